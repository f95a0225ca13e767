"""Random integer ONNX graphs for the differential fuzzer (the ``int`` family).

The float family (:mod:`m100.tools.fuzz_onnx`) compares with a tolerance; integer programs must be
*exact*, and narrow integers must wrap modulo 2^w the way ONNX (and numpy, and onnxruntime) define.
These graphs are where a miscompiled sign- or zero-extension, a missing wrap, a wrong truncation of
integer ``Div`` or a lost unsignedness shows up as a wrong number, so :func:`random_int_graph` draws:

* a dtype ``T`` among int8 / int16 / int32 / uint8 / uint16 and a small shape (rank 1-3, size-1
  dims drawn often);
* 1..``max_ops`` steps from: Add / Sub / Mul (full-range operands for 8/16-bit types, so they
  overflow and wrap), Max / Min, Abs / Neg (signed), integer Div (truncating, divisors 1..9 in
  magnitude), BitwiseAnd / BitwiseOr / BitwiseXor, BitShift (unsigned types, shifts below the width),
  a comparison feeding ``Where``, a widening Cast (and a narrowing one when the values fit),
  ReduceMax / ReduceMin (8- and 32-bit types) and ReduceSum (int32) over one, two or all axes,
  Transpose / Reshape / Concat, MatMulInteger on 8-bit 2-D values (int32 result), and the
  order-based ops that once compared unsigned values signed: Clip (scalar bounds, either omitted,
  min > max at times), TopK (values, or indices as int32; largest or smallest), MaxPool (int8 /
  uint8 as [1, C, H, W], padded), Sign, and ArgMax / ArgMin (first or last extreme, the
  index as int32; not of uint16, which is refused);
* operands as initializers or graph inputs, broadcast like the float family.

int32 values are kept small and their magnitude is tracked (``_Int.bound``) so that no int32
operation overflows: ONNX int32 arithmetic wraps too, but the M100 narrows the frontend's int64 to
i32 and reports an i32 overflow as a fault (a clear error, not a wrong number), so an overflowing
int32 graph would test the fault path rather than the arithmetic.

The oracle is onnxruntime where it implements the op for the type, else ONNX's own numpy
reference evaluator (``onnx.reference``, written from the operator definitions); outputs must be
bit-identical (:func:`m100.tools.fuzz_onnx.differential` compares integer outputs exactly).
"""

from __future__ import annotations

import math

import numpy as np

from m100.tools.fuzz_graph import (Choices, FuzzGraph, _bcast_shape, _Builder, _concat, _reshape,
                                   _transpose)

#: ONNX integer types drawn, with their numpy dtype
INT_TYPES = ("int8", "int16", "int32", "uint8", "uint16")
#: |value| bound of int32 graph inputs and initializers (products of a few stay far below 2^31)
INT32_INPUT_MAX = 30
I32_MAX = 2**31 - 1


class _Int(_Builder):
    """A builder whose operands are integers of ``self.dtype``, with a magnitude bound per value."""

    def __init__(self, c: Choices, seed: int, dtype: str):
        super().__init__(c, seed)
        self.dtype = np.dtype(dtype)  # the type of new operands (the current value's type)
        self.types: dict[str, np.dtype] = {}
        self.bound: dict[str, int] = {}  # |value| bound (exact for int32, the type's for others)
        self.opset = 18  # BitwiseAnd/Or/Xor

    def full_range(self, dt: np.dtype) -> tuple[int, int]:
        if dt == np.int32:
            return -INT32_INPUT_MAX, INT32_INPUT_MAX
        info = np.iinfo(dt)
        return int(info.min), int(info.max)

    def _values(self, shape, kind: str, scale: float = 1.0, dtype=None) -> np.ndarray:
        dt = np.dtype(dtype or self.dtype)
        lo, hi = self.full_range(dt)
        if kind == "divisor":  # 1..9 in magnitude, either sign for signed types, never -1:
            # INT_MIN / -1 does not fit its type (undefined in C; onnxruntime and numpy differ)
            mag = self.rng.integers(1, 10, size=shape)
            if dt.kind == "i":
                mag = mag * np.where((self.rng.random(size=shape) < 0.5) & (mag > 1), -1, 1)
            return np.asarray(mag, dtype=dt)  # (an array also for shape (): not a numpy scalar)
        if kind == "shift":
            return np.asarray(self.rng.integers(0, 8 * dt.itemsize, size=shape), dtype=dt)
        return np.asarray(self.rng.integers(lo, hi + 1, size=shape, dtype=np.int64), dtype=dt)

    def operand(self, shape, kind: str = "normal", scale: float = 1.0, runtime: bool | None = None,
                hint: str = "w", dtype=None) -> str:
        return self.given(self._values(tuple(shape), kind, dtype=dtype), runtime, hint)

    def given(self, arr: np.ndarray, runtime: bool | None = None, hint: str = "w") -> str:
        """``arr`` as a graph input (``runtime``) or an initializer (drawn when None)."""
        from onnx import numpy_helper

        if runtime is None:
            runtime = self.c.pick((False, True))
        shape = arr.shape
        n = self.name("in" if runtime else hint)
        if runtime:
            self.inputs[n] = arr
        else:
            self.inits.append(numpy_helper.from_array(arr, n))
        self.shapes[n] = tuple(shape)
        self.types[n] = arr.dtype
        self.bound[n] = int(np.abs(arr.astype(np.int64)).max(initial=0))
        return n

    def node(self, op: str, ins: list[str], out_shape, dtype=None, bound: int | None = None,
             **attrs) -> str:
        """``bound``: |result| bound (default: the operands', as for data movement)."""
        out = super().node(op, ins, out_shape, **attrs)
        dt = np.dtype(dtype) if dtype is not None else self.types[ins[0]]
        self.types[out] = dt
        if bound is None:
            bound = max(self.bound.get(i, 0) for i in ins)
        # 8/16-bit results wrap into their type; int32 results never overflow (bounds checked)
        self.bound[out] = min(bound, _type_max(dt))
        return out


def _type_max(dt: np.dtype) -> int:
    if dt == np.bool_:
        return 1
    info = np.iinfo(dt)
    return max(abs(int(info.min)), int(info.max))


def _arith(b: _Int, x: str) -> str:
    s, dt = b.shapes[x], b.types[x]
    op = b.c.pick(("Add", "Sub", "Mul", "Max", "Min"))
    os_ = _bcast_shape(b, s)
    y = b.operand(os_, dtype=dt)
    bx, by = b.bound[x], b.bound[y]
    bound = bx * by if op == "Mul" else (bx + by if op in ("Add", "Sub") else max(bx, by))
    if dt == np.int32 and bound > I32_MAX // 2:
        op, bound = "Max", max(bx, by)  # keep int32 away from overflow (see the module doc)
    ins = [y, x] if b.c.pick((False, True)) else [x, y]
    return b.node(op, ins, np.broadcast_shapes(s, os_), bound=bound)


def _unary(b: _Int, x: str) -> str:
    dt = b.types[x]
    if dt.kind == "u":
        return b.node("Abs", [x], b.shapes[x], bound=b.bound[x])
    return b.node(b.c.pick(("Abs", "Neg")), [x], b.shapes[x], bound=b.bound[x])


def _div(b: _Int, x: str) -> str:
    s, dt = b.shapes[x], b.types[x]
    os_ = _bcast_shape(b, s)
    d = b.operand(os_, kind="divisor", dtype=dt)
    return b.node("Div", [x, d], np.broadcast_shapes(s, os_), bound=b.bound[x])


def _bitwise(b: _Int, x: str) -> str:
    s, dt = b.shapes[x], b.types[x]
    if dt.kind == "u" and b.c.pick((False, True)):
        sh = b.operand(_bcast_shape(b, s), kind="shift", dtype=dt)
        out = np.broadcast_shapes(s, b.shapes[sh])
        return b.node("BitShift", [x, sh], out, direction=b.c.pick(("LEFT", "RIGHT")))
    op = b.c.pick(("BitwiseAnd", "BitwiseOr", "BitwiseXor"))
    y = b.operand(_bcast_shape(b, s), dtype=dt)
    out = np.broadcast_shapes(s, b.shapes[y])
    bound = max(b.bound[x], b.bound[y])
    # |a op b| < 2 * max(|a|, |b|) + 1 for two's complement bit operations
    return b.node(op, [y, x] if b.c.pick((False, True)) else [x, y], out, bound=2 * bound + 1)


def _where(b: _Int, x: str) -> str:
    s, dt = b.shapes[x], b.types[x]
    y = b.operand(_bcast_shape(b, s), dtype=dt)
    cmp = b.c.pick(("Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"))
    out = np.broadcast_shapes(s, b.shapes[y])
    c = b.node(cmp, [x, y], out, dtype=np.bool_)
    z = b.operand(_bcast_shape(b, out), dtype=dt)
    return b.node("Where", [c, x, z] if b.c.pick((False, True)) else [c, z, x], out, dtype=dt,
                  bound=max(b.bound[x], b.bound[z]))


def _cast(b: _Int, x: str) -> str:
    from onnx import helper

    dt = b.types[x]
    bx = b.bound[x]
    fits = [t for t in INT_TYPES if np.dtype(t) != dt and _fits(dt, np.dtype(t), bx)]
    if not fits:
        return _unary(b, x)
    to = np.dtype(b.c.pick(fits))
    return b.node("Cast", [x], b.shapes[x], dtype=to, bound=bx,
                  to=helper.np_dtype_to_tensor_dtype(to))


def _fits(src: np.dtype, dst: np.dtype, bound: int) -> bool:
    """Every value of ``src`` with |v| <= bound is a value of ``dst`` (no wrap in the Cast)."""
    si, di = np.iinfo(src), np.iinfo(dst)
    lo = max(int(si.min), -bound)
    hi = min(int(si.max), bound)
    return int(di.min) <= lo and hi <= int(di.max)


def _reduce(b: _Int, x: str) -> str:
    s, dt = b.shapes[x], b.types[x]
    if dt.itemsize == 2:  # ReduceMax/Min/Sum are not defined on 16-bit integers
        return _arith(b, x)
    # one axis, or two, or every axis (no axes input); negative axes at times
    n_ax = b.c.pick((1, 1, 2, 0)) if len(s) > 1 else b.c.pick((1, 0))
    axes = sorted({b.c.int(0, len(s) - 1) for _ in range(n_ax)}) if n_ax else list(range(len(s)))
    keep = b.c.pick((0, 1))
    op = b.c.pick(("ReduceMax", "ReduceMin") + (("ReduceSum",) if dt == np.int32 else ()))
    n_red = math.prod(s[a] for a in axes)
    if op == "ReduceSum" and b.bound[x] * n_red > I32_MAX // 2:
        op = "ReduceMax"
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    if not out:
        keep, out = 1, tuple(1 for _ in s)
    bound = b.bound[x] * (n_red if op == "ReduceSum" else 1)
    ins = [x]
    if n_ax:
        ins.append(b.const_i64([a - len(s) if b.c.pick((False, True)) else a for a in axes]))
    return b.node(op, ins, out, keepdims=keep, bound=bound)


def _clip(b: _Int, x: str) -> str:
    """Clip with scalar bounds of the value's type (initializers or inputs), either one omitted
    at times, min > max at times (ONNX: every element becomes max)."""
    s, dt = b.shapes[x], b.types[x]
    lo, hi = b.full_range(dt)
    a, c = sorted(int(v) for v in b.rng.integers(lo, hi + 1, size=2))
    if b.c.int(0, 5) == 0:
        a, c = c, a
    ins = [x]
    for v in (a, c):
        ins.append("" if b.c.int(0, 4) == 0 else b.given(np.array(v, dtype=dt), hint="clip"))
    while ins[-1] == "":
        ins.pop()
    return b.node("Clip", ins, s, bound=max(b.bound[x], abs(a), abs(c)))


def _topk(b: _Int, x: str) -> str:
    """TopK along one axis, largest or smallest, sorted; the values, or the indices as int32."""
    s = b.shapes[x]
    ax = b.c.int(0, len(s) - 1)
    k = b.c.int(1, s[ax])
    out = tuple(k if i == ax else d for i, d in enumerate(s))
    vals, idx = b.name("t"), b.name("t")
    from onnx import helper

    b.nodes.append(helper.make_node("TopK", [x, b.const_i64([k])], [vals, idx], axis=ax,
                                    largest=b.c.pick((1, 0)), sorted=1))
    b.ops.append("TopK")
    b.shapes[vals] = b.shapes[idx] = out
    b.types[vals], b.bound[vals] = b.types[x], b.bound[x]
    b.types[idx], b.bound[idx] = np.dtype(np.int64), s[ax]
    if b.c.pick((False, True)):
        return vals
    return b.node("Cast", [idx], out, dtype=np.int32, bound=s[ax],
                  to=helper.np_dtype_to_tensor_dtype(np.dtype(np.int32)))


def _argmax(b: _Int, x: str) -> str:
    """ArgMax / ArgMin along one axis, keepdims or not, the first or the last extreme; the index
    as int32. uint16 is not drawn (refused in one line: torch-mlir compares it unsigned and can
    not widen it)."""
    from onnx import helper

    if b.types[x] == np.uint16:
        return x
    s = b.shapes[x]
    ax = b.c.int(0, len(s) - 1)
    keep = b.c.pick((1, 0))
    out = tuple(1 if i == ax else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i != ax)
    if not out:
        keep, out = 1, tuple(1 for _ in s)
    op = b.c.pick(("ArgMax", "ArgMin"))
    idx = b.name("a")
    b.nodes.append(helper.make_node(op, [x], [idx], axis=ax, keepdims=keep,
                                    select_last_index=b.c.pick((0, 1))))
    b.ops.append(op)
    b.shapes[idx], b.types[idx], b.bound[idx] = out, np.dtype(np.int64), s[ax]
    return b.node("Cast", [idx], out, dtype=np.int32, bound=s[ax],
                  to=helper.np_dtype_to_tensor_dtype(np.dtype(np.int32)))


def _maxpool(b: _Int, x: str) -> str:
    """MaxPool (int8 / uint8 only in ONNX) of the value as [1, C, H, W]: kernel 1..3 per axis,
    stride 1..2, pads below the kernel (padding never wins a max)."""
    s, dt = b.shapes[x], b.types[x]
    if dt.itemsize != 1:
        return _arith(b, x)
    if len(s) < 4:
        s4 = ((1,) * 4 + tuple(s))[-4:]
        x = b.node("Reshape", [x, b.const_i64(list(s4))], s4)
        s = s4
    kern = [b.c.int(1, min(3, d)) for d in s[2:]]
    strides = [b.c.int(1, 2) for _ in kern]
    pads = [b.c.int(0, k - 1) for k in kern] + [b.c.int(0, k - 1) for k in kern]
    out = list(s[:2]) + [(d + p0 + p1 - k) // st + 1 for d, p0, p1, k, st in
                         zip(s[2:], pads[:2], pads[2:], kern, strides)]
    return b.node("MaxPool", [x], out, kernel_shape=kern, strides=strides, pads=pads)


def _sign(b: _Int, x: str) -> str:
    return b.node("Sign", [x], b.shapes[x], bound=1)


def _matmul_integer(b: _Int, x: str) -> str:
    s, dt = b.shapes[x], b.types[x]
    if dt.itemsize != 1:
        return _arith(b, x)
    if len(s) != 2:  # rows x the last dim (an 8-bit value of any rank reaches the int8 TCU)
        s = (math.prod(s[:-1]), s[-1]) if len(s) > 1 else (1, s[0])
        x = b.node("Reshape", [x, b.const_i64(list(s))], s)
    k = s[1]
    n = b.pick_dim()
    wdt = np.dtype(b.c.pick(("int8", "uint8")))
    w = b.operand((k, n), dtype=wdt)
    bound = k * b.bound[x] * b.bound[w]
    return b.node("MatMulInteger", [x, w], (s[0], n), dtype=np.int32, bound=bound)


STEPS = {"arith": _arith, "unary": _unary, "div": _div, "bitwise": _bitwise, "where": _where,
         "cast": _cast, "reduce": _reduce, "matmulinteger": _matmul_integer,
         "transpose": _transpose, "reshape": _reshape, "concat": _concat, "clip": _clip,
         "topk": _topk, "maxpool": _maxpool, "sign": _sign,
         "argmax": _argmax}


def random_int_graph(c: Choices, max_ops: int = 4) -> FuzzGraph:
    """A random valid integer ONNX model (opset 18) and its inputs (see the module doc)."""
    from onnx import helper

    dtype = c.pick(INT_TYPES)
    b = _Int(c, seed=c.int(0, 2**16), dtype=dtype)
    rank = c.int(1, 3)
    shape = tuple(c.pick((1, 2, 3, 4, 8)) for _ in range(rank))
    x = b.operand(shape, runtime=True)
    for _ in range(c.int(1, max_ops)):
        b.dtype = b.types[x]  # new operands (e.g. Concat's) take the value's type
        x = STEPS[c.pick(sorted(STEPS))](b, x)
        if math.prod(b.shapes[x]) > 1024 or len(b.shapes[x]) > 4:
            break  # keep graphs small (the op is kept: its output is the result)
    return b.finish("fuzz_int", x, helper.np_dtype_to_tensor_dtype(b.types[x]), 8)
