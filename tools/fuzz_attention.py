"""The causal attention chain of the fuzzer's heads (float) and quant (W8A8) families.

The heads family's column parts (:func:`m100.tools.fuzz_graph.random_parts_graph`) never drew
what the prefill layer's heads are: ``q_j @ kT_j`` with ``kT`` and ``v`` WRITTEN BY THE PROGRAM
(run-time B operands whose producer -- a projection, a transpose -- is in the same program),
several heads sharing TPBs, the causal mask, the softmax, ``@ v_j`` and the output projection.
Session 25's silently wrong ``list_schedule.ACT_PREFETCH`` program (a head's ``v`` prefetched
over another head's ``kT``, W8A8, 4 heads of a 512-wide layer) was found by the CI's same-bits
check of the LLaMA layer, not by the fuzzer. :func:`attention_chain` draws that chain:

* sizes that make heads share TPBs: 4-8 heads, ``heads * head_dim`` 64-512 wide, 16-128 rows,
  and ``M = 1`` (one token); GQA sometimes (``kv_heads`` a divisor of ``heads``);
* ``q``, ``k``, ``v`` three projections of ``x`` or one fused projection cut into column parts
  (the weights initializers or graph inputs: run-time weights); ``v``'s projection sometimes
  written after ``q``'s and ``kT``'s layouts, just before the heads, as the LLaMA layer does (the
  heads' column views of ``v`` then come right after it: its stores built late,
  ``build_segments.LATE_READ_STORES``);
* ``kT`` as the program writes it: ``Transpose(k)`` cut into row parts; the LLaMA layer's
  ``Transpose(Reshape(k, [M, kvh, d]), perm=[1, 2, 0])`` with a head a ``Slice`` + ``Reshape``;
  each head's columns of ``k`` transposed; or no ``kT`` at all, ``Gemm(q_j, k_j, transB=1)``
  (the scale as ``alpha``);
* ``v``'s heads its column parts (``Slice`` or one ``Split``) or the LLaMA layer's
  ``[kvh, M, d]`` layout;
* the scale ``1/sqrt(d)`` on ``q`` (before its heads are cut), on the scores (``Mul`` / ``Div``),
  in ``Gemm``'s alpha, or none; the causal mask (an ``Add`` of a ``[M, M]`` constant, ``-1e9``
  above the diagonal, ``-1e4`` in f16) or none; ``Softmax`` on the last axis;
* the heads' results side by side (``Concat``) into the output projection ``@ Wo``, sometimes a
  residual ``Add`` of ``x``; ``kT`` and ``v`` sometimes outputs of the model too (the prefill
  layer's KV cache).

The W8A8 form (:func:`quant_attention`, the quant family): ``x`` quantized once, the projections
``MatMulInteger`` dequantized per channel into the model type (f16 or f32), the attention in the
model type, each head's result quantized to int8 for ``wo`` (the layer's ``o_quant = "heads"``)
or the concat quantized once, ``wo`` a ``MatMulInteger`` too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

#: heads' widths drawn (the chain is ``heads * head_dim`` wide: 64-512; 128: the 7B layer's)
HEAD_DIMS = (8, 16, 32, 64, 128)
#: rows drawn: one token (decode-like) and the prefill's 16-128
ROWS = (1, 16, 16, 32, 64, 128)
#: the forms of ``kT`` (see the module doc)
KT_FORMS = ("transpose", "llm", "per_head", "gemm")


@dataclass(frozen=True)
class AttnShape:
    rows: int
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


def draw_shape(c) -> AttnShape:
    """``M`` rows, 4-8 heads of a width in :data:`HEAD_DIMS` (64-512 wide in all), KV heads all of
    them mostly, else a divisor (GQA; 1: multi-query)."""
    m = c.pick(ROWS)
    h = c.int(4, 8)
    d = c.pick([d for d in HEAD_DIMS if 64 <= h * d <= 512])
    kvh = c.pick((h, h, h, h // 2 if h % 2 == 0 else h, 1))
    return AttnShape(m, h, kvh, d)


def causal_mask(m: int, dt) -> np.ndarray:
    """``[m, m]``: 0 on and below the diagonal, a large negative number above it (-1e9; -1e4 in
    f16, as ``frontend.llm`` writes it)."""
    big = -1e4 if np.dtype(dt) == np.float16 else -1e9
    return np.triu(np.full((m, m), big, dt), k=1)


def attention_chain(b, x: str, s: AttnShape, proj: Callable[[str, int], str], node: Callable,
                    dt, head_out: Callable[[str], str] = lambda o: o,
                    out_proj: Callable[[str, int], str] | None = None) -> tuple[str, list[str]]:
    """The chain on ``x`` ``[M, K]`` (see the module doc): (its result, the model's extra outputs
    -- ``kT`` / ``v`` when drawn). ``proj(value, n)``: the projection of ``value`` to ``n``
    columns (float: a ``MatMul``; W8A8: quantize, ``MatMulInteger``, dequantize); ``node(op,
    ins, shape, **attrs)``: a new node of the model type; ``head_out(o_j)``: what a head's result
    becomes before the concat (W8A8: its int8 quantize); ``out_proj(o, n)``: the output
    projection of the concat (default ``proj``)."""
    c = b.c
    m, h, kvh, d = s.rows, s.heads, s.kv_heads, s.head_dim
    g = h // kvh
    kt_form = c.pick(KT_FORMS)
    scale_at = c.pick(("q", "scores", "div", "none") + (("alpha",) if kt_form == "gemm" else ()))
    sc = 1.0 / math.sqrt(d)
    order = c.pick(("fused", "together", "v_last", "v_last"))
    if order == "fused":  # one fused projection, its q / k / v column parts
        qkv = proj(x, s.width + 2 * s.kv_width)
        q, k, v = (_cols(b, node, qkv, c0, c1) for c0, c1 in (
            (0, s.width), (s.width, s.width + s.kv_width),
            (s.width + s.kv_width, s.width + 2 * s.kv_width)))
    elif order == "together":
        q, k, v = proj(x, s.width), proj(x, s.kv_width), proj(x, s.kv_width)
    else:  # the LLaMA layer's order: q, k and their layouts first, v's projection just
        # before the heads (the scheduler places segments in graph order: the heads' column
        # views of v right after it, so its stores may be built late -- LATE_READ_STORES)
        q, k, v = proj(x, s.width), proj(x, s.kv_width), None
    if scale_at == "q":
        q = node("Mul", [q, b.array(np.asarray(sc, dt), runtime=False, hint="scale")], (m, s.width))
    extra: list[str] = []
    # kT as the program writes it, and each KV head's B operand of q_j @ kT_j
    if kt_form == "transpose":
        kt = node("Transpose", [k], (s.kv_width, m), perm=[1, 0])
        kth = [_slice(b, node, kt, j * d, (j + 1) * d, 0, (d, m)) for j in range(kvh)]
    elif kt_form == "llm":
        k3 = node("Reshape", [k, b.const_i64([m, kvh, d])], (m, kvh, d))
        kt = node("Transpose", [k3], (kvh, d, m), perm=[1, 2, 0])
        kth = [node("Reshape", [_slice(b, node, kt, j, j + 1, 0, (1, d, m)), b.const_i64([d, m])],
                    (d, m)) for j in range(kvh)]
    else:  # each head's columns of k (transposed by the head itself, or Gemm's transB)
        kt = None
        kth = [_slice(b, node, k, j * d, (j + 1) * d, c.pick((1, -1)), (m, d)) for j in range(kvh)]
        if kt_form == "per_head":
            kth = [node("Transpose", [t], (d, m), perm=[1, 0]) for t in kth]
    if kt is not None and c.pick((False, True)):
        extra.append(kt)
    qh = _parts(b, node, q, h, d, m)
    if v is None:
        v = proj(x, s.kv_width)
    # v's heads: column parts, or the LLaMA layer's [kvh, M, d] layout
    if c.pick((False, True)):
        v3 = node("Transpose", [node("Reshape", [v, b.const_i64([m, kvh, d])], (m, kvh, d))],
                  (kvh, m, d), perm=[1, 0, 2])
        vh = [node("Reshape", [_slice(b, node, v3, j, j + 1, 0, (1, m, d)), b.const_i64([m, d])],
                   (m, d)) for j in range(kvh)]
    else:
        vh = _parts(b, node, v, kvh, d, m)
    if c.pick((False, False, True)):
        extra.append(v)
    mask = None
    if c.pick((True, True, False)):
        mask = b.array(causal_mask(m, dt), runtime=False, hint="mask")
    scale = None
    if scale_at in ("scores", "div"):
        scale = b.array(np.asarray(sc if scale_at == "scores" else math.sqrt(d), dt),
                        runtime=False, hint="scale")
    outs = []
    for j in range(h):
        if kt_form == "gemm":
            sj = node("Gemm", [qh[j], kth[j // g]], (m, m), transB=1,
                      **({"alpha": sc} if scale_at == "alpha" else {}))
        else:
            sj = node("MatMul", [qh[j], kth[j // g]], (m, m))
        if scale is not None:
            sj = node("Mul" if scale_at == "scores" else "Div", [sj, scale], (m, m))
        if mask is not None:
            sj = node("Add", [sj, mask] if c.pick((True, False)) else [mask, sj], (m, m))
        p = node("Softmax", [sj], (m, m), axis=c.pick((-1, 1)))
        outs.append(head_out(node("MatMul", [p, vh[j // g]], (m, d))))
    o = b.node("Concat", outs, (m, s.width), axis=c.pick((-1, 1)))
    return o, extra


def _cols(b, node, t: str, c0: int, c1: int) -> str:
    m = b.shapes[t][0]
    return _slice(b, node, t, c0, c1, b.c.pick((1, -1)), (m, c1 - c0))


def _slice(b, node, t: str, i0: int, i1: int, axis: int, shape) -> str:
    return node("Slice", [t, b.const_i64([i0]), b.const_i64([i1]), b.const_i64([axis])], shape)


def _parts(b, node, t: str, n: int, d: int, m: int) -> list[str]:
    """``t`` ``[m, n * d]`` cut into its ``n`` column parts: ``Slice`` each, or one ``Split``."""
    if b.c.pick((False, True)) and b.opset >= 13:
        from onnx import helper

        outs = [b.name("t") for _ in range(n)]
        b.nodes.append(helper.make_node("Split", [t, b.const_i64([d] * n)], outs,
                                        axis=b.c.pick((1, -1))))
        b.ops.append("Split")
        for o in outs:
            b.shapes[o] = (m, d)
            if hasattr(b, "types"):
                b.types[o] = b.types[t]
        return outs
    return [_cols(b, node, t, j * d, (j + 1) * d) for j in range(n)]


def float_attention(b, x: str, s: AttnShape) -> tuple[str, list[str]]:
    """The float chain (the heads family) of shape ``s`` on ``x`` ``[M, K]`` (``b`` a
    ``fuzz_graph._Builder``): projections and ``wo`` ``MatMul``s with initializers or graph
    inputs, scaled by ``1/sqrt(K)``; a residual ``Add`` of ``x`` sometimes when ``wo`` gives
    ``K`` columns."""
    c = b.c
    m, k = b.shapes[x]

    def proj(v: str, n: int) -> str:
        kk = b.shapes[v][1]
        w = b.operand((kk, n), scale=1 / math.sqrt(kk), runtime=c.pick((False, True)))
        return b.node("MatMul", [v, w], (b.shapes[v][0], n))

    y, extra = attention_chain(b, x, s, proj, b.node, np.float32)
    out = proj(y, c.pick((k, k, 16)))
    if b.shapes[out] == (m, k) and c.pick((False, True)):
        out = b.node("Add", [x, out] if c.pick((False, True)) else [out, x], (m, k))
    return out, extra


def quant_attention(b, x: str, s: AttnShape, sx: float) -> tuple[str, list[str]]:
    """The W8A8 chain of shape ``s`` (the quant family; ``b`` a ``fuzz_quant._Quant`` of model
    type ``b.dt``) on ``x`` ``[M, K]``: ``x`` quantized once by ``sx``, the q / k / v projections (one fused
    sometimes) ``MatMulInteger`` dequantized into the model type, the attention in the model
    type, each head's result quantized to int8 (or the concat once), ``wo`` ``MatMulInteger``
    dequantized, sometimes a residual ``Add`` of ``x``."""
    from m100.tools.fuzz_quant import _elem, _projection, _quantize

    c = b.c
    m, k = b.shapes[x]
    elem = _elem(b.dt)
    xq = _quantize(b, x, sx)
    so = c.pick((1 / 32, 1 / 16, 0.037))  # the scale of the heads' int8 results

    def node(op, ins, shape, **attrs):
        return b.op(op, ins, shape, elem, **attrs)

    def proj(v: str, n: int) -> str:
        assert v == xq
        return _projection(b, xq, n, sx)

    per_head = c.pick((True, False))
    y, extra = attention_chain(b, xq, s, proj, node, b.dt,
                               head_out=(lambda o: _quantize(b, o, so)) if per_head else
                               (lambda o: o))
    if per_head:  # the concat of the int8 heads (the layer's o_quant = "heads")
        from onnx import TensorProto
        b.types[y] = TensorProto.INT8
    else:
        b.types[y] = elem
        y = _quantize(b, y, so)
    out = _projection(b, y, c.pick((k, k, 16)), so)
    # the heads' int8 quantize comes after float arithmetic (scores, softmax, @ v) whose order
    # is not the oracle's: an element may round one step apart, which moves wo's output by
    # |W[i, n]| * dq[n] <= 127 * dq[n]; two such steps in a row are tolerated
    b.slack = 2 * 127 * float(np.max(b.dq[out]))
    if b.shapes[out] == (m, k) and c.pick((False, True)):
        out = node("Add", [x, out] if c.pick((False, True)) else [out, x], (m, k))
    return out, extra


def random_attention_graph(c, max_ops: int = 2):
    """A random float model around the chain (the heads family's attention form): ``x`` ``[M, K]``
    a graph input (``K`` the chain's width mostly), up to ``max_ops`` ops that keep its shape
    (a norm, an activation; ``fuzz_graph._prelude``), the chain and its output projection; the
    model's outputs its result and, when drawn, ``kT`` / ``v``."""
    from onnx import TensorProto

    from m100.tools.fuzz_graph import _Builder, _prelude

    b = _Builder(c, seed=c.int(0, 2**16))
    b.opset = c.pick((17, 20))
    s = draw_shape(c)
    x = b.operand((s.rows, c.pick((s.width, s.width, 32, 128))), runtime=True)
    x = _prelude(b, x, max_ops)[-1]
    y, extra = float_attention(b, x, s)
    return b.finish("fuzz_attention", y, TensorProto.FLOAT, 8 if b.opset <= 17 else 9,
                    extra=[(e, TensorProto.FLOAT) for e in extra])
