"""LLaMA-architecture decoders as ONNX, by configuration: the parts an LLM runs, one layer at a time.

:func:`build` returns a ``ModelProto`` for one part of a LLaMA model (:class:`LlamaConfig`):

* ``layer`` (``phase='decode'``): one decoder layer for one new token per sequence with a KV cache.
  Inputs ``x`` [B,H] (the hidden rows, 2-D so that every projection is one GEMM), ``cos``/``sin`` [B,1,1,hd] (RoPE of each sequence's position),
  ``past_kT`` [B,kvh,hd,L] (the K cache, stored transposed: the score GEMV reads it as is),
  ``past_v`` [B,kvh,L,hd] as one input per sequence b and KV head j, ``past_kT.b.j`` [hd,L] and
  ``past_v.b.j`` [L,hd] (``past_kT.j`` / ``past_v.j`` at batch 1), so that every head is a plain
  GEMV the scheduler can place on its own TPBs; outputs ``y`` [B,H], ``k_new`` [B,kvh,1,hd] and ``v_new``
  [B,kvh,1,hd] -- the row the runtime appends to the cache (at row L). Attention is computed as
  ``softmax([q K_past^T, q k_new^T]) [V_past; v_new]`` split into the cached part and the new row,
  so the cache is read once and never copied.
* ``layer`` (``phase='prefill'``): the layer over T = ``context`` tokens with a causal mask; outputs
  ``y`` [B*T,H] and the cache it writes: ``kT`` [B,kvh,hd,T], ``v`` [B,kvh,T,hd].
* ``head``: final RMSNorm + LM head, ``x`` [B*T,H] -> ``logits`` [B,vocab] of each sequence's last
  token (prefill; ``logits='all'``: [B*T,vocab], every row).

The layer is RMSNorm -> Q/K/V projections -> RoPE (rotate-half) -> attention (MHA, or GQA when
``kv_heads < heads``: the ``heads / kv_heads`` query heads of one KV head are the rows of one
batched GEMM) -> output projection + residual -> RMSNorm -> SiLU-gated MLP + residual, the ops and
order of ``transformers``' ``LlamaDecoderLayer`` (the models in ``test/data/llama_*_small.onnx``).

``fuse=True`` stores Q/K/V as one weight ``wqkv`` [H, (heads + 2 kv_heads) hd] and gate/up as
``wgu`` [H, 2 ffn] (as LLM runtimes do): one GEMM each and column slices of the result;
``fuse=("qkv",)`` / ``("gu",)`` fuses only that group.

``dtype='f16'`` makes every tensor (weights, activations, KV cache) f16.

``weights='random'`` materializes seeded weights (the tests compare with onnxruntime);
``weights='shape'`` declares every weight by shape and dtype only, as external data that is never
written, so the model compiles by shape (:mod:`m100.frontend.shape_only`): a 7B layer is a few KB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from m100.frontend.llm_graph import (  # noqa: F401  (re-exported: the builder's public names)
    SHAPE_ONLY_LOCATION, W8_ACT_SCALE, LlmBuildError, LlmGraph)


@dataclass(frozen=True)
class LlamaConfig:
    name: str
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    layers: int
    eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def layer_weights(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape of one layer's weights (projections stored [in, out]: ``x @ W``)."""
        h, hd, f = self.hidden, self.head_dim, self.ffn
        return {"attn_norm": (h,), "wq": (h, self.heads * hd), "wk": (h, self.kv_heads * hd),
                "wv": (h, self.kv_heads * hd), "wo": (self.heads * hd, h), "mlp_norm": (h,),
                "wg": (h, f), "wu": (h, f), "wd": (f, h)}

    def layer_params(self) -> int:
        return sum(math.prod(s) for s in self.layer_weights().values())

    def params(self) -> int:
        """All parameters: layers, embedding, final norm, LM head (untied)."""
        return self.layers * self.layer_params() + 2 * self.vocab * self.hidden + self.hidden


PRESETS = {
    "llama2-7b": LlamaConfig("llama2-7b", 4096, 32, 32, 11008, 32000, 32),
    "llama3-8b": LlamaConfig("llama3-8b", 4096, 32, 8, 14336, 128256, 32, rope_theta=500000.0),
    # the layer architecture of test/data/llama_*_small.onnx (transformers LlamaConfig), 2 layers
    "tiny": LlamaConfig("tiny", 32, 2, 1, 96, 128, 2),
}


def config(name: str) -> LlamaConfig:
    if name not in PRESETS:
        raise LlmBuildError(f"unknown model '{name}' (models: {', '.join(PRESETS)})")
    return PRESETS[name]


#: prefill RoPE: ``"halves"`` on the halves of every head's rows (rotate-half's sign a subtraction,
#: the halves read in place through the CVU op's maps: fold-slice-reads; session 13),
#: ``"rows"`` on the [T*n, hd] rows of all heads at once (rotate-half as a matmul, reshapes and
#: head slices as views), ``"heads"`` the older [n, T, hd] form with slice / neg / concat copies
#: (both kept for A/B measurements); ``"rot"`` one op per tensor over whole heads,
#: ``x * C + rot(x) * S'`` with the sign of rotate-half in the table and ``rot(x)`` read from the
#: HBSM box of ``x`` itself (``x`` loaded once instead of twice; the same bits as ``"halves"``;
#: session 18, docs/llm.md section 5)
PREFILL_ROPE = "rot"

#: W8A8 prefill: where the attention output ``o`` is quantized for ``wo``: ``"heads"`` each
#: head's [T, hd] result (the last op of its pipeline; the int8 columns written in place;
#: session 15), ``"concat"`` the whole [T, nh*hd] after the last head (one separate CVU pass).
#: The same bits: the quantize is per tensor and elementwise. Session 15 measured ``"heads"``
#: -4.6 % predicted / -1.0 % simulated on the 8-head variant but +0.1 % / +0.7 % on the
#: LLaMA2-7B layer. Session 18 (the heads' causal band order and work cuts take the quantize
#: stage too; it crashed at 7B before): LLaMA3-8B layer -3.8 % predicted / -4.1 % simulated,
#: LLaMA2-7B layer -0.3 % / +0.1 %, whole 7B step 78.707 ms against 78.607 simulated
#: (docs/llm.md section 5): still ``"concat"``, a lead decision. Session 19 (after the RoPE
#: change of session 18): ``"heads"`` -4.0 % predicted / -3.7 % simulated on the LLaMA2-7B layer,
#: -3.5 % / -4.0 % on LLaMA3-8B; ``bench/llm.py`` now compiles both forms (``build``'s
#: ``o_quant``) and runs the shorter plan, so this default only serves other callers
PREFILL_O_QUANT = "concat"

#: prefill with ``PREFILL_ROPE = "rot"`` at batch 1: the projections in the order ``wk``, k's
#: RoPE, ``wq``, q's RoPE, ``wv`` (``"rope"``) instead of ``wq, wk, wv`` and the RoPEs after them
#: (``"proj"``). The same ops (the same values): a projection's result then stays in its TPBs'
#: HBSM only until its RoPE, not over the other projections (``keep.row_root``: RoPE copies the
#: rows from there instead of the projection storing ``x`` and RoPE loading it; issue 13,
#: session 19)
PREFILL_PROJ_ORDER = "rope"

#: prefill RoPE of q (``PREFILL_ROPE = "halves"``) in this many groups of heads (each of whole
#: KV-head groups; 1: one RoPE over all heads), each group its own RoPE ops and its own
#: head-major layout, so a group's heads wait only for that group's RoPE and can start while
#: the next group is roped (issue 13, session 17). Default 1 (off): measured simulated, 2 groups
#: give the LLaMA2-7B W8A8 layer at 1024 tokens 3 838 645 cycles (-0.3 %) but LLaMA3-8B
#: +2.1 % and the 8-head variant +2.6 %; with k in groups too (:data:`PREFILL_K_GROUPS`) 7B
#: +0.9 %, LLaMA3-8B +4.7 % (docs/llm.md section 5): the heads' loads wait for the DMA engines
#: the RoPE holds
PREFILL_Q_GROUPS = 1
#: k's RoPE in the same groups (its KV heads), each group's ``[kg, 2, hd/2, T]`` a part of the
#: ``kT`` output written in place (``writer_maps``: a transpose written by its producers into a
#: part of a concat), each head reading its group's part; False: one RoPE over all KV heads
PREFILL_K_GROUPS = True


def _q_group(nh: int, kvh: int) -> int:
    """Heads per RoPE group of q (:data:`PREFILL_Q_GROUPS` groups where the heads allow): a
    divisor of ``nh`` made of whole KV-head groups."""
    gq = nh // kvh
    ng = max(gq, -(-nh // max(1, PREFILL_Q_GROUPS)))
    ng = -(-ng // gq) * gq
    while nh % ng:
        ng += gq
    return ng


def rope_tables(cfg: LlamaConfig, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [len(positions), hd] of rotate-half RoPE (``transformers`` convention)."""
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.outer(np.asarray(positions, np.float64), inv)
    emb = np.concatenate([ang, ang], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _decode_layer(g: LlmGraph, cfg: LlamaConfig, context: int, batch: int) -> None:
    B, H, hd, nh, kvh, gq, L = (batch, cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads,
                                cfg.group, context)
    rows = B
    x = g.inp("x", [B, H])  # 2-D rows: every projection is a plain GEMM against the weight
    cos, sin = g.inp("cos", [B, 1, 1, hd]), g.inp("sin", [B, 1, 1, hd])
    xn = g.rmsnorm(x, g.weight("attn_norm", (H,), "norm"), cfg.eps)
    q, k, v = g.projections(xn, rows, [("wq", nh * hd), ("wk", kvh * hd), ("wv", kvh * hd)], H)
    # one token: [B,1,heads*hd] is [B,heads,1,hd] in memory (no transpose)
    q4 = g.rope(g.op("Reshape", [q, g.ints([B, nh, 1, hd])]), cos, sin, hd)
    k_new = g.rope(g.op("Reshape", [k, g.ints([B, kvh, 1, hd])]), cos, sin, hd, "k_new")
    g.op("Reshape", [v, g.ints([B, kvh, 1, hd])], "v_new")
    # the score of the new row, q . k_new per query head (GQA: a KV head's queries share it):
    # an elementwise product and a sum over hd (a batched [gq, hd] x [hd, 1] MatMul became per
    # (sequence, KV head) a slice, a GEMV and a reshape)
    qg = g.op("Reshape", [q4, g.ints([B, kvh, gq, hd])])
    s_new = g.op("ReduceSum", [g.op("Mul", [qg, g.op("Reshape", [k_new, g.ints([B, kvh, 1, hd])])]),
                               g.ints([-1])], keepdims=1)
    scale = g.const(g.f(1.0 / math.sqrt(hd)))
    # one 2-D GEMV per (sequence, KV head) against its own cache input: the heads spread over
    # TPBs, and no cache is sliced out of a [B, kvh, ...] tensor (a batched MatMul over the
    # cache became per batch a DMA copy of that head's cache, a GEMV and a reshape: 2105 ops
    # and 2.1 GB of cache copies per LLaMA2-7B step at batch 4, 8249 ops at batch 16)
    o = _decode_attention_per_head(g, cfg, L, q4, s_new, scale, B)
    attn = g.proj(g.op("Reshape", [o, g.ints([B, nh * hd])]), "wo", (nh * hd, H))
    h = g.op("Add", [x, attn])
    g.mlp(h, cfg, "y", rows)
    g.out("y", [B, H])
    g.out("k_new", [B, kvh, 1, hd])
    g.out("v_new", [B, kvh, 1, hd])


def _decode_attention_per_head(g: LlmGraph, cfg: LlamaConfig, L: int, q4: str, s_new: str,
                               scale: str, B: int = 1) -> str:
    """Decode attention with the cache of sequence b's KV head j as its own inputs
    ``past_kT.b.j`` [hd, L] and ``past_v.b.j`` [L, hd] (``past_kT.j`` / ``past_v.j`` at batch 1):
    two plain GEMVs per (sequence, KV head) (its query heads are the rows), one softmax over
    [B * heads, L+1]. Returns o [B, heads, 1, hd]-shaped as [B * heads, hd]."""
    hd, nh, kvh, gq = cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.group
    qr = g.op("Reshape", [q4, g.ints([B * nh, hd])])

    def rows(t: str, r0: int, r1: int) -> str:
        return g.op("Slice", [t, g.ints([r0]), g.ints([r1]), g.ints([0]), g.ints([1])])

    def cat0(parts: list[str]) -> str:
        return g.op("Concat", parts, axis=0) if len(parts) > 1 else parts[0]

    heads = [(b, j) for b in range(B) for j in range(kvh)]
    sfx = {(b, j): (f"{j}" if B == 1 else f"{b}.{j}") for b, j in heads}
    kts = {h: g.inp(f"past_kT.{sfx[h]}", [hd, L]) for h in heads}
    vs = {h: g.inp(f"past_v.{sfx[h]}", [L, hd]) for h in heads}

    def r0(b: int, j: int) -> int:
        return b * nh + j * gq
    s_past = cat0([g.op("MatMul", [rows(qr, r0(b, j), r0(b, j) + gq), kts[(b, j)]])
                   for b, j in heads])
    s = g.op("Mul", [g.op("Concat", [s_past, g.op("Reshape", [s_new, g.ints([B * nh, 1])])],
                          axis=1), scale])
    p = g.op("Softmax", [s], axis=-1)  # [B * heads, L+1]
    p_past = g.op("Slice", [p, g.ints([0]), g.ints([L]), g.ints([1]), g.ints([1])])
    p_new = g.op("Slice", [p, g.ints([L]), g.ints([L + 1]), g.ints([1]), g.ints([1])])
    o_past = cat0([g.op("MatMul", [rows(p_past, r0(b, j), r0(b, j) + gq), vs[(b, j)]])
                   for b, j in heads])
    o_new = g.op("Mul", [g.op("Reshape", [p_new, g.ints([B * kvh, gq, 1])]),
                         g.op("Reshape", ["v_new", g.ints([B * kvh, 1, hd])])])
    return g.op("Add", [o_past, g.op("Reshape", [o_new, g.ints([B * nh, hd])])])


def _prefill_layer(g: LlmGraph, cfg: LlamaConfig, tokens: int, batch: int) -> None:
    """Attention of one sequence as a chain of 2-D ops per query head: ``q_h [T, hd] @ kT_j
    [hd, T]`` (``j`` its KV head: GQA shares it; ``q_h`` scaled by 1/sqrt(hd) through its RoPE
    tables), causal mask, softmax over rows, ``@ v_j [T, hd]``; the heads' results side by side
    [T, nh*hd]; sequences one after the other.
    Each head's chain is one pipeline the scheduler can keep on chip: its [T, T] scores never
    go to memory. (The batched form ``[kvh, g*T, hd] x [kvh, hd, T]`` was unrolled per head
    anyway, and its [heads, T, T] scores -- 64 MB at T = 1024 -- went through DDR at every op
    boundary: concat, scale, mask, softmax, per-head slices: 5x slower at T = 1024.)"""
    B, H, hd, nh, kvh, gq, T = (batch, cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads,
                                cfg.group, tokens)
    rows = B * T
    x = g.inp("x", [B * T, H])  # 2-D rows: every projection is a plain GEMM
    cos, sin = g.inp("cos", [T, hd]), g.inp("sin", [T, hd])
    xn = g.rmsnorm(x, g.weight("attn_norm", (H,), "norm"), cfg.eps)
    lazy = PREFILL_ROPE == "rot" and B == 1 and PREFILL_PROJ_ORDER == "rope" and not (
        g.fuse if isinstance(g.fuse, bool) else "qkv" in g.fuse)
    held: dict[str, list] = {}  # the nodes of a projection moved to where it is first read
    if lazy:  # made in the usual order (the weights drawn as always), then wq's and wv's
        # nodes (their quantize of xn included) held back until RoPE / the heads read them
        made = {}
        for n, c in (("wq", nh * hd), ("wk", kvh * hd), ("wv", kvh * hd)):
            n0 = len(g.nodes)
            made[n] = g.proj(xn, n, (H, c))
            if n != "wk":
                held[n] = g.nodes[n0:]
        q, k, v = made["wq"], made["wk"], made["wv"]
        for nodes in held.values():
            for nd in nodes:
                g.nodes.remove(nd)
    else:
        q, k, v = g.projections(xn, rows, [("wq", nh * hd), ("wk", kvh * hd), ("wv", kvh * hd)],
                                H)

    def release(name: str) -> None:  # a held projection's nodes, here
        g.nodes.extend(held.pop(name, []))
    mask = np.triu(np.full((T, T), -1e4 if g.np_dt == np.float16 else -1e9, g.np_dt), k=1)
    mask = g.const(mask, "causal_mask")  # [T, T]
    scale = g.const(g.f(1.0 / math.sqrt(hd)))

    # the query carries the attention scale 1/sqrt(hd) (s RoPE(x)): each head's chain is then
    # matmul, mask, softmax, matmul -- one pipeline of the scheduler's at most 4 stages, its
    # [T, T] scores never in memory

    def seq(t: str, b: int, n: int) -> str:  # sequence b of a [B*T, n*hd] -> [n, T, hd]
        if B > 1:
            t = g.op("Slice", [t, g.ints([b * T]), g.ints([(b + 1) * T]), g.ints([0]),
                               g.ints([1])])
        return g.op("Transpose", [g.op("Reshape", [t, g.ints([T, n, hd])])], perm=[1, 0, 2])

    def head(t: str, i: int, r: int, c: int) -> str:  # [n, r, c] -> its i-th [r, c]
        sl = g.op("Slice", [t, g.ints([i]), g.ints([i + 1]), g.ints([0]), g.ints([1])])
        return g.op("Reshape", [sl, g.ints([r, c])])

    # W8A8: each head's output is quantized for ``wo`` on its own (QuantizeLinear is per tensor
    # and elementwise, so the concat of the heads' quantizes is the quantize of their concat,
    # bit for bit): the quantize is the fourth op of the head's pipeline, its [T, hd] f16 result
    # never goes to memory, and the int8 columns of ``o`` are written in place -- instead of a
    # separate pass over the whole f16 ``o`` [T, nh*hd] after the last head (8 MB read, 4 MB
    # written at LLaMA2-7B, on the critical path between the heads and ``wo``)
    q_heads = g.quant == "w8a8" and g.o_quant == "heads"

    def attention(qb, kh: list[str], vh: list[str]) -> str:  # one sequence -> [T, nh*hd]
        oh = []
        qg = qb if isinstance(qb, list) else [qb]  # q in groups of heads: [ng, T, hd] each
        ng = nh // len(qg)
        for h in range(nh):  # each head's chain: matmul, mask, softmax, matmul (, quantize)
            s = g.op("MatMul", [head(qg[h // ng], h % ng, T, hd), kh[h // gq]])
            p = g.op("Softmax", [g.op("Add", [s, mask])], axis=-1)
            o_h = g.op("MatMul", [p, vh[h // gq]])  # [T, hd]
            oh.append(g.w8_quantize(o_h) if q_heads else o_h)
        return g.op("Concat", oh, axis=1)

    def out_proj_mlp(outs: list[str]) -> None:  # the sequences' heads -> wo, residual, MLP
        o = g.op("Concat", outs, axis=0) if B > 1 else outs[0]
        wo = g.w8_matmul(o, "wo", (nh * hd, H), None, quantized=True) if q_heads else \
            g.proj(o, "wo", (nh * hd, H))
        g.mlp(g.op("Add", [x, wo]), cfg, "y", rows)

    outs, kts, vs = [], [], []
    if PREFILL_ROPE in ("halves", "rows", "rot"):
        def rows_b(t: str, b: int) -> str:
            if B == 1:
                return t
            return g.op("Slice", [t, g.ints([b * T]), g.ints([(b + 1) * T]), g.ints([0]),
                                  g.ints([1])])

        if PREFILL_ROPE == "rot":
            # RoPE as ONE op per tensor over whole heads: ``y = x * C + rot(x) * S'`` with
            # ``rot(x) = [x_hi, x_lo]`` (a concat of the halves: the scheduler reads it from the
            # HBSM box of ``x`` itself: ``from_ir/rotated.py``) and the signed table ``S' =
            # [-S_lo, S_hi]`` (rotate-half's sign in the table: ``x_lo * C_lo + x_hi * (-S_lo)``
            # is the f32 value of ``x_lo * C_lo - x_hi * S_lo``, the halves' form, bit for bit).
            # The result [T, n, hd] is written straight into the heads' layouts (transposes
            # written by their producer: q [n, T, hd], k the kT output [kvh, hd, T])
            half = hd // 2
            sgn = np.concatenate([-np.ones(half), np.ones(half)]).astype(g.np_dt)
            tabs = {}

            def table(t: str, scaled: bool, signed: bool) -> str:  # [T, hd] -> [T, 1, hd]
                if (t, scaled, signed) not in tabs:
                    if signed:  # the scale (an f16 number) times +-1: exact
                        f = g.const((sgn * g.f(1.0 / math.sqrt(hd)) if scaled else sgn)
                                    .astype(g.np_dt))
                    else:
                        f = scale if scaled else None
                    src = g.op("Mul", [t, f]) if f is not None else t
                    tabs[(t, scaled, signed)] = g.op("Reshape", [src, g.ints([T, 1, hd])])
                return tabs[(t, scaled, signed)]

            def rope_rot(t: str, n: int, scaled: bool) -> str:  # [T, n*hd] -> [T, n, hd] roped
                x3 = g.op("Reshape", [t, g.ints([T, n, hd])])
                ax = g.ints([2])
                lo = g.op("Slice", [x3, g.ints([0]), g.ints([half]), ax, g.ints([1])])
                hi = g.op("Slice", [x3, g.ints([half]), g.ints([hd]), ax, g.ints([1])])
                rot = g.op("Concat", [hi, lo], axis=2)
                return g.op("Add", [g.op("Mul", [x3, table(cos, scaled, False)]),
                                    g.op("Mul", [rot, table(sin, scaled, True)])])

            def rope_qk(b: int) -> tuple[str, str]:  # q [nh, T, hd] (/ sqrt(hd)), kT
                kr = rope_rot(rows_b(k, b), kvh, False)  # k first (no scaled tables)
                kt = g.op("Transpose", [g.op("Reshape", [kr, g.ints([1, T, kvh, hd])])],
                          perm=[0, 2, 3, 1], out="kT" if B == 1 else None)
                release("wq")
                qb = g.op("Transpose", [rope_rot(rows_b(q, b), nh, True)], perm=[1, 0, 2])
                return qb, kt
        elif PREFILL_ROPE == "halves":
            # RoPE on the halves of every head's rows, no rotate matmul: rotate-half is
            # ``[-x_hi, x_lo]``, so ``y_lo = x_lo * C_lo - x_hi * S_lo`` and ``y_hi = x_hi * C_hi +
            # x_lo * S_hi`` (the sign of rotate-half is the subtraction: the same f32 value as
            # ``x * C + rot * S`` with ``rot = x @ R`` exact, then one rounding). The halves are
            # slices of ``x`` [T, n, hd] (a view of the projection) and of the tables [T, 1, hd]
            # (read broadcast over the heads) that fold-slice-reads turns into offsets of the CVU
            # op's reads (no copies); each half is one fused CVU op written in place into its half
            # of ``Y`` [2, T, n, hd/2] (halves outermost: a concat of contiguous parts); the heads'
            # layouts are the transposes of ``Y`` (q: [n, T, hd]; k: the kT output [kvh, hd, T])
            half = hd // 2
            tabs = {}

            def halves(t: str, axis: int) -> tuple[str, str]:
                ax = g.ints([axis])
                return (g.op("Slice", [t, g.ints([0]), g.ints([half]), ax, g.ints([1])]),
                        g.op("Slice", [t, g.ints([half]), g.ints([hd]), ax, g.ints([1])]))

            def table(t: str, scaled: bool) -> tuple[str, str]:  # the halves of [T, 1, hd] (* s)
                if (t, scaled) not in tabs:
                    src = g.op("Mul", [t, scale]) if scaled else t
                    tabs[(t, scaled)] = halves(g.op("Reshape", [src, g.ints([T, 1, hd])]), 2)
                return tabs[(t, scaled)]

            def rope_halves(t: str, n: int, scaled: bool, heads: tuple[int, int] | None = None
                            ) -> str:  # [T, n*hd] -> [2, T, n, hd/2] (heads [h0, h1) of n)
                x3 = g.op("Reshape", [t, g.ints([T, n, hd])])
                if heads is None:
                    lo, hi = halves(x3, 2)
                else:  # one slice per half of the group's heads (fold-slice-reads: offsets)
                    h0, h1 = heads
                    n = h1 - h0
                    ax = g.ints([1, 2])
                    lo = g.op("Slice", [x3, g.ints([h0, 0]), g.ints([h1, half]), ax, g.ints([1, 1])])
                    hi = g.op("Slice", [x3, g.ints([h0, half]), g.ints([h1, hd]), ax, g.ints([1, 1])])
                c_lo, c_hi = table(cos, scaled)
                s_lo, s_hi = table(sin, scaled)
                y_lo = g.op("Sub", [g.op("Mul", [lo, c_lo]), g.op("Mul", [hi, s_lo])])
                y_hi = g.op("Add", [g.op("Mul", [hi, c_hi]), g.op("Mul", [lo, s_hi])])
                parts = [g.op("Reshape", [y, g.ints([1, T, n, half])]) for y in (y_lo, y_hi)]
                return g.op("Concat", parts, axis=0)

            def rope_qk(b: int) -> tuple[str, str]:  # q [nh, T, hd] (/ sqrt(hd)), kT
                # k first: its RoPE needs no scaled tables, so it can start as soon as the K
                # projection ends (the scheduler places segments in graph order)
                ng = _q_group(nh, kvh)
                kg = ng // (nh // kvh)  # KV heads of a group
                if PREFILL_K_GROUPS and kg < kvh:  # each group's [kg, 2, hd/2, T] a part of kT
                    kparts = [g.op("Transpose", [rope_halves(rows_b(k, b), kvh, False,
                                                             (j0, j0 + kg))], perm=[2, 0, 3, 1])
                              for j0 in range(0, kvh, kg)]
                    kt = g.op("Reshape", [g.op("Concat", kparts, axis=0),
                                          g.ints([1, kvh, hd, T])], out="kT" if B == 1 else None)
                    kt = (kt, kparts)
                else:
                    yk = rope_halves(rows_b(k, b), kvh, False)  # [kvh, 2, hd/2, T] = kT
                    kt = g.op("Reshape", [g.op("Transpose", [yk], perm=[2, 0, 3, 1]),
                                          g.ints([1, kvh, hd, T])], out="kT" if B == 1 else None)
                # q in PREFILL_Q_GROUPS groups of heads (whole KV-head groups), each its own
                # RoPE ops and layout: a group's heads wait only for their group's RoPE
                qs = []
                for h0 in range(0, nh, ng):
                    yq = rope_halves(rows_b(q, b), nh, True, None if ng == nh else (h0, h0 + ng))
                    qs.append(g.op("Reshape", [g.op("Transpose", [yq], perm=[2, 1, 0, 3]),
                                               g.ints([ng, T, hd])]))
                return qs, kt
        else:
            # RoPE on the rows of every head at once: [T, n*hd] viewed as [T*n, hd] (a view: no
            # copy), rotate-half as a matmul by the signed permutation R (one exact f16 product per
            # output: x * +-1, f32 accumulation of one term), the tables broadcast over the heads
            # once; each sequence's rows are a contiguous slice (a view); the KV outputs are the
            # transposes themselves (B == 1) and the heads views of them
            R = np.zeros((hd, hd), g.np_dt)
            half = hd // 2
            R[np.arange(half) + half, np.arange(half)] = -1  # rot[j] = -x[j + half], j < half
            R[np.arange(half), np.arange(half) + half] = 1   # rot[j] = x[j - half], j >= half
            rmat = g.const(R, "rope_rotate_half")
            tabs = {}

            def table(t: str, scaled: bool) -> str:  # [T, hd] (* s) -> [T, 1, hd], read broadcast
                if (t, scaled) not in tabs:
                    src = g.op("Mul", [t, scale]) if scaled else t
                    tabs[(t, scaled)] = g.op("Reshape", [src, g.ints([T, 1, hd])])
                return tabs[(t, scaled)]

            def rope_rows(t: str, n: int, scaled: bool) -> str:  # [T, n*hd] -> [T, n, hd] roped
                # rotate-half of the [T*n, hd] rows (a view of t), then x * C + rot * S on
                # [T, n, hd] (views) with the tables [T, 1, hd] broadcast over the heads by the multiplies'
                # reads: fuse-elementwise makes the three ops one CVU pipeline (session 11; the
                # tables were [T*n, hd] copies of an Expand before, 8 MB each at T = 1024)
                rot = g.op("MatMul", [g.op("Reshape", [t, g.ints([T * n, hd])]), rmat])
                x3 = g.op("Reshape", [t, g.ints([T, n, hd])])
                r3 = g.op("Reshape", [rot, g.ints([T, n, hd])])
                return g.op("Add", [g.op("Mul", [x3, table(cos, scaled)]),
                                    g.op("Mul", [r3, table(sin, scaled)])])

            def rope_qk(b: int) -> tuple[str, str]:  # q [nh, T, hd] (/ sqrt(hd)), kT
                qb = g.op("Transpose", [rope_rows(rows_b(q, b), nh, True)], perm=[1, 0, 2])
                kr = rope_rows(rows_b(k, b), kvh, False)
                return qb, g.op("Transpose", [g.op("Reshape", [kr, g.ints([1, T, kvh, hd])])],
                                perm=[0, 2, 3, 1], out="kT" if B == 1 else None)

        for b in range(B):
            qb, ktb = rope_qk(b)
            release("wv")
            kparts = None
            if isinstance(ktb, tuple):
                ktb, kparts = ktb
            vb = g.op("Transpose", [g.op("Reshape", [rows_b(v, b), g.ints([1, T, kvh, hd])])],
                      perm=[0, 2, 1, 3], out="v" if B == 1 else None)    # [1, kvh, T, hd]
            kts.append(ktb)
            vs.append(vb)
            if kparts is None:
                kh = [head(g.op("Reshape", [ktb, g.ints([kvh, hd, T])]), j, hd, T)
                      for j in range(kvh)]
            else:  # each head reads its group's part of kT
                kg = kvh // len(kparts)
                kh = [head(g.op("Reshape", [kparts[j // kg], g.ints([kg, hd, T])]), j % kg, hd, T)
                      for j in range(kvh)]
            # each head reads its columns of the V projection (a column view: no copy, and no
            # wait for the transpose into the ``v`` output, which nothing in the layer reads)
            vh = [g.op("Slice", [rows_b(v, b), g.ints([j * hd]), g.ints([(j + 1) * hd]),
                                 g.ints([1]), g.ints([1])]) for j in range(kvh)]
            outs.append(attention(qb, kh, vh))
        out_proj_mlp(outs)
        if B > 1:
            g.op("Concat", kts, axis=0, out="kT")
            g.op("Concat", vs, axis=0, out="v")
        g.out("y", [B * T, H])
        g.out("kT", [B, kvh, hd, T])
        g.out("v", [B, kvh, T, hd])
        return
    cos_q, sin_q = (g.op("Mul", [c, scale]) for c in (cos, sin))
    for b in range(B):
        qb = g.rope3d(seq(q, b, nh), cos_q, sin_q, hd)  # [nh, T, hd], times 1/sqrt(hd)
        ktb = g.op("Transpose", [g.rope3d(seq(k, b, kvh), cos, sin, hd)], perm=[0, 2, 1])
        vb = seq(v, b, kvh)
        kts.append(ktb)
        vs.append(vb)
        kh = [head(ktb, j, hd, T) for j in range(kvh)]
        vh = [head(vb, j, T, hd) for j in range(kvh)]
        outs.append(attention(qb, kh, vh))
    out_proj_mlp(outs)
    g.op("Reshape", [g.op("Concat", kts, axis=0) if B > 1 else kts[0],
                     g.ints([B, kvh, hd, T])], "kT")
    g.op("Reshape", [g.op("Concat", vs, axis=0) if B > 1 else vs[0],
                     g.ints([B, kvh, T, hd])], "v")
    g.out("y", [B * T, H])
    g.out("kT", [B, kvh, hd, T])
    g.out("v", [B, kvh, T, hd])


def _embed(g: LlmGraph, cfg: LlamaConfig, tokens: int, batch: int) -> None:
    """The embedding lookup: ``x`` [B*T, H] = rows ``ids`` [B*T] (int64 token ids) of the table
    ``embed`` [vocab, H] (float in every scheme, as LLM runtimes keep it: one row a token is read,
    nothing to gain from quantizing it). An ONNX ``Gather`` with runtime indices: the CSU computes
    the row addresses (docs/llm.md section 3)."""
    from onnx import TensorProto
    ids = g.inp("ids", [batch * tokens], TensorProto.INT64)
    g.op("Gather", [g.weight("embed", (cfg.vocab, cfg.hidden), "embed"), ids], "x", axis=0)
    g.out("x", [batch * tokens, cfg.hidden])


def _head(g: LlmGraph, cfg: LlamaConfig, tokens: int, batch: int, last: bool = False) -> None:
    """Final RMSNorm + LM head of the rows ``x`` [B*T, H]; ``last``: of each sequence's last
    token only (rows T-1, 2T-1, ...: ``logits`` [B, vocab]). Both are row-wise, so the last rows'
    logits are the same numbers either way; generation after a prefill reads only them."""
    H = cfg.hidden
    x = g.inp("x", [batch * tokens, H])
    rows = batch * tokens
    if last and tokens > 1:
        if batch == 1:
            x = g.op("Slice", [x, g.ints([tokens - 1]), g.ints([tokens]), g.ints([0]),
                               g.ints([1])])
        else:  # [B, T, H] -> the row T-1 of each sequence -> [B, H]
            x3 = g.op("Reshape", [x, g.ints([batch, tokens, H])])
            x = g.op("Reshape", [g.op("Slice", [x3, g.ints([tokens - 1]), g.ints([tokens]),
                                                g.ints([1]), g.ints([1])]), g.ints([batch, H])])
        rows = batch
    xn = g.rmsnorm(x, g.weight("final_norm", (H,), "norm"), cfg.eps)
    g.proj(xn, "lm_head", (H, cfg.vocab), "logits")
    g.out("logits", [rows, cfg.vocab])


def build(cfg: LlamaConfig | str, part: str = "layer", phase: str = "decode", context: int = 16,
          batch: int = 1, weights: str = "random", seed: int = 0, fuse: bool | tuple = False,
          dtype: str = "f32", quant: str = "none", block: int = 128, logits: str = "last",
          o_quant: str | None = None):
    """One part of a LLaMA model as ONNX (``part``: ``'embed'`` the token ids' rows, ``'layer'`` one
    decoder layer, ``'head'`` final norm + LM head); returns ``(model, weight values by name)`` (values empty
    for ``weights='shape'``). ``context``: cached tokens L (decode) or prompt tokens T (prefill).
    ``quant='w4a16'``: every projection (and the LM head) is int4 with f16 scales per ``block``
    rows of K (activations, norms and the KV cache f16: implies ``dtype='f16'``).
    ``quant='w8a8'``: every projection (and the LM head) is int8 x int8 -> int32
    (``QuantizeLinear`` of the f16 activation, ``MatMulInteger``, per-channel dequantization to
    f16: :meth:`LlmGraph.w8_matmul`); attention, norms, RoPE and the KV cache f16.
    ``logits`` (head, prefill): ``'last'`` computes the logits of each sequence's last token
    only (what generation reads after a prefill), ``'all'`` those of every row.
    ``o_quant`` (W8A8 prefill layer): where the attention output is quantized for ``wo``,
    ``'concat'`` or ``'heads'`` (:data:`PREFILL_O_QUANT`, the default when None; the same bits
    either way: ``bench/llm.py`` compiles both and keeps the shorter plan)."""
    if quant not in ("none", "w4a16", "w8a8"):
        raise LlmBuildError(f"quant must be 'none', 'w4a16' or 'w8a8', not {quant!r}")
    if quant in ("w4a16", "w8a8"):
        dtype = "f16"
    cfg = config(cfg) if isinstance(cfg, str) else cfg
    if weights not in ("random", "shape"):
        raise LlmBuildError(f"weights must be 'random' or 'shape', not {weights!r}")
    if phase not in ("decode", "prefill"):
        raise LlmBuildError(f"phase must be 'decode' or 'prefill', not {phase!r}")
    if context < 1 or batch < 1:
        raise LlmBuildError(f"context ({context}) and batch ({batch}) must be >= 1")
    if cfg.heads % cfg.kv_heads or cfg.hidden % cfg.heads or cfg.head_dim % 2:
        raise LlmBuildError(f"{cfg.name}: heads must be a multiple of kv_heads and head_dim even")
    if dtype not in ("f32", "f16"):
        raise LlmBuildError(f"dtype must be 'f32' or 'f16', not {dtype!r}")
    if o_quant not in (None, "concat", "heads"):
        raise LlmBuildError(f"o_quant must be 'concat' or 'heads', not {o_quant!r}")
    g = LlmGraph(weights, seed, fuse, dtype, quant, block)
    g.o_quant = o_quant or PREFILL_O_QUANT
    if part == "layer":
        (_decode_layer if phase == "decode" else _prefill_layer)(g, cfg, context, batch)
    elif part == "embed":
        _embed(g, cfg, 1 if phase == "decode" else context, batch)
    elif part == "head":
        if logits not in ("last", "all"):
            raise LlmBuildError(f"logits must be 'last' or 'all', not {logits!r}")
        _head(g, cfg, 1 if phase == "decode" else context, batch, last=logits == "last")
    else:
        raise LlmBuildError(f"part must be 'embed', 'layer' or 'head', not {part!r}")
    return g.model(f"{cfg.name}_{part}_{phase}"), g.values


def scaled(cfg: LlamaConfig, **kw) -> LlamaConfig:
    return replace(cfg, **kw)


__all__ = ["PRESETS", "LlamaConfig", "LlmBuildError", "build", "config", "rope_tables", "scaled"]
