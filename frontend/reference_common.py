"""Shared pieces of the numpy reference executor (:mod:`m100.frontend.reference`): the error type,
MLIR element types -> numpy dtypes, dense-attribute decoding, op locations for messages, and affine
indexing maps -> zero-copy strided views over a loop space. Split out of ``reference.py`` to keep
modules under ~30 KB; no behaviour of its own."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ShapedType,
)
from xdsl.ir import Attribute, Operation
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)

from m100.dialects.dense import DenseError
from m100.dialects.dense import dense_to_numpy as decode_dense
from m100.errors import M100Error


class ReferenceError(M100Error):  # noqa: A001 - the project's name for it
    """An op (or a case of an op) that the reference executor does not implement, or bad inputs."""


# --------------------------------------------------------------------------------------------------
# types
# --------------------------------------------------------------------------------------------------
def np_dtype(t: Attribute) -> np.dtype:
    """The numpy dtype that holds values of the MLIR element type ``t``."""
    if isinstance(t, ShapedType):
        t = t.get_element_type()  # type: ignore[assignment]
    if isinstance(t, Float32Type):
        return np.dtype(np.float32)
    if isinstance(t, Float64Type):
        return np.dtype(np.float64)
    if isinstance(t, Float16Type):
        return np.dtype(np.float16)
    if isinstance(t, BFloat16Type):
        return np.dtype(np.float32)
    if isinstance(t, IndexType):
        return np.dtype(np.int64)
    from m100.dialects.quant import QuantizedType

    if isinstance(t, QuantizedType):  # stored values with their sign (u8 storage: uint8)
        for bits in (8, 16, 32):
            if t.width <= bits:
                return np.dtype(f"{'' if t.signed else 'u'}int{bits}")
    if isinstance(t, IntegerType):
        w = t.width.data
        if w == 1:
            return np.dtype(np.bool_)
        unsigned = t.signedness.data.name == "UNSIGNED"
        for bits in (8, 16, 32, 64):
            if w <= bits:
                return np.dtype(f"{'u' if unsigned else ''}int{bits}")
    raise ReferenceError(f"element type {t} is not supported by the reference executor")


def _int_width(t: Attribute) -> int:
    if isinstance(t, ShapedType):
        t = t.get_element_type()  # type: ignore[assignment]
    if isinstance(t, IndexType):
        return 64
    assert isinstance(t, IntegerType)
    return t.width.data


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """Decode a dense attribute bit-exactly (:func:`m100.dialects.dense.dense_to_numpy`, the one
    decoder), as a :class:`ReferenceError` if its element type has no decoding."""
    try:
        return decode_dense(attr)
    except DenseError as e:
        raise ReferenceError(str(e)) from None


def _scalar_attr(attr: Attribute, t: Attribute) -> np.ndarray:
    if isinstance(attr, FloatAttr):
        return np.asarray(attr.value.data, dtype=np_dtype(t))
    if isinstance(attr, IntegerAttr):
        v = attr.value.data
        dt = np_dtype(t)
        if dt == np.bool_:
            return np.asarray(bool(v & 1))
        if dt.kind == "i":
            v = _wrap_signed(v, dt.itemsize * 8)
        elif dt.kind == "u":
            v = v & ((1 << (dt.itemsize * 8)) - 1)
        return np.asarray(v, dtype=dt)
    raise ReferenceError(f"unsupported constant attribute {attr}")


def _wrap_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _op_name(op: Operation) -> str:
    if op.name == "builtin.unregistered":
        try:
            return op.op_name.data  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            return op.name
    return op.name


def _loc(op: Operation) -> str:
    """Where an op is, for messages: its name, result, position in its block, enclosing ops up to the
    function, e.g. ``'foo.bar' (%7, op #12 in @main_graph)`` or ``... (op #3 in the body of
    'linalg.generic' op #40 in @main_graph)``."""
    parts = []
    cur: Operation | None = op
    while cur is not None and cur.name != "func.func":
        block = cur.parent_block()
        index = list(block.ops).index(cur) if block is not None else -1
        parts.append(f"op #{index}" if cur is op else f"the body of '{_op_name(cur)}' op #{index}")
        cur = cur.parent_op()
    where = " in ".join(parts)
    if cur is not None and hasattr(cur, "sym_name"):
        where += f" in @{cur.sym_name.data}"
    res = ", ".join(f"%{r.name_hint}" for r in op.results if r.name_hint)
    return f"'{_op_name(op)}' ({res + ', ' if res else ''}{where})"


# --------------------------------------------------------------------------------------------------
# affine maps -> strided views
# --------------------------------------------------------------------------------------------------
def _linear(expr: AffineExpr, n_dims: int) -> tuple[list[int], int] | None:
    """Coefficients per dim and constant of an affine expression, or None if not linear."""
    if isinstance(expr, AffineDimExpr):
        c = [0] * n_dims
        c[expr.position] = 1
        return c, 0
    if isinstance(expr, AffineConstantExpr):
        return [0] * n_dims, expr.value
    if isinstance(expr, AffineBinaryOpExpr):
        lhs, rhs = _linear(expr.lhs, n_dims), _linear(expr.rhs, n_dims)
        if lhs is None or rhs is None:
            return None
        if expr.kind == AffineBinaryOpKind.Add:
            return [a + b for a, b in zip(lhs[0], rhs[0])], lhs[1] + rhs[1]
        if expr.kind == AffineBinaryOpKind.Mul:
            if not any(lhs[0]):
                return [lhs[1] * b for b in rhs[0]], lhs[1] * rhs[1]
            if not any(rhs[0]):
                return [rhs[1] * a for a in lhs[0]], lhs[1] * rhs[1]
    return None


def _eval_expr(expr: AffineExpr, idx: Sequence[np.ndarray]) -> np.ndarray:
    if isinstance(expr, AffineDimExpr):
        return idx[expr.position]
    if isinstance(expr, AffineConstantExpr):
        return np.asarray(expr.value)
    if isinstance(expr, AffineBinaryOpExpr):
        a, b = _eval_expr(expr.lhs, idx), _eval_expr(expr.rhs, idx)
        k = expr.kind
        if k == AffineBinaryOpKind.Add:
            return a + b
        if k == AffineBinaryOpKind.Mul:
            return a * b
        if k == AffineBinaryOpKind.Mod:
            return np.mod(a, b)
        if k == AffineBinaryOpKind.FloorDiv:
            return np.floor_divide(a, b)
        if k == AffineBinaryOpKind.CeilDiv:
            return -np.floor_divide(-a, b)
    raise ReferenceError(f"unsupported affine expression {expr}")


class _View:
    """An operand seen over the loop space: ``arr`` has one axis per loop dim in ``dims`` (sorted)."""

    __slots__ = ("arr", "dims")

    def __init__(self, arr: np.ndarray, dims: tuple[int, ...]):
        self.arr, self.dims = arr, dims

    def full(self, n_loops: int) -> np.ndarray:
        """Broadcastable to the whole loop space (unit axes for loops not used)."""
        missing = tuple(d for d in range(n_loops) if d not in self.dims)
        return np.expand_dims(self.arr, missing) if missing else self.arr


def _affine_view(
    arr: np.ndarray, amap: AffineMap, ranges: Sequence[int], writeable: bool = False
) -> _View:
    """View ``arr`` through ``amap`` over the loop space ``ranges`` (zero-copy where the map is linear)."""
    n = amap.num_dims
    lin = [_linear(e, n) for e in amap.results]
    if all(x is not None for x in lin):
        used = sorted({d for coeffs, _ in lin for d, c in enumerate(coeffs) if c})  # type: ignore[misc]
        es = arr.itemsize
        base = sum(c0 * (s // es) for (_, c0), s in zip(lin, arr.strides))  # type: ignore[misc]
        strides = [sum(coeffs[d] * s for (coeffs, _), s in zip(lin, arr.strides)) for d in used]  # type: ignore[misc]
        shape = [ranges[d] for d in used]
        if arr.ndim == 0:
            return _View(arr, ())
        if arr.size == 0:
            return _View(np.zeros(shape, arr.dtype), tuple(used))
        assert arr.flags.c_contiguous, "operands are made contiguous before viewing"
        flat = arr.reshape(-1)
        view = np.lib.stride_tricks.as_strided(flat[base:], shape, strides, writeable=writeable)
        return _View(view, tuple(used))
    if writeable:
        raise ReferenceError(f"output indexing map {amap} is not affine-linear")
    idx = [np.arange(r).reshape([-1 if i == d else 1 for i in range(n)]) for d, r in enumerate(ranges)]
    gathered = arr[tuple(np.broadcast_to(_eval_expr(e, idx), ranges) for e in amap.results)]
    return _View(gathered, tuple(range(n)))


def _loop_ranges(maps: Sequence[AffineMap], shapes: Sequence[tuple[int, ...]], op: Operation) -> list[int]:
    n = maps[0].num_dims
    ranges: list[int | None] = [None] * n
    for amap, shape in zip(maps, shapes):
        for e, size in zip(amap.results, shape):
            if isinstance(e, AffineDimExpr) and ranges[e.position] is None:
                ranges[e.position] = size
    if any(r is None for r in ranges):
        # a loop reached only through compound expressions (e.g. d0 + d1 of a window): solve from the
        # other loops when the expression is `a*dx + b*dy` with one unknown
        for amap, shape in zip(maps, shapes):
            for e, size in zip(amap.results, shape):
                lin = _linear(e, n)
                if lin is None:
                    continue
                unknown = [d for d, c in enumerate(lin[0]) if c and ranges[d] is None]
                if len(unknown) == 1:
                    d = unknown[0]
                    rest = sum(c * (ranges[k] - 1) for k, c in enumerate(lin[0]) if c and k != d)  # type: ignore[operator]
                    ranges[d] = (size - 1 - lin[1] - rest) // lin[0][d] + 1
    if any(r is None for r in ranges):
        raise ReferenceError(f"{_loc(op)}: cannot infer the loop ranges from the indexing maps")
    return ranges  # type: ignore[return-value]



def _contig(a) -> np.ndarray:
    """C-contiguous without turning a 0-d array into shape (1,) as np.ascontiguousarray does."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)
