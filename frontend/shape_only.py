"""Compile by shape: ONNX weights whose bytes are not there become DDR weight symbols.

A 7B-parameter model has 13 GB of f16 weights; the compiler needs only their shapes, element types
and (for quantized weights) how they are dequantized. An ONNX model saved with external data
(``onnx.save(..., save_as_external_data=True)``) whose data file is left out -- or a
``ModelProto`` built with initializers that point at external data that is never written
(:mod:`m100.frontend.llm` does this) -- is compiled *by shape*:

1. :func:`load_onnx_lazy` reads the model without its external data and loads the external data of
   the initializers whose file is present (those stay ordinary constants);
2. :func:`lift_shape_only_weights` turns each initializer whose bytes are absent into a graph input
   and records the names in the model's ``metadata_props`` under :data:`WEIGHTS_KEY`;
3. the importer (``onnx_import.name_io``) marks those function arguments ``{m100.weight}``;
   ``m100-schedule`` (``from_ir``) makes them scheduler tensors of kind ``weight`` without data, and
   the emitter gives each one a program symbol of role ``weight`` (DDR address, shape, dtype) in
   place of a data segment. Nothing of the weights' size is ever allocated by the compiler.

A program with weight symbols runs ``m100-sim --timing-only`` as is; a functional run needs every
weight supplied like an input (``--inputs`` npz keyed by the weight's ONNX name). Quantization
parameters of a weight (the ``DequantizeLinear`` that consumes it: scale / zero-point tensor names,
axis, block size) are recorded in the program metadata under :data:`WEIGHTS_KEY` as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

#: ``ModelProto.metadata_props`` key (comma-separated weight names) and program metadata key
#: (JSON object: weight name -> {"quant": {...}}) of the shape-only weights.
WEIGHTS_KEY = "m100.weights"
#: ``func.func`` argument attribute of a shape-only weight (a unit attribute next to ``m100.name``).
WEIGHT_ATTR = "m100.weight"
#: ``ModelProto.metadata_props`` key and ``func.func`` argument attribute of a shape-only int4
#: weight (JSON / dictionary: the int4 tensor ``q``, the ``scale`` tensor, the ``block`` along K)
INT4_KEY = "m100.int4"


def int4_weights(model) -> dict[str, dict]:
    """The int4 weights recorded by :func:`lift_shape_only_weights` (input name -> q/scale/block)."""
    for p in model.metadata_props:
        if p.key == INT4_KEY:
            return json.loads(p.value)
    return {}


def _is_external(t) -> bool:
    from onnx import TensorProto
    return t.data_location == TensorProto.EXTERNAL and not t.raw_data


def _location(t) -> str:
    for e in t.external_data:
        if e.key == "location":
            return e.value
    return ""


def read_model(path: str | os.PathLike):
    """``onnx.load(path, load_external_data=False)``, a binary model parsed from a read-only
    mapping of the file instead of a ``bytes`` copy of it.

    Why: ``onnx.load`` reads the whole file into ``bytes`` and parses that: two new copies of the
    weights (ResNet-50: 2 x 100 MB, ~50 000 minor page faults, ~0.09 CPU-s); protobuf's parser
    takes a ``memoryview`` of the mapping (the page cache's pages, mapped, not copied), so only
    the parsed message is new memory (~25 000 faults, ~0.05 CPU-s). The same message: the same
    parser on the same bytes, and a short parse is the same ``DecodeError`` as onnx's. A path
    whose extension names a text format (``.textproto``, ``.json``, ...), an empty file and
    anything that can not be mapped (a pipe) go to ``onnx.load`` as before (so does a protobuf
    runtime whose parser takes only ``bytes``).
    ``test_read_model_is_onnx_load``."""
    import mmap

    import onnx
    from google.protobuf.message import DecodeError
    from onnx import serialization

    path = os.fspath(path)
    fmt = serialization.registry.get_format_from_file_extension(os.path.splitext(path)[1])
    if fmt not in (None, "protobuf"):
        return onnx.load(path, load_external_data=False)
    with open(path, "rb") as f:
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # empty, or not a regular file
            return onnx.load(path, load_external_data=False)
    with mm, memoryview(mm) as view:
        model = onnx.ModelProto()
        try:
            decoded = model.ParseFromString(view)
        except TypeError:  # a protobuf runtime that parses only ``bytes``
            return onnx.load(path, load_external_data=False)
        if decoded is not None and decoded != len(view):
            raise DecodeError(f"Protobuf decoding consumed too few bytes: {decoded} out of "
                              f"{len(view)}")
    return model


def load_onnx_lazy(path: str | os.PathLike):
    """``onnx.load`` of ``path`` that loads only the external data whose file exists next to the
    model; the other external initializers stay shape-only."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor

    model = read_model(path)
    base = str(Path(path).parent)
    for t in model.graph.initializer:
        if _is_external(t) and _location(t) and (Path(base) / _location(t)).is_file():
            load_external_data_for_tensor(t, base)
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
    return model


def shape_only_names(model) -> list[str]:
    """The names recorded by :func:`lift_shape_only_weights` (empty if none)."""
    for p in model.metadata_props:
        if p.key == WEIGHTS_KEY:
            return [n for n in p.value.split(",") if n]
    return []


def _int4_dequants(model, external: dict) -> dict:
    """The shape-only W4 weights: ``DequantizeLinear(q, scale)`` with ``q`` an external signed
    int4 [K, N] initializer, ``scale`` an external [K / B, N] float initializer, ``axis=0``,
    ``block_size=B``, no zero point -> {node output: (node, q, scale, B)}. Another int4 form with
    external data is one clear error (it could be neither folded nor streamed)."""
    from onnx import TensorProto, helper
    out = {}
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or not node.input or node.input[0] not in external:
            continue
        q = external[node.input[0]]
        if q.data_type not in (TensorProto.INT4, TensorProto.UINT4):
            continue
        at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        s = external.get(node.input[1]) if len(node.input) > 1 else None
        k, n = (list(q.dims) + [0, 0])[:2]
        b = int(at.get("block_size", 0))
        ok = (q.data_type == TensorProto.INT4 and len(q.dims) == 2 and s is not None
              and (len(node.input) < 3 or not node.input[2]) and int(at.get("axis", 1)) == 0
              and b > 0 and k % b == 0 and list(s.dims) == [k // b, n]
              and s.data_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16))
        if not ok:
            raise ValueError(f"DequantizeLinear '{node.name or node.output[0]}': a shape-only int4 "
                             "weight must be signed int4 [K, N] with f16 scales [K/B, N], axis=0, "
                             "block_size=B dividing K and no zero point (the W4A16 form)")
        out[node.output[0]] = (node, q, s, b)
    return out


def lift_int4_constants(model) -> int:
    """The constant W4 weights of ``model``, in place: ``DequantizeLinear(q, scale)`` with constant
    signed int4 ``q`` [K, N], constant f16/bf16 ``scale`` [K/B, N], ``axis=0``, ``block_size=B``,
    no (or a zero) zero point, read only as the B operand of ``MatMul`` -> a graph input named
    after the output (recorded under :data:`WEIGHTS_KEY` and :data:`INT4_KEY` with
    ``"const": true``), ``q`` and ``scale`` kept as initializers: the importer attaches their
    values to the function argument and the scheduler stores them in DDR as packed int4 plus
    scales (the TCU dequantizes on the fly), instead of folding an f16 copy of the weights.
    Other int4 forms stay as they are (``onnx_rewrite_quant`` folds them). Returns the count."""
    from onnx import TensorProto, helper, numpy_helper
    inits = {t.name: t for t in model.graph.initializer if not _is_external(t)}
    users: dict[str, list] = {}
    for node in model.graph.node:
        for i, n in enumerate(node.input):
            users.setdefault(n, []).append((node, i))
    outs = {o.name for o in model.graph.output}
    found = {}
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") \
                or len(node.input) < 2 or node.input[0] not in inits or node.input[1] not in inits:
            continue
        q, s = inits[node.input[0]], inits[node.input[1]]
        at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        b = int(at.get("block_size", 0))
        if q.data_type != TensorProto.INT4 or len(q.dims) != 2 or b <= 0 or q.dims[0] % b \
                or int(at.get("axis", 1)) != 0 or list(s.dims) != [q.dims[0] // b, q.dims[1]] \
                or s.data_type not in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
            continue
        if len(node.input) > 2 and node.input[2]:
            z = inits.get(node.input[2])
            if z is None or np.any(numpy_helper.to_array(z) != 0):
                continue
        d = node.output[0]
        if d in outs or not users.get(d) or any(n.op_type != "MatMul" or i != 1
                                                for n, i in users[d]):
            continue
        found[d] = (node, q, s, b)
    if not found:
        return 0
    for d, (node, q, s, b) in found.items():
        model.graph.node.remove(node)
        model.graph.input.append(helper.make_tensor_value_info(d, s.data_type, list(q.dims)))
    int4 = int4_weights(model) | {d: {"q": q.name, "scale": s.name, "block": b, "const": True}
                                  for d, (_, q, s, b) in found.items()}
    names = shape_only_names(model) + list(found)
    for p in list(model.metadata_props):
        if p.key in (INT4_KEY, WEIGHTS_KEY):
            model.metadata_props.remove(p)
    model.metadata_props.add(key=INT4_KEY, value=json.dumps(int4, sort_keys=True))
    model.metadata_props.add(key=WEIGHTS_KEY, value=",".join(names))
    return len(found)


def lift_shape_only_weights(model) -> list[str]:
    """Turn every initializer without its bytes (external data not loaded) into a graph input of the
    same name, type and shape, in place; return their names (also recorded in ``metadata_props``).

    A shape-only int4 weight with its blocked ``DequantizeLinear`` (:func:`_int4_dequants`)
    becomes one graph input named after the DequantizeLinear's output, of the scale's type and
    shape [K, N], recorded under :data:`INT4_KEY` (JSON: input -> {q, scale, block}): the scheduler
    stores it in DDR as packed int4 ``q`` plus the scale tensor ``scale`` and the TCU dequantizes it
    on the fly (``isa.MatMul.scale``)."""
    from onnx import helper

    external = {t.name: t for t in model.graph.initializer if _is_external(t)}
    w4 = _int4_dequants(model, external)
    w4_parts = {n for _, q, s, _ in w4.values() for n in (q.name, s.name)}
    lifted = []
    keep = []
    for t in model.graph.initializer:
        if _is_external(t):
            if t.name not in w4_parts:
                lifted.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    int4 = {}
    for d, (node, q, s, b) in w4.items():
        lifted.append(helper.make_tensor_value_info(d, s.data_type, list(q.dims)))
        int4[d] = {"q": q.name, "scale": s.name, "block": b}
        model.graph.node.remove(node)
    if not lifted:
        return shape_only_names(model)
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    model.graph.input.extend(lifted)
    if int4:
        for p in list(model.metadata_props):
            if p.key == INT4_KEY:
                int4 = json.loads(p.value) | int4
                model.metadata_props.remove(p)
        model.metadata_props.add(key=INT4_KEY, value=json.dumps(int4, sort_keys=True))
    names = shape_only_names(model) + [v.name for v in lifted]
    for p in list(model.metadata_props):
        if p.key == WEIGHTS_KEY:
            model.metadata_props.remove(p)
    model.metadata_props.add(key=WEIGHTS_KEY, value=",".join(names))
    return names


def weight_quant_info(model, names: list[str]) -> dict[str, dict]:
    """Per shape-only weight: how it is dequantized (the ``DequantizeLinear`` consuming it), if any."""
    out: dict[str, dict] = {n: {} for n in names}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input and node.input[0] in out:
            q = {"op": "DequantizeLinear", "scale": node.input[1] if len(node.input) > 1 else "",
                 "zero_point": node.input[2] if len(node.input) > 2 else ""}
            for a in node.attribute:
                if a.name in ("axis", "block_size"):
                    q[a.name] = str(a.i)
            out[node.input[0]] = {"quant": q}
    return out


def weights_metadata(model) -> str:
    """The program metadata value of :data:`WEIGHTS_KEY` for ``model`` ('' if nothing is shape-only)."""
    names = shape_only_names(model)
    info = weight_quant_info(model, names)
    for d, w4 in int4_weights(model).items():  # the symbols are the int4 tensor and its scales
        if w4.get("const"):
            info.pop(d, None)
            continue
        info.pop(d, None)
        info[w4["q"]] = {"quant": {"op": "DequantizeLinear", "scale": w4["scale"], "axis": "0",
                                   "block_size": str(w4["block"]), "zero_point": "",
                                   "storage": "int4, dequantized by the TCU"}}
        info[w4["scale"]] = {}
    return json.dumps(info, sort_keys=True) if names else ""


__all__ = ["INT4_KEY", "WEIGHTS_KEY", "WEIGHT_ATTR", "int4_weights", "lift_int4_constants", "lift_shape_only_weights", "load_onnx_lazy", "read_model",
           "shape_only_names", "weight_quant_info", "weights_metadata"]
