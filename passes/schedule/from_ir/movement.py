"""Constants and data movement (split out of ``from_ir.py``): ``arith.constant`` / ``linalg.fill``
(constant data, or nothing when a fill only initialises an accumulator), ``tensor.pad`` (folded
into a feeding conv/pool when it can be, else a DMA), ``linalg.broadcast`` (a contraction's bias,
a runtime bias, or a DMA), transposes, concats, slices, reshapes, copy generics, the function's
results, and ``quant.scast`` (the same buffer under another type).
"""

from __future__ import annotations

import collections
import math

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation
from xdsl.ir.affine import AffineMap

from m100.passes.graph.common import scalar_const

from ..graph import ScheduleError
from ..ir_facts import Lowering, _dense, _shape, linear_map
from .builder import Builder
from .contraction import TCU_CONVS


def constant(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A tensor ``arith.constant``: remembered as constant data (a weight tensor once used)."""
    arr = _dense(op)
    if arr is not None and isinstance(op.results[0].type, TensorType):
        ctx.consts[op.results[0]] = arr


def func_return(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """The function's results (an input, a constant or a value returned twice is copied)."""
    for v in op.operands:
        if v in ctx.consts and isinstance(ctx.consts[v], tuple):
            raise ScheduleError(f"{where}: returning a bias broadcast is not supported")
        src = ctx.value(v)
        t = ctx.g.tensors[src]
        if t.kind in ("input", "weight") or src in ctx.outputs:
            # an input, a constant (ONNX Identity, a no-op reduction, Shape folded to a
            # constant) or a value returned twice: the program copies it (one DMA)
            src = ctx.add_t("copy", "dtdu.copy", [src], t.shape, t.dtype, {},
                        Lowering("reshape"), op)
        ctx.outputs.append(src)


def scast(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``quant.scast``: the same buffer under the quantized/storage type."""
    src = op.operands[0]
    if src in ctx.consts:
        ctx.consts[op.results[0]] = ctx.consts[src]
    else:
        ctx.names[op.results[0]] = ctx.tname(src)


def fill(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``linalg.fill`` of a constant: remembered (an accumulator init or constant data)."""
    val = scalar_const(op.operands[0])
    if val is None:
        raise ScheduleError(f"{where}: fill with a non-constant value")
    ctx.fills[op.results[0]] = float(val)


def _spatial_pad(user: str, low: list[int], high: list[int]) -> bool:
    """Whether a 4-D pad touches only the H and W axes of its pool/conv user's layout (a pool or
    conv pads only those: a pad of N or C, e.g. an ONNX ``Pad`` of every axis before a
    ``GlobalAveragePool``, must be its own copy)."""
    if len(low) != 4:
        return True  # not a 2-D pool/conv input: the user's own check decides
    keep = (0, 1) if "_nchw_" in user else (0, 3) if "_nhwc_" in user else ()
    return not any(low[i] or high[i] for i in keep)


def pad(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``tensor.pad`` with a constant: folded into its only pool/conv user when it pads only that
    user's H and W, else a DMA."""
    low_p = list(op.static_low.get_values())  # type: ignore[attr-defined]
    high_p = list(op.static_high.get_values())  # type: ignore[attr-defined]
    yld = list(op.regions[0].blocks[0].ops)[-1]
    pv = scalar_const(yld.operands[0])
    if pv is None:
        raise ScheduleError(f"{where}: padding with a non-constant value")
    src = op.operands[0]
    users_ = [u.operation for u in op.results[0].uses]
    if len(users_) == 1 and (users_[0].name.startswith("linalg.pooling") or
                             (users_[0].name in TCU_CONVS and pv == 0.0)) and \
            _spatial_pad(users_[0].name, low_p, high_p):
        ctx.pad_fold[op.results[0]] = (src, low_p, high_p, float(pv))
        return
    s_in = _shape(src)
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    t_src = ctx.tname(src)
    ctx.add("pad", "dtdu.copy", [t_src], op.results[0], {},
        Lowering("pad", params=dict(low=low_p, high=high_p, value=float(pv),
                                    src_shape=s_in)), op)


def broadcast(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``linalg.broadcast``: a contraction bias (constant or runtime), else a DMA."""
    src = op.operands[0]
    users_ = [u.operation for u in op.results[0].uses]
    if src in ctx.consts and users_ and all(
            u.name in ("linalg.matmul", "linalg.batch_matmul") + TCU_CONVS
            and u.operands[-1] is op.results[0] for u in users_) and \
            list(op.dimensions.get_values()) == list(  # type: ignore[attr-defined]
                range(len(_shape(op.results[0])) - 1)):
        ctx.consts[op.results[0]] = ("bias", ctx.consts[src], src)  # type: ignore[assignment]
        return
    dims = list(op.dimensions.get_values())  # type: ignore[attr-defined]
    oshape = _shape(op.results[0])
    if src not in ctx.consts and users_ and len(_shape(src)) == 1 and \
            dims == list(range(len(oshape) - 1)) and all(
            u.name in ("linalg.matmul",) + TCU_CONVS
            and u.operands[-1] is op.results[0]
            and u.operands[0] is not op.results[0] and u.operands[1] is not op.results[0]
            for u in users_):
        # a runtime per-channel vector broadcast into a contraction's accumulator (ONNX
        # Conv/Gemm with the bias as a graph input): the TCU epilogue's bias operand
        ctx.runtime_bias[op.results[0]] = src
        return
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    dims = list(op.dimensions.get_values())  # type: ignore[attr-defined]
    ctx.add("bcast", "dtdu.copy", [ctx.tname(src)], op.results[0], {},
        Lowering("broadcast", params=dict(dims=dims)), op)


def transpose(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``linalg.transpose``: a DMA with a permuted access."""
    perm = list(op.permutation.get_values())  # type: ignore[attr-defined]
    src = op.operands[0]
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    ctx.add("transpose", "dtdu.copy", [ctx.tname(src)], op.results[0], {"perm": tuple(perm)},
        Lowering("transpose", params=dict(perm=perm)), op)


def concat(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``tensor.concat``: a DMA per input."""
    ins_ = []
    for v in op.operands:
        if v in ctx.consts:
            ctx.const_tensor(v, ctx.consts[v])
        ins_.append(ctx.tname(v))
    ctx.add("concat", "dtdu.copy", ins_, op.results[0], {},
        Lowering("concat", params=dict(dim=op.dim.value.data)), op)  # type: ignore


def extract_slice(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A static ``tensor.extract_slice``: a strided DMA."""
    if len(op.operands) != 1:
        raise ScheduleError(f"{where}: dynamic slices are not supported")
    src = op.operands[0]
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    ctx.add("slice", "dtdu.copy", [ctx.tname(src)], op.results[0], {},
        Lowering("slice", params=dict(
            offsets=list(op.static_offsets.get_values()),  # type: ignore[attr-defined]
            sizes=list(op.static_sizes.get_values()),  # type: ignore[attr-defined]
            strides=list(op.static_strides.get_values()))), op)  # type: ignore[attr-defined]


def reshape(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """Reshapes, casts and ``linalg.copy``: a DMA (a view where the layout allows)."""
    src = op.operands[0]
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    ctx.add("reshape", "dtdu.copy", [ctx.tname(src)], op.results[0], {}, Lowering("reshape"), op)


def find_views(g, low: dict, align: int) -> dict[str, tuple[str, int]]:
    """The data-movement ops whose result is a **view** of their input's bytes: ``result tensor
    -> (root tensor, byte offset)``, the root being a tensor with memory of its own. A view is
    emitted and planned as no transfer at all: its consumers read the root's memory at the
    offset (``emit_core.Emitter.memory``, ``segment.memory_of``, ``kinds/movement.py``).

    * a reshape (collapse/expand/reshape, a shape cast, ``linalg.copy``) whose result has the
      input's dtype and byte size: row-major order is kept, the bytes are the same;
    * a slice with unit strides whose box is one contiguous run of the input: every dim after
      the last cut dim is whole, every dim before it has size 1 (a head of ``[n, T, hd]``, a
      row band of a matrix); its byte offset a multiple of ``align`` (buffer alignment).
    Never for a model output (its own DDR symbol), a weight root (constant bytes are emitted per
    tensor) or a sub-byte dtype; tensors are never freed in DDR / CCB SRAM (bump allocation), so
    the root outlives every reader of its views."""
    from ..graph import dtype_bytes
    views: dict[str, tuple[str, int]] = {}
    for op in g.ops:
        lw = low.get(op.name)
        if lw is None or lw.kind not in ("reshape", "slice") or len(op.inputs) != 1:
            continue
        src, dst = g.tensors[op.inputs[0]], g.tensors[op.outputs[0]]
        if dst.kind != "act" or src.dtype != dst.dtype or src.dtype in ("i4", "u4") or \
                dtype_bytes(src.dtype) < 1:
            continue
        if lw.kind == "reshape":
            if src.nbytes != dst.nbytes:
                continue
            off = 0
        else:
            offs, sizes, strides = lw.params["offsets"], lw.params["sizes"], lw.params["strides"]
            shape = src.shape
            if any(s != 1 for s in strides) or len(sizes) != len(shape) or \
                    math.prod(sizes) != dst.numel:
                continue
            cut = [d for d in range(len(shape)) if sizes[d] != shape[d]]
            if cut and any(sizes[d] != 1 for d in range(cut[-1])):
                continue  # the dims after the last cut one are whole: one run iff unit before
            lin = 0
            for d in range(len(shape)):
                lin = lin * shape[d] + offs[d]
            off = lin * int(dtype_bytes(src.dtype))
            if off % align:
                continue
        root, base = op.inputs[0], 0
        if root in views:
            root, base = views[root]
        if g.tensors[root].kind == "weight":
            continue
        views[op.outputs[0]] = (root, base + off)
    return views


def find_in_place(g, low: dict, align: int, views: dict[str, tuple[str, int]],
                  strided: dict[str, tuple[str, tuple[int, int]]] | None = None
                  ) -> dict[str, frozenset[int]]:
    """Concat inputs **written in place** (a view on the writing side): ``concat op -> the
    positions of its inputs`` whose producer writes them straight into the concat's result.
    ``views`` (from :func:`find_views`) is extended in place: the relocated tensor (and every view
    of it) becomes a view of the concat's result at the part's byte offset, so its producer's
    stores land there (``emit_core.Emitter.memory``) and the concat moves only its other inputs
    (``kinds/movement.py``; with all of them in place it is no transfer at all, its readers wait
    for the parts' writers).

    An input is written in place when its part is one contiguous run of the result (every dim
    before the concat dim has size 1) at a byte offset that is a multiple of ``align``, and its
    bytes are those of a tensor ``R`` of its own (the input itself, or a reshape view of all of
    ``R``) that is an ``act`` tensor produced by some op (not a model input, output or weight,
    not a view itself) and placed in no other concat. The concat's result must be an ``act``
    tensor (a model output is its own DDR symbol) and not of a sub-byte dtype; the producer of
    ``R`` stores it whatever else reads it (the concat is a DMA segment of its own, so a
    consumer outside ``R``'s segment). Concats are taken last first, so a concat's result
    that is itself written in place into a later concat carries its parts along (chains resolve
    to the final root). DDR and CCB SRAM are bump-allocated and never reused, so the root
    outlives every writer and reader of its parts.

    ``strided`` (filled in place when given): the columns of a 2-D concat along its last dim
    (``[T, hd]`` attention heads side by side in ``[T, nh*hd]``) are written in place by their
    producers too (:func:`_strided_parts`)."""
    from ..graph import dtype_bytes
    out: dict[str, frozenset[int]] = {}
    produced = {t for op in g.ops for t in op.outputs}
    placed: set[str] = set()
    counts = None
    for op in reversed(g.ops):
        lw = low.get(op.name)
        if lw is None or lw.kind != "concat" or len(op.inputs) < 2:
            continue
        dst = g.tensors[op.outputs[0]]
        if dst.kind != "act" or dst.dtype in ("i4", "u4") or dtype_bytes(dst.dtype) < 1:
            continue
        dim = lw.params["dim"] % len(dst.shape)
        if any(dst.shape[d] != 1 for d in range(dim)):
            # a part is one contiguous run only when every dim before it is 1
            if strided is not None:
                if counts is None:  # who produces / how often each tensor is read, once
                    counts = ({t: o for o in g.ops for t in o.outputs},
                              collections.Counter(t for o in g.ops for t in o.inputs))
                pos = _strided_parts(g, op, dim, views, strided, placed, *counts)
                if pos:
                    out[op.name] = pos
            continue
        root, base = views.get(op.outputs[0], (op.outputs[0], 0))
        inner = math.prod(dst.shape[dim + 1:]) * int(dtype_bytes(dst.dtype))
        pos, at = [], 0
        for i, tn in enumerate(op.inputs):
            t = g.tensors[tn]
            off = base + at * inner
            at += t.shape[dim]
            r = views.get(tn, (tn, 0))
            rt = g.tensors[r[0]]
            if r[1] != 0 or rt.nbytes != t.nbytes or rt.kind != "act" or \
                    r[0] not in produced or r[0] in placed or r[0] in views or \
                    t.dtype != dst.dtype or op.inputs.count(tn) != 1 or off % align or \
                    any(x != tn and views.get(x, (x, 0))[0] == r[0] for x in op.inputs):
                continue
            placed.add(r[0])
            for v, (vr, vo) in list(views.items()):
                if vr == r[0]:
                    views[v] = (root, off + vo)
            views[r[0]] = (root, off)
            pos.append(i)
        if pos:
            out[op.name] = frozenset(pos)
    return out


def find_output_reshapes(g, low: dict, views: dict[str, tuple[str, int]]) -> set[str]:
    """Reshapes **into a model output** written in place (a view on the writing side): the
    reshape ops that move nothing because their input ``R`` becomes a view of the output at
    offset 0 (``views`` is extended in place, every view of ``R`` re-rooted), so ``R``'s producer
    stores straight into the output's DDR symbol; the reshape is then a view op (its readers and
    the output wait for ``R``'s writers). ``R`` must be an ``act`` tensor produced by some op,
    read by this reshape only, not a view itself nor placed in a concat, of the output's dtype
    (not sub-byte) and byte size (a reshape keeps the row-major order: the same bytes). Prefill
    RoPE's K (``[kvh, 2, hd/2, T]``, the transpose of its halves) is the ``kT`` output
    ``[1, kvh, hd, T]`` this way (docs/llm.md, session 13).
    ``R`` may also be a whole-size view (offset 0) of a root read by nothing but reader-side
    view ops and this reshape (the kT chain ``transpose -> collapse -> expand``, the heads'
    slices views of the collapse): the root and every view of it move into the output
    (session 14: one 8 MB copy less a 7B layer)."""
    from ..graph import dtype_bytes
    out: set[str] = set()
    produced = {t for op in g.ops for t in op.outputs}
    readers: dict[str, int] = {}
    for op in g.ops:
        for t in set(op.inputs):
            readers[t] = readers.get(t, 0) + 1
    for op in g.ops:
        lw = low.get(op.name)
        if lw is None or lw.kind != "reshape" or len(op.inputs) != 1 or not op.outputs:
            continue
        src, dst = g.tensors[op.inputs[0]], g.tensors[op.outputs[0]]
        if dst.kind != "output" or src.dtype != dst.dtype or src.nbytes != dst.nbytes or \
                src.dtype in ("i4", "u4") or dtype_bytes(src.dtype) < 1 or dst.name in views:
            continue
        if src.name in views:
            # a whole-size view (offset 0) of its root R: R and its views move to the output
            # when R is read through views only (the kT chain transpose -> collapse -> expand)
            r, off = views[src.name]
            rt = g.tensors[r]
            if off or rt.nbytes != dst.nbytes or rt.dtype != dst.dtype or rt.kind != "act" or \
                    r not in produced or r in views or \
                    not _only_view_readers(g, r, views, op.name):
                continue
            for v, (vr, vo) in list(views.items()):
                if vr == r:
                    views[v] = (dst.name, vo)
            views[r] = (dst.name, 0)
            out.add(op.name)
            continue
        if src.kind != "act" or src.name not in produced or readers.get(src.name) != 1:
            continue
        if any(r == src.name for r, _ in views.values()):
            continue  # R is the root of reader-side views: keep it simple, leave it a copy
        views[src.name] = (dst.name, 0)
        out.add(op.name)
    return out


def _only_view_readers(g, root: str, views: dict, last: str) -> bool:
    """Whether ``root`` is read by reader-side view ops only (reshapes / contiguous slices whose
    result is a view of it) or by the reshape ``last`` into the output."""
    for op in g.ops:
        if root in op.inputs and op.name != last and op.outputs[0] not in views:
            return False
    return True


#: producers whose pieces store through ``emit_units.store`` with ``row_index`` of a 2-D
#: output: their stores can land in the columns of another 2-D tensor
_STRIDED_WRITERS = ("tcu.matmul", "cvu.elementwise", "cvu.softmax", "cvu.layernorm",
                    "cvu.rmsnorm")


def _strided_parts(g, op, dim: int, views: dict, strided: dict, placed: set, producer: dict,
                   readers: collections.Counter) -> frozenset[int]:
    """The inputs of the concat ``op`` along the last dim of a 2-D result written in place as
    columns of the result (``strided``: part -> (root, (row, col) offset)): a part is a 2-D
    ``act`` tensor of the result's dtype, produced by one op of :data:`_STRIDED_WRITERS`, read
    by nothing but this concat (once), neither a view nor viewed, not placed elsewhere. The
    result may itself be a contiguous view of a 2-D root with as many columns (the sequences
    of a batched prefill one after the other): the offset is then in the root's rows.
    ``producer`` / ``readers``: each tensor's producing op / how many inputs read it."""
    from ..graph import dtype_bytes
    dst_n = op.outputs[0]
    dst = g.tensors[dst_n]
    if len(dst.shape) != 2 or dim != 1 or dst_n in strided:
        return frozenset()
    root, base = views.get(dst_n, (dst_n, 0))
    rt = g.tensors[root]
    row_b = dst.shape[1] * int(dtype_bytes(dst.dtype))
    if len(rt.shape) != 2 or rt.shape[1] != dst.shape[1] or base % row_b:
        return frozenset()
    r_off = base // row_b
    viewed = {r for r, _ in views.values()}
    pos, col = [], 0
    for i, tn in enumerate(op.inputs):
        t = g.tensors[tn]
        c0, col = col, col + (t.shape[1] if len(t.shape) == 2 else 0)
        p = producer.get(tn)
        if len(t.shape) != 2 or t.shape[0] != dst.shape[0] or t.kind != "act" or \
                t.dtype != dst.dtype or p is None or p.unit not in _STRIDED_WRITERS or \
                len(p.outputs) != 1 or readers.get(tn) != 1 or tn in views or \
                tn in viewed or tn in placed or tn in strided:
            continue
        strided[tn] = (root, (r_off, c0))
        placed.add(tn)
        pos.append(i)
    return frozenset(pos)


def gcopy(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A single-input copy generic (``dtdu.copy``) with an affine input map: a DMA."""
    maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
    ins = list(op.inputs)  # type: ignore[attr-defined]
    if len(ins) != 1 or linear_map(maps[1]) != linear_map(
            AffineMap.identity(maps[1].num_dims)):
        raise ScheduleError(f"{where}: only single-input copy generics are supported")
    src = ins[0]
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    ctx.add("copy", "dtdu.copy", [ctx.tname(src)], op.results[0], {},
        Lowering("gcopy", params=dict(map=linear_map(maps[0]))), op)
