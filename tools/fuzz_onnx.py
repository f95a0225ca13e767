"""Random ONNX graphs for differential testing of the whole stack against onnxruntime.

The generator (:func:`random_graph`) builds small, valid ONNX models with ``onnx.helper`` from a
stream of choices, so the same code serves hypothesis (``HypothesisChoices``: every choice is a
``data.draw``, so failures shrink to a minimal model) and plain seeded runs (``RandomChoices``, for
benches and the CLI below). :func:`differential` compiles one graph for a machine, runs it on the
reference interpreter and compares it with onnxruntime; the outcome is ``pass``, ``refused`` (a clean
"not supported": an :class:`~m100.errors.M100Error` whose message is one line) or ``fail`` (a numeric
mismatch, an interpreter report, a traceback-worthy exception, or a multi-line error).

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
  negative pads, reflect, edge).

Integer graphs (exact comparison, 8/16-bit wrap-around, unsigned types) come from
:mod:`m100.tools.fuzz_int`; :func:`differential` compares integer and bool outputs bit-exactly.

CLI (a seeded campaign, prints the op mix, refusal reasons and failures; writes failing models)::

    python -m m100.tools.fuzz_onnx --count 200 --seed 0 --machines tiny,m100 --out out/fuzz
    python -m m100.tools.fuzz_onnx --family int --count 200
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

#: comparison: |got - want| <= ATOL * max(1, max|want|) + RTOL * |want| (f32, summation order)
RTOL = 1e-3
ATOL = 1e-4
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
    inputs: dict[str, np.ndarray]  # graph input name -> value (float32)
    ops: list[str] = field(default_factory=list)  # ONNX op types, in graph order

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
        from onnx import numpy_helper

        if runtime is None:
            runtime = self.c.pick((False, True))
        arr = self._values(shape, kind, scale)
        if runtime:
            n = self.name("in")
            self.inputs[n] = arr
        else:
            n = self.name(hint)
            self.inits.append(numpy_helper.from_array(arr, n))
        self.shapes[n] = tuple(shape)
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
        from onnx import numpy_helper

        vals = b.rng.integers(0, 4, size=es).astype(np.float32)
        if b.c.pick((False, True)):
            n = b.name("in")
            b.inputs[n] = vals
        else:
            n = b.name("w")
            b.inits.append(numpy_helper.from_array(vals, n))
        b.shapes[n] = tuple(es)
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
            "pad": _pad}
BY_RANK = {2: {"matmul": _matmul, "gemm": _gemm}, 3: {"matmul": _matmul},
           4: {"conv": _conv, "pool": _pool, "flatten": _flatten}}


def random_graph(c: Choices, max_ops: int = 4) -> FuzzGraph:
    """A random valid ONNX model (opset 17 or 20; Gelu only at 20) and its inputs."""
    from onnx import TensorProto, helper

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
    values = [x]
    for _ in range(c.int(1, max_ops)):
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
            break  # keep graphs small (the op is kept: its output is the result)
        x = y
        values.append(x)
    if not b.nodes:  # every step was a residual without a partner: one unary op
        x = _unary(b, x)
    outs = [x]
    graph = helper.make_graph(
        b.nodes, "fuzz",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
         for n, v in b.inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(b.shapes[o])) for o in outs],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8 if b.opset <= 17 else 9
    return FuzzGraph(model, dict(b.inputs), b.ops)


# --- differential run -------------------------------------------------------------------------------
@dataclass
class Outcome:
    status: str  # "pass" | "refused" | "fail"
    machine: str
    detail: str = ""  # refusal message or failure description
    max_abs: float = 0.0


def _reason(msg: str) -> str:
    """A short category for a refusal message (for counting)."""
    import re

    m = msg.split(": ", 1)[-1] if "@" in msg or "op #" in msg else msg
    m = re.sub(r"'[^']*'", "'…'", m)
    m = re.sub(r"\[[^\]]*\]|\d+", "N", m)
    return m[:90]


def differential(fg: FuzzGraph, machines: Sequence[str] = ("tiny", "m100"), *,
                 rtol: float = RTOL, atol: float = ATOL, seed: int = 0) -> list[Outcome]:
    """Compile ``fg`` for each machine, run it on the interpreter, compare with onnxruntime.
    The ONNX model is imported once (torch-mlir) and the module compiled per machine."""
    from m100.errors import M100Error
    from m100.frontend.mlir_load import shared_context
    from m100.tools import driver
    from m100.tools.onnx_backend import _as_onnx_dtype

    names = [i.name for i in fg.model.graph.input]
    feeds = [fg.inputs[n] for n in names]
    want = oracle_run(fg.model, feeds)  # the oracle must accept every generated model
    out: list[Outcome] = []
    try:
        module, _ = driver.load_model(fg.model, shared_context())
    except M100Error as e:
        msg = str(e)
        st = "refused" if "\n" not in msg.strip() else "fail"
        return [Outcome(st, m, msg) for m in machines]
    for mach in machines:
        try:
            cr = driver.compile(module.clone(), machine=mach, seed=seed)
        except M100Error as e:
            msg = str(e)
            if "\n" in msg.strip():
                out.append(Outcome("fail", mach, f"multi-line error: {msg}"))
            else:
                out.append(Outcome("refused", mach, msg))
            continue
        except Exception:  # noqa: BLE001 - a traceback is a failure of the compiler
            out.append(Outcome("fail", mach, "exception:\n" + traceback.format_exc(limit=8)))
            continue
        try:
            syms = [s.name for s in cr.program.symbols if s.role == "input"]
            res = driver.run(cr.program, dict(zip(syms, feeds, strict=True)))
        except Exception:  # noqa: BLE001
            out.append(Outcome("fail", mach, "run exception:\n" + traceback.format_exc(limit=8)))
            continue
        if res.reports:
            out.append(Outcome("fail", mach, "interpreter: " + "; ".join(map(str, res.reports[:3]))))
            continue
        got = list(res.outputs.values())
        bad = []
        worst = 0.0
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            g, w = np.asarray(g), np.asarray(w)
            if g.size != w.size:
                bad.append(f"output {i}: {g.size} elements, want {w.size}")
                continue
            if w.dtype.kind in "iub":  # integers and bools: bit-exact, in the ONNX output type
                g = _as_onnx_dtype(g, w.dtype).reshape(w.shape)
                wrong = int((g != w).sum())
                if g.dtype != w.dtype or wrong:
                    bad.append(f"output {i}: {wrong} of {w.size} {w.dtype} elements differ "
                               f"(got {g.dtype})")
                continue
            w = np.asarray(w, np.float64)
            g = np.asarray(g, np.float64)
            g = g.reshape(w.shape)
            tol = atol * max(1.0, float(np.abs(w).max(initial=0.0))) + rtol * np.abs(w)
            d = np.abs(g - w)
            worst = max(worst, float(d.max(initial=0.0)))
            if not np.isfinite(g).all() or (d > tol).any():
                bad.append(f"output {i}: max abs error {d.max():.3g} (|want| max "
                           f"{np.abs(w).max():.3g})")
        out.append(Outcome("fail" if bad else "pass", mach, "; ".join(bad), worst))
    return out


def oracle_run(model, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime (CPU, one thread) on ``model``; where it does not implement an op for a type
    (e.g. Max on int16), ONNX's numpy reference evaluator, written from the operator definitions."""
    from m100.tools.onnx_backend import onnxruntime_run

    try:
        return onnxruntime_run(model, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own NOT_IMPLEMENTED types
        if "NOT_IMPLEMENTED" not in str(e) and "Could not find an implementation" not in str(e):
            raise
    from onnx.reference import ReferenceEvaluator

    names = [i.name for i in model.graph.input]
    return list(ReferenceEvaluator(model).run(None, dict(zip(names, feeds, strict=True))))


def save_failure(fg: FuzzGraph, directory, tag: str = "last_failure") -> Path:
    """Write the model and its inputs (``<tag>.onnx``, ``<tag>.npz``); return the model path."""
    import onnx

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(fg.model, d / f"{tag}.onnx")
    np.savez(d / f"{tag}.npz", **fg.inputs)
    return d / f"{tag}.onnx"


@dataclass
class Campaign:
    graphs: int = 0
    ops: collections.Counter = field(default_factory=collections.Counter)
    status: collections.Counter = field(default_factory=collections.Counter)
    refusals: collections.Counter = field(default_factory=collections.Counter)
    failures: list[tuple[int, Outcome, str]] = field(default_factory=list)

    def add(self, idx: int, fg: FuzzGraph, outs: list[Outcome]) -> None:
        self.graphs += 1
        self.ops.update(fg.ops)
        for o in outs:
            self.status[o.status] += 1
            if o.status == "refused":
                self.refusals[_reason(o.detail)] += 1
            elif o.status == "fail":
                self.failures.append((idx, o, fg.describe()))

    def table(self) -> str:
        lines = [f"graphs {self.graphs}, runs {sum(self.status.values())}: "
                 + ", ".join(f"{k} {v}" for k, v in sorted(self.status.items()))]
        lines.append("op mix: " + ", ".join(f"{k} {v}" for k, v in self.ops.most_common()))
        lines.append("refusals:")
        lines += [f"  {v:5d}  {k}" for k, v in self.refusals.most_common(25)]
        lines.append(f"failures: {len(self.failures)}")
        lines += [f"  #{i} {o.machine}: {o.detail.splitlines()[0] if o.detail else ''} | {d}"
                  for i, o, d in self.failures[:30]]
        return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m m100.tools.fuzz_onnx", description=__doc__.split(
        "\n")[0])
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--machines", default="tiny,m100")
    ap.add_argument("--max-ops", type=int, default=4)
    ap.add_argument("--family", choices=("float", "int"), default="float",
                    help="float graphs (tolerance) or integer graphs (exact; m100.tools.fuzz_int)")
    ap.add_argument("--out", default="out/fuzz", help="failing models are written here")
    a = ap.parse_args(argv)
    camp = Campaign()
    for i in range(a.count):
        from m100.tools.fuzz_int import random_int_graph

        gen = random_int_graph if a.family == "int" else random_graph
        fg = gen(RandomChoices(a.seed * 1_000_003 + i), a.max_ops)
        outs = differential(fg, a.machines.split(","))
        camp.add(i, fg, outs)
        if any(o.status == "fail" for o in outs):
            save_failure(fg, a.out, f"seed{a.seed}_{i}")
        print(f"#{i} " + " ".join(f"{o.machine}:{o.status}" for o in outs) + f" | {fg.describe()}",
              flush=True)
    print(camp.table())
    return 1 if camp.failures else 0


if __name__ == "__main__":
    sys.exit(main())
