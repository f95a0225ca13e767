"""Numpy reference executor for func + linalg/tensor/arith/math on tensors (the graph-level oracle).

``run(module, inputs, func_name=None) -> list[np.ndarray]`` executes one ``func.func`` op by op.
Nothing is interpreted per element:

* Every structured linalg op (``linalg.generic`` and every named op, which xDSL/our dialect give
  indexing maps, iterator types and a body) is executed from its *indexing maps*: each operand becomes a
  zero-copy ``as_strided`` view with one axis per loop dimension it uses (an affine result
  ``d2 * 2 + d5`` gives two view axes with strides ``2 * s`` and ``s``; that is how convolutions and
  pooling become sliding windows), then
  - a body ``acc + a * b`` (optionally with casts) is one ``np.einsum`` (matmul, batch_matmul, conv...);
  - a body ``combine(acc, f(inputs))`` with ``combine`` in add/mul/max/min/and/or/xor evaluates ``f`` on
    whole arrays and reduces with the ufunc over the reduction axes;
  - any other body with reduction loops (e.g. the max+argmax softmax generic) is evaluated vectorized
    over all parallel dims, looping only over the reduction index tuples;
  - parallel-only bodies are evaluated once on broadcast arrays.
* ``linalg.fill/copy/transpose/broadcast/reduce`` and ``tensor.*`` ops have direct numpy forms.
* Unsupported ops raise :class:`ReferenceError` naming the op and its location.

Values: tensors are ``np.ndarray`` of the element type (f32 -> float32, i1 -> bool, index -> int64;
bf16 is computed in float32); scalars are 0-d arrays. Results of float ops keep their type (float32
stays float32), so results match onnxruntime to f32 rounding (different summation order).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    ShapedType,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.affine import (
    AffineBinaryOpExpr,
    AffineBinaryOpKind,
    AffineConstantExpr,
    AffineDimExpr,
    AffineExpr,
    AffineMap,
)

from m100.errors import M100Error

__all__ = ["ReferenceError", "run", "np_dtype"]


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
    """Decode a dense attribute bit-exactly (hex weights stay bit-identical)."""
    et = attr.get_element_type()
    shape = tuple(attr.get_shape())
    raw = attr.data.data
    if isinstance(et, BFloat16Type):
        u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        arr = u16.view(np.float32)
    elif isinstance(et, IntegerType) and et.width.data == 1:
        arr = np.frombuffer(raw, dtype=np.uint8) != 0
    else:
        dt = np_dtype(et)
        if isinstance(et, IntegerType) and et.width.data not in (8, 16, 32, 64):
            dt = np.dtype(f"int{max(8, 1 << (et.width.data - 1).bit_length())}")
        arr = np.frombuffer(raw, dtype=dt.newbyteorder("<")).astype(dt)
    n = int(np.prod(shape)) if shape else 1
    if arr.size == 1 and n != 1:
        arr = np.full(n, arr[0], dtype=arr.dtype)
    return arr.reshape(shape)


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


# --------------------------------------------------------------------------------------------------
# scalar / elementwise semantics of arith and math (on whole arrays)
# --------------------------------------------------------------------------------------------------
def _cmpf(pred: int, a, b):
    ordered = ~(np.isnan(a) | np.isnan(b))
    with np.errstate(invalid="ignore"):
        table = {
            0: lambda: np.zeros(np.broadcast(a, b).shape, bool),
            1: lambda: ordered & (a == b),
            2: lambda: ordered & (a > b),
            3: lambda: ordered & (a >= b),
            4: lambda: ordered & (a < b),
            5: lambda: ordered & (a <= b),
            6: lambda: ordered & (a != b),
            7: lambda: ordered,
            8: lambda: ~ordered | (a == b),
            9: lambda: ~ordered | (a > b),
            10: lambda: ~ordered | (a >= b),
            11: lambda: ~ordered | (a < b),
            12: lambda: ~ordered | (a <= b),
            13: lambda: ~ordered | (a != b),
            14: lambda: ~ordered,
            15: lambda: np.ones(np.broadcast(a, b).shape, bool),
        }
        return np.asarray(table[pred]())


def _unsigned(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"uint{a.dtype.itemsize * 8}")) if a.dtype.kind == "i" else a


def _cmpi(pred: int, a, b):
    a, b = np.asarray(a), np.asarray(b)
    if pred >= 6:
        a, b = _unsigned(a), _unsigned(b)
    f = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
         np.less, np.less_equal, np.greater, np.greater_equal][pred]
    return np.asarray(f(a, b))


_ERF_UFUNC = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """Correctly rounded erf (libm's, through ``math.erf``; ~0.1 us per element)."""
    x = np.asarray(x)
    return _ERF_UFUNC(x.astype(np.float64)).astype(x.dtype)


def _fmax(a, b):  # arith.maximumf: NaN-propagating
    return np.maximum(a, b)


def _fmin(a, b):
    return np.minimum(a, b)


def _same(a, like):
    return np.asarray(a).astype(np.asarray(like).dtype, copy=False)


def _div_trunc(a, b):
    a, b = np.asarray(a), np.asarray(b)
    qa = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return (np.sign(a) * np.sign(b) * qa).astype(a.dtype)


_BINARY: dict[str, Callable] = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
    "arith.divf": lambda a, b: np.divide(a, b),
    "arith.remf": np.fmod,
    "arith.maximumf": _fmax, "arith.minimumf": _fmin,
    "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin,
    "arith.addi": lambda a, b: _same(np.add(a, b), a),
    "arith.subi": lambda a, b: _same(np.subtract(a, b), a),
    "arith.muli": lambda a, b: _same(np.multiply(a, b), a),
    "arith.divsi": _div_trunc,
    "arith.divui": lambda a, b: _same(_unsigned(a) // _unsigned(b), a),
    "arith.remsi": lambda a, b: _same(np.fmod(a, b), a),
    "arith.remui": lambda a, b: _same(_unsigned(a) % _unsigned(b), a),
    "arith.floordivsi": lambda a, b: _same(np.floor_divide(a, b), a),
    "arith.ceildivsi": lambda a, b: _same(-np.floor_divide(-np.asarray(a), b), a),
    "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.maxui": lambda a, b: _same(np.maximum(_unsigned(a), _unsigned(b)), a),
    "arith.minui": lambda a, b: _same(np.minimum(_unsigned(a), _unsigned(b)), a),
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
    "arith.shli": lambda a, b: _same(np.left_shift(a, b), a),
    "arith.shrsi": lambda a, b: _same(np.right_shift(a, b), a),
    "arith.shrui": lambda a, b: _same(np.right_shift(_unsigned(a), _unsigned(b)), a),
    "math.powf": np.power,
    "math.atan2": np.arctan2,
    "math.copysign": np.copysign,
}

_UNARY: dict[str, Callable] = {
    "arith.negf": np.negative,
    "math.exp": np.exp, "math.exp2": np.exp2, "math.expm1": np.expm1,
    "math.log": np.log, "math.log2": np.log2, "math.log10": np.log10, "math.log1p": np.log1p,
    "math.sqrt": np.sqrt, "math.rsqrt": lambda x: np.reciprocal(np.sqrt(x)),
    "math.tanh": np.tanh, "math.sin": np.sin, "math.cos": np.cos, "math.tan": np.tan,
    "math.sinh": np.sinh, "math.cosh": np.cosh, "math.asin": np.arcsin, "math.acos": np.arccos,
    "math.atan": np.arctan, "math.asinh": np.arcsinh, "math.acosh": np.arccosh, "math.atanh": np.arctanh,
    "math.absf": np.abs, "math.absi": np.abs, "math.floor": np.floor, "math.ceil": np.ceil,
    "math.trunc": np.trunc, "math.roundeven": np.rint,
    "math.round": lambda x: np.copysign(np.floor(np.abs(x) + np.asarray(0.5, np.asarray(x).dtype)), x),
    "math.erf": _erf, "math.cbrt": np.cbrt,
}

_REDUCE_UFUNC = {
    "arith.addf": np.add, "arith.addi": np.add, "arith.mulf": np.multiply, "arith.muli": np.multiply,
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum, "arith.maxnumf": np.fmax,
    "arith.minnumf": np.fmin, "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
}


# --------------------------------------------------------------------------------------------------
# the executor
# --------------------------------------------------------------------------------------------------
class _Executor:
    def __init__(self, module: ModuleOp):
        self.module = module
        self.funcs = {op.sym_name.data: op for op in module.walk() if op.name == "func.func"}

    # ---------------------------------------------------------------- functions and blocks
    def call(self, fn: Operation, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        block = fn.body.blocks[0]
        if len(args) != len(block.args):
            raise ReferenceError(
                f"@{fn.sym_name.data} takes {len(block.args)} inputs, {len(args)} were given"
            )
        env: dict[SSAValue, np.ndarray] = {}
        for a, v in zip(block.args, args):
            env[a] = self._coerce_input(v, a.type, fn)
        return self.run_block(block, env, "func.return")

    def _coerce_input(self, v, t: Attribute, fn) -> np.ndarray:
        arr = np.asarray(v)
        if isinstance(t, ShapedType):
            shape = tuple(t.get_shape())
            if len(shape) != arr.ndim or any(s >= 0 and s != d for s, d in zip(shape, arr.shape)):
                raise ReferenceError(
                    f"@{fn.sym_name.data}: input of shape {arr.shape} does not match {t}"
                )
        return _contig(arr.astype(np_dtype(t), copy=False))

    def run_block(self, block: Block, env: dict, terminator: str) -> list[np.ndarray]:
        for op in block.ops:
            if op.name == terminator:
                return [self.get(env, v) for v in op.operands]
            self.exec_op(op, env)
        raise ReferenceError(f"block without '{terminator}'")

    def get(self, env: dict, v: SSAValue):
        try:
            return env[v]
        except KeyError:
            raise ReferenceError(f"value {v} used before definition") from None

    def exec_op(self, op: Operation, env: dict) -> None:
        handler = _HANDLERS.get(op.name)
        if handler is None:
            if op.name in _BINARY or op.name in _UNARY or op.name in _SCALAR_SPECIAL:
                handler = _Executor._elementwise
            elif hasattr(op, "get_indexing_maps") and hasattr(op, "body"):
                handler = _Executor._structured
            else:
                raise ReferenceError(f"{_loc(op)}: op not supported by the reference executor")
        args = [self.get(env, v) for v in op.operands]
        try:
            outs = handler(self, op, args, env)
        except ReferenceError:
            raise
        except Exception as e:  # an internal failure: say which op
            raise ReferenceError(f"{_loc(op)}: reference execution failed: {type(e).__name__}: {e}") from e
        for r, v in zip(op.results, outs):
            env[r] = v

    # ---------------------------------------------------------------- arith / math on values
    def _elementwise(self, op: Operation, args, env):
        return [self.scalar_op(op, args)]

    def scalar_op(self, op: Operation, args):
        name = op.name
        if name in _BINARY:
            with np.errstate(all="ignore"):
                r = _BINARY[name](args[0], args[1])
            return np.asarray(r).astype(np_dtype(op.results[0].type), copy=False)
        if name in _UNARY:
            with np.errstate(all="ignore"):
                r = _UNARY[name](args[0])
            return np.asarray(r).astype(np_dtype(op.results[0].type), copy=False)
        return _SCALAR_SPECIAL[name](self, op, args, None)[0]

    # ---------------------------------------------------------------- structured ops
    def _structured(self, op: Operation, args, env):
        maps = [m.data for m in op.get_indexing_maps().data]
        iters = [str(it.data) for it in op.get_iterator_types().data]
        iters = ["reduction" if "reduction" in it else "parallel" for it in iters]
        n_in = len(op.inputs)
        ins, outs = args[:n_in], args[n_in:]
        shapes = [np.shape(a) for a in args]
        ranges = _loop_ranges(maps, shapes, op)
        n = len(ranges)
        block = op.body.blocks[0]
        in_views = [_affine_view(_contig(a), m, ranges) for a, m in zip(ins, maps[:n_in])]
        results = [np.array(o, copy=True) for o in outs]
        out_views = [_affine_view(r, m, ranges, writeable=True) for r, m in zip(results, maps[n_in:])]
        red = [d for d in range(n) if iters[d] == "reduction"]

        if red:
            fast = self._try_contraction(op, block, in_views, out_views, results, n, env)
            if fast:
                return results
            if self._try_combiner_reduction(op, block, in_views, out_views, env, ranges, red):
                return results
            self._loop_reduction(op, block, in_views, out_views, env, ranges, red)
            return results
        # parallel only: one vectorized evaluation
        vals = self._eval_body(block, [v.full(n) for v in in_views] + [v.full(n) for v in out_views],
                               env, ranges)
        for ov, val in zip(out_views, vals):
            val = np.broadcast_to(val, tuple(ranges))
            drop = tuple(d for d in range(n) if d not in ov.dims)
            if drop:
                val = val[tuple(0 if d in drop else slice(None) for d in range(n))]
            ov.arr[...] = val
        return results

    def _eval_body(self, block: Block, arg_vals: Sequence, env: dict, ranges: Sequence[int],
                   index_offsets: dict[int, int] | None = None) -> list:
        """Evaluate a linalg body on whole arrays; returns the yielded values."""
        local = dict(env)
        n = len(ranges)
        for a, v in zip(block.args, arg_vals):
            local[a] = v
        for bop in block.ops:
            if bop.name == "linalg.yield":
                return [local[v] for v in bop.operands]
            if bop.name == "linalg.index":
                d = bop.dim.value.data
                if index_offsets is not None and d in index_offsets:
                    local[bop.results[0]] = np.asarray(index_offsets[d], dtype=np.int64)
                else:
                    shape = [1] * n
                    shape[d] = ranges[d]
                    local[bop.results[0]] = np.arange(ranges[d], dtype=np.int64).reshape(shape)
                continue
            self.exec_op(bop, local)
        raise ReferenceError("linalg body without linalg.yield")

    def _try_contraction(self, op, block, in_views, out_views, results, n, env) -> bool:
        """One output yielding ``acc + X * Y`` where X depends on one input operand only and Y on
        another (plus loop-invariant scalars): X and Y are evaluated on those operands' own views
        (casts, zero-point subtractions, scales...) and contracted with one ``np.einsum``. Covers
        matmul, batch_matmul, every conv (quantized ones too) and generic contractions."""
        if len(out_views) != 1:
            return False
        ops = list(block.ops)
        yld = ops[-1]
        n_in = len(in_views)
        args = list(block.args)
        acc = args[n_in]
        if len(yld.operands) != 1:
            return False
        add = yld.operands[0].owner
        if not isinstance(add, Operation) or add.name not in ("arith.addf", "arith.addi"):
            return False
        if acc not in add.operands:
            return False
        others = [v for v in add.operands if v is not acc]
        if len(others) != 1:
            return False
        mul = others[0].owner
        if not isinstance(mul, Operation) or mul.name not in ("arith.mulf", "arith.muli") \
                or mul.parent_block() is not block:
            return False
        scalar_args = {args[i] for i in range(n_in) if not in_views[i].dims}

        def cone(v):
            """(block ops computing v in order, the non-scalar input args it reads) or None."""
            seen, order, reads, stack = set(), [], set(), [v]
            while stack:
                x = stack.pop()
                if x is acc:
                    return None
                if x in args:
                    if x not in scalar_args:
                        reads.add(x)
                    continue
                o = x.owner
                if not isinstance(o, Operation) or o.parent_block() is not block or o in seen:
                    continue
                if o.name == "linalg.index" or o.regions:
                    return None
                seen.add(o)
                stack.extend(o.operands)
            order = [o for o in ops if o in seen]
            return order, reads

        sides = []
        for v in mul.operands:
            c = cone(v)
            if c is None or len(c[1]) != 1:
                return False
            sides.append((v, *c))
        (va, ops_a, ra), (vb, ops_b, rb) = sides
        ia, ib = args.index(next(iter(ra))), args.index(next(iter(rb)))
        if ia == ib:
            return False
        if any(o not in {add, mul, yld} and o not in ops_a and o not in ops_b for o in ops):
            return False  # something else happens in the body

        def side_value(v, side_ops, i):
            local = dict(env)
            for j, a in enumerate(args[:n_in]):
                local[a] = in_views[j].arr
            for o in side_ops:
                self.exec_op(o, local)
            return np.asarray(local[v]) if side_ops else in_views[i].arr

        xa, xb = side_value(va, ops_a, ia), side_value(vb, ops_b, ib)
        out_dt = results[0].dtype
        letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        sub = lambda dims: "".join(letters[d] for d in dims)  # noqa: E731
        ov = out_views[0]
        acc_t = xa.dtype if xa.dtype.kind == "f" else np.int64
        prod = np.einsum(f"{sub(in_views[ia].dims)},{sub(in_views[ib].dims)}->{sub(ov.dims)}",
                         xa.astype(acc_t, copy=False), xb.astype(acc_t, copy=False), optimize=True)
        ov.arr[...] = (ov.arr + prod).astype(out_dt, copy=False)
        return True

    def _try_combiner_reduction(self, op, block, in_views, out_views, env, ranges, red) -> bool:
        """Each output yields combine(acc, f(inputs)) with f independent of every acc: reduce by ufunc."""
        ops = list(block.ops)
        yld = ops[-1]
        n_in = len(in_views)
        accs = list(block.args[n_in:])
        acc_set = set(accs)
        plan = []
        for j, y in enumerate(yld.operands):
            comb = y.owner
            if not isinstance(comb, Operation) or comb.name not in _REDUCE_UFUNC:
                return False
            if comb.operands[0] is accs[j]:
                other = comb.operands[1]
            elif comb.operands[1] is accs[j]:
                other = comb.operands[0]
            else:
                return False
            plan.append((comb, other))
        # the non-acc operand must not depend on any acc (walk its in-block producers)
        combs = {c for c, _ in plan}
        for _, other in plan:
            stack, seen = [other], set()
            while stack:
                v = stack.pop()
                if v in acc_set:
                    return False
                o = v.owner
                if isinstance(o, Operation) and o.parent_block() is block and o not in seen:
                    if o in combs:
                        return False
                    seen.add(o)
                    stack.extend(o.operands)
        # evaluate the body with acc args bound to zeros (they are unused by `other`); take `other`
        n = len(ranges)
        local = dict(env)
        for a, v in zip(block.args[:n_in], in_views):
            local[a] = v.full(n)
        for a in accs:
            local[a] = np.zeros((), np_dtype(a.type))
        for bop in ops[:-1]:
            if bop in combs:
                continue
            if bop.name == "linalg.index":
                d = bop.dim.value.data
                shape = [1] * n
                shape[d] = ranges[d]
                local[bop.results[0]] = np.arange(ranges[d], dtype=np.int64).reshape(shape)
                continue
            self.exec_op(bop, local)
        for (comb, other), ov in zip(plan, out_views):
            val = np.broadcast_to(local[other], tuple(ranges))
            axes = tuple(d for d in range(n) if d not in ov.dims)
            ufunc = _REDUCE_UFUNC[comb.name]
            dt = ov.arr.dtype
            with np.errstate(all="ignore"):
                reduced = ufunc.reduce(val, axis=axes) if axes else val
                ov.arr[...] = np.asarray(ufunc(ov.arr, reduced)).astype(dt, copy=False)
        return True

    def _loop_reduction(self, op, block, in_views, out_views, env, ranges, red) -> None:
        """General reduction body: vectorized over parallel dims, loop over reduction tuples."""
        n = len(ranges)
        par = [d for d in range(n) if d not in red]
        par_ranges = [ranges[d] if d in par else 1 for d in range(n)]
        for ov in out_views:
            if any(d in red for d in ov.dims):
                raise ReferenceError(f"{_loc(op)}: an output indexed by a reduction loop")
        for ridx in np.ndindex(*[ranges[d] for d in red]):
            fix = dict(zip(red, ridx))

            def at(v: _View) -> np.ndarray:
                sl = tuple(fix[d] if d in fix else slice(None) for d in v.dims)
                sub = v.arr[sl]
                kept = tuple(d for d in v.dims if d not in fix)
                missing = tuple(i for i in range(n) if i not in kept)
                return np.expand_dims(sub, missing) if missing else sub

            vals = self._eval_body(
                block, [at(v) for v in in_views] + [at(v) for v in out_views], env, par_ranges, fix
            )
            for ov, val in zip(out_views, vals):
                val = np.broadcast_to(val, tuple(par_ranges))
                val = val[tuple(slice(None) if d in ov.dims else 0 for d in range(n))]
                ov.arr[...] = val


# ----------------------------------------------------------------------------------------------------
# op handlers
# ----------------------------------------------------------------------------------------------------
def _h_constant(ex, op, args, env):
    v = op.value
    t = op.results[0].type
    if isinstance(v, DenseIntOrFPElementsAttr):
        arr = dense_to_numpy(v)
        if isinstance(t, ShapedType):
            return [arr.reshape(tuple(t.get_shape()))]
        return [arr.reshape(())]
    if isinstance(v, (FloatAttr, IntegerAttr)):
        return [_scalar_attr(v, t)]
    raise ReferenceError(f"{_loc(op)}: unsupported constant {v}")


def _h_select(ex, op, args, env):
    c, a, b = args
    return [np.asarray(np.where(c, a, b)).astype(np_dtype(op.results[0].type), copy=False)]


def _h_cmpf(ex, op, args, env):
    return [_cmpf(op.predicate.value.data, np.asarray(args[0]), np.asarray(args[1]))]


def _h_cmpi(ex, op, args, env):
    return [_cmpi(op.predicate.value.data, args[0], args[1])]


def _h_cast(ex, op, args, env):
    """extf/truncf/sitofp/uitofp/fptosi/fptoui/extsi/extui/trunci/index_cast(ui)/bitcast."""
    x = np.asarray(args[0])
    rt = op.results[0].type
    dt = np_dtype(rt)
    name = op.name
    if name in ("arith.extui", "arith.uitofp", "arith.index_castui"):
        if x.dtype == np.bool_:
            x = x.astype(np.uint8)
        x = _unsigned(x)
        if name == "arith.extui" and dt.kind == "i":
            return [x.astype(np.uint64).astype(dt)]
    if name == "arith.extsi" and x.dtype == np.bool_:
        return [np.where(x, -1, 0).astype(dt)]
    if name == "arith.trunci":
        w = _int_width(rt)
        if w == 1:
            return [(x & 1).astype(bool)]
        return [x.astype(np.int64).astype(dt)]
    if name in ("arith.fptosi", "arith.fptoui"):
        with np.errstate(all="ignore"):
            return [np.trunc(x).astype(dt)]
    if name == "arith.bitcast":
        return [x.view(dt)]
    if name == "arith.truncf" and isinstance(rt if not isinstance(rt, ShapedType) else rt.get_element_type(), BFloat16Type):
        u = x.astype(np.float32).view(np.uint32)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return [r.view(np.float32)]
    with np.errstate(all="ignore"):
        return [x.astype(dt)]


def _h_fpowi(ex, op, args, env):
    x, p = np.asarray(args[0]), np.asarray(args[1])
    if p.ndim == 0 and int(p) == 2:
        return [(x * x).astype(x.dtype)]
    return [np.power(x, p.astype(x.dtype)).astype(x.dtype)]


def _h_ipowi(ex, op, args, env):
    return [np.power(args[0], args[1]).astype(np.asarray(args[0]).dtype)]


def _h_fma(ex, op, args, env):
    return [(np.asarray(args[0]) * args[1] + args[2]).astype(np.asarray(args[0]).dtype)]


_SCALAR_SPECIAL: dict[str, Callable] = {
    "arith.select": _h_select,
    "arith.cmpf": _h_cmpf,
    "arith.cmpi": _h_cmpi,
    "math.fpowi": _h_fpowi,
    "math.ipowi": _h_ipowi,
    "math.fma": _h_fma,
    **{k: _h_cast for k in (
        "arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui",
        "arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui",
        "arith.bitcast")},
}


def _h_assert(ex, op, args, env):
    if not np.all(args[0]):
        raise ReferenceError(f"{_loc(op)}: assertion failed: {op.msg.data}")
    return []


def _h_call(ex, op, args, env):
    callee = op.callee.root_reference.data
    fn = ex.funcs.get(callee)
    if fn is None:
        raise ReferenceError(f"{_loc(op)}: unknown callee @{callee}")
    return ex.call(fn, args)


# ---- linalg ops with a direct numpy form
def _h_fill(ex, op, args, env):
    val, out = args
    return [np.full(np.shape(out), val, dtype=np_dtype(op.results[0].type))]


def _h_copy(ex, op, args, env):
    return [np.array(args[0], dtype=np_dtype(op.results[0].type), copy=True)]


def _h_transpose(ex, op, args, env):
    perm = list(op.permutation.get_values())
    return [_contig(np.transpose(args[0], perm))]


def _h_broadcast(ex, op, args, env):
    x, init = np.asarray(args[0]), args[1]
    dims = list(op.dimensions.get_values())
    out_shape = np.shape(init)
    x = np.expand_dims(x, tuple(dims)) if dims else x
    return [_contig(np.broadcast_to(x, out_shape)).astype(np_dtype(op.results[0].type), copy=False)]


def _h_reduce(ex, op, args, env):
    n_in = len(op.operands) // 2  # xDSL 0.74: one input, one init
    ins, inits = args[:n_in], args[n_in:]
    dims = tuple(op.dimensions.get_values())
    block = op.region.blocks[0]
    ops = list(block.ops)
    # fast path: single input/init, body = combine(in, init)
    if n_in == 1 and len(ops) == 2 and ops[0].name in _REDUCE_UFUNC and set(ops[0].operands) == set(block.args):
        uf = _REDUCE_UFUNC[ops[0].name]
        with np.errstate(all="ignore"):
            r = uf(inits[0], uf.reduce(ins[0], axis=dims))
        return [np.asarray(r).astype(np.asarray(inits[0]).dtype)]
    # general: loop over the reduced index tuples, vectorized over the kept dims
    accs = [np.array(i, copy=True) for i in inits]
    rank = np.ndim(ins[0])
    for idx in np.ndindex(*[np.shape(ins[0])[d] for d in dims]):
        fix = dict(zip(dims, idx))
        sl = tuple(fix.get(d, slice(None)) for d in range(rank))
        vals = ex._eval_body(block, [np.asarray(i)[sl] for i in ins] + accs, env, [])
        accs = [np.asarray(v).astype(a.dtype) for v, a in zip(vals, accs)]
    return accs


# ---- tensor ops
def _contig(a) -> np.ndarray:
    """C-contiguous without turning a 0-d array into shape (1,) as np.ascontiguousarray does."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _static_or_dynamic(static_vals, dynamic_vals):
    out = []
    dyn = iter(dynamic_vals)
    for s in static_vals:
        if s == -(2**63):  # ShapedType.kDynamic
            out.append(int(next(dyn)))
        else:
            out.append(int(s))
    return out


def _h_empty(ex, op, args, env):
    t = op.results[0].type
    shape = list(t.get_shape())
    dyn = iter(args)
    shape = [int(next(dyn)) if s < 0 else s for s in shape]
    return [np.zeros(shape, dtype=np_dtype(t))]


def _slice_params(op, args, first_dynamic_index: int):
    dyn_off = [args[first_dynamic_index + i] for i in range(len(op.offsets))]
    base = first_dynamic_index + len(op.offsets)
    dyn_size = [args[base + i] for i in range(len(op.sizes))]
    base += len(op.sizes)
    dyn_str = [args[base + i] for i in range(len(op.strides))]
    offsets = _static_or_dynamic(op.static_offsets.get_values(), dyn_off)
    sizes = _static_or_dynamic(op.static_sizes.get_values(), dyn_size)
    strides = _static_or_dynamic(op.static_strides.get_values(), dyn_str)
    return offsets, sizes, strides


def _h_extract_slice(ex, op, args, env):
    src = np.asarray(args[0])
    offsets, sizes, strides = _slice_params(op, args, 1)
    sl = tuple(slice(o, o + (s - 1) * st + 1, st) for o, s, st in zip(offsets, sizes, strides))
    out = src[sl]
    rt = list(op.results[0].type.get_shape())
    if out.ndim != len(rt):  # rank-reducing: drop unit dims the result type does not have
        keep, i = [], 0
        for j, size in enumerate(out.shape):
            if i < len(rt) and (rt[i] == size or rt[i] < 0) and not (
                size == 1 and rt[i] != 1 and out.ndim - j > len(rt) - i
            ):
                keep.append(size)
                i += 1
            elif size != 1:
                raise ReferenceError(f"{_loc(op)}: cannot drop dim {j} of size {size}")
        out = out.reshape(keep)
    return [_contig(out)]


def _h_insert_slice(ex, op, args, env):
    src, dest = np.asarray(args[0]), np.array(args[1], copy=True)
    offsets, sizes, strides = _slice_params(op, args, 2)
    sl = tuple(slice(o, o + (s - 1) * st + 1, st) for o, s, st in zip(offsets, sizes, strides))
    dest[sl] = src.reshape(dest[sl].shape)
    return [dest]


def _h_reshape_like(ex, op, args, env):
    return [_contig(np.asarray(args[0])).reshape(tuple(op.results[0].type.get_shape()))]


def _h_expand_shape(ex, op, args, env):
    t = op.results[0].type
    shape = list(t.get_shape())
    if any(s < 0 for s in shape):
        static = list(op.static_output_shape.get_values())
        dyn = iter(args[1:])
        shape = [int(next(dyn)) if s < 0 else s for s in static]
    return [_contig(np.asarray(args[0])).reshape(shape)]


def _h_collapse_shape(ex, op, args, env):
    src = _contig(np.asarray(args[0]))
    groups = [list(g.get_values()) if hasattr(g, "get_values") else [a.value.data for a in g.data]
              for g in op.reassociation.data]
    shape = [int(np.prod([src.shape[i] for i in g])) for g in groups]
    return [src.reshape(shape)]


def _h_tensor_reshape(ex, op, args, env):
    t = op.results[0].type
    shape = list(t.get_shape())
    if any(s < 0 for s in shape):
        shape = [int(x) for x in np.asarray(args[1]).ravel()]
    return [_contig(np.asarray(args[0])).reshape(shape)]


def _h_concat(ex, op, args, env):
    return [np.concatenate([np.asarray(a) for a in args], axis=op.dim.value.data)]


def _h_cast_tensor(ex, op, args, env):
    return [args[0]]


def _h_pad(ex, op, args, env):
    src = np.asarray(args[0])
    n_low, n_high = len(op.low), len(op.high)
    low = _static_or_dynamic(op.static_low.get_values(), args[1 : 1 + n_low])
    high = _static_or_dynamic(op.static_high.get_values(), args[1 + n_low : 1 + n_low + n_high])
    block = op.region.blocks[0]
    yld = list(block.ops)[-1]
    pv = yld.operands[0]
    if pv in block.args:
        raise ReferenceError(f"{_loc(op)}: padding value depends on the index")
    if pv.owner is not None and isinstance(pv.owner, Operation) and pv.owner.parent_block() is block:
        local = dict(env)
        for a in block.args:
            local[a] = np.asarray(0, np.int64)
        for bop in list(block.ops)[:-1]:
            ex.exec_op(bop, local)
        value = local[pv]
    else:
        value = env[pv]
    if any(x < 0 for x in low + high):  # negative padding = cropping
        sl = tuple(slice(-lo if lo < 0 else 0, (s + hi) if hi < 0 else s) for lo, s, hi in zip(low, src.shape, high))
        src = src[sl]
        low, high = [max(0, x) for x in low], [max(0, x) for x in high]
    return [np.pad(src, list(zip(low, high)), constant_values=np.asarray(value).item()).astype(src.dtype)]


def _h_extract(ex, op, args, env):
    """Scalar indices, or (inside a vectorized linalg body) broadcastable index arrays: a gather.

    Inside a body, an out-of-range index is clipped: lowerings (e.g. torch-mlir's GridSample) compute
    the element at an out-of-range index and then select it away; its value is undefined in MLIR.
    At function level an out-of-range index is an error."""
    src = np.asarray(args[0])
    idx = [np.asarray(i, dtype=np.int64) for i in args[1:]]
    vectorized = any(i.ndim for i in idx)
    for d, i in enumerate(idx):
        if vectorized:
            idx[d] = np.clip(i, 0, src.shape[d] - 1)
        elif not 0 <= int(i) < src.shape[d]:
            raise ReferenceError(f"{_loc(op)}: index {int(i)} out of range for dim {d} of size {src.shape[d]}")
    return [np.asarray(src[tuple(idx)])]


def _h_insert(ex, op, args, env):
    val, dest = args[0], np.array(args[1], copy=True)
    dest[tuple(int(i) for i in args[2:])] = val
    return [dest]


def _h_dim(ex, op, args, env):
    return [np.asarray(np.shape(args[0])[int(args[1])], np.int64)]


def _h_from_elements(ex, op, args, env):
    t = op.results[0].type
    return [np.asarray([np.asarray(a).item() for a in args], dtype=np_dtype(t)).reshape(tuple(t.get_shape()))]


def _h_splat(ex, op, args, env):
    t = op.results[0].type
    return [np.full(tuple(t.get_shape()), np.asarray(args[0]).item(), dtype=np_dtype(t))]


def _h_affine_apply(ex, op, args, env):
    amap = op.map.data
    dims = [np.asarray(a, dtype=np.int64) for a in args[: amap.num_dims]]
    syms = [np.asarray(a, dtype=np.int64) for a in args[amap.num_dims:]]
    (expr,) = amap.results
    from xdsl.ir.affine import AffineSymExpr

    def ev(e):
        if isinstance(e, AffineSymExpr):
            return syms[e.position]
        if isinstance(e, AffineBinaryOpExpr):
            a, b = ev(e.lhs), ev(e.rhs)
            return {AffineBinaryOpKind.Add: np.add, AffineBinaryOpKind.Mul: np.multiply,
                    AffineBinaryOpKind.Mod: np.mod, AffineBinaryOpKind.FloorDiv: np.floor_divide,
                    AffineBinaryOpKind.CeilDiv: lambda x, y: -np.floor_divide(-x, y)}[e.kind](a, b)
        return _eval_expr(e, dims)

    return [np.asarray(ev(expr), dtype=np.int64)]


def _h_scf_for(ex, op, args, env):
    lb, ub, step = (int(a) for a in args[:3])
    carried = list(args[3:])
    block = op.body.blocks[0]
    for i in range(lb, ub, step):
        local = dict(env)
        local[block.args[0]] = np.asarray(i, dtype=np_dtype(block.args[0].type))
        for a, v in zip(block.args[1:], carried):
            local[a] = v
        carried = ex.run_block(block, local, "scf.yield")
    return carried


def _h_scf_if(ex, op, args, env):
    region = op.true_region if bool(np.asarray(args[0])) else op.false_region
    if not region.blocks:
        return []
    return ex.run_block(region.blocks[0], dict(env), "scf.yield")


def _h_bufferization_id(ex, op, args, env):
    return [args[0]]


_HANDLERS: dict[str, Callable] = {
    "arith.constant": _h_constant,
    "cf.assert": _h_assert,
    "func.call": _h_call,
    "linalg.fill": _h_fill,
    "linalg.copy": _h_copy,
    "linalg.transpose": _h_transpose,
    "linalg.broadcast": _h_broadcast,
    "linalg.reduce": _h_reduce,
    "tensor.empty": _h_empty,
    "tensor.extract_slice": _h_extract_slice,
    "tensor.insert_slice": _h_insert_slice,
    "tensor.collapse_shape": _h_collapse_shape,
    "tensor.expand_shape": _h_expand_shape,
    "tensor.reshape": _h_tensor_reshape,
    "tensor.concat": _h_concat,
    "tensor.cast": _h_cast_tensor,
    "tensor.pad": _h_pad,
    "tensor.extract": _h_extract,
    "tensor.insert": _h_insert,
    "tensor.dim": _h_dim,
    "tensor.from_elements": _h_from_elements,
    "tensor.splat": _h_splat,
    "builtin.unrealized_conversion_cast": _h_bufferization_id,
    "affine.apply": _h_affine_apply,
    "scf.for": _h_scf_for,
    "scf.if": _h_scf_if,
}


# ----------------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------------
def find_func(module: ModuleOp, func_name: str | None = None) -> Operation:
    """The ``func.func`` to run: by name, else the only / first public function with a body."""
    funcs = [op for op in module.walk() if op.name == "func.func" and op.body.blocks]
    if func_name is not None:
        for f in funcs:
            if f.sym_name.data == func_name:
                return f
        raise ReferenceError(f"no function @{func_name} in the module (have: "
                             f"{', '.join('@' + f.sym_name.data for f in funcs) or 'none'})")
    if not funcs:
        raise ReferenceError("the module has no func.func with a body")
    public = [f for f in funcs if f.sym_visibility is None or f.sym_visibility.data == "public"]
    return (public or funcs)[0]


def run(module: ModuleOp, inputs: Sequence[np.ndarray], func_name: str | None = None) -> list[np.ndarray]:
    """Run ``func_name`` (default: the first public function) of ``module`` on ``inputs`` with numpy."""
    fn = find_func(module, func_name)
    ex = _Executor(module)
    return [np.asarray(r) for r in ex.call(fn, list(inputs))]
