"""ONNX -> func + linalg-on-tensors, through torch-mlir (not a hand-written converter).

Steps (the verified recipe in ``notes/frontend-recipes.md``, run in-process through the torch-mlir
Python bindings instead of the console scripts, so no temp files and no process start-up):

1. ``onnx.load`` (or a ``ModelProto`` given by the caller); models whose default-domain opset is older
   than :data:`MIN_OPSET` are converted with ``onnx.version_converter`` (torch-mlir's ONNX lowering
   targets recent opsets; the light ResNet-50/SqueezeNet in the onnx wheel are opset 9);
   ``onnx.shape_inference`` fills in the value shapes the importer needs; then
   :mod:`m100.frontend.onnx_rewrite` rewrites the nodes torch-mlir gets wrong (Gelu(tanh), MatMul of a
   1-D with a rank >= 3 operand) into equivalent ONNX ops;
2. ``torch_mlir.extras.onnx_importer`` builds the ``torch`` dialect module.
3. ``torch-onnx-to-torch-backend-pipeline`` then ``torch-backend-to-linalg-on-tensors-backend-pipeline``.
4. The module is printed in MLIR's *generic* form (with all weights as hex ``dense<"0x...">``) and parsed
   by xDSL with the project's extended ``linalg`` dialect (:mod:`m100.dialects.linalg_ext`).

Every failure a user can cause (missing file, not an ONNX file, an op torch-mlir cannot lower) raises
:class:`FrontendError` whose message is one line naming the file and, where known, the op.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from m100.errors import M100Error
from m100.frontend.onnx_owned import PrepareFailed, copy_fields
from m100.frontend.dense_blobs import (  # noqa: F401  (re-exported for callers)
    attach_dense_blobs, split_dense_blobs, split_via_elision)

#: Models with an older default-domain opset are converted to this one before import.
MIN_OPSET = 17



class FrontendError(M100Error):
    """A model that the frontend cannot read or lower; the message names the file and the op."""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _load_model(model, name: str):
    import onnx

    if not isinstance(model, onnx.ModelProto):
        path = Path(model)
        if not path.exists():
            raise FrontendError(f"{name}: no such file")
        if path.is_dir():
            raise FrontendError(f"{name}: is a directory, expected an .onnx file")
        try:
            from m100.frontend.shape_only import load_onnx_lazy
            model = load_onnx_lazy(path)
        except Exception as e:  # protobuf DecodeError and friends
            raise FrontendError(f"{name}: not a valid ONNX model ({_one_line(e, 120)})") from None
    if not model.HasField("graph") or not model.opset_import:
        # an empty file parses as an empty ModelProto; the version converter would assert in C++
        raise FrontendError(f"{name}: not an ONNX model (no graph or no opset; an empty file?)")
    return model


def _default_opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 0


def prepare_model(model, name: str = "<model>", opset: int | None = None, *,
                  owned: bool = False):
    """Load, version-convert (if older than :data:`MIN_OPSET` or ``opset`` is given), shape-infer,
    apply the torch-mlir workarounds of :mod:`m100.frontend.onnx_rewrite`. ``owned``: ``model``
    may be changed (a forked child's copy, :mod:`m100.frontend.onnx_owned`); a model this
    function loads or copies is its own either way."""
    import onnx

    given = model
    model = _load_model(model, name)
    from m100.frontend.shape_only import _is_external, lift_shape_only_weights
    if any(_is_external(t) for t in model.graph.initializer):
        # compile by shape: weights without their bytes become graph inputs marked as weights
        lifted = onnx.ModelProto()
        lifted.CopyFrom(model)
        try:
            lift_shape_only_weights(lifted)
        except ValueError as e:  # a shape-only weight in a form that can not be compiled by shape
            raise FrontendError(f"{name}: {e}") from None
        model = lifted
    from m100.frontend.shape_only import lift_int4_constants
    int4 = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT4}
    if any(n.op_type == "DequantizeLinear" and n.input and n.input[0] in int4
           for n in model.graph.node):
        # W4A16: constant int4 weights stay int4 (streamed, dequantized by the TCU)
        lifted = onnx.ModelProto()
        lifted.CopyFrom(model)
        if lift_int4_constants(lifted):
            model = lifted
    target = opset if opset is not None else (MIN_OPSET if _default_opset(model) < MIN_OPSET else None)
    if target is not None and target != _default_opset(model):
        old_resize = _old_resize_nodes(model) if _default_opset(model) < 11 else {}
        try:
            model = convert_version(model, target)
        except Exception as e:
            raise FrontendError(
                f"{name}: cannot convert opset {_default_opset(model)} -> {target}: {_one_line(e, 160)}"
            ) from None
        if old_resize:
            _fix_converted_resize(model, old_resize, name)
    model = check_and_infer(model, name, owned=owned or model is not given)
    from m100.frontend.onnx_rewrite import rewrite_for_torch_mlir
    from m100.frontend.onnx_rewrite_quant import QuantRewriteError

    try:
        rewritten = rewrite_for_torch_mlir(model)
    except QuantRewriteError as e:
        raise FrontendError(f"{name}: {e}") from None
    if rewritten:
        try:
            data = model.SerializeToString()
            onnx.checker.check_model(data)
            model = onnx.shape_inference.infer_shapes(data, strict_mode=False)
        except Exception as e:  # a defect of the rewrite, not of the user's model
            raise FrontendError(f"{name}: internal ONNX rewrite failed: {_one_line(e, 200)}") from None
    return model


def _check_and_infer_whole(model, name: str):
    """onnx's checker and shape inference on the whole model (both C++, one serialization)."""
    import onnx

    data = model.SerializeToString()
    try:
        onnx.checker.check_model(data)
    except Exception as e:
        raise FrontendError(f"{name}: invalid ONNX model: {_one_line(e, 200)}") from None
    try:
        return onnx.shape_inference.infer_shapes(data, strict_mode=False)
    except Exception as e:
        raise FrontendError(f"{name}: ONNX shape inference failed: {_one_line(e, 200)}") from None


#: default-domain ops whose shape inference reads only its inputs' types and shapes, never an
#: input's value (onnx/defs: Conv's convPoolShapeInference, Gemm's and MatMul's shape rules,
#: BatchNormalization's propagation from input 0 and rank checks): an initializer read by these
#: alone can go to the checker and shape inference as a graph input of the same type
VALUE_FREE_READERS = frozenset({"Conv", "Gemm", "MatMul", "BatchNormalization"})
#: False: the checker and shape inference always get the whole model
WEIGHTLESS_CHECK = True


#: element types a plain tensor may have (numeric, fixed byte width: raw_data length is exact)
_PLAIN_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
                   16: 2}  # FLOAT UINT8 INT8 UINT16 INT16 INT32 INT64 BOOL FLOAT16 DOUBLE
                           # UINT32 UINT64 BFLOAT16


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def _probe_size(t) -> int:
    """The serialized size of ``t``'s name, type, dims, doc string and metadata alone (what a
    plain tensor holds besides ``raw_data``)."""
    probe = type(t)()
    probe.name, probe.data_type = t.name, t.data_type
    probe.dims.extend(t.dims)
    if t.HasField("doc_string"):
        probe.doc_string = t.doc_string
    probe.metadata_props.extend(t.metadata_props)
    return probe.ByteSize()


def _plain_tensor(t, byte_size: int) -> bool:
    """True when ``t`` (of ``t.ByteSize() == byte_size``) is a tensor
    ``onnx.checker.check_tensor`` accepts without reading its bytes: a name, a numeric type of
    fixed width, positive dims, only ``raw_data`` holding values (no typed value field, segment
    or external data), and exactly ``prod(dims) * itemsize`` bytes of them (from ``ByteSize``,
    no copy of the bytes: field 9's tag, the length's varint and the bytes). Anything else:
    False (the checker sees the tensor). ``test_plain_tensor_is_what_the_checker_accepts``."""
    size = _PLAIN_ITEMSIZE.get(t.data_type)
    if (size is None or not t.name or not t.HasField("raw_data") or t.HasField("segment")
            or t.float_data or t.int32_data or t.string_data or t.int64_data or t.double_data
            or t.uint64_data or t.external_data or t.data_location != t.DEFAULT
            or any(d <= 0 for d in t.dims)):
        return False
    n = size
    for d in t.dims:
        n *= d
    return byte_size - _probe_size(t) == 1 + _varint_len(n) + n


#: the TensorProto fields :func:`_plain_size` accounts for (a newer onnx with another field:
#: it asks ``ByteSize`` as before)
_PLAIN_FIELDS = frozenset({
    "dims", "data_type", "segment", "float_data", "int32_data", "string_data", "int64_data",
    "name", "doc_string", "raw_data", "external_data", "data_location", "double_data",
    "uint64_data", "metadata_props"})


def _plain_size(t) -> int | None:
    """``t.ByteSize()`` if ``_plain_tensor(t, t.ByteSize())``, else None -- without serializing
    ``t`` (upb's ``ByteSize`` encodes the whole message into a scratch arena: ResNet-50's
    initializers ~0.04 CPU-s and 14 500 page faults the first time). A plain tensor holds the
    probe's fields of :func:`_plain_tensor` and ``raw_data`` of exactly ``prod(dims) *
    itemsize`` bytes (its length read, not serialized) and nothing else: no other value field
    (each tested), no ``segment`` / ``data_location`` present (an explicit default is
    serialized too), no unknown field; its size is then the probe's plus field 9's tag, the
    length's varint and the bytes. ``test_plain_size_is_bytesize_and_plain_tensor``."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    if not _FIELDS_KNOWN[0]:
        b = t.ByteSize()
        return b if _plain_tensor(t, b) else None
    size = _PLAIN_ITEMSIZE.get(t.data_type)
    if (size is None or not t.name or not t.HasField("raw_data") or t.HasField("segment")
            or t.HasField("data_location") or t.float_data or t.int32_data or t.string_data
            or t.int64_data or t.double_data or t.uint64_data or t.external_data
            or any(d <= 0 for d in t.dims)):
        return None
    n = size
    for d in t.dims:
        n *= d
    if len(t.raw_data) != n or len(UnknownFieldSet(t)):
        return None
    return _probe_size(t) + 1 + _varint_len(n) + n


def _fields_known() -> bool:
    from onnx import TensorProto
    return {f.name for f in TensorProto.DESCRIPTOR.fields} <= _PLAIN_FIELDS


_FIELDS_KNOWN: list = [None]  # filled at the first check_and_infer (onnx imported then)


def _copy_without(msg, field: str):
    """A copy of a protobuf message without one of its fields (not copied at all)."""
    out = type(msg)()
    copy_fields(out, msg, (field,))
    return out


def check_and_infer(model, name: str = "<model>", *, owned: bool = False):
    """``onnx.checker.check_model`` then ``onnx.shape_inference.infer_shapes(strict_mode=False)``,
    with the big weights' bytes kept out of the C++ round trip when that provably changes nothing.
    ``owned``: ``model`` may be changed -- the result is then ``model`` itself holding the
    inferred fields (:func:`m100.frontend.onnx_owned.merge_inferred`), not a copy of its weights.

    Why: both serialize and parse the model (inference also serializes its result, parsed back
    in Python): five copies of ResNet-50's 100 MB of weights (~0.45 CPU-s) that neither reads.
    How: an initializer of ``CONVERT_STRIP_BYTES`` or more with ``raw_data``, not a graph
    output, read only by :data:`VALUE_FREE_READERS` (no subgraphs, no functions in the model)
    becomes a graph input of exactly its type in a light copy (a graph input of another type
    makes the whole model go as before); the light copy is checked and inferred, each removed
    initializer is plain (:func:`_plain_tensor`: one the checker accepts) and the original
    inputs and initializers are put back (one copy of the weights, as the parse of the whole
    model's inference was). The types the inference
    sees are the same (an initializer's type is the type of its name), and no op that reads a
    value loses one. ``test_weightless_check_and_infer``: the same model bytes as the whole
    model's check and inference."""
    import onnx
    from onnx import helper

    g = model.graph
    if not WEIGHTLESS_CHECK or model.functions or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for n in g.node for a in n.attribute):
        return _check_and_infer_whole(model, name)
    value_read = {o.name for o in g.output}
    for n in g.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in VALUE_FREE_READERS:
            value_read.update(n.input)
    inputs = {i.name: i for i in g.input}
    strip = {}
    if _FIELDS_KNOWN[0] is None:
        _FIELDS_KNOWN[0] = _fields_known()
    for t in g.initializer:
        if t.name in value_read or t.name in strip:
            continue
        byte_size = _plain_size(t)  # t.ByteSize() of a plain tensor, None for any other
        if byte_size is None or byte_size < CONVERT_STRIP_BYTES:
            continue
        vi = helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        if t.name in inputs and inputs[t.name].type != vi.type:
            return _check_and_infer_whole(model, name)
        strip[t.name] = vi
    if not strip or len(strip) != sum(t.name in strip for t in g.initializer):
        return _check_and_infer_whole(model, name)
    light = _copy_without(model, "graph")
    light.graph.CopyFrom(_copy_without(g, "initializer"))
    lg = light.graph
    kept = [t for t in g.initializer if t.name not in strip]
    lg.initializer.extend(kept)
    lg.input.extend(vi for n, vi in strip.items() if n not in inputs)
    try:
        onnx.checker.check_model(light)
    except Exception:
        return _check_and_infer_whole(model, name)  # its own error, as before
    try:
        out = onnx.shape_inference.infer_shapes(light, strict_mode=False)
    except Exception:
        return _check_and_infer_whole(model, name)
    og = out.graph
    if list(og.input) != list(lg.input) or list(og.initializer) != kept:
        return _check_and_infer_whole(model, name)
    if owned:
        from m100.frontend.onnx_owned import merge_inferred
        got = merge_inferred(model, out)
        if got is not None:
            return got
    og.ClearField("input")
    og.input.extend(g.input)
    og.ClearField("initializer")
    og.initializer.extend(g.initializer)
    return out


#: initializers with at least this many bytes of ``raw_data`` go around onnx's version converter
#: (:func:`convert_version`); shape / axes / scale inputs (tens of bytes) still go through it
CONVERT_STRIP_BYTES = 4096


def convert_version(model, target: int):
    """``onnx.version_converter.convert_version(model, target)`` with the big initializers' bytes
    kept out of the converter: it works on a copy whose initializers of ``CONVERT_STRIP_BYTES``
    or more (by dims) carry no ``raw_data`` and puts the bytes back into the converted model by
    name.

    Why: the converter serializes the model, parses it in C++, converts, serializes and parses
    it back; on an opset-9 ResNet-50 (100 MB of weights) that was ~0.8 CPU-s of a ~4.5 CPU-s
    frontend, all of it copying weights that no upgrade adapter reads (they rewrite nodes and
    attributes, and add small constant inputs). Exactness: every stripped initializer must come
    back exactly once, with the same name, type and dims and still without data; otherwise
    (or when the weightless conversion fails) the whole model is converted as before.
    ``test_weightless_version_conversion`` compares the bytes with onnx's own conversion on
    the onnx wheel's old-opset models."""
    import onnx
    from onnx import version_converter

    # big by dims, not ``ByteSize`` (which serializes each tensor); the stripped ones must come
    # back unchanged whichever they are (below)
    big = {t.name: t for t in model.graph.initializer
           if _tensor_bytes(t) >= CONVERT_STRIP_BYTES and t.HasField("raw_data")}
    if not big or len(big) != sum(t.name in big for t in model.graph.initializer):
        return version_converter.convert_version(model, target)
    light = _light_copy(model, big)
    try:
        out = version_converter.convert_version(light, target)
    except Exception:
        return version_converter.convert_version(model, target)  # its own error, as before
    back = [t for t in out.graph.initializer if t.name in big]
    if len(back) != len(big) or any(
            t.raw_data or t.data_type != big[t.name].data_type
            or list(t.dims) != list(big[t.name].dims) for t in back):
        return version_converter.convert_version(model, target)
    for t in back:
        t.raw_data = big[t.name].raw_data
    return out


def _light_copy(model, big: dict):
    """A copy of ``model`` whose initializers named in ``big`` have no ``raw_data``: the same
    message as ``CopyFrom`` then ``ClearField("raw_data")`` of those, without copying their bytes
    first (ResNet-50: 100 MB, ~0.05 CPU-s). The model, its graph and those initializers are
    copied field by field (``ListFields``, which has no unknown fields; every other message is
    copied whole): when one of them has unknown fields, it is ``CopyFrom`` then ``ClearField`` as
    before. ``test_light_copy_is_copy_then_clear``."""
    import onnx
    from google.protobuf.unknown_fields import UnknownFieldSet

    if any(len(UnknownFieldSet(x)) for x in (model, model.graph, *big.values())):
        light = onnx.ModelProto()
        light.CopyFrom(model)
        for t in light.graph.initializer:
            if t.name in big:
                t.ClearField("raw_data")
        return light
    light = _copy_without(model, "graph")
    light.graph.CopyFrom(_copy_without(model.graph, "initializer"))
    inits = light.graph.initializer
    for t in model.graph.initializer:
        inits.append(_copy_without(t, "raw_data") if t.name in big else t)
    return light


def _old_resize_nodes(model) -> dict:
    """Output name -> (op, node name, mode, constant scales or None) of the ``Upsample`` and
    ``Resize`` nodes of a model older than opset 11 (see :func:`_fix_converted_resize`)."""
    from onnx import helper, numpy_helper

    nodes = [n for n in model.graph.node
             if n.op_type in ("Upsample", "Resize") and n.domain in ("", "ai.onnx")]
    if not nodes:
        return {}
    # only the constants such a node may read as its scales are decoded (a model's weights are
    # not: ResNet-50's 268 initializers were ~0.02 CPU-s for nothing); later ones win, as before
    wanted = {n.input[1] for n in nodes if len(n.input) > 1}
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
              if t.name in wanted}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value" \
                and n.output[0] in wanted:
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    out = {}
    for n in nodes:
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        mode = a.get("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        scales = a.get("scales")  # Upsample-7: an attribute; later: input 1
        if scales is None and len(n.input) > 1 and n.input[1] in consts:
            scales = consts[n.input[1]].tolist()
        out[n.output[0]] = (n.op_type, n.name or n.output[0], mode, scales)
    return out


def _fix_converted_resize(model, old: dict, name: str) -> None:
    """``Upsample`` (opset <= 9) and ``Resize``-10 map an output coordinate to ``x / scale``
    (asymmetric) and, nearest, take the floor when upsampling (onnxruntime; the onnx reference's
    integer-scale repeat). ``onnx.version_converter`` turns them into a ``Resize`` that leaves
    ``coordinate_transformation_mode`` at its default ``half_pixel`` (and ``nearest_mode`` at
    ``round_prefer_floor``): a linear Upsample x2 came out wrong by up to 0.7 on a unit-variance
    input. The converted nodes get the old semantics; a nearest one that does not upsample
    (a scale < 1, or scales known only at run time) is refused."""
    from onnx import helper

    for n in model.graph.node:
        if n.op_type != "Resize" or n.output[0] not in old:
            continue
        op, node_name, mode, scales = old[n.output[0]]
        keep = [a for a in n.attribute if a.name not in ("coordinate_transformation_mode",
                                                          "nearest_mode")]
        new = [helper.make_attribute("coordinate_transformation_mode", "asymmetric")]
        if mode == "nearest":
            if scales is None or any(float(s) < 1 for s in scales):
                raise FrontendError(
                    f"{name}: {op} '{node_name}': nearest {op} (opset < 11) with a scale < 1 or "
                    "run-time scales is not supported (only upsampling: every scale >= 1)")
            new.append(helper.make_attribute("nearest_mode", "floor"))
        del n.attribute[:]
        n.attribute.extend(keep + new)


def _diagnose(name: str, err: Exception, model) -> FrontendError:
    """Turn a torch-mlir failure into one line naming the ONNX op that could not be lowered."""
    text = str(err)
    m = re.search(r"failed to legalize operation '([^']+)'", text)
    op = None
    if m:
        op = m.group(1)
    onnx_op = re.search(r"torch\.operator\"?\s*\(?\"?(onnx\.[A-Za-z0-9_]+)", text) or re.search(
        r"(onnx\.[A-Z][A-Za-z0-9_]*)", text
    )
    if onnx_op:
        op = onnx_op.group(1)
    first = next((ln.strip() for ln in text.splitlines() if "error" in ln.lower()), text)
    if op and op.startswith("onnx."):
        op_type = op[len("onnx."):]
        nodes = [n for n in model.graph.node if n.op_type == op_type]
        where = ""
        if nodes:
            where = f" (node '{nodes[0].name}')" if nodes[0].name else f" (node #{list(model.graph.node).index(nodes[0])})"
        return FrontendError(f"{name}: torch-mlir cannot lower ONNX op '{op_type}'{where}")
    if op:
        ops = sorted({n.op_type for n in model.graph.node})
        return FrontendError(
            f"{name}: torch-mlir cannot lower '{op}' (made from the graph's ONNX ops "
            f"{', '.join(ops[:8])}{', ...' if len(ops) > 8 else ''})"
        )
    return FrontendError(f"{name}: torch-mlir import failed: {_one_line(first, 200)}")


def lower_in_process(model, name: str, generic: bool = True, split: bool = False, put=None):
    """torch-mlir import + the two lowering pipelines on a prepared ``ModelProto``, in this process
    (``put``: where the weights' bytes go, :func:`split_via_elision`).

    torch-mlir is C++: on some inputs it crashes the whole process (a segfault in the pass pipeline
    was seen on the ONNX node test ``test_linear_attention_linear_expanded``), so by default
    :func:`onnx_to_linalg_text` runs this in a worker process (:class:`_Worker`).
    """
    try:
        from torch_mlir.dialects import torch as torch_d
        from torch_mlir.extras import onnx_importer
        from torch_mlir.ir import Context
    except ImportError as e:  # pragma: no cover - the wheel is a dependency of the frontend extra
        raise FrontendError(f"{name}: torch-mlir is not installed ({e}); pip install m100[frontend]") from None

    ctx = Context()
    ctx.enable_multithreading(False)  # small graphs; threads only contend on a loaded 2-core box
    torch_d.register_dialect(ctx)
    try:
        info = onnx_importer.ModelInfo(model, config=onnx_importer.Config())
        module = info.create_module(context=ctx)
        imp = onnx_importer.NodeImporter.define_function(info.main_graph, module.operation)
        imp.import_all()
    except Exception as e:
        raise FrontendError(f"{name}: torch-mlir ONNX import failed: {_one_line(e, 200)}") from None
    from m100.frontend import torch_pipeline
    try:
        torch_pipeline.run(module, ctx)
    except Exception as e:
        raise _diagnose(name, e, model) from None
    fast = None
    if split and generic:
        try:
            fast = split_via_elision(module, put)
        except Exception:  # noqa: BLE001 - any surprise: the hex path below is always correct
            fast = None
    if fast is not None:
        text, blobs = fast
    else:
        text = module.operation.get_asm(print_generic_op_form=generic, large_elements_limit=None)
        if split:
            text, blobs = split_dense_blobs(text)
    # xDSL 0.74's arith.trunci has no overflowFlags property (newer MLIR prints one, e.g. for
    # MatMulInteger); "none" means no flag, so dropping it keeps the op's meaning exactly (nsw/nuw
    # flags are left in and fail to parse: they would change the semantics).
    if '"arith.trunci"' in text:
        text = re.sub(r'("arith\.trunci"\([^)]*\)) <\{overflowFlags = #arith\.overflow<none>\}>', r"\1", text)
    leftover = sorted(set(re.findall(r'"(torch(?:_c)?\.[A-Za-z0-9_.]+)"', text)))
    if leftover:
        raise FrontendError(f"{name}: torch-mlir left ops it could not lower: {', '.join(leftover[:5])}")
    return (text, blobs) if split else text


def _import_torch_mlir() -> None:
    """Import what :func:`lower_in_process` imports (a forked child then finds it imported)."""
    try:
        from torch_mlir.dialects import torch as _  # noqa: F401
        from torch_mlir.extras import onnx_importer as _i  # noqa: F401
        from torch_mlir.ir import Context as _c  # noqa: F401
        from torch_mlir.passmanager import PassManager as _p  # noqa: F401
    except ImportError:  # pragma: no cover - lower_in_process reports it in the child
        pass


#: bytes per element of an ONNX tensor type (TensorProto.DataType); any other type: 8
_ITEM_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2,
               17: 1, 18: 1, 19: 1, 20: 1, 21: 1, 22: 1, 23: 1, 24: 1, 25: 1, 26: 1}


class _ReplyWriter:
    """A forked child's reply stream (:meth:`_Worker._lower_forked`): each weight array as one
    record when torch-mlir hands it over (:meth:`put`, the ``put`` of :func:`split_via_elision`:
    ``b"B"``, its byte count, its bytes -- the array is freed at once, as when it was copied
    into a shared mapping), then the reply (:meth:`reply`: ``b"R"``, a length-prefixed pickle in
    which a weight is its record's index), then the child's CPU seconds."""

    def __init__(self, f):
        self.f = f
        self.records = 0

    def put(self, arr) -> int:
        import struct

        self.f.write(b"B" + struct.pack("<Q", int(arr.nbytes)))
        self.f.write(memoryview(arr).cast("B"))
        self.records += 1
        return self.records - 1

    def reply(self, reply, cpu_s: float) -> None:
        import pickle
        import struct

        data = pickle.dumps(reply, protocol=5)
        self.f.write(b"R" + struct.pack("<Q", len(data)))
        self.f.write(data)
        self.f.write(struct.pack("<d", cpu_s))


def _read_reply(f, split: bool):
    """``(kind, value, cpu_s)`` from a :class:`_ReplyWriter`'s stream, each weight record read
    into a ``bytes`` object of its own (``BufferedReader.read(n)`` fills one new object) and put
    where the reply names its index -- or None when the stream ends early or is not one."""
    import pickle
    import struct

    records = []
    while True:
        tag = f.read(1)
        head = f.read(8)
        if tag not in (b"B", b"R") or len(head) != 8:
            return None
        (n,) = struct.unpack("<Q", head)
        data = f.read(n)
        if len(data) != n:
            return None
        if tag == b"R":
            break
        records.append(data)
    kind, value = pickle.loads(data)
    if split and kind == "ok":
        text, blobs, *rest = value  # rest: prepare_and_lower's model for the parent
        if any(isinstance(b, int) and not 0 <= b < len(records) for b in blobs):
            return None
        value = (text, [records[b] if isinstance(b, int) else b for b in blobs], *rest)
    tail = f.read(8)
    if len(tail) != 8:
        return None
    return kind, value, struct.unpack("<d", tail)[0]


def _tensor_bytes(t) -> int:
    """Elements x bytes per element of a tensor from its dims and type (:data:`_ITEM_BYTES`), its
    data unread (protobuf's ``ByteSize`` serializes the tensor to count it)."""
    n = _ITEM_BYTES.get(t.data_type, 8)
    for d in t.dims:
        n *= max(int(d), 0)
    return n


class _Worker:
    """Runs :func:`lower_in_process` in another process, so that a torch-mlir crash is a one-line
    :class:`FrontendError` (naming the signal and the model's ops), never the end of this one.

    ``mode`` ``"fork"``: each request is a child forked from this process; it already holds the
    model and the imported onnx / torch-mlir modules (imported here once), so the only work in
    it is the lowering and pickling the reply back through a pipe. ``"process"``: a persistent
    ``python -m m100.frontend._lower_worker`` process, requests and replies as length-prefixed
    pickles on its stdin/stdout (the model serialized and parsed again); it is restarted after
    a crash. Its start-up imports onnx and torch-mlir again, ~1.4 CPU-s per compiling process
    (ResNet-18 224: ~10 % of a compile), which is why ``"auto"`` (the default) forks where it
    can: where ``os.fork`` exists and this process runs one thread (forking a multi-threaded
    process may copy a lock another thread holds). Both give the same text and blobs (test).
    """

    mode = "auto"  # auto | fork | process
    _proc = None
    last_cpu_s = 0.0  #: the worker's CPU time for the last request (benchmarks)
    total_cpu_s = 0.0  #: the workers' CPU time for every request of this process

    @classmethod
    def _start(cls):
        import subprocess
        import sys

        cls._proc = subprocess.Popen(
            [sys.executable, "-m", "m100.frontend._lower_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        if not cls._atexit:
            import atexit

            atexit.register(cls._stop)
            cls._atexit = True
        return cls._proc

    _atexit = False

    @classmethod
    def _stop(cls) -> None:
        """At exit: close the worker's stdin (it exits on EOF) and reap it, so its CPU time is
        counted in this process's children (``bench/speed.py`` measures the process tree)."""
        proc, cls._proc = cls._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            proc.kill()

    @classmethod
    def _use_fork(cls) -> bool:
        if cls.mode == "process" or not hasattr(os, "fork"):
            return False
        if cls.mode == "fork":
            return True
        import threading
        return threading.active_count() == 1

    @classmethod
    def _crashed(cls, code: int, model, name: str) -> FrontendError:
        sig = f"signal {-code}" if code < 0 else f"exit code {code}"
        ops = sorted({n.op_type for n in model.graph.node})
        return FrontendError(
            f"{name}: torch-mlir crashed ({sig}) while lowering a graph of ops "
            f"{', '.join(ops[:12])}{'...' if len(ops) > 12 else ''}"
        )

    @classmethod
    def _lower_forked(cls, model, name: str, generic: bool, split: bool, job=None):
        """One request in a forked child. The reply is a stream on a pipe (:class:`_ReplyWriter`):
        each weight array as torch-mlir hands it over, then the pickled reply naming them, then
        the child's CPU seconds; the parent reads each weight straight into its ``bytes`` object
        (:func:`_read_reply`). ``job``: what the child runs instead of :func:`lower_in_process`
        (given the stream's ``put``; :meth:`prepare_and_lower`). Until session 33 the weights
        went through a shared mapping: the child's copy into it and the parent's copy out of it
        both faulted their 100 MB in. A stream that ends early (the child died while writing) is
        the child's crash, in one line."""
        import gc

        _import_torch_mlir()  # once, here: every child has it
        r, w = os.pipe()
        import fcntl
        if hasattr(fcntl, "F_SETPIPE_SZ"):
            try:  # fewer switches between the writing child and the reading parent
                fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
            except OSError:
                pass
        pid = os.fork()
        if pid == 0:  # the child: lower, write the reply, leave without any cleanup of the parent's
            try:
                gc.disable()  # a collection would touch (copy) every page of the parent's heap
                import faulthandler
                faulthandler.disable()  # a crash is reported by the parent, in one line
                os.close(r)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):  # torch-mlir's diagnostics stay out of the caller's terminal
                    os.dup2(null, fd)
                with os.fdopen(w, "wb") as f:
                    out = _ReplyWriter(f)
                    try:
                        put = out.put if split and generic else None
                        reply = ("ok", lower_in_process(model, name, generic, split, put)
                                 if job is None else job(put))
                    except FrontendError as e:
                        reply = ("err", str(e))
                    except PrepareFailed as e:
                        import pickle
                        try:
                            pickle.dumps(e.exc)
                            reply = ("exc", e.exc)
                        except Exception:  # noqa: BLE001 - not picklable: its message
                            reply = ("err", f"{name}: {type(e.exc).__name__}: "
                                            f"{_one_line(e.exc, 200)}")
                    except Exception as e:  # noqa: BLE001 - any failure becomes a message
                        reply = ("err", f"{name}: torch-mlir lowering failed: {_one_line(e, 200)}")
                    out.reply(reply, time.process_time())
                os._exit(0)
            finally:
                os._exit(1)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            got = _read_reply(f, split)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or got is None:
            raise cls._crashed(code, model, name) from None
        kind, value, cls.last_cpu_s = got
        cls.total_cpu_s += cls.last_cpu_s
        if kind == "ok":
            return value
        if kind == "exc":
            raise value
        raise FrontendError(value)

    @classmethod
    def prepare_and_lower(cls, model, name: str, opset: int | None):
        """``prepare_model`` + ``_without_int4_values`` + ``lower_in_process`` (split) of
        ``model`` (loaded here when a path) in one forked child that changes its own copy of it
        (:mod:`m100.frontend.onnx_owned`): ``(text, blobs, the prepared model without its big
        weights' bytes)``; None when this process does not fork (the caller prepares here)."""
        if not cls._use_fork():
            return None
        from m100.frontend.onnx_owned import prepare_and_lower
        model = _load_model(model, name)
        return cls._lower_forked(model, name, True, True,
                                 job=lambda put: prepare_and_lower(model, name, opset, put))

    @classmethod
    def lower(cls, model, name: str, generic: bool, split: bool = False):
        import pickle
        import struct

        if cls._use_fork():
            return cls._lower_forked(model, name, generic, split)
        proc = cls._proc if cls._proc is not None and cls._proc.poll() is None else cls._start()
        payload = pickle.dumps((model.SerializeToString(), name, generic, split), protocol=5)
        try:
            proc.stdin.write(struct.pack("<Q", len(payload)) + payload)
            proc.stdin.flush()
            head = proc.stdout.read(8)
            if len(head) < 8:
                raise EOFError
            (n,) = struct.unpack("<Q", head)
            kind, value, cls.last_cpu_s = pickle.loads(proc.stdout.read(n))
            cls.total_cpu_s += cls.last_cpu_s
        except (EOFError, BrokenPipeError, OSError):
            code = proc.wait()
            cls._proc = None
            raise cls._crashed(code, model, name) from None
        if kind == "ok":
            return value
        raise FrontendError(value)


def onnx_to_linalg_text(
    model, *, name: str | None = None, opset: int | None = None, generic: bool = True,
    isolate: bool = True,
) -> str:
    """Return the func + linalg-on-tensors MLIR text (generic form by default) of an ONNX model.

    ``model``: a path or an ``onnx.ModelProto``. ``opset``: force a version conversion.
    ``isolate``: run torch-mlir in a worker process so that a crash in it is a clean error.
    """
    if name is None:
        name = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<onnx model>"
    model = _without_int4_values(prepare_model(model, name, opset))
    if isolate:
        return _Worker.lower(model, name, generic)
    return lower_in_process(model, name, generic)


def _without_int4_values(model):
    """``model`` without the int4 values and scales of its constant W4 weights (torch-mlir does not
    import int4 initializers; :func:`name_io` attaches them to the function argument instead)."""
    from m100.frontend.shape_only import int4_weights
    drop = {n for d in int4_weights(model).values() if d.get("const")
            for n in (d["q"], d["scale"])}
    if not drop:
        return model
    import onnx
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [t for t in out.graph.initializer if t.name not in drop]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    return out


#: :func:`load_onnx` prepares the model in the forked torch-mlir child where the worker forks
#: (:meth:`_Worker.prepare_and_lower`); False: here, as before session 34 (the A/B switch)
PREPARE_IN_CHILD = True

# ONNX op types that torch-mlir lowers to a dialect m100 has no lowering for (for error messages)
_NEEDS = {"tm_tensor": ("TopK", "NonMaxSuppression")}


def load_onnx(model, ctx=None, *, opset: int | None = None, isolate: bool = True):
    """Import an ONNX model (path or ``ModelProto``) as an xDSL ``ModuleOp`` of func + linalg on tensors.

    The weights travel as raw bytes next to the text (:func:`split_dense_blobs`), not through xDSL's
    lexer; the module is verified after they are attached."""
    from m100.frontend.mlir_load import load_mlir_text

    name = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<onnx model>"
    got = _Worker.prepare_and_lower(model, name, opset) if isolate and PREPARE_IN_CHILD else None
    if got is not None:  # prepared in the forked child (onnx_owned); its model without weights
        import onnx
        text, blobs, io_bytes = got
        model = onnx.ModelProto.FromString(io_bytes)
    else:
        model = prepare_model(model, name, opset)
        lowered = _without_int4_values(model)
        if isolate:
            text, blobs = _Worker.lower(lowered, name, True, split=True)
        else:
            text, blobs = lower_in_process(lowered, name, True, split=True)
    try:
        module = load_mlir_text(text, ctx, name=name, verify=False)
    except FrontendError as e:
        m = re.search(r"Operation (\S+) is not registered", str(e))
        if m is None:
            raise
        # torch-mlir lowered some ONNX op to a dialect m100 has no lowering for: name the op
        # types of the model instead of a line of the intermediate MLIR text
        dialect = m.group(1).split(".")[0]
        suspects = sorted({n.op_type for n in model.graph.node
                           if n.op_type in _NEEDS.get(dialect, ())})
        hint = f" (from ONNX {', '.join(suspects)})" if suspects else ""
        raise FrontendError(f"{name}: {m.group(1)}{hint} is not supported: torch-mlir lowers it "
                            f"to the '{dialect}' dialect, which m100 does not compile") from None
    attach_dense_blobs(module, blobs)
    from m100.frontend.mlir_load import verify_module

    zero_d_expands_as_reshapes(module)
    name_io(module, model)
    verify_module(module, name)
    return module


def zero_d_expands_as_reshapes(module) -> int:
    """Every ``tensor.expand_shape`` of a 0-D tensor (reassociation ``[]``, to an all-ones shape)
    becomes ``tensor.reshape`` by a constant shape (the same value); returns how many.

    torch-mlir writes that form wherever a 0-D value gains unit dims: a ``Gather`` with a rank-0
    index, an ``Unsqueeze`` of a 0-D input, a reduction of a 1-D tensor with ``keepdims``. MLIR
    accepts it; xDSL's verifier does not ("expected the total number of reassociation dimensions
    (0) to equal the expanded type's rank (1)"), so each such model was refused (fuzz float seed
    1311 #40: ``Gather(x, i)`` with a runtime scalar ``i``). ``tensor.reshape`` is a view like
    ``expand_shape`` for every later stage."""
    from xdsl.dialects import arith, tensor
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, i64
    from xdsl.rewriter import Rewriter

    n = 0
    for op in list(module.walk()):
        if not isinstance(op, tensor.ExpandShapeOp) or op.dynamic_output_shape:
            continue
        src_t = op.src.type
        if not isinstance(src_t, TensorType) or src_t.get_shape() != ():
            continue
        shape = list(op.result.type.get_shape())
        c = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(TensorType(i64, [len(shape)]),
                                                                shape))
        Rewriter.replace_op(op, [c, tensor.ReshapeOp(op.src, c.result, op.result.type)])
        n += 1
    return n


#: Attribute of a ``func.func`` argument / result that carries the model's name for that value
#: (``{m100.name = "x"}``); ``m100-schedule`` names the program's symbols after it.
NAME_ATTR = "m100.name"


def _int4_values(model, q: str, scale: str) -> dict:
    """``q_data`` (i8 values of the int4 initializer ``q``) and ``scale_data`` dense attributes."""
    import numpy as np
    from onnx import numpy_helper
    from xdsl.dialects.builtin import BFloat16Type, Float16Type, IntegerType, TensorType

    from m100.dialects.dense import numpy_to_dense
    inits = {t.name: t for t in model.graph.initializer if t.name in (q, scale)}
    qa = numpy_helper.to_array(inits[q]).astype(np.int8)
    sa = numpy_helper.to_array(inits[scale])
    st = Float16Type() if sa.dtype == np.float16 else BFloat16Type()
    return {"q_data": numpy_to_dense(qa, TensorType(IntegerType(8), list(qa.shape))),
            "scale_data": numpy_to_dense(sa, TensorType(st, list(sa.shape)))}


def name_io(module, model) -> None:
    """Record the ONNX graph's input names (initializers excluded) and output names on the arguments
    and results of the module's single function (``arg_attrs`` / ``res_attrs`` with
    :data:`NAME_ATTR`), so that the compiled program's symbols keep the model's names. Nothing is
    recorded when the function does not match the graph one to one."""
    from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, StringAttr
    from xdsl.dialects.func import FuncOp

    funcs = [o for o in module.walk() if isinstance(o, FuncOp) and o.body.blocks]
    if len(funcs) != 1:
        return
    fn = funcs[0]
    inits = {i.name for i in model.graph.initializer}
    ins = [i.name for i in model.graph.input if i.name not in inits]
    outs = [o.name for o in model.graph.output]
    args, results = fn.function_type.inputs.data, fn.function_type.outputs.data
    if len(ins) != len(args) or len(outs) != len(results):
        return

    def attrs(names):
        return ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in names])

    fn.arg_attrs = attrs(ins)
    fn.res_attrs = attrs(outs)
    from m100.frontend.shape_only import INT4_KEY, WEIGHT_ATTR, int4_weights, shape_only_names
    weights = set(shape_only_names(model))
    if weights:
        from xdsl.dialects.builtin import IntegerAttr, UnitAttr
        w4 = int4_weights(model)

        def w4_attr(n):  # a W4 weight: where its int4 data and scales come from (shape_only)
            if n not in w4:
                return {}
            d = w4[n]
            a = {"q": StringAttr(d["q"]), "scale": StringAttr(d["scale"]),
                 "block": IntegerAttr(int(d["block"]), 64)}
            if d.get("const"):  # the values (lift_int4_constants kept them as initializers)
                a |= _int4_values(model, d["q"], d["scale"])
            return {INT4_KEY: DictionaryAttr(a)}
        fn.arg_attrs = ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n),
                                                  **({WEIGHT_ATTR: UnitAttr()} if n in weights
                                                     else {}), **w4_attr(n)}) for n in ins])
