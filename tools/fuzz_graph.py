"""The random ONNX graph generator of the float fuzzer (:mod:`m100.tools.fuzz_onnx` runs the graphs).

:func:`random_graph` builds small, valid ONNX models with ``onnx.helper`` from a stream of choices,
so the same code serves hypothesis (``HypothesisChoices``: every choice is a ``data.draw``, so
failures shrink to a minimal model) and plain seeded runs (``RandomChoices``). Each op emitter takes
the builder and a value and returns a new value; :mod:`m100.tools.fuzz_int` reuses the builder and
the shape-only emitters for integer graphs.

Families and ops (shapes are small, with M = 1 and size-1 dims drawn often):

* dense ``[M, K]``: MatMul (right operand an initializer or a graph input; or the value as the
  right operand), Gemm (alpha, beta, transA, transB; C absent / initializer / input, shapes
  ``[N]``, ``[1, N]``, ``[M, 1]``, ``[M, N]``, ``[]``);
* sequence ``[B, S, D]``: MatMul with ``[D, N]`` (broadcast) or ``[B, D, N]`` (batched);
* image ``[N, C, H, W]``: Conv (k 1/3, stride 1/2, pad, bias absent / initializer / input, depthwise),
  MaxPool / AveragePool (k 2/3, stride 1/2, pads), GlobalAveragePool, Flatten;
* any rank: Relu / Sigmoid / Tanh / Gelu (erf and tanh), Add / Mul / Sub / Div with broadcasting
  (operand an initializer or a graph input, either side; divisors are kept away from zero), Softmax
  (any axis), a LayerNorm chain (ReduceMean / Sub / Mul / Add eps / Sqrt / Div / scale / shift) or
  ``LayerNormalization``, Transpose, Reshape, Concat, residual Add of an earlier value, ``Mod``
  (``fmod=1``, sometimes with wide-range dividends), ``Pow`` (integer-valued exponents of any base,
  real exponents of ``|x|``), ``Pad`` (constant with an absent / initializer / run-time value and
  negative pads, reflect, edge), ``Slice`` (positive and negative steps, bounds past either end,
  negative axes, ``axes``/``steps`` absent), ``Gather`` (index tensors of rank 0-2 with negative
  and repeated indices, constant or run-time int64).

:func:`random_heads_graph` (a family of its own: ``random_graph``'s seeds draw the same graphs as
before it) wraps the prefill heads' pattern (:func:`_heads`): a projection's output cut into
column parts, each read by its own MatMul, the results side by side or added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

UNARY = ("Relu", "Sigmoid", "Tanh", "Gelu")
BINARY = ("Add", "Mul", "Sub", "Div")


class Choices(Protocol):
    def int(self, lo: int, hi: int) -> int: ...  # inclusive
    def pick(self, seq: Sequence[Any]) -> Any: ...
    def float(self, lo: float, hi: float) -> float: ...


class RandomChoices:
    """Choices from a seeded numpy Generator."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def int(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, seq):
        return seq[int(self.rng.integers(0, len(seq)))]

    def float(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))


class HypothesisChoices:
    """Choices drawn from hypothesis' ``st.data()`` (shrinks towards the first option / lo)."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def pick(self, seq):
        return self.data.draw(self.st.sampled_from(list(seq)))

    def float(self, lo: float, hi: float) -> float:
        return self.data.draw(self.st.floats(lo, hi, allow_nan=False, width=32))


@dataclass
class FuzzGraph:
    model: Any  # onnx.ModelProto
    inputs: dict[str, np.ndarray]  # graph input name -> value (float32; int64 Gather indices)
    ops: list[str] = field(default_factory=list)  # ONNX op types, in graph order
    #: absolute tolerance added to every float output's: an int8 quantize of float arithmetic
    #: whose summation order is not the oracle's may round one step apart (the W8A8 attention's
    #: heads, :func:`m100.tools.fuzz_attention.quant_attention`: two such steps of ``wo``'s input)
    slack: float = 0.0

    def describe(self) -> str:
        g = self.model.graph
        ins = ", ".join(f"{k}{list(v.shape)}" for k, v in self.inputs.items())
        return f"inputs {ins}; nodes " + " ".join(n.op_type for n in g.node)


class _Builder:
    """Graph under construction: nodes, initializers, graph inputs with their values."""

    def __init__(self, c: Choices, seed: int):
        self.c = c
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.inputs: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.k = 0
        self.opset = 17
        self.ops: list[str] = []
        self.slack = 0.0  # FuzzGraph.slack

    def finish(self, name: str, out: str, out_type: int, ir_version: int,
               extra: Sequence[tuple[str, int]] = ()) -> FuzzGraph:
        """The model of the graph built so far: graph inputs typed by their values' dtypes, the
        output ``out`` of ONNX element type ``out_type`` (then ``extra``'s (value, type): more
        outputs), this builder's opset."""
        from onnx import helper

        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
             for n, v in self.inputs.items()],
            [helper.make_tensor_value_info(o, t, list(self.shapes[o]))
             for o, t in [(out, out_type), *extra]], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = ir_version
        return FuzzGraph(model, dict(self.inputs), self.ops, self.slack)

    def name(self, hint: str) -> str:
        self.k += 1
        return f"{hint}{self.k}"

    def _values(self, shape, kind: str, scale: float = 1.0) -> np.ndarray:
        shape = tuple(shape)
        if kind == "away":  # |v| in [0.5, 2], random sign: a safe divisor
            mag = self.rng.uniform(0.5, 2.0, size=shape)
            sgn = np.where(self.rng.random(size=shape) < 0.5, -1.0, 1.0)
            return np.asarray(mag * sgn, dtype=np.float32)
        if kind == "positive":
            return np.asarray(self.rng.uniform(0.5, 2.0, size=shape), dtype=np.float32)
        return np.asarray(self.rng.standard_normal(shape) * scale, dtype=np.float32)

    def operand(self, shape, kind: str = "normal", scale: float = 1.0, runtime: bool | None = None,
                hint: str = "w") -> str:
        """A new initializer or graph input of ``shape``."""
        if runtime is None:
            runtime = self.c.pick((False, True))
        return self.array(self._values(shape, kind, scale), runtime, hint)

    def array(self, arr: np.ndarray, runtime: bool | None = None, hint: str = "w") -> str:
        """``arr`` as a new graph input (``runtime``) or initializer (drawn when None)."""
        from onnx import numpy_helper

        if runtime is None:
            runtime = self.c.pick((False, True))
        if runtime:
            n = self.name("in")
            self.inputs[n] = arr
        else:
            n = self.name(hint)
            self.inits.append(numpy_helper.from_array(arr, n))
        self.shapes[n] = tuple(arr.shape)
        return n

    def const_i64(self, vals) -> str:
        from onnx import numpy_helper

        n = self.name("shape")
        self.inits.append(numpy_helper.from_array(np.array(vals, dtype=np.int64), n))
        return n

    def const_f32(self, val: float) -> str:
        from onnx import numpy_helper

        n = self.name("eps")
        self.inits.append(numpy_helper.from_array(np.array(val, dtype=np.float32), n))
        self.shapes[n] = ()
        return n

    def node(self, op: str, ins: list[str], out_shape, **attrs) -> str:
        from onnx import helper

        out = self.name("t")
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        self.shapes[out] = tuple(int(d) for d in out_shape)
        self.ops.append(op)
        return out


# --- op emitters: each takes (builder, value name) and returns the new value name -------------------
def _unary(b: _Builder, x: str) -> str:
    op = b.c.pick(UNARY if b.opset >= 20 else UNARY[:-1])  # Gelu is opset 20
    if op == "Gelu":
        return b.node("Gelu", [x], b.shapes[x], approximate=b.c.pick(("none", "tanh")))
    return b.node(op, [x], b.shapes[x])


def _bcast_shape(b: _Builder, s: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to ``s``: some dims 1, maybe fewer leading dims, maybe a scalar."""
    mode = b.c.pick(("full", "ones", "last", "lower", "scalar"))
    if mode == "full":
        return s
    if mode == "scalar":
        return ()
    if mode == "last":
        return (s[-1],)
    if mode == "lower" and len(s) > 1:
        return s[b.c.int(1, len(s) - 1):]
    return tuple(d if b.c.pick((True, False)) else 1 for d in s)


def _binary(b: _Builder, x: str) -> str:
    op = b.c.pick(BINARY)
    s = b.shapes[x]
    os_ = _bcast_shape(b, s)
    y = b.operand(os_, "away" if op == "Div" else "normal")
    swap = op != "Div" and b.c.pick((False, True))
    out = np.broadcast_shapes(s, os_)
    return b.node(op, [y, x] if swap else [x, y], out)


def _softmax(b: _Builder, x: str) -> str:
    r = len(b.shapes[x])
    return b.node("Softmax", [x], b.shapes[x], axis=b.c.int(-r, r - 1))


def _layernorm(b: _Builder, x: str) -> str:
    s = b.shapes[x]
    d = s[-1]
    if b.c.pick((False, True)):
        g = b.operand((d,), scale=1.0, runtime=False, hint="gamma")
        bb = b.operand((d,), scale=1.0, runtime=False, hint="beta")
        return b.node("LayerNormalization", [x, g, bb], s, axis=-1, epsilon=1e-5)
    # the chain as exporters write it (ReduceMean axes: an attribute before opset 18, an input after)
    red = s[:-1] + (1,)

    def mean(v):
        if b.opset >= 18:
            return b.node("ReduceMean", [v, b.const_i64([-1])], red, keepdims=1)
        return b.node("ReduceMean", [v], red, axes=[-1], keepdims=1)
    cen = b.node("Sub", [x, mean(x)], s)
    sq = b.node("Mul", [cen, cen], s)
    var = mean(sq)
    eps = b.const_f32(1e-5)
    ve = b.node("Add", [var, eps], red)
    sd = b.node("Sqrt", [ve], red)
    y = b.node("Div", [cen, sd], s)
    if b.c.pick((False, True)):
        y = b.node("Mul", [y, b.operand((d,), runtime=False, hint="gamma")], s)
        y = b.node("Add", [y, b.operand((d,), runtime=False, hint="beta")], s)
    return y


def _mod(b: _Builder, x: str) -> str:
    """``Mod`` with ``fmod=1`` (C ``fmod``; the only float form ONNX allows): the divisor broadcasts and
    is kept away from zero; sometimes wide-range dividends (quotients past 2**24, where a rounded
    ``a - b * trunc(a / b)`` is wrong) when the dividend is a graph input: the value of an earlier
    op carries its summation-order rounding, which a wide range would turn into a different
    remainder."""
    s = b.shapes[x]
    if x in b.inputs and b.c.pick((False, False, True)):
        x = b.node("Mul", [x, b.const_f32(b.c.pick((1e3, 1e6, 3e9)))], s)
    y = b.operand(_bcast_shape(b, s), "away")
    return b.node("Mod", [x, y], np.broadcast_shapes(s, b.shapes[y]), fmod=1)


def _pow(b: _Builder, x: str) -> str:
    """``Pow``: a negative base to an integer-valued exponent, or ``|x|`` to a real exponent in
    [0.5, 2]; the exponent a scalar or broadcast tensor, an initializer or a graph input."""
    s = b.shapes[x]
    es = _bcast_shape(b, s)
    if b.c.pick((False, True)):
        n = b.array(b.rng.integers(0, 4, size=es).astype(np.float32))
        base = x
    else:
        n = b.operand(es, "positive")
        base = b.node("Abs", [x], s)
    return b.node("Pow", [base, n], np.broadcast_shapes(s, es))


def _pad(b: _Builder, x: str) -> str:
    """``Pad`` (opset 11+ inputs): constant (value absent, an initializer or a run-time scalar;
    negative pads crop), reflect (pads < dim) or edge."""
    from onnx import numpy_helper

    s = b.shapes[x]
    mode = b.c.pick(("constant", "constant", "reflect", "edge"))
    pads = []
    for d in list(s) * 2:
        lo = -1 if mode == "constant" and d > 2 else 0
        hi = min(2, d - 1) if mode == "reflect" else 2
        pads.append(b.c.int(lo, max(lo, hi)))
    r = len(s)
    out = tuple(d + pads[i] + pads[i + r] for i, d in enumerate(s))
    if min(out) < 1:
        return x
    ins = [x, b.const_i64(pads)]
    if mode == "constant":
        how = b.c.pick(("absent", "init", "runtime"))
        if how != "absent":
            v = np.array(b.rng.standard_normal(), dtype=np.float32)
            if how == "runtime":
                n = b.name("in")
                b.inputs[n] = v
            else:
                n = b.name("w")
                b.inits.append(numpy_helper.from_array(v, n))
            b.shapes[n] = ()
            ins.append(n)
    return b.node("Pad", ins, out, mode=mode)


def _slice_len(d: int, start: int, end: int, step: int) -> int:
    """Elements of one sliced axis of extent ``d``, as the ONNX ``Slice`` definition counts them
    (negative bounds count from the end; start clamps to [0, d] stepping up and [0, d - 1] stepping
    down, end to [0, d] and [-1, d - 1]). Not Python's ``slice.indices``, which clamps a negative
    step's start differently."""
    start += d if start < 0 else 0
    end += d if end < 0 else 0
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        return max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    return max(0, -(-(start - end) // -step))


def _slice(b: _Builder, x: str) -> str:
    """``Slice`` (opset 10+ inputs, all initializers): one or more distinct axes, sometimes written
    negative; per axis a start and an end anywhere in [-d - 2, d + 1] (past either end: clamped)
    and a step in {1, 2, 3, -1, -2}; ``axes`` and ``steps`` sometimes absent (all axes in order,
    steps 1). An axis whose eight draws are all empty keeps the value unsliced."""
    s = b.shapes[x]
    r = len(s)
    every = b.c.pick((False, False, True))
    axes = list(range(r)) if every else sorted({b.c.int(0, r - 1) for _ in range(b.c.int(1, r))})
    unit = every and b.c.pick((False, True))  # steps absent
    starts, ends, steps = [], [], []
    out = list(s)
    for a in axes:
        d = s[a]
        step = 1 if unit else b.c.pick((1, 1, 2, 3, -1, -1, -2))
        for _ in range(8):  # many (start, end) pairs are empty (most on short axes): redraw
            start, end = b.c.int(-d - 2, d + 1), b.c.int(-d - 2, d + 1)
            n = _slice_len(d, start, end, step)
            if n:
                break
        else:
            return x
        starts.append(start), ends.append(end), steps.append(step)
        out[a] = n
    ins = [x, b.const_i64(starts), b.const_i64(ends)]
    if not every or not unit:
        ins.append(b.const_i64([a - r if b.c.pick((False, True)) else a for a in axes]))
        if not unit:
            ins.append(b.const_i64(steps))
    return b.node("Slice", ins, out)


def _gather(b: _Builder, x: str) -> str:
    """``Gather`` along a drawn axis (sometimes written negative) with an index tensor of rank 0-2
    whose values lie anywhere in [-d, d - 1] (negative: from the end; repeats allowed), an int64
    initializer or a run-time int64 graph input. The output keeps rank 1-4."""
    s = b.shapes[x]
    r = len(s)
    ax = b.c.int(0, r - 1)
    ishape: tuple[int, ...] = b.c.pick(((), (1,), (2,), (3,), (2, 2)))
    if r - 1 + len(ishape) not in range(1, 5):
        ishape = (b.c.pick((1, 2, 3)),)
    d = s[ax]
    n = b.array(b.rng.integers(-d, d, size=ishape).astype(np.int64), hint="idx")
    out = s[:ax] + ishape + s[ax + 1:]
    return b.node("Gather", [x, n], out, axis=ax - r if b.c.pick((False, True)) else ax)


def _transpose(b: _Builder, x: str) -> str:
    s = b.shapes[x]
    perm = list(range(len(s)))
    # a random permutation from len(s) - 1 transpositions drawn one by one (shrinks to identity)
    for i in range(len(s) - 1, 0, -1):
        j = b.c.int(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    return b.node("Transpose", [x], [s[p] for p in perm], perm=perm)


def _reshape(b: _Builder, x: str) -> str:
    s = b.shapes[x]
    mode = b.c.pick(("flatten2", "merge", "split", "unsqueeze"))
    if mode == "merge" and len(s) >= 2:
        i = b.c.int(0, len(s) - 2)
        new = s[:i] + (s[i] * s[i + 1],) + s[i + 2:]
    elif mode == "split":
        i = b.c.int(0, len(s) - 1)
        f = next((f for f in (2, 3) if s[i] % f == 0 and s[i] > f), None)
        new = s[:i] + ((f, s[i] // f) if f else (s[i], 1)) + s[i + 1:]
    elif mode == "unsqueeze" and len(s) < 4:
        i = b.c.int(0, len(s))
        new = s[:i] + (1,) + s[i:]
    else:
        new = (s[0], math.prod(s[1:])) if len(s) > 1 else (1, s[0])
    return b.node("Reshape", [x, b.const_i64(list(new))], new)


def _concat(b: _Builder, x: str) -> str:
    s = b.shapes[x]
    ax = b.c.int(0, len(s) - 1)
    other = list(s)
    other[ax] = b.c.int(1, 3)
    y = b.operand(other)
    ins = [y, x] if b.c.pick((False, True)) else [x, y]
    out = list(s)
    out[ax] += other[ax]
    return b.node("Concat", ins, out, axis=ax)


def _residual(b: _Builder, x: str, earlier: list[str]) -> str | None:
    same = [v for v in earlier if v != x and b.shapes[v] == b.shapes[x]]
    if not same:
        return None
    v = b.c.pick(same)
    return b.node("Add", [v, x] if b.c.pick((False, True)) else [x, v], b.shapes[x])


def _matmul(b: _Builder, x: str) -> str:
    s = b.shapes[x]
    n = b.pick_dim()
    if len(s) == 2 and b.c.pick((False, False, True)):  # the value as the right operand
        p = b.pick_dim()
        a = b.operand((p, s[0]), scale=1 / math.sqrt(s[0]))
        return b.node("MatMul", [a, x], (p, s[1]))
    if len(s) == 3 and b.c.pick((False, True)):
        w = b.operand((s[0], s[2], n), scale=1 / math.sqrt(s[2]))
    else:
        w = b.operand((s[-1], n), scale=1 / math.sqrt(s[-1]))
    return b.node("MatMul", [x, w], s[:-1] + (n,))


def _gemm(b: _Builder, x: str) -> str:
    m, k = b.shapes[x]
    ta, tb = b.c.int(0, 1), b.c.int(0, 1)
    if ta:
        m, k = k, m
    n = b.pick_dim()
    w = b.operand((n, k) if tb else (k, n), scale=1 / math.sqrt(k))
    alpha = b.c.pick((1.0, 1.0, 0.5, -2.0))
    beta = b.c.pick((1.0, 1.0, 0.25, -1.5))
    ins = [x, w]
    cmode = b.c.pick(("none", "vec", "row", "col", "full", "scalar"))
    if cmode != "none":
        cs = {"vec": (n,), "row": (1, n), "col": (m, 1), "full": (m, n), "scalar": ()}[cmode]
        ins.append(b.operand(cs))
    attrs = dict(alpha=alpha, beta=beta, transA=ta, transB=tb)
    if b.c.pick((False, True)):  # defaults omitted, as many exporters write it
        default = dict(alpha=1.0, beta=1.0, transA=0, transB=0)
        attrs = {k_: v for k_, v in attrs.items() if v != default[k_]}
    return b.node("Gemm", ins, (m, n), **attrs)


def _conv(b: _Builder, x: str) -> str:
    n_, c, h, w = b.shapes[x]
    k = b.c.pick((1, 3)) if min(h, w) >= 3 else 1
    stride = b.c.pick((1, 2))
    pad = b.c.pick((0, 1)) if k == 3 else 0
    depthwise = c > 1 and b.c.pick((False, False, False, True))
    f = c if depthwise else b.c.pick((1, 2, 4, 8))
    cin = 1 if depthwise else c
    wt = b.operand((f, cin, k, k), scale=1 / math.sqrt(cin * k * k), runtime=False)
    ins = [x, wt]
    bias = b.c.pick(("none", "init", "input"))
    if bias != "none":
        ins.append(b.operand((f,), runtime=bias == "input", hint="bias"))
    ho = (h + 2 * pad - k) // stride + 1
    wo = (w + 2 * pad - k) // stride + 1
    attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
    if depthwise:
        attrs["group"] = c
    return b.node("Conv", ins, (n_, f, ho, wo), **attrs)


def _pool(b: _Builder, x: str) -> str:
    n_, c, h, w = b.shapes[x]
    op = b.c.pick(("MaxPool", "AveragePool", "GlobalAveragePool"))
    if op == "GlobalAveragePool" or min(h, w) < 2:
        return b.node("GlobalAveragePool", [x], (n_, c, 1, 1))
    k = b.c.pick((2, 3)) if min(h, w) >= 3 else 2
    stride = b.c.pick((1, 2))
    pad = b.c.pick((0, 0, 1))
    ho = (h + 2 * pad - k) // stride + 1
    wo = (w + 2 * pad - k) // stride + 1
    return b.node(op, [x], (n_, c, ho, wo), kernel_shape=[k, k], strides=[stride, stride],
                  pads=[pad] * 4)


def _flatten(b: _Builder, x: str) -> str:
    s = b.shapes[x]
    return b.node("Flatten", [x], (s[0], math.prod(s[1:])), axis=1)


def _pick_dim(b: _Builder) -> int:
    return b.c.pick((1, 2, 3, 4, 8, 16))


_Builder.pick_dim = _pick_dim  # type: ignore[attr-defined]

ANY_RANK = {"unary": _unary, "binary": _binary, "softmax": _softmax, "layernorm": _layernorm,
            "transpose": _transpose, "reshape": _reshape, "concat": _concat, "mod": _mod, "pow": _pow,
            "pad": _pad, "slice": _slice, "gather": _gather}
BY_RANK = {2: {"matmul": _matmul, "gemm": _gemm}, 3: {"matmul": _matmul},
           4: {"conv": _conv, "pool": _pool, "flatten": _flatten}}


def _heads(b: _Builder, x: str, big: bool = False) -> str:
    """The prefill heads' pattern (``build_segments.LATE_READ_STORES``): a projection
    ``v = x @ Wv`` (``Wv`` a graph input, run-time weights, when ``big``; else mostly) whose output is cut into ``h``
    column parts on the last axis (``Slice`` with ``axes`` 1 or -1, or one ``Split``), each part
    read by its own MatMul -- as the left operand (``part @ W_j``) or, as attention's PV reads
    ``v``'s heads, the right one (``P_j @ part``, ``P_j`` sometimes a softmax of an input) -- and
    the heads' results side by side (``Concat`` on the last axis) or added; sometimes ``v``
    itself is read again (a residual of the concat, or a second reader of a part). Part widths
    are mostly a multiple of 16 columns (f32: 64-byte offsets, read in place as column views,
    ``OpGraph.cviews``), sometimes not (the slices are copies). ``x`` must be 2-D; ``big``: wider
    parts, and ``P_j`` mostly square (attention's)."""
    m, k = b.shapes[x]
    d = b.c.pick((32, 32, 64, 64, 8) if big else (16, 16, 32, 8, 3))
    h = b.c.int(2, 4)
    wv = b.operand((k, h * d), scale=1 / math.sqrt(k),
                   runtime=True if big else b.c.pick((True, True, False)))
    v = b.node("MatMul", [x, wv], (m, h * d))
    parts = []
    if b.c.pick((False, True)) and b.opset >= 13:  # one Split (sizes as an input, opset 13+)
        from onnx import helper

        outs = [b.name("t") for _ in range(h)]
        axis = b.c.pick((1, -1))
        b.nodes.append(helper.make_node("Split", [v, b.const_i64([d] * h)], outs, axis=axis))
        b.ops.append("Split")
        for o in outs:
            b.shapes[o] = (m, d)
        parts = outs
    else:
        for j in range(h):
            ax = b.c.pick((1, -1))
            parts.append(b.node("Slice", [v, b.const_i64([j * d]), b.const_i64([(j + 1) * d]),
                                          b.const_i64([ax])], (m, d)))
    right = b.c.pick((False, True))  # the part as the right operand (attention's P @ v_j)
    p = (b.c.pick((m, m, 16)) if big else b.c.pick((1, 2, 4, 16))) if right else m
    outs = []
    for part in parts:
        if right:
            if b.c.pick((False, True)):  # P_j a softmax of an input, like attention's
                s = b.operand((p, m), runtime=True)
                pj = b.node("Softmax", [s], (p, m), axis=-1)
            else:
                pj = b.operand((p, m), scale=1 / math.sqrt(m), runtime=b.c.pick((True, False)))
            outs.append(b.node("MatMul", [pj, part], (p, d)))
        else:
            n = b.c.pick((d, d, 4, 16))
            wj = b.operand((d, n), scale=1 / math.sqrt(d), runtime=b.c.pick((True, True, False)))
            outs.append(b.node("MatMul", [part, wj], (m, n)))
    if b.c.pick((False, False, True)) and not right:  # a part read again, by an elementwise op
        j = b.c.int(0, h - 1)
        outs.append(b.node("Relu", [parts[j]], (m, d)))
    same = all(b.shapes[o] == b.shapes[outs[0]] for o in outs)
    if same and b.c.pick((False, True)):
        y = outs[0]
        for o in outs[1:]:
            y = b.node("Add", [y, o], b.shapes[y])
    else:
        rows = b.shapes[outs[0]][0]
        y = b.node("Concat", outs, (rows, sum(b.shapes[o][1] for o in outs)), axis=-1)
    if b.shapes[y] == b.shapes[v] and b.c.pick((False, True)):  # v itself read again
        y = b.node("Add", [y, v], b.shapes[y])
    return y


def _chain(b: _Builder, c: Choices, x: str, values: list[str], steps: int) -> str:
    """``steps`` random steps from ``x`` (half from the rank's own ops); the last value. Stops at
    a value past 4096 elements or rank 4 (its op stays in the graph, unread; the value before it
    is the result)."""
    for _ in range(steps):
        r = len(b.shapes[x])
        # half of the steps from the rank's own ops (MatMul/Gemm, Conv/pooling), so that they are
        # not drowned by the generic ones
        own = BY_RANK.get(r, {})
        table = dict(own) if own and c.pick((True, False)) else dict(ANY_RANK, residual=None)
        kind = c.pick(sorted(table))
        if kind == "residual":
            y = _residual(b, x, values)
            if y is None:
                continue
        else:
            y = table[kind](b, x)
        if math.prod(b.shapes[y]) > 4096 or len(b.shapes[y]) > 4:
            return x  # keep graphs small
        x = y
        values.append(x)
    return x


#: the heads family's large inputs ``[M, K]``: on ``m100`` a 128-row projection (or 16 rows of a
#: 1024-deep one, K chunked) is a lockstep contraction whose heads are segments of their own, so
#: its stores are built late (``PlanBuilder._late_reads``); the small ones never are
HEADS_BIG = ((128, 128), (128, 256), (16, 1024), (64, 512))


def _prelude(b: _Builder, x: str, max_ops: int) -> list[str]:
    """Up to ``max_ops`` random ops on ``x`` that keep its shape (an activation, a broadcast
    binary op, a norm, a softmax, a residual); the values, ``x`` first, the last the result."""
    c = b.c
    values = [x]
    for _ in range(c.int(0, max_ops)):
        kind = c.pick(("unary", "binary", "layernorm", "softmax", "residual"))
        y = _residual(b, x, values) if kind == "residual" else ANY_RANK[kind](b, x)
        if y is not None and b.shapes[y] == b.shapes[x]:
            x = y
            values.append(x)
    return values


def random_heads_graph(c: Choices, max_ops: int = 2) -> FuzzGraph:
    """The heads family: half its graphs the column parts (:func:`random_parts_graph`), half the
    causal attention chain (:func:`m100.tools.fuzz_attention.random_attention_graph`: ``q_j @
    kT_j`` with ``kT`` / ``v`` written by the program, the mask, softmax, ``@ v_j``, ``wo``).
    The parts graph of a seed is ``random_parts_graph`` of the choices after the first."""
    if c.pick(("parts", "attention")) == "attention":
        from m100.tools.fuzz_attention import random_attention_graph
        return random_attention_graph(c, max_ops)
    return random_parts_graph(c, max_ops)


def random_parts_graph(c: Choices, max_ops: int = 2) -> FuzzGraph:
    """A random model around the heads' pattern (:func:`_heads`): a dense ``[M, K]`` input (small,
    M = 1 often; or one of :data:`HEADS_BIG`), up to ``max_ops`` random steps that keep it, the
    heads block, up to ``max_ops`` random steps after (when its result has at most 4096
    elements). (Session 24-25's ``random_heads_graph``: ``RandomChoices(i)`` draws the same
    graphs as it did.)"""
    from onnx import TensorProto

    b = _Builder(c, seed=c.int(0, 2**16))
    b.opset = c.pick((17, 20))
    big = c.pick((False, True))
    shape = c.pick(HEADS_BIG) if big else (c.pick((1, 1, 2, 4, 16)), c.pick((4, 16, 32, 64)))
    x = b.operand(shape, runtime=True)
    values = _prelude(b, x, max_ops)
    x = _heads(b, values[-1], big)
    values.append(x)
    if math.prod(b.shapes[x]) <= 4096:
        x = _chain(b, c, x, values, c.int(0, max_ops))
    return b.finish("fuzz_heads", x, TensorProto.FLOAT, 8 if b.opset <= 17 else 9)


def random_graph(c: Choices, max_ops: int = 4) -> FuzzGraph:
    """A random valid ONNX model (opset 17 or 20; Gelu only at 20) and its inputs."""
    from onnx import TensorProto

    b = _Builder(c, seed=c.int(0, 2**16))
    b.opset = c.pick((17, 20))
    family = c.pick(("dense", "image", "seq"))
    if family == "dense":
        shape: tuple[int, ...] = (c.pick((1, 1, 2, 4, 16)), b.pick_dim())  # type: ignore
    elif family == "seq":
        shape = (c.pick((1, 2)), c.pick((1, 3, 4)), b.pick_dim())  # type: ignore
    else:
        shape = (c.pick((1, 1, 2)), c.pick((1, 2, 3, 8)), c.pick((1, 2, 4, 5, 8)),
                 c.pick((1, 2, 4, 5, 8)))
    x = b.operand(shape, runtime=True)
    x = _chain(b, c, x, [x], c.int(1, max_ops))
    if not b.nodes:  # every step was a residual without a partner: one unary op
        x = _unary(b, x)
    return b.finish("fuzz", x, TensorProto.FLOAT, 8 if b.opset <= 17 else 9)
