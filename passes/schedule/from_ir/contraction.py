"""Contractions on the TCU (split out of ``from_ir.py``): ``linalg.matmul``, the 2-D / depthwise
convolutions (a zero ``tensor.pad`` folded into the conv's padding), ``linalg.batch_matmul`` (one
2-D matmul per batch, or one ``[B*S, D] @ W`` when every batch shares the weight), and their fused
epilogue (bias from the accumulator init, a runtime bias, or a constant add after the contraction;
one activation; requantization; rounding on store). Grouped convolutions with more than one channel
per group and 3-D convolutions are refused with one line.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from m100.passes.graph.common import (CHANNEL_DIM, EPILOGUE, FUSED_INTO, GROUP, STAGE,
                                      channel_vector, generic_maps)
from m100.targets.m100.isa import Act

from ..graph import ScheduleError, Tensor
from ..ir_facts import ACTS, Lowering, _dtype, _shape, _vec
from ..quant_facts import epilogue_result, requant_params, requant_table
from .builder import Builder


#: the convolutions the TCU runs (after layout-nhwc): NHWC activations, [kh, kw, c/groups, f]
TCU_CONVS = ("linalg.conv_2d_nhwc_hwcf", "linalg.depthwise_conv_2d_nhwc_hwc")


REFUSED_CONVS = {
    "linalg.conv_2d_ngchw_gfchw": "grouped convolution with more than one channel per group is "
    "not supported yet (depthwise, group = channels, is)",
    "linalg.conv_2d_ngchw_fgchw": "grouped convolution with more than one channel per group is "
    "not supported yet (depthwise, group = channels, is)",
    "linalg.conv_3d_ncdhw_fcdhw": "3-D convolution is not supported (1-D and 2-D are)",
}


def post_add_bias(op: Operation, where: str) -> np.ndarray | None:
    """The per-channel vector of the ``bias`` stage fused after contraction ``op`` (an elementwise
    add of a constant, ``m100.stage = "bias"``), or None if the bias (if any) is the init."""
    if GROUP not in op.attributes:
        return None
    gid = op.attributes[GROUP]
    cur = op.results[0]
    while True:
        us = [u.operation for u in cur.uses]
        if len(us) != 1 or us[0].attributes.get(FUSED_INTO) != gid:
            return None
        u = us[0]
        stage = u.attributes.get(STAGE)
        if stage is not None and stage.data == "bias":  # type: ignore[attr-defined]
            break
        cur = u.results[0]
    ins = list(u.inputs)  # type: ignore[attr-defined]
    ch = CHANNEL_DIM.get(op.name)
    shape = _shape(op.results[0])
    others = [i for i, v in enumerate(ins) if v is not cur]
    if len(ins) != 2 or len(others) != 1 or ch is None:
        raise ScheduleError(f"{where}: the fused bias stage is not an add of one operand")
    i = others[0]
    vec = channel_vector(ins[i], generic_maps(u)[i], ch, shape[ch])
    if vec is None:
        # fuse-epilogue only fuses constant per-channel addends; anything else is a compiler bug
        raise ScheduleError(f"{where}: the fused bias is not a constant per-channel vector")
    return vec


def _dequant_scale(ctx: Builder, op: Operation, where: str) -> str:
    """The tensor of the per-channel f32 scales of matmul ``op``'s ``dequant`` epilogue (the
    fused generic's scale operand, :func:`m100.passes.graph.fuse_dequant.tcu_dequant`)."""
    from m100.passes.graph.fuse_dequant import tcu_dequant
    gid = op.attributes[GROUP]
    us = [u.operation for u in op.results[0].uses]
    g = us[0] if len(us) == 1 and us[0].attributes.get(FUSED_INTO) == gid else None
    si = tcu_dequant(g, marked=True) if g is not None else None  # type: ignore[arg-type]
    if si is None:
        raise ScheduleError(f"{where}: the fused dequantize stage is not sitofp * per-channel "
                            "f32 scale (then a rounding)")
    return ctx.value(g.inputs[si])  # type: ignore[union-attr]


def batch_matmul(ctx: Builder, op: Operation, where: str) -> None:
    """batch_matmul = per batch: slice (DMA), 2-D matmul (+ epilogue), reshape/concat (DMA)."""
    a, b = op.operands[0], op.operands[1]
    outs = op.operands[2]
    sa, sb, so = _shape(a), _shape(b), _shape(op.results[0])
    bt, m_, k_ = sa
    n_ = sb[2]
    epi = [x.data for x in op.attributes[EPILOGUE].data] if EPILOGUE in op.attributes else []
    dt = _dtype(op.results[0].type)
    acts = [x for x in epi if x in ACTS]
    init = ctx.consts.get(outs)
    bias = None
    if isinstance(init, tuple) and init[0] == "bias" and np.asarray(init[1]).shape == (n_,):
        bias = ctx.const_tensor(init[2], init[1])  # a per-output-channel bias broadcast as init
        if "bias" not in epi:
            epi = ["bias"] + epi
    elif not (outs in ctx.fills and ctx.fills[outs] == 0.0):
        raise ScheduleError(f"{where}: batch_matmul supports a zero or bias init and one "
                            "activation")
    if any(x not in ACTS and x not in ("bias", "store") for x in epi) or len(acts) > 1 or \
            ("bias" in epi and bias is None):
        raise ScheduleError(f"{where}: batch_matmul supports a zero or bias init, one "
                            "activation and rounding on store")
    # rounded on store (f16 x f16 accumulated in f32): the parts hold the fused result's type
    out_dt = _dtype(epilogue_result(op).type) if "store" in epi else dt
    if a in ctx.consts:
        ctx.const_tensor(a, ctx.consts[a])
    ta = ctx.tname(a)
    tb = None if b in ctx.consts else ctx.tname(b)
    lw_mm = Lowering("matmul", act=ACTS[acts[0]] if acts else Act.NONE, bias=bias)
    if tb is None and all(np.array_equal(ctx.consts[b][i], ctx.consts[b][0]) for i in range(1, bt)):
        # the usual transformer linear [B, S, D] @ W (+ b): one weight for every batch
        # (torch-mlir broadcasts W to [B, D, N]) -> one [B*S, D] @ W matmul
        a2 = ctx.add_t("reshape", "dtdu.copy", [ta], (bt * m_, k_), _dtype(a.type), {},
                   Lowering("reshape"), op)
        w0 = ctx.next_name("c")
        ctx.g.add_tensor(Tensor(w0, (k_, n_), _dtype(b.type), "weight"))
        ctx.data[w0] = np.ascontiguousarray(np.asarray(ctx.consts[b])[0])
        mo = ctx.add_t("matmul", "tcu.matmul", [a2, w0] + ([bias] if bias else []), (bt * m_, n_),
                   out_dt, dict(m=bt * m_, n=n_, k=k_), lw_mm, op)
        ctx.g.ops[-1].epilogue = tuple(epi)
        ctx.add_t("reshape", "dtdu.copy", [mo], so, out_dt, {}, Lowering("reshape"), op,
              op.results[0])
        if GROUP in op.attributes:
            ctx.group_out[op.attributes[GROUP].value.data] = ctx.names[op.results[0]]  # type: ignore
        return
    parts = []
    for i in range(bt):
        sl = Lowering("slice", params=dict(offsets=[i, 0, 0], sizes=[1, m_, k_],
                                           strides=[1, 1, 1]))
        ai = ctx.add_t("slice", "dtdu.copy", [ta], (m_, k_), _dtype(a.type), {}, sl, op)
        if tb is None:
            bi = ctx.next_name("c")
            ctx.g.add_tensor(Tensor(bi, (k_, n_), _dtype(b.type), "weight"))
            ctx.data[bi] = np.ascontiguousarray(np.asarray(ctx.consts[b])[i])
        else:
            sl2 = Lowering("slice", params=dict(offsets=[i, 0, 0], sizes=[1, k_, n_],
                                                strides=[1, 1, 1]))
            bi = ctx.add_t("slice", "dtdu.copy", [tb], (k_, n_), _dtype(b.type), {}, sl2, op)
        lw = Lowering("matmul", act=ACTS[acts[0]] if acts else Act.NONE, bias=bias)
        mi = ctx.add_t("matmul", "tcu.matmul", [ai, bi] + ([bias] if bias else []), (m_, n_),
                   out_dt, dict(m=m_, n=n_, k=k_), lw, op)
        ctx.g.ops[-1].epilogue = tuple(epi)
        parts.append(ctx.add_t("reshape", "dtdu.copy", [mi], (1, m_, n_), out_dt, {},
                           Lowering("reshape"), op, op.results[0] if bt == 1 else None))
    if bt > 1:
        ctx.add_t("concat", "dtdu.copy", parts, so, out_dt, {},
              Lowering("concat", params=dict(dim=0)),
              op, op.results[0])
    if GROUP in op.attributes:
        ctx.group_out[op.attributes[GROUP].value.data] = ctx.names[op.results[0]]  # type: ignore


def epilogue(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A ``tcu.epilogue`` generic: its value is the output of its group's contraction."""
    gid = op.attributes[FUSED_INTO].value.data  # type: ignore[union-attr]
    if gid not in ctx.group_out:
        raise ScheduleError(f"{where}: fused into group {gid}, which has no contraction")
    ctx.names[op.results[0]] = ctx.group_out[gid]


def contraction(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``linalg.matmul`` or a TCU convolution, with its fused epilogue."""
    ins = list(op.operands[:2])
    outs = op.operands[2]
    epi = [s.data for s in op.attributes[EPILOGUE].data] if EPILOGUE in op.attributes else []
    lw = Lowering("matmul" if nm == "linalg.matmul" else "conv")
    acts = [s for s in epi if s in ACTS]
    if len(acts) > 1 or any(s not in ACTS and s not in ("bias", "requant", "store", "dequant")
                            for s in epi):
        raise ScheduleError(f"{where}: epilogue {epi} is not supported (bias + one "
                            "activation + requant)")
    if "dequant" in epi:
        if epi != ["dequant"] or nm != "linalg.matmul":
            raise ScheduleError(f"{where}: a dequantize epilogue is supported alone on a "
                                f"matmul, not {epi} on {nm}")
        lw.dequant = _dequant_scale(ctx, op, where)
    if "requant" in epi:
        lw.requant = requant_params(op, where)
        if len(lw.requant["mult"]) > 1:
            tab = requant_table(lw.requant)
            lw.requant_table = ctx.next_name("c")
            ctx.g.add_tensor(Tensor(lw.requant_table, tab.shape, "i32", "weight"))
            ctx.data[lw.requant_table] = tab
    if acts:
        lw.act = ACTS[acts[0]]
    init = ctx.consts.get(outs)
    if outs in ctx.runtime_bias:
        lw.bias = ctx.tname(ctx.runtime_bias[outs])
        if "bias" not in epi:
            epi = ["bias"] + epi
    elif isinstance(init, tuple) and init[0] == "bias":
        lw.bias = ctx.const_tensor(init[2], init[1])
    elif outs in ctx.fills and ctx.fills[outs] == 0.0:
        pass
    elif outs in ctx.fills or (isinstance(init, np.ndarray) and init.ndim >= 1):
        # a constant init that repeats one vector along the output channels: a bias
        arr = np.full(_shape(outs), ctx.fills[outs], np.float32) if outs in ctx.fills else init
        vec = arr.reshape(-1, arr.shape[-1])[0]
        if not np.array_equal(arr, np.broadcast_to(vec, arr.shape)):
            raise ScheduleError(f"{where}: the accumulator init is not a per-channel bias")
        lw.bias = ctx.next_name("c")
        ctx.g.add_tensor(Tensor(lw.bias, (arr.shape[-1],), _dtype(outs.type), "weight"))
        ctx.data[lw.bias] = np.ascontiguousarray(vec)
        if "bias" not in epi:
            epi = ["bias"] + epi
    else:
        raise ScheduleError(f"{where}: the accumulator init must be a zero fill or a bias "
                            "broadcast")
    post = post_add_bias(op, where)
    if post is not None:
        # A bias fused from an add after the contraction (fuse-epilogue's ``bias`` stage
        # with a constant per-channel operand; fold-batchnorm normally moves it into the
        # init, but not for integer accumulators or with fold-bn=false). Until issue 10 it
        # was silently dropped here. Combined with a bias from the init into a new tensor
        # (the init's constant may be shared with other ops).
        if lw.bias is not None and lw.bias not in ctx.data:
            raise ScheduleError(f"{where}: a runtime bias and a constant bias after it are "
                                "not supported together")
        if lw.bias is not None:
            post = np.asarray(ctx.data[lw.bias]).reshape(-1) + post
        lw.bias = ctx.next_name("c")
        ctx.g.add_tensor(Tensor(lw.bias, (post.size,), _dtype(outs.type), "weight"))
        ctx.data[lw.bias] = np.ascontiguousarray(post)  # cast to the tensor dtype when emitted
    if nm == "linalg.matmul":
        a, b = ins
        if a in ctx.consts:
            ctx.const_tensor(a, ctx.consts[a])
        tb = ctx.value(b)
        sa, sb = _shape(a), _shape(b)
        if len(sa) != 2 or len(sb) != 2:
            raise ScheduleError(f"{where}: only 2-D matmuls are supported")
        attrs = dict(m=sa[0], n=sb[1], k=sa[1])
        o = ctx.add("matmul", "tcu.matmul", [ctx.tname(a), tb] + ([lw.bias] if lw.bias else [])
                + ([lw.requant_table] if lw.requant_table else [])
                + ([lw.dequant] if lw.dequant else []),
                op.results[0], attrs, lw, op)
    else:
        x, w = ins
        pads = [0, 0, 0, 0]
        if x in ctx.pad_fold:
            src, lo_p, hi_p, _ = ctx.pad_fold[x]
            if lo_p[0] or hi_p[0] or lo_p[3] or hi_p[3]:
                raise ScheduleError(f"{where}: padding of N or C is not supported")
            pads = [lo_p[1], lo_p[2], hi_p[1], hi_p[2]]
            x = src
        n_, h, wd, c = _shape(x)
        st, dl = _vec(op, "strides"), _vec(op, "dilations")
        if nm == "linalg.depthwise_conv_2d_nhwc_hwc":
            # the TCU's grouped conv with groups = c: w [kh, kw, c] -> [kh, kw, 1, c]
            kh, kw, f = _shape(w)
            groups = c
            # (a runtime [kh, kw, c] filter has the bytes of [kh, kw, 1, c])
            wk = ctx.consts[w].reshape(kh, kw, 1, f) if w in ctx.consts else None
        else:
            kh, kw, cw, f = _shape(w)
            groups = 1
            if cw != c:
                raise ScheduleError(f"{where}: grouped convolutions are not supported yet")
            wk = ctx.consts.get(w)
        attrs = dict(n=n_, h=h, w=wd, c=c, f=f, kh=kh, kw=kw, stride=tuple(st),
                     pad=tuple(pads), dilation=tuple(dl), groups=groups)
        if x in ctx.consts:
            ctx.const_tensor(x, ctx.consts[x])
        tw = ctx.const_tensor(w, wk) if wk is not None else ctx.tname(w)  # runtime filter
        o = ctx.add("conv", "tcu.conv2d", [ctx.tname(x), tw] + ([lw.bias] if lw.bias else [])
                + ([lw.requant_table] if lw.requant_table else []),
                op.results[0], attrs, lw, op)
    o.epilogue = tuple(epi)
    if lw.dequant:
        o.attrs["dq_table"] = lw.dequant
    if lw.requant is not None or "store" in epi or lw.dequant:
        # the requantized (i8), rounded-on-store (f16) or dequantized (float) result: the last
        # fused op's type
        t = ctx.g.tensors[o.outputs[0]]
        ctx.g.tensors[o.outputs[0]] = Tensor(t.name, t.shape, "i8" if lw.requant else
                                         _dtype(epilogue_result(op).type), t.kind)
        if lw.requant_table:
            o.attrs["rq_table"] = lw.requant_table
    if GROUP in op.attributes:
        gid = op.attributes[GROUP].value.data  # type: ignore[union-attr]
        ctx.group_out[gid] = o.outputs[0]
        ctx.group_op[gid] = o
    if lw.dequant:
        from .tcu_post import tcu_post
        tcu_post(ctx, o, op, lw, where)
