"""CVU ops (split out of ``from_ir.py``): elementwise generics (a body longer than one CVU
pipeline is cut into several ops, :mod:`..split_stages`), reductions (last axis directly, any other
axes through a transposing walk, :mod:`..reduce_walk`), the softmax / layernorm / rmsnorm idiom
groups of ``recognize-idioms``, 2-D max/sum pooling with a folded pad, and the quantize /
dequantize casts (``quant.qcast`` / ``quant.dcast``).
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineMap

from m100.passes.graph.common import (GROUP, IDIOM, IDIOM_AXIS, IDIOM_EPS, IDIOM_ROOT,
                                      body_exprs, describe_op, generic_maps, is_identity)
from m100.targets.m100.isa import CvuOp, DType, Ref, RefKind, Stage
from m100.targets.m100.numerics import cvu_stage_lanes

from .. import split_stages
from ..graph import ScheduleError
from ..ir_facts import (Lowering, _dtype, _expr_stages, _norm_roles, _shape, _vec,
                        int_body_check, linear_map)
from ..quant_facts import cast_stages, fold_cast
from ..reduce_walk import softmax_any_axis, walk_inputs
from .builder import Builder
from .silu import _SIGMOID_ROUND, _elem, _sigmoid_of


# a band mask's two iotas resident in each TPB (``Op.attrs["resident"]``); False: loaded per piece
# as in session 16 (A/B)
RESIDENT_IOTAS = True

def qdcast(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """``quant.qcast`` / ``quant.dcast``: folded on constants, else CVU cast stages."""
    src = op.operands[0]
    if src in ctx.consts and isinstance(ctx.consts[src], np.ndarray):
        ctx.consts[op.results[0]] = fold_cast(op, ctx.consts[src], where)
        return
    stages = cast_stages(op, where)  # checks the quantized type first (one clear line)
    if src in ctx.consts:
        ctx.const_tensor(src, ctx.consts[src])
    ident_map = linear_map(AffineMap.identity(len(_shape(src))))
    lw = Lowering("cvu", stages=stages, in_maps=[ident_map])
    ctx.add("ew", "cvu.elementwise", [ctx.tname(src)], op.results[0], {"maps": lw.in_maps}, lw, op)


def idiom(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A member of a softmax / layernorm / rmsnorm group: the CVU op, at the group root."""
    gid = op.attributes[GROUP].value.data  # type: ignore[union-attr]
    ctx.idiom_members.setdefault(gid, []).append(op)
    if IDIOM_ROOT not in op.attributes:
        return
    members = ctx.idiom_members.pop(gid)
    mset = {id(x) for x in members}
    ext: list[SSAValue] = []
    for mo in members:
        ins_of = list(getattr(mo, "inputs", mo.operands))
        for v in ins_of:
            owner = v.owner
            if isinstance(owner, Operation) and id(owner) in mset:
                continue
            if v in ctx.softmax_adds:  # the group's input is a fused add's (softmax_addend)
                if v not in ext:
                    ext.append(v)
                continue
            if v in ctx.fills or v not in ctx.names and v not in ctx.consts:
                continue
            if v in ctx.consts and not _shape(v):
                continue  # a scalar (eps) constant: the stage's fparam
            if v not in ext:
                ext.append(v)
    out_v = op.results[0]
    oshape = _shape(out_v)
    axis = op.attributes[IDIOM_AXIS].value.data  # type: ignore[union-attr]
    xs = [v for v in ext if v not in ctx.consts and _shape(v) == oshape]
    if len(xs) != 1:
        raise ScheduleError(f"{where}: {unit} group has {len(xs)} main inputs")
    x = xs[0]
    params = [v for v in ext if v is not x]
    sm_round = _softmax_rounding(members, where) if unit == "cvu.softmax" else ()
    if axis % len(oshape) != len(oshape) - 1:
        if unit != "cvu.softmax" or params:
            raise ScheduleError(f"{where}: {unit} along axis {axis} (only the last axis "
                                f"of {list(oshape)} is supported)")
        dt = _dtype(out_v.type)
        sm_stage = (Stage(CvuOp.SOFTMAX, (Ref(RefKind.INPUT, 0),), axis=-1, iparams=sm_round),)

        def _sm(t: str, ts: tuple, _dt=dt, _st=sm_stage, _op=op) -> str:
            im = [linear_map(AffineMap.identity(len(ts)))]
            return ctx.add_t("softmax", "cvu.softmax", [t], ts, _dt, {"maps": im},
                         Lowering("cvu", stages=_st, in_maps=im), _op)
        softmax_any_axis(ctx.walk, op, x, axis, _sm)
        return
    if x in ctx.softmax_adds:
        _softmax_with_add(ctx, ctx.softmax_adds.pop(x), op, sm_round, params, where)
        return
    eps = float(op.attributes[IDIOM_EPS].value.data) if IDIOM_EPS in op.attributes else 0.0
    kind = unit.split(".")[1]
    roles = _norm_roles(members, params, mset) if params else []
    names_in = [ctx.tname(x)]
    maps = [linear_map(AffineMap.identity(len(oshape)))]
    for v in roles:
        if v in ctx.consts:
            names_in.append(ctx.const_tensor(v, ctx.consts[v]))
        else:
            names_in.append(ctx.tname(v))
        ps = _shape(v)
        # broadcast along leading dims: aligned to the trailing dims of the output
        lm = []
        for r, dsz in enumerate(ps):
            od = len(oshape) - len(ps) + r
            lm.append((tuple(1 if (d == od and dsz != 1) else 0
                             for d in range(len(oshape))), 0))
        maps.append(lm)
    op_enum = {"softmax": CvuOp.SOFTMAX, "layernorm": CvuOp.LAYERNORM,
               "rmsnorm": CvuOp.RMSNORM}[kind]
    stage = Stage(op_enum, tuple(Ref(RefKind.INPUT, i) for i in range(len(names_in))),
                  axis=-1, fparam=eps if kind != "softmax" else 0.0, iparams=sm_round)
    lw = Lowering("cvu", stages=(stage,), in_maps=maps)
    ctx.add(kind, unit, names_in, out_v, {"maps": maps}, lw, op)


def softmax_addend(op: Operation) -> bool:
    """``op`` is an add ``y = a + b`` (an elementwise generic, one ``addf`` of its two inputs,
    identity output map) whose every use is a member of ONE softmax group along the last axis
    of ``y``'s shape -- the attention's ``scores + mask`` -- and fusing it keeps the values: the
    group computes in f32 and ``y`` is f32 (the f32 ``ADD`` stage is the generic's add), or the
    group is the 16-bit body of that type and ``y``, ``a``, ``b`` are of it (the 16-bit
    ``SOFTMAX`` stage rounds its argument to the type first, docs/isa.md: the ``ADD`` stage's
    f32 sum of two 16-bit values rounded once is the 16-bit add, f32 having more than twice
    their precision). Then the add is the first stage of the group's CVU op
    (:func:`_softmax_with_add`): one pass over the scores instead of a separate op writing ``y``
    to memory for the softmax to read back; the chain ``matmul -> softmax -> matmul`` of a head
    is one pipeline of three ops."""
    if len(op.results) != 1 or len(getattr(op, "inputs", ())) != 2:
        return False
    ex = body_exprs(op)
    if ex is None or len(ex) != 1 or ex[0].kind != "addf" or \
            sorted(a.val for a in ex[0].args if a.kind == "in") != [0, 1]:
        return False
    maps = generic_maps(op)
    if not is_identity(maps[-1]):
        return False
    y = op.results[0]
    t = _elem(y)
    if t not in ("f32", "f16", "bf16") or any(_elem(v) != t for v in op.inputs):  # type: ignore[attr-defined]
        return False
    users = [u.operation for u in y.uses]
    if not users or any(IDIOM not in u.attributes or u.attributes[IDIOM].data != "softmax"  # type: ignore[attr-defined]
                        or u.attributes.get(GROUP) != users[0].attributes.get(GROUP)
                        for u in users):
        return False
    gid = users[0].attributes[GROUP]
    block = op.parent_block()
    if block is None:
        return False
    members = [o for o in block.ops if o.attributes.get(GROUP) == gid and IDIOM in o.attributes]
    roots = [o for o in members if IDIOM_ROOT in o.attributes]
    if len(roots) != 1 or IDIOM_AXIS not in roots[0].attributes or len(roots[0].results) != 1:
        return False
    oshape = _shape(roots[0].results[0])
    axis = roots[0].attributes[IDIOM_AXIS].value.data  # type: ignore[union-attr]
    if _shape(y) != oshape or axis % len(oshape) != len(oshape) - 1:
        return False
    try:
        rnd = _softmax_rounding(members, describe_op(roots[0]))
    except ScheduleError:
        return False
    want = () if t == "f32" else ((DType.F16 if t == "f16" else DType.BF16).value,)
    return rnd == want


# the largest |integer| up to which every integer is an f16 (11 significant bits): band-mask
# iotas within it are f16 (cvu._softmax_with_add)
F16_IOTA_MAX = 2048


def _softmax_with_add(ctx: Builder, add: Operation, root: Operation, sm_round: tuple,
                      params: list, where: str) -> None:
    """The softmax group rooted at ``root`` whose input is the fused add ``add``
    (:func:`softmax_addend`): ONE CVU op of the add's two inputs, stages ``ADD(in0, in1)``
    (the add's maps: a broadcast mask stays a broadcast) and ``SOFTMAX(stage 0)``."""
    if params:
        raise ScheduleError(f"{where}: a softmax group with parameters")
    in_names = []
    for v in add.inputs:  # type: ignore[attr-defined]
        if v in ctx.consts and not isinstance(ctx.consts[v], tuple):
            in_names.append(ctx.const_tensor(v, ctx.consts[v]))
        elif v in ctx.consts or v in ctx.fills:
            raise ScheduleError(f"{where}: a broadcast constant or fill added before a softmax")
        else:
            in_names.append(ctx.tname(v))
    maps = [linear_map(m) for m in generic_maps(add)[:2]]
    band = _band_mask(ctx, add, maps)
    if band is not None:  # the mask from two iotas: no [T, T] load per piece
        si, (v, k), shape = band
        rows, cols = shape
        iotas = ctx.band_iotas
        # the iotas in the scores' f16 when every position is an f16 integer (|x| <= 2048): the
        # CVU's beat is as wide as its widest operand, so f32 iotas would halve an f16 softmax
        sdt = ctx.g.tensors[in_names[1 - si]].dtype
        idt = "f16" if sdt == "f16" and max(cols - 1, abs(k - 1), rows + k - 2) <= F16_IOTA_MAX \
            else "f32"
        if (rows, cols, k, idt) not in iotas:
            npt = np.float16 if idt == "f16" else np.float32
            iotas[(rows, cols, k, idt)] = [
                ctx.const_array(np.arange(cols, dtype=npt), idt),
                ctx.const_array(np.arange(rows, dtype=np.float32).astype(npt) + npt(k - 1), idt)]
        in_names = [in_names[1 - si]] + iotas[(rows, cols, k, idt)]
        maps = [maps[1 - si], [((0, 1), 0)], [((1, 0), 0)]]
        stages = (Stage(CvuOp.CMP_GT, (Ref(RefKind.INPUT, 1), Ref(RefKind.INPUT, 2))),
                  Stage(CvuOp.SELECT, (Ref(RefKind.STAGE, 0), Ref(RefKind.IMM, 0, v),
                                       Ref(RefKind.IMM, 0, 0.0))),
                  Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.STAGE, 1))))
    else:
        stages = _expr_stages(body_exprs(add), 2, describe_op(add))
    stages += (Stage(CvuOp.SOFTMAX, (Ref(RefKind.STAGE, len(stages) - 1),), axis=-1,
                     iparams=sm_round),)
    lw = Lowering("cvu", stages=stages, in_maps=maps)
    attrs = {"maps": maps}
    if band is not None and RESIDENT_IOTAS:
        # the iotas (a few KB) resident: loaded once per TPB, each piece reading its rows /
        # columns of them (``kinds/cvu``), not two DMAs per piece -- each a DMA setup and a DDR
        # latency on an engine for ~100 B to ~2 KB
        attrs["resident"] = (1, 2)
    sm = ctx.add("softmax", "cvu.softmax", in_names, root.results[0], attrs, lw, root)
    if band is not None:
        ctx.band_softmax[sm.name] = band[1]


def _band_mask(ctx: Builder, add: Operation, maps: list) -> tuple | None:
    """``(operand index, (v, k), (R, C))`` when an operand of the 2-D ``add`` is a constant
    ``[R, C]`` read with the identity map whose elements are ``v`` where ``col - row >= k`` and
    ``+0`` elsewhere (``np.triu(full(v), k)``: the causal mask, ``v`` finite and non-zero), the
    other operand not a constant; else None. Such a mask is computed in the softmax's pipeline
    from a column iota ``[C]`` and a row iota ``[R]`` (+ ``k - 1``) read broadcast: ``CMP_GT``,
    ``SELECT(., v, 0)`` -- the same value per element as loading it (exact in f32 below
    ``2**24``), without reading ``R * C`` elements per head from memory."""
    ident2 = [((1, 0), 0), ((0, 1), 0)]
    for si, v in enumerate(add.inputs):  # type: ignore[attr-defined]
        arr = ctx.consts.get(v)
        other = add.inputs[1 - si]  # type: ignore[attr-defined]
        if not isinstance(arr, np.ndarray) or arr.ndim != 2 or maps[si] != ident2 or \
                other in ctx.consts or max(arr.shape) >= 2 ** 24:
            continue
        nz = np.flatnonzero(arr[0])
        if len(nz) == 0:
            continue
        k = int(nz[0])
        val = arr[0, k]
        if not np.isfinite(val):
            continue
        r, c = np.indices(arr.shape)
        want = np.where(c - r >= k, val, np.zeros((), arr.dtype)).astype(arr.dtype)
        if np.array_equal(arr, want) and not np.signbit(arr[arr == 0]).any():
            return si, (float(val), k), arr.shape
    return None


def _softmax_rounding(members: list[Operation], where: str) -> tuple[int, ...]:
    """The SOFTMAX stage's ``iparams``: ``()`` when the group computes in f32 (torch-mlir's form,
    between an extf and a truncf), ``(DType.F16,)`` / ``(DType.BF16,)`` when every float value of
    the group is of that type (the ONNX function body of a 16-bit softmax,
    ``frontend/onnx_rewrite_half.py``): then ``x - max``, ``exp`` and the sum are each rounded to it,
    as the linalg computes them. A group mixing float widths has rounding points the stage does not
    model: refused."""
    widths = set()
    for mo in members:
        for r in mo.results:
            if isinstance(r.type, TensorType) and str(r.type.get_element_type()) in ("f16", "bf16",
                                                                                     "f32"):
                widths.add(str(r.type.get_element_type()))
    if widths in ({"f32"}, set()):
        return ()
    if len(widths) != 1:
        raise ScheduleError(f"{where}: a softmax computed in a mix of {sorted(widths)} is not "
                            "supported (its intermediate roundings have no CVU stage)")
    return ((DType.F16 if widths == {"f16"} else DType.BF16).value,)


def pooling(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """2-D max/sum pooling (NCHW/NHWC) with a folded pad: a CVU pool op."""
    if not nm.startswith(("linalg.pooling_nchw_", "linalg.pooling_nhwc_")):
        raise ScheduleError(f"{where}: only 2-D pooling (nchw/nhwc) is supported, not "
                            f"{nm}")
    x = op.operands[0]
    win = _shape(op.operands[1])
    outs = op.operands[2]
    layout = "nchw" if "nchw" in nm else "nhwc"
    kind = "max" if nm.endswith("_max") else "sum" if nm.endswith("_sum") else None
    if "_nchw_" not in nm and "_nhwc_" not in nm:  # 1-D (ncw/nwc) and 3-D (ncdhw/ndhwc)
        raise ScheduleError(f"{where}: {nm} is not supported (2-D pooling only)")
    if kind is None:
        raise ScheduleError(f"{where}: {nm} is not supported")
    pads = [0, 0, 0, 0]
    if x in ctx.pad_fold:
        src, lo_p, hi_p, pv = ctx.pad_fold[x]
        sp = (2, 3) if layout == "nchw" else (1, 2)
        if any(lo_p[i] or hi_p[i] for i in range(4) if i not in sp):
            raise ScheduleError(f"{where}: padding of N or C is not supported")
        if (kind == "max" and not pv == -math.inf and pv != float("-inf")) or \
                (kind == "sum" and pv != 0.0):
            if kind == "max" and pv > -3.0e38:
                raise ScheduleError(f"{where}: max-pool padding value {pv} is not -inf")
        pads = [lo_p[sp[0]], lo_p[sp[1]], hi_p[sp[0]], hi_p[sp[1]]]
        x = src
    s = _shape(x)
    n_, c, h, wd = (s[0], s[1], s[2], s[3]) if layout == "nchw" else (s[0], s[3], s[1], s[2])
    st, dl = _vec(op, "strides"), _vec(op, "dilations")
    if dl != [1, 1]:
        raise ScheduleError(f"{where}: dilated pooling is not supported")
    init = ctx.fills.get(outs)
    if init is None or (kind == "sum" and init != 0.0):
        raise ScheduleError(f"{where}: pooling init must be a fill (0 for sum pooling)")
    # the result may have fewer rows/cols than the padded input gives (torch-mlir pads
    # ceil_mode pools by stride - 1 and drops the window that would start in the pad):
    # trim the end pads to exactly the windows of the result
    ro = _shape(op.results[0])
    out_hw = (ro[2], ro[3]) if layout == "nchw" else (ro[1], ro[2])
    for d, (size, k) in enumerate(((h, win[0]), (wd, win[1]))):
        if (size + pads[d] + pads[d + 2] - k) // st[d] + 1 == out_hw[d]:
            continue
        end = (out_hw[d] - 1) * st[d] + k - size - pads[d]
        if end < 0 or end > pads[d + 2]:
            raise ScheduleError(f"{where}: the pooling windows of a {size}-element axis "
                                f"(pads {pads[d]}/{pads[d + 2]}, kernel {k}, stride "
                                f"{st[d]}) do not give the result's {out_hw[d]}")
        pads[d + 2] = end
    attrs = dict(n=n_, h=h, w=wd, c=c, kh=win[0], kw=win[1], stride=tuple(st),
                 pad=tuple(pads), layout=layout)
    if x in ctx.consts:
        ctx.const_tensor(x, ctx.consts[x])
    ctx.add("pool", "cvu.pool", [ctx.tname(x)], op.results[0], attrs,
        Lowering("pool", params=dict(kind=kind, layout=layout)), op)


#: integer reduction bodies (the CVU's integer lane reduces exactly: numerics.CVU_INT_REDUCE)
_INT_REDUCE = {"addi": CvuOp.RSUM, "maxsi": CvuOp.RMAX, "minsi": CvuOp.RMIN, "muli": CvuOp.RPROD}
#: unsigned ones (torch-mlir's ReduceMax/Min of uint8): on the zero-extended values
_UINT_REDUCE = {"maxui": CvuOp.RMAX, "minui": CvuOp.RMIN}


def _int_reduction(kind: str, t, where: str) -> tuple[CvuOp, dict]:
    """(CVU op, {op: neutral init}) of an integer reduction body of result type ``t``.

    maxsi/minsi (ONNX ReduceMax/Min of signed integers, which torch-mlir lowers as a
    max-with-index whose index result is unused) reduce in the integer lane at any width: the
    result is one of the inputs; their neutral init is the type's smallest/largest value.
    maxui/minui (uint8, uint32/64 held as i32, bool: torch-mlir's unsigned forms) reduce the
    zero-extended values (neutral 0 / all ones) and give an 8/16-bit result's bits back (sext). A sum or product of integers narrower than 32 bits would have to
    wrap to the type: refused (ONNX ReduceSum/Prod take no 8/16-bit integers); at 32/64 bits a
    result outside i32 is the integer lane's run-time fault."""
    w = t.element_type.width.data  # type: ignore[attr-defined]
    if kind in _UINT_REDUCE:
        # the all-ones init of minui reads as -1 (a signed constant) or 2**w - 1
        return _UINT_REDUCE[kind], {CvuOp.RMAX: 0.0, CvuOp.RMIN: (-1.0, float((1 << w) - 1))}
    red = _INT_REDUCE[kind]
    if red in (CvuOp.RSUM, CvuOp.RPROD) and w < 32:
        raise ScheduleError(f"{where}: an i{w} integer {kind} reduction (wrapping to i{w}) is "
                            "not supported; widen it to int32 first")
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    return red, {CvuOp.RSUM: 0.0, CvuOp.RPROD: 1.0, CvuOp.RMAX: float(lo), CvuOp.RMIN: float(hi)}


def reduction(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """A sum/max/min/product reduction generic into a neutral fill: a CVU reduction."""
    its = [str(i.data) for i in op.iterator_types]  # type: ignore[attr-defined]
    maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
    ins = list(op.inputs)  # type: ignore[attr-defined]
    r = len(its)
    ident_in = linear_map(AffineMap.identity(r))
    n_in = len(ins)
    outm = linear_map(maps[n_in])
    keep = outm == ident_in[:-1] + [(tuple(0 for _ in range(r)), 0)]
    drop = outm == ident_in[:-1]
    exprs = body_exprs(op)
    extra_used = any(res.uses for res in op.results[1:])  # e.g. an unused argmax result
    if extra_used:
        raise ScheduleError(f"{where}: a reduction with {len(op.results)} used results "
                            "(e.g. max with argmax) is not supported; only one result "
                            "may be used")
    last_axis = not (its[-1] != "reduction" or any(i != "parallel" for i in its[:-1]) or
                     any(linear_map(m) != ident_in for m in maps[:n_in]) or
                     not (keep or drop))
    if not exprs:
        raise ScheduleError(f"{where}: the reduction body can not be mapped to CVU stages")
    e = exprs[0]
    red = {"addf": CvuOp.RSUM, "maximumf": CvuOp.RMAX, "maxnumf": CvuOp.RMAX,
           "minimumf": CvuOp.RMIN, "minnumf": CvuOp.RMIN, "mulf": CvuOp.RPROD}.get(e.kind)
    outs = op.outputs[0]  # type: ignore[attr-defined]
    neutral = {CvuOp.RSUM: 0.0, CvuOp.RMAX: -math.inf, CvuOp.RMIN: math.inf,
               CvuOp.RPROD: 1.0}
    if red is None and (e.kind in _INT_REDUCE or e.kind in _UINT_REDUCE):
        red, neutral = _int_reduction(e.kind, op.results[0].type, where)
    acc_args = [a for a in e.args if a.kind == "out"]
    ok_init = neutral.get(red) if red is not None else None
    if red is None or len(acc_args) != 1 or outs not in ctx.fills or \
            ctx.fills[outs] not in (ok_init if isinstance(ok_init, tuple) else (ok_init,)):
        raise ScheduleError(f"{where}: a reduction must be sum/max/min/product of its "
                            "input into a neutral fill")
    other = e.args[1] if e.args[0].kind == "out" else e.args[0]
    pre = _expr_stages([other], len(ins), where) if other.kind != "in" else ()
    src_ref = Ref(RefKind.STAGE, len(pre) - 1) if pre else Ref(RefKind.INPUT, int(other.val))
    post: tuple[Stage, ...] = ()
    w = getattr(op.results[0].type.element_type, "width", None)  # type: ignore[attr-defined]
    if e.kind in _UINT_REDUCE and w.data > 1:
        # the unsigned values (zext: exact below 2**16; a u32/u64 held value >= 2**31 faults),
        # reduced, then an i8/i16 result back to its bits (sext); booleans are 0/1 already
        pre = tuple(pre) + (Stage(CvuOp.ZEXT, (src_ref,), iparams=(w.data,)),)
        src_ref = Ref(RefKind.STAGE, len(pre) - 1)
        if w.data < 32:
            post = (Stage(CvuOp.SEXT, (Ref(RefKind.STAGE, len(pre)),), iparams=(w.data,)),)
    stages = tuple(pre) + (Stage(red, (src_ref,), axis=-1),) + post
    if not last_axis:  # any axes: transposing walk onto a last-axis reduction
        try:
            in_names, flat, _ = walk_inputs(ctx.walk, op, ins, maps, its)
        except ScheduleError as err:
            raise ScheduleError(f"{where}: {err}") from None
        dt = _dtype(op.results[0].type)
        red_t = ctx.add_t("reduce", "cvu.reduction", in_names, (flat[0], 1), dt,
                      {"keep": True}, Lowering("reduce", stages=stages,
                                               params=dict(keep=True)), op)
        ctx.add_t("reshape", "dtdu.copy", [red_t], _shape(op.results[0]), dt, {},
              Lowering("reshape"), op, op.results[0])
        return
    in_names = []
    for v in ins:
        in_names.append(ctx.value(v))
    ctx.add("reduce", "cvu.reduction", in_names, op.results[0], {"keep": keep},
        Lowering("reduce", stages=stages, params=dict(keep=keep)), op)


def elementwise(ctx: Builder, op: Operation, nm: str, unit: str | None, where: str) -> None:
    """An elementwise generic: CVU stages, cut into several ops when too long. A 16-bit sigmoid
    (:func:`_sigmoid_of`) is one ``SIGMOID`` stage with its body's roundings (``iparams``): its
    four f16 ops computed in f32 and rounded once differ from the generic's values."""
    ins = list(op.inputs)  # type: ignore[attr-defined]
    x = _sigmoid_of(op)
    if x is not None and x not in ctx.consts and x not in ctx.fills and \
            _elem(x) == _elem(op.results[0]) and _SIGMOID_ROUND.get(_elem(x) or ""):
        lw = Lowering("cvu", stages=(Stage(CvuOp.SIGMOID, (Ref(RefKind.INPUT, 0),),
                                           iparams=_SIGMOID_ROUND[_elem(x)]),),
                      in_maps=[linear_map(AffineMap.identity(len(_shape(x))))])
        ctx.add("ew", "cvu.elementwise", [ctx.tname(x)], op.results[0], {"maps": lw.in_maps}, lw,
                op)
        return
    exprs = body_exprs(op)
    if exprs is None or len(exprs) != 1:
        raise ScheduleError(f"{where}: the elementwise body can not be mapped to CVU stages")
    maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
    in_names = []
    rot = ctx.rotated.get(id(op))
    for i, v in enumerate(ins):
        if rot and i in rot:  # input k's tensor (below): the rotate-half concat is not made
            in_names.append("")
        elif v in ctx.consts:
            if isinstance(ctx.consts[v], tuple):
                raise ScheduleError(f"{where}: broadcast constant input not supported")
            in_names.append(ctx.const_tensor(v, ctx.consts[v]))
        elif v in ctx.fills:
            raise ScheduleError(f"{where}: a fill as an elementwise input is not supported")
        else:
            in_names.append(ctx.tname(v))
    # integer bodies: what the CVU's integer lane reproduces exactly (it also makes
    # maxsi/minsi exact at any width: quant_facts.check_int_minmax's f32 limit is gone)
    int_body_check(op, where)
    lw = Lowering("cvu", stages=_expr_stages(exprs, len(ins), where),
                  in_maps=[linear_map(m) for m in maps[:len(ins)]])
    out_map = maps[len(ins)]
    if linear_map(out_map) != linear_map(AffineMap.identity(out_map.num_dims)):
        raise ScheduleError(f"{where}: the output indexing map must be the identity")
    attrs = {"maps": lw.in_maps}
    if rot:  # rotate-half inputs: input k's tensor, read with the halves swapped (kinds/cvu)
        for i, (k, _) in rot.items():
            in_names[i] = in_names[k]
        attrs["rot"] = dict(rot)
    if len(lw.stages) <= ctx.max_cvu_stages:
        ctx.add("ew", "cvu.elementwise", in_names, op.results[0], attrs, lw, op)
        return
    if rot:
        raise ScheduleError(f"{where}: a rotate-half read in an elementwise body longer than one "
                            "CVU pipeline is not supported")
    # longer than one pipeline: several CVU ops through intermediate tensors
    oshape, odt = _shape(op.results[0]), _dtype(op.results[0].type)
    ident = linear_map(AffineMap.identity(len(oshape)))
    parts = split_stages.split(lw.stages, ctx.max_cvu_stages)
    # a cut value keeps its CVU lane: i32 for an integer-lane stage, else f32 (the
    # output's type would round a float intermediate of an integer/bool output)
    lanes = cvu_stage_lanes(lw.stages, [ctx.g.tensors[n].dtype.startswith("i")
                                        for n in in_names])
    cut_t: dict[int, str] = {}
    for pi, (root, part) in enumerate(parts):
        st_, keys = split_stages.remap(lw.stages, part)
        p_names = [in_names[k] if kind == "in" else cut_t[k] for kind, k in keys]
        p_maps = [lw.in_maps[k] if kind == "in" else ident for kind, k in keys]
        last = pi == len(parts) - 1
        cut_t[root] = ctx.add_t("ew", "cvu.elementwise", p_names, oshape,
                            odt if last else ("i32" if lanes[root] else "f32"),
                            {"maps": p_maps}, Lowering("cvu", stages=st_, in_maps=p_maps),
                            op, op.results[0] if last else None)
