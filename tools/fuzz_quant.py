"""Random W8A8 graphs for the differential fuzzer (the ``quant`` family).

The integer family (:mod:`m100.tools.fuzz_int`) draws ``MatMulInteger`` alone; the LLM path
compiles whole quantized chains into one TCU instruction (the dequantization, and with
``from_ir/tcu_post`` the SiLU gate and the ``silu(gate) * up`` product with its int8 quantize,
run in the TCU's epilogue stages). :func:`random_quant_graph` draws those chains as exporters and
:mod:`m100.frontend.llm_graph` write them, so that a wrong epilogue, a lost f16 rounding, a
per-channel scale read with the wrong stride or a runtime-weight walk at ``M = 1`` shows up as a
wrong number:

* the model type ``T`` (f16 or f32), ``M`` rows (1 often: decode), ``K`` and ``N`` among small
  multiples of 8 and odd sizes; a sixth of them wide (:data:`WIDE_K`: ``K`` 640-2048 on 16-64
  rows, one projection);
* ``xq = QuantizeLinear(x, sx, 0)`` with ``sx`` a power of two (the LLM's exact scale) or not;
* each projection ``Cast(Cast(MatMulInteger(xq, W), f32) * dq, T)`` with an int8 ``W`` [K, N] and
  ``dq`` per output channel [N] or per tensor, each an initializer or a graph input (run-time
  weights);
* one of: the projection alone; the projection times another ``T`` value, quantized to int8
  (int8 output: compared bit for bit, so a lost 16-bit rounding fails: ``test_half_roundings``);
  the projection times a constant cast to a narrow integer (int4 / uint4 at opset 21, int2 /
  uint2 at opset 25) and back to int8 (:func:`_narrow`: values beyond the narrow type wrap
  modulo ``2**bits``, compared bit for bit with ONNX's reference evaluator, which truncates:
  onnxruntime rounds to nearest there);
  ``silu`` of it (gate's epilogue); the SiLU-gated MLP ``silu(g) * u`` (either operand order of
  each ``Mul``) ending in its int8 ``QuantizeLinear`` (f32 only, bit for bit), or going on through
  the down projection and a residual ``Add`` (a ``T`` output);
* a third of the graphs: the prefill heads' causal attention chain in W8A8
  (:mod:`m100.tools.fuzz_attention`: the q / k / v projections, ``q_j @ kT_j`` with ``kT`` / ``v``
  written by the program, mask, softmax, ``@ v_j``, the heads quantized, ``wo``).

f16 ``Sigmoid`` is not one value: onnxruntime computes it in f32 and rounds once, ONNX's reference
evaluator computes ``exp(x) / (1 + exp(x))`` in f16 for ``x < 0``, the compiled program what
torch-mlir's linalg says (``1 / (1 + exp(-x))``, each op rounded to f16; docs/isa.md ``sigmoid``):
up to an ulp apart, so an int8 quantize right after an f16 SiLU may differ by one from either
oracle (seed 2 #21). The f16 MLP therefore goes on through the down projection (tolerance).

Outputs are compared with onnxruntime (float outputs with the model type's tolerance, int8
exactly); where onnxruntime is off the ONNX definition, ONNX's reference evaluator decides
(:func:`m100.tools.fuzz_onnx.differential`).
"""

from __future__ import annotations

import numpy as np

from m100.tools.fuzz_graph import Choices, FuzzGraph, _Builder

#: sizes drawn for K and N (multiples of the 8-row granule and odd ones)
DIMS = (8, 16, 24, 32, 5, 13, 64)
#: rows drawn (1: one decode token)
ROWS = (1, 1, 2, 3, 8, 16)
#: the wide draw (a sixth of the chains that are not attention; one projection, with its int8
#: quantize or SiLU or not): ``K`` beyond 512 (LLaMA's projections stream K in chunks:
#: ``partition``'s K candidates, the K split over TPBs, the K-chunked first tile
#: ``kinds.tcu.FIRST_K_CHUNK``; an i32 accumulator past 2**24, whose f32 ``Cast`` rounds) on
#: rows that several TPB rows share, ``N`` of a few column tiles
WIDE_K = (640, 1024, 1536, 2048)
WIDE_ROWS = (16, 24, 40, 64)
WIDE_N = (64, 136, 256)
#: the ``narrow`` form's types (ONNX TensorProto codes) and the opset that has each:
#: INT4, UINT4 (opset 21), INT2, UINT2 (opset 25)
NARROW = ((22, 21), (21, 21), (26, 25), (25, 25))
#: the factor before the narrow Cast (1: mostly in range; 6, 40: most values wrap)
NARROW_SCALE = (1.0, 6.0, 40.0)


class _Quant(_Builder):
    def __init__(self, c: Choices, seed: int, dt: np.dtype):
        super().__init__(c, seed)
        self.dt = dt
        self.opset = 21  # QuantizeLinear with a float16 scale
        self.types: dict[str, int] = {}
        self.dq: dict[str, np.ndarray] = {}  # a projection's result -> its dequantization scale

    def value(self, arr: np.ndarray, runtime: bool | None = None, hint: str = "w") -> str:
        n = self.array(arr, runtime, hint)
        from onnx import helper
        self.types[n] = helper.np_dtype_to_tensor_dtype(arr.dtype)
        return n

    def op(self, op: str, ins: list[str], shape, elem: int, **attrs) -> str:
        out = self.node(op, ins, shape, **attrs)
        self.types[out] = elem
        return out


def _elem(dt: np.dtype) -> int:
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(dt)


def _quantize(b: _Quant, x: str, scale: float) -> str:
    from onnx import TensorProto
    sc = b.value(np.asarray(scale, b.dt), runtime=False, hint="scale")
    zp = b.value(np.asarray(0, np.int8), runtime=False, hint="zp")
    return b.op("QuantizeLinear", [x, sc, zp], b.shapes[x], TensorProto.INT8)


def _projection(b: _Quant, xq: str, n: int, sx: float) -> str:
    """``Cast(Cast(MatMulInteger(xq, W), f32) * dq, T)``, ``W`` int8 [K, N], ``dq`` [N] or []."""
    from onnx import TensorProto
    m, k = b.shapes[xq]
    w = b.value(b.rng.integers(-127, 128, (k, n)).astype(np.int8))
    per_channel = b.c.pick((True, True, False))
    sw = (np.abs(b.rng.standard_normal(n if per_channel else ())) * 0.5 + 0.5) / (73.6 * np.sqrt(k))
    dqv = np.asarray(sx * sw, np.float32)
    dq = b.value(dqv, hint="dq")
    acc = b.op("MatMulInteger", [xq, w], (m, n), TensorProto.INT32)
    f = b.op("Cast", [acc], (m, n), TensorProto.FLOAT, to=TensorProto.FLOAT)
    y = b.op("Mul", [f, dq] if b.c.pick((True, False)) else [dq, f], (m, n), TensorProto.FLOAT)
    if b.dt != np.float32:
        y = b.op("Cast", [y], (m, n), _elem(b.dt), to=_elem(b.dt))
    b.dq[y] = dqv
    return y


def _mul(b: _Quant, p: str, q: str) -> str:
    ins = [p, q] if b.c.pick((True, False)) else [q, p]
    return b.op("Mul", ins, b.shapes[p], _elem(b.dt))


def _silu(b: _Quant, g: str) -> str:
    s = b.op("Sigmoid", [g], b.shapes[g], _elem(b.dt))
    return _mul(b, g, s)


def _narrow(b: _Quant, y: str) -> str:
    """``Cast(Cast(y * c, narrow), int8)``: a narrow integer type of :data:`NARROW` (the graph's
    opset raised to the type's), ``c`` of :data:`NARROW_SCALE` in the model type. The projection's
    value is exact (an i32 sum, one f32 product, one rounding to ``T``), so the truncation and the
    wrap modulo ``2**bits`` are compared bit for bit."""
    from onnx import TensorProto
    to, opset = b.c.pick(NARROW)
    b.opset = max(b.opset, opset)
    c = b.value(np.asarray(b.c.pick(NARROW_SCALE), b.dt), runtime=False, hint="c")
    n = b.op("Cast", [_mul(b, y, c)], b.shapes[y], to, to=to)
    return b.op("Cast", [n], b.shapes[y], TensorProto.INT8, to=TensorProto.INT8)


def random_quant_graph(c: Choices, max_ops: int = 4) -> FuzzGraph:
    """A random W8A8 ONNX model (opset 21) and its inputs (see the module doc). ``max_ops`` is
    accepted for the fuzzer's interface; the chains have their own lengths."""
    dt = np.dtype(c.pick(("float16", "float32")))
    b = _Quant(c, seed=c.int(0, 2**16), dt=dt)
    if c.pick((False, False, True)):  # the prefill heads' causal attention chain
        return _attention(b)
    wide = c.pick((False,) * 5 + (True,))
    m, k = (c.pick(WIDE_ROWS), c.pick(WIDE_K)) if wide else (c.pick(ROWS), c.pick(DIMS))
    x = b.value((b.rng.standard_normal((m, k)) * 2).astype(dt), runtime=True, hint="x")
    sx = c.pick((1 / 32, 1 / 16, 0.037))
    xq = _quantize(b, x, sx)
    # (a wide one: one projection -- the MLP's three cost the default tests' time)
    form = c.pick(("proj", "proj_q", "silu") if wide else
                  ("proj", "proj_q", "silu", "mlp_q", "mlp_down", "narrow"))
    if form == "mlp_q" and dt == np.float16:
        form = "mlp_down"  # f16 Sigmoid is not one value: see the module doc
    n = c.pick(WIDE_N if wide else DIMS)
    if form == "proj":
        y = _projection(b, xq, n, sx)
    elif form == "proj_q":
        p = _projection(b, xq, n, sx)
        other = b.value((b.rng.standard_normal((m, n)) * 1.5).astype(dt), hint="s")
        y = _quantize(b, _mul(b, p, other), c.pick((1 / 64, 1 / 32, 0.021)))
    elif form == "silu":
        y = _silu(b, _projection(b, xq, n, sx))
    elif form == "narrow":
        y = _narrow(b, _projection(b, xq, n, sx))
    else:
        g, u = _projection(b, xq, n, sx), _projection(b, xq, n, sx)
        prod = _mul(b, _silu(b, g), u) if c.pick((True, False)) else _mul(b, u, _silu(b, g))
        sm = c.pick((1 / 64, 1 / 32, 0.021))
        y = _quantize(b, prod, sm)
        if form == "mlp_down":
            d = _projection(b, y, k, sm)
            y = b.op("Add", [x, d] if c.pick((True, False)) else [d, x], (m, k), _elem(dt))
    return b.finish("fuzz_quant", y, b.types[y], 10)


def random_quant_attention_graph(c: Choices, max_ops: int = 4) -> FuzzGraph:
    """The quant family's attention form alone (``--family quant-attention``): the model type
    (f16 or f32) and the W8A8 causal attention chain (:func:`_attention`). ``max_ops``: the
    fuzzer's interface (unused)."""
    dt = np.dtype(c.pick(("float16", "float32")))
    return _attention(_Quant(c, seed=c.int(0, 2**16), dt=dt))


def _attention(b: _Quant) -> FuzzGraph:
    """The W8A8 causal attention chain (:func:`m100.tools.fuzz_attention.quant_attention`): ``x``
    ``[M, K]`` of the model type, ``K`` the chain's width mostly; outputs its result and, when
    drawn, ``kT`` / ``v``."""
    from m100.tools.fuzz_attention import draw_shape, quant_attention

    c = b.c
    s = draw_shape(c)
    k = c.pick((s.width, s.width, 32, 128))
    x = b.value((b.rng.standard_normal((s.rows, k)) * 2).astype(b.dt), runtime=True, hint="x")
    y, extra = quant_attention(b, x, s, c.pick((1 / 32, 1 / 16, 0.037)))
    return b.finish("fuzz_quant_attention", y, b.types[y], 10,
                    extra=[(e, b.types[e]) for e in extra])
