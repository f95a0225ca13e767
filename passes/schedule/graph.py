"""The scheduler's own op-graph description: plain Python, no xDSL.

The space-time scheduler works on this small description so that its algorithms (cost model,
partitioning, placement search) are testable without IR. ``from_ir.py`` builds an :class:`OpGraph`
from classified linalg IR (every op carries ``m100.unit``); tests build graphs directly.

Conventions
-----------
* Tensors are row-major; activations of convolutions/pools are NHWC (the TCU's layout).
* Every op exposes a *row* axis (the outer, streamable axis: ``m`` of a matmul, ``n*oh`` of a conv,
  the product of all but the last dim of an elementwise op) and a *column* axis (``n`` / ``f`` /
  the last dim). Mini-tensors are bands of rows; data-parallel splits cut rows and/or columns.
* ``row_window(op, lo, hi)`` maps a band of output rows ``[lo, hi)`` to the input rows it needs
  (halo rows of convolutions and pools), or ``None`` when every input row is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from m100.errors import M100Error

DTYPE_BITS = {"i4": 4, "i8": 8, "i16": 16, "i32": 32, "f16": 16, "bf16": 16, "f32": 32, "i1": 8,
              "i64": 64}

TCU_UNITS = ("tcu.matmul", "tcu.conv2d")
CVU_UNITS = ("cvu.elementwise", "cvu.reduction", "cvu.softmax", "cvu.layernorm", "cvu.rmsnorm",
             "cvu.pool", "tcu.epilogue")
DTDU_UNITS = ("dtdu.copy", "dtdu.fill", "dtdu.transpose", "dtdu.broadcast")
CSU_UNITS = ("csu.gather", "csu.scatter", "csu.topk", "csu.argmax", "csu.call")
# how many times a CVU op streams its input (a reduction-based idiom reads it more than once)
CVU_PASSES = {"cvu.elementwise": 1, "cvu.reduction": 1, "cvu.softmax": 3, "cvu.layernorm": 2,
              "cvu.rmsnorm": 2, "cvu.pool": 1, "tcu.epilogue": 1}


class ScheduleError(M100Error, ValueError):
    """A graph the scheduler can not place (message names the op and what to change)."""


def dtype_bytes(dtype: str) -> float:
    try:
        return DTYPE_BITS[dtype] / 8
    except KeyError:
        raise ScheduleError(f"unknown element type '{dtype}'") from None


@dataclass(frozen=True)
class Tensor:
    """A value of the graph: ``kind`` is ``input``, ``weight`` (a constant), ``act`` or ``output``."""
    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"
    kind: str = "act"

    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @cached_property
    def nbytes(self) -> int:
        return math.ceil(self.numel * dtype_bytes(self.dtype))


@dataclass
class Op:
    """One classified operator. ``unit`` is a ``m100.unit`` name; ``attrs`` per unit:

    * ``tcu.matmul``: ``m, n, k`` (batch folded into m), optional ``batch`` (separate weights per batch)
    * ``tcu.conv2d``: ``n, h, w, c, f, kh, kw, stride=(1,1), pad=(0,0,0,0), dilation=(1,1), groups=1``
    * ``cvu.pool``: ``n, h, w, c, kh, kw, stride, pad`` (NHWC)
    * others: shapes come from the tensors.
    ``epilogue`` lists fused epilogue ops (bias, relu, ...) that the TCU runs for free.
    """
    name: str
    unit: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    epilogue: tuple[str, ...] = ()
    loc: str = ""  # source location for diagnostics


class OpGraph:
    """Tensors plus ops in a topological order."""

    def __init__(self, tensors: list[Tensor] | None = None, ops: list[Op] | None = None):
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        # data-movement results that are views of another tensor's bytes: tensor -> (root
        # tensor, byte offset) (``from_ir.movement.find_views``; planned and emitted as no
        # transfer, read at the root's memory)
        self.views: dict[str, tuple[str, int]] = {}
        # the data-movement ops whose result is such a view (reshapes, contiguous slices): no
        # transfer; and per concat op the positions of its inputs written in place by their
        # producers (``from_ir.movement.find_in_place``: those inputs are views of its result)
        self.view_ops: set[str] = set()
        self.in_place: dict[str, frozenset[int]] = {}
        # concat parts written in place that are NOT one contiguous run of the result (a 2-D
        # part's columns: the attention heads side by side): part -> (root tensor, (row, col)
        # offset in it); the part's producer stores its pieces into the root's rows
        # (``emit_units.store``), nothing else reads the part (``find_in_place``)
        self.strided: dict[str, tuple[str, tuple[int, int]]] = {}
        # tensors whose producers store into another layout (a transpose written by them,
        # ``from_ir.writer_maps``): tensor -> (root tensor, element stride per dim, element
        # offset): the linear element index in the root of each element; no memory of its own
        self.wmap: dict[str, tuple[str, tuple[int, ...], int]] = {}
        # roots accessed scattered (``from_ir.writer_maps.root_strides``): a root of ``wmap``
        # (a transposed layout its producers store into) or of ``cviews`` (read in column boxes)
        # -> the (byte stride, extent) pairs its runs are placed at (``segment.memory_of``'s
        # SRAM bank rule)
        self.wroots: dict[str, tuple[tuple[int, int], ...]] = {}
        # column slices of a 2-D tensor read by TCU matmuls only (``from_ir.writer_maps.
        # find_column_views``): tensor -> (root, byte offset, root columns): read in place at
        # the root's row pitch, no copy
        self.cviews: dict[str, tuple[str, int, int]] = {}
        # strided views (``from_ir.strided_views``): a non-contiguous slice and every slice /
        # reshape of it: tensor -> (root, element stride per dim, element offset); no memory of
        # its own, its readers load through the composed walk (``Emitter.source``)
        self.rmap: dict[str, tuple[str, tuple[int, ...], int]] = {}
        # causal attention chains ``scores = q @ kT -> softmax(scores + causal mask) -> @ v``
        # (``from_ir.causal.find_causal``): op -> (role, k, (qk, softmax, pv)); a piece of rows
        # [r0, r1) needs only the score columns [0, r1 - 1 + k): role ``cols`` (QK, softmax)
        # clips its columns, role ``k`` (PV) its reduction (``passes/schedule/causal.py``)
        self.causal: dict[str, tuple[str, int, tuple[str, str, str]]] = {}
        # transposes whose result nothing in the graph reads, moved to the end of the plan in
        # this many DMAs, each a range of the result's first dim longer than 1 (``background.py``:
        # they fill the DMA engines' gaps instead of holding one engine for the whole copy)
        self.chunks: dict[str, int] = {}
        for t in tensors or []:
            self.add_tensor(t)
        for o in ops or []:
            self.add_op(o)

    def add_tensor(self, t: Tensor) -> Tensor:
        self.tensors[t.name] = t
        return t

    def add_op(self, op: Op) -> Op:
        for n in op.inputs + op.outputs:
            if n not in self.tensors:
                raise ScheduleError(f"op '{op.name}': unknown tensor '{n}'")
        self.ops.append(op)
        return op

    def producer(self, tensor: str) -> Op | None:
        for o in self.ops:
            if tensor in o.outputs:
                return o
        return None

    def producers(self) -> dict[str, Op]:
        return {t: o for o in self.ops for t in o.outputs}

    def consumers(self) -> dict[str, list[Op]]:
        out: dict[str, list[Op]] = {}
        for o in self.ops:
            for t in o.inputs:
                out.setdefault(t, []).append(o)
        return out

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def act_inputs(self, op: Op) -> list[Tensor]:
        return [self.tensors[t] for t in op.inputs if self.tensors[t].kind != "weight"]

    def weights(self, op: Op) -> list[Tensor]:
        return [self.tensors[t] for t in op.inputs if self.tensors[t].kind == "weight"]

    def out(self, op: Op) -> Tensor:
        return self.tensors[op.outputs[0]]


# ------------------------------------------------------------------------------------------------
# geometry of an op: rows / cols / reduction, and the row window of its inputs
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """Work shape of an op: output ``rows x cols``, reduction ``k`` (MACs = rows*cols*k for TCU)."""
    rows: int
    cols: int
    k: int = 1
    row_elems: int = 1  # output elements per (row, col): conv ``ow`` (a row is one output image row)
    in_row_bytes: float = 0.0  # activation input bytes per *input* row (all columns)
    out_row_bytes: float = 0.0  # output bytes per output row (all columns)
    weight_bytes: float = 0.0  # constant bytes (split with cols)
    in_rows: int = 0  # input rows (for the row window)


def conv_out_hw(a: dict[str, Any]) -> tuple[int, int]:
    sh, sw = a.get("stride", (1, 1))
    dh, dw = a.get("dilation", (1, 1))
    pt, pl, pb, pr = a.get("pad", (0, 0, 0, 0))
    oh = (a["h"] + pt + pb - dh * (a["kh"] - 1) - 1) // sh + 1
    ow = (a["w"] + pl + pr - dw * (a["kw"] - 1) - 1) // sw + 1
    return oh, ow


def tensor_rows(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, elements per row and column) of a tensor: rank >= 3 -> ``prod(shape[:-2])`` rows of
    ``shape[-2]`` elements (an NHWC image row); rank 2 -> ``shape[0]`` rows of 1; rank <= 1 -> 1."""
    if len(shape) >= 3:
        return math.prod(shape[:-2]), shape[-2]
    if len(shape) == 2:
        return shape[0], 1
    return 1, 1


def view_names(g: OpGraph, root: str) -> tuple[str, ...]:
    """The tensors whose readers wait for ``root``'s writers, transitively: the results of view
    ops over it (no transfer: ``OpGraph.view_ops``) and of the concats it is a part of written in
    place (``OpGraph.in_place``: its producer's stores are the concat's, whatever else moves the
    concat's other parts). Cached per graph and root."""
    return _aliases(g, root)[0]


def concat_names(g: OpGraph, root: str) -> tuple[str, ...]:
    """Of :func:`view_names`, the results of in-place concats: each has a writer list of its
    own (its views share it: ``kinds.movement.emit_op``)."""
    return _aliases(g, root)[1]


def _aliases(g: OpGraph, root: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cache = g.__dict__.setdefault("_view_names", {})
    r = cache.get(root)
    if r is None:
        out, cats, names = [], [], {root}
        for o in g.ops:  # (topological order: a view of a view comes after it)
            view = o.name in g.view_ops and o.inputs and o.inputs[0] in names
            cat = not view and any(o.inputs[i] in names for i in g.in_place.get(o.name, ()))
            if view or cat:
                for t in o.outputs:
                    names.add(t)
                    out.append(t)
                    if cat:
                        cats.append(t)
        r = cache[root] = (tuple(out), tuple(cats))
    return r


def geometry(g: OpGraph, op: Op) -> Geometry:
    """The op's :class:`Geometry` (cached per graph and op name)."""
    cache = g.__dict__.setdefault("_geo_cache", {})
    r = cache.get(op.name)
    if r is None:
        r = cache[op.name] = _geometry(g, op)
    return r


def _geometry(g: OpGraph, op: Op) -> Geometry:
    a = op.attrs
    out = g.out(op)
    ob = dtype_bytes(out.dtype)
    acts = g.act_inputs(op)
    wbytes = float(sum(w.nbytes for w in g.weights(op)))
    if op.unit == "tcu.matmul":
        m, n, k = a["m"], a["n"], a["k"]
        rows, re = tensor_rows(out.shape)
        if rows * re != m:
            rows, re = m, 1
        ib = dtype_bytes(acts[0].dtype) if acts else 4
        return Geometry(rows, n, k, re, re * k * ib, re * n * ob, wbytes, rows)
    if op.unit in ("tcu.conv2d", "cvu.pool"):
        oh, ow = conv_out_hw(a)
        c = a["c"]
        f = a.get("f", c)
        groups = a.get("groups", 1) if op.unit == "tcu.conv2d" else c
        k = a["kh"] * a["kw"] * (c // groups)
        ib = dtype_bytes(acts[0].dtype)
        return Geometry(a["n"] * oh, f, k, ow, a["w"] * c * ib, ow * f * ob, wbytes, a["n"] * a["h"])
    # elementwise / reductions / copies: rows of the output (of the input for a reduction)
    shape = acts[0].shape if (op.unit in ("cvu.reduction",) and acts) else out.shape
    if not shape:
        shape = (1,)
    cols = shape[-1]
    rows, re = tensor_rows(shape)
    rot = op.attrs.get("rot") or {}  # rotate-half reads: another input's box, no bytes
    in_bytes = sum(g.tensors[t].nbytes for i, t in enumerate(op.inputs)
                   if g.tensors[t].kind != "weight" and i not in rot)
    return Geometry(rows, cols, 1, re, in_bytes / rows, out.nbytes / rows, wbytes, rows)


def row_window(g: OpGraph, op: Op, lo: int, hi: int) -> tuple[int, int] | None:
    """Input rows ``[ilo, ihi)`` of the first activation input needed for output rows ``[lo, hi)``.

    ``None``: the op needs its whole input for any output row (e.g. a reduction over rows, a matmul
    whose rows are not the producer's rows). Rows of a conv/pool are ``n * h`` image rows.
    """
    if op.unit in ("tcu.conv2d", "cvu.pool"):
        a = op.attrs
        oh, _ = conv_out_hw(a)
        sh, _ = a.get("stride", (1, 1))
        dh, _ = a.get("dilation", (1, 1))
        pt = a.get("pad", (0, 0, 0, 0))[0]
        h = a["h"]
        n0, n1 = lo // oh, (hi - 1) // oh
        if n0 != n1:  # the band crosses images: take whole images
            return n0 * h, (n1 + 1) * h
        r0, r1 = lo % oh, (hi - 1) % oh
        i0 = max(0, r0 * sh - pt)
        i1 = min(h, r1 * sh - pt + dh * (a["kh"] - 1) + 1)
        return n0 * h + i0, n0 * h + i1
    acts = g.act_inputs(op)
    if not acts:
        return None
    out = g.out(op)
    if op.unit in ("cvu.reduction",):
        return (lo, hi) if len(out.shape) == len(acts[0].shape) else None
    if tensor_rows(acts[0].shape)[0] == tensor_rows(out.shape)[0] and \
            op.unit not in ("csu.gather", "csu.scatter", "csu.topk", "csu.argmax", "csu.call"):
        return (lo, hi)
    return None


# Compile-size limit: natural TCU tiles (tcu_tile_m x tcu_tile_k x tcu_tile_n MACs) per program.
# 2**24 tiles is ~250x ResNet-50 at 224x224; beyond it the instruction streams and the schedule
# search grow past what the compiler handles in reasonable time, so it refuses up front.
MAX_TCU_TILES = 1 << 24


def check_limits(g: OpGraph, machine) -> None:
    """Refuse, before any scheduling work, a graph the machine or the compiler can not take:
    a tensor with a zero-size dimension, inputs + outputs + weights larger than DDR, or more TCU
    work than :data:`MAX_TCU_TILES`. One :class:`ScheduleError` naming the op/tensor and the limit."""
    producers = g.producers()

    def where(t: Tensor) -> str:
        op = producers.get(t.name) or next((o for o in g.ops if t.name in o.inputs), None)
        if op is None:
            return f"tensor '{t.name}'"
        return f"op '{op.name}'" + (f" ({op.loc})" if op.loc else "")

    for t in g.tensors.values():
        if any(d < 1 for d in t.shape):
            raise ScheduleError(f"{where(t)}: tensor '{t.name}' {t.dtype}{list(t.shape)} has a "
                                "zero-size dimension; tensors without elements are not supported")
    ddr = sum(t.nbytes for t in g.tensors.values() if t.kind in ("input", "output", "weight"))
    if ddr > machine.ddr_bytes:
        raise ScheduleError(f"the model's inputs, outputs and weights need {ddr / 2**30:.3g} GiB of "
                            f"DDR, more than machine '{machine.name}' has ({machine.ddr_bytes / 2**30:.3g} "
                            "GiB)")
    tile = machine.tcu_tile_m * machine.tcu_tile_k * machine.tcu_tile_n
    tiles = 0
    for op in g.ops:
        if op.unit != "tcu.matmul":
            continue
        a = op.attrs
        n_tiles = (-(-a["m"] // machine.tcu_tile_m) * -(-a["k"] // machine.tcu_tile_k)
                   * -(-a["n"] // machine.tcu_tile_n) * a.get("batch", 1))
        tiles += n_tiles
        if tiles > MAX_TCU_TILES:
            raise ScheduleError(
                f"op '{op.name}'{f' ({op.loc})' if op.loc else ''}: the program needs more than "
                f"{MAX_TCU_TILES} TCU tiles of {machine.tcu_tile_m}x{machine.tcu_tile_k}x"
                f"{machine.tcu_tile_n} MACs (this op alone {n_tiles}, "
                f"{a['m']}x{a['k']}x{a['n']}), the compiler's program-size limit "
                f"(MAX_TCU_TILES, ~{MAX_TCU_TILES * tile / 1e12:.2g} TMAC); split the model")

