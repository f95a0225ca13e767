"""Classified linalg IR (after ``m100-graph``) -> the scheduler's :class:`OpGraph` + lowering facts.

What each graph op becomes (``m100.unit`` set by ``classify-ops``):

* ``tcu.matmul`` (``linalg.matmul``) / ``tcu.conv2d`` (``linalg.conv_2d_nhwc_hwcf``): one scheduler op;
  the fused epilogue (``m100.epilogue``: bias, activation) comes from the ``outs`` broadcast of a
  constant vector and the ``tcu.epilogue`` generics, whose result is the op's output tensor. A
  ``tensor.pad`` of zeros on H/W feeding only the conv folds into the conv's padding.
* ``cvu.elementwise`` generics: a CVU pipeline; the body becomes stages (relu idiom ``select(x > 0,
  x, 0)`` -> ``max(x, 0)``), inputs may use any projected-permutation indexing map.
* ``cvu.pool`` (``pooling_nchw/nhwc_max/sum``): CVU MAXPOOL / AVGPOOL(x kh*kw) with the padding of a
  feeding ``tensor.pad`` folded in.
* data movement (``linalg.transpose``, ``linalg.broadcast`` not used as a bias, ``tensor.pad``,
  reshapes, ``linalg.copy``) -> ``dtdu.copy`` ops that the emitter turns into CCB DMAs with affine
  accesses; ``linalg.fill`` of a constant becomes constant data (a program data segment), or nothing
  when it only initialises an accumulator.

Anything else raises :class:`ScheduleError` naming the op, so an unsupported model fails with one
clear line rather than a wrong program.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.ir.affine import AffineMap

from m100.passes.graph.common import (CHANNEL_DIM, EPILOGUE, FUSED_INTO, GROUP, IDIOM_AXIS,
                                      IDIOM_EPS, IDIOM_ROOT, STAGE, UNIT, body_exprs,
                                      channel_vector, describe_op, generic_maps, scalar_const)
from m100.targets.m100.isa import Act, CvuOp, Ref, RefKind, Stage
from m100.targets.m100.numerics import cvu_stage_lanes

from .graph import Op, OpGraph, ScheduleError, Tensor
from . import split_stages
from .ir_index import argmax_info, flip_map, gather_info, iota_dim, sort_info
from .quant_facts import (cast_stages, epilogue_result, fold_cast,
                          requant_params, requant_table)
from .reduce_walk import Walk, softmax_any_axis, walk_inputs
from .ir_facts import (_DT, ACTS, IRGraph, Lowering, _dense, _dtype, _expr_stages,  # noqa: F401
                       _norm_roles, _shape, _vec, int_body_check, linear_map, narrow_const)


#: the convolutions the TCU runs (after layout-nhwc): NHWC activations, [kh, kw, c/groups, f]
_TCU_CONVS = ("linalg.conv_2d_nhwc_hwcf", "linalg.depthwise_conv_2d_nhwc_hwc")


_REFUSED_CONVS = {
    "linalg.conv_2d_ngchw_gfchw": "grouped convolution with more than one channel per group is "
    "not supported yet (depthwise, group = channels, is)",
    "linalg.conv_2d_ngchw_fgchw": "grouped convolution with more than one channel per group is "
    "not supported yet (depthwise, group = channels, is)",
    "linalg.conv_3d_ncdhw_fcdhw": "3-D convolution is not supported (1-D and 2-D are)",
}


def _post_add_bias(op: Operation, where: str) -> np.ndarray | None:
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


def from_module(module: ModuleOp, max_cvu_stages: int = 8) -> IRGraph:
    """The OpGraph of the single function of ``module`` (after ``m100-graph``); an elementwise
    body longer than ``max_cvu_stages`` (the machine's ``cvu_max_stages``) becomes several CVU
    ops (:mod:`.split_stages`)."""
    funcs = [o for o in module.walk() if isinstance(o, func.FuncOp) and o.body.blocks]
    if len(funcs) != 1:
        raise ScheduleError(f"m100-schedule expects exactly one function with a body, found "
                            f"{len(funcs)}")
    fn = funcs[0]
    block = fn.body.blocks[0]
    g = OpGraph()
    low: dict[str, Lowering] = {}
    data: dict[str, np.ndarray] = {}
    names: dict[SSAValue, str] = {}
    counter = [0]

    def tname(v: SSAValue) -> str:
        if v not in names:
            raise ScheduleError(f"value {v.name_hint or v} is used but was not produced by a "
                                "supported op")
        return names[v]

    def new_tensor(v: SSAValue, kind: str = "act", prefix: str = "t") -> str:
        counter[0] += 1
        n = f"{prefix}{counter[0]}"
        g.add_tensor(Tensor(n, _shape(v), _dtype(v.type), kind))
        names[v] = n
        return n

    def const_tensor(v: SSAValue, arr: np.ndarray) -> str:
        if v in names:
            return names[v]
        counter[0] += 1
        n = f"c{counter[0]}"
        g.add_tensor(Tensor(n, tuple(arr.shape), _dtype(v.type), "weight"))
        data[n] = narrow_const(arr, v.type, describe_op(v.owner) if isinstance(v.owner, Operation)
                               else n)
        names[v] = n
        return n

    inputs = []
    arg_syms, _ = symbol_names(fn, len(block.args), len(fn.function_type.outputs.data))
    weight_syms: dict[str, str] = {}
    in_syms: list[str] = []
    for i, a in enumerate(block.args):
        n = f"arg{i}"
        if _is_weight_arg(fn, i):  # compile by shape: a weight declared by shape and dtype only
            g.add_tensor(Tensor(n, _shape(a), _dtype(a.type), "weight"))
            weight_syms[n] = arg_syms[i]
        else:
            g.add_tensor(Tensor(n, _shape(a), _dtype(a.type), "input"))
            inputs.append(n)
            in_syms.append(arg_syms[i])
        names[a] = n

    for op in block.ops:  # convolutions the TCU lowering does not take: one clear line first
        if op.name in _REFUSED_CONVS:
            raise ScheduleError(f"{describe_op(op)}: {_REFUSED_CONVS[op.name]}")

    consts: dict[SSAValue, np.ndarray] = {}
    fills: dict[SSAValue, float] = {}  # linalg.fill results (scalar fill value)
    pad_fold: dict[SSAValue, tuple[SSAValue, list[int], list[int], float]] = {}
    runtime_bias: dict[SSAValue, SSAValue] = {}  # broadcast result -> runtime [F] vector
    group_out: dict[int, str] = {}  # contraction group -> output tensor
    group_op: dict[int, Op] = {}
    idiom_members: dict[int, list[Operation]] = {}
    iotas: dict[SSAValue, int] = {}  # index iotas feeding a tm_tensor.sort: the dimension
    outputs: list[str] = []
    idx = 0

    def add(kind: str, unit: str, ins: list[str], out_v: SSAValue, attrs: dict, lw: Lowering,
            ir_op: Operation) -> Op:
        nonlocal idx
        idx += 1
        out = new_tensor(out_v)
        op = Op(f"{kind}{idx}", unit, tuple(ins), (out,), attrs, loc=describe_op(ir_op))
        g.add_op(op)
        low[op.name] = lw
        return op

    def add_t(kind: str, unit: str, ins: list[str], shape: tuple[int, ...], dtype: str,
              attrs: dict, lw: Lowering, ir_op: Operation, out_v: SSAValue | None = None) -> str:
        """Like add() for an intermediate that has no IR value of its own (or maps to out_v)."""
        nonlocal idx
        idx += 1
        counter[0] += 1
        out = f"t{counter[0]}"
        g.add_tensor(Tensor(out, shape, dtype, "act"))
        if out_v is not None:
            names[out_v] = out
        o = Op(f"{kind}{idx}", unit, tuple(ins), (out,), attrs, loc=describe_op(ir_op))
        g.add_op(o)
        low[o.name] = lw
        return out

    def const_array(arr: np.ndarray, dt: str) -> str:
        counter[0] += 1
        n = f"c{counter[0]}"
        g.add_tensor(Tensor(n, tuple(arr.shape), dt, "weight"))
        data[n] = arr
        return n

    walk = Walk(add_t, tname, const_array, consts)

    def batch_matmul(op: Operation, where: str) -> None:
        """batch_matmul = per batch: slice (DMA), 2-D matmul (+ epilogue), reshape/concat (DMA)."""
        a, b = op.operands[0], op.operands[1]
        outs = op.operands[2]
        sa, sb, so = _shape(a), _shape(b), _shape(op.results[0])
        bt, m_, k_ = sa
        n_ = sb[2]
        epi = [x.data for x in op.attributes[EPILOGUE].data] if EPILOGUE in op.attributes else []
        dt = _dtype(op.results[0].type)
        acts = [x for x in epi if x in ACTS]
        init = consts.get(outs)
        bias = None
        if isinstance(init, tuple) and init[0] == "bias" and np.asarray(init[1]).shape == (n_,):
            bias = const_tensor(init[2], init[1])  # a per-output-channel bias broadcast as init
            if "bias" not in epi:
                epi = ["bias"] + epi
        elif not (outs in fills and fills[outs] == 0.0):
            raise ScheduleError(f"{where}: batch_matmul supports a zero or bias init and one "
                                "activation")
        if any(x not in ACTS and x not in ("bias", "store") for x in epi) or len(acts) > 1 or \
                ("bias" in epi and bias is None):
            raise ScheduleError(f"{where}: batch_matmul supports a zero or bias init, one "
                                "activation and rounding on store")
        # rounded on store (f16 x f16 accumulated in f32): the parts hold the fused result's type
        out_dt = _dtype(epilogue_result(op).type) if "store" in epi else dt
        if a in consts:
            const_tensor(a, consts[a])
        ta = tname(a)
        tb = None if b in consts else tname(b)
        lw_mm = Lowering("matmul", act=ACTS[acts[0]] if acts else Act.NONE, bias=bias)
        if tb is None and all(np.array_equal(consts[b][i], consts[b][0]) for i in range(1, bt)):
            # the usual transformer linear [B, S, D] @ W (+ b): one weight for every batch
            # (torch-mlir broadcasts W to [B, D, N]) -> one [B*S, D] @ W matmul
            a2 = add_t("reshape", "dtdu.copy", [ta], (bt * m_, k_), _dtype(a.type), {},
                       Lowering("reshape"), op)
            counter[0] += 1
            w0 = f"c{counter[0]}"
            g.add_tensor(Tensor(w0, (k_, n_), _dtype(b.type), "weight"))
            data[w0] = np.ascontiguousarray(np.asarray(consts[b])[0])
            mo = add_t("matmul", "tcu.matmul", [a2, w0] + ([bias] if bias else []), (bt * m_, n_),
                       out_dt, dict(m=bt * m_, n=n_, k=k_), lw_mm, op)
            g.ops[-1].epilogue = tuple(epi)
            add_t("reshape", "dtdu.copy", [mo], so, out_dt, {}, Lowering("reshape"), op,
                  op.results[0])
            if GROUP in op.attributes:
                group_out[op.attributes[GROUP].value.data] = names[op.results[0]]  # type: ignore
            return
        parts = []
        for i in range(bt):
            sl = Lowering("slice", params=dict(offsets=[i, 0, 0], sizes=[1, m_, k_],
                                               strides=[1, 1, 1]))
            ai = add_t("slice", "dtdu.copy", [ta], (m_, k_), _dtype(a.type), {}, sl, op)
            if tb is None:
                counter[0] += 1
                bi = f"c{counter[0]}"
                g.add_tensor(Tensor(bi, (k_, n_), _dtype(b.type), "weight"))
                data[bi] = np.ascontiguousarray(np.asarray(consts[b])[i])
            else:
                sl2 = Lowering("slice", params=dict(offsets=[i, 0, 0], sizes=[1, k_, n_],
                                                    strides=[1, 1, 1]))
                bi = add_t("slice", "dtdu.copy", [tb], (k_, n_), _dtype(b.type), {}, sl2, op)
            lw = Lowering("matmul", act=ACTS[acts[0]] if acts else Act.NONE, bias=bias)
            mi = add_t("matmul", "tcu.matmul", [ai, bi] + ([bias] if bias else []), (m_, n_),
                       out_dt, dict(m=m_, n=n_, k=k_), lw, op)
            g.ops[-1].epilogue = tuple(epi)
            parts.append(add_t("reshape", "dtdu.copy", [mi], (1, m_, n_), out_dt, {},
                               Lowering("reshape"), op, op.results[0] if bt == 1 else None))
        if bt > 1:
            add_t("concat", "dtdu.copy", parts, so, out_dt, {},
                  Lowering("concat", params=dict(dim=0)),
                  op, op.results[0])
        if GROUP in op.attributes:
            group_out[op.attributes[GROUP].value.data] = names[op.results[0]]  # type: ignore

    for op in list(block.ops):
        nm = op.name
        where = describe_op(op)
        unit = op.attributes.get(UNIT)
        unit = unit.data if unit is not None else None
        if nm == "arith.constant":
            arr = _dense(op)
            if arr is not None and isinstance(op.results[0].type, TensorType):
                consts[op.results[0]] = arr
            continue
        if nm in ("tensor.empty",):
            continue
        if nm == "func.return":
            for v in op.operands:
                if v in consts and isinstance(consts[v], tuple):
                    raise ScheduleError(f"{where}: returning a bias broadcast is not supported")
                src = const_tensor(v, consts[v]) if v in consts else tname(v)
                t = g.tensors[src]
                if t.kind in ("input", "weight") or src in outputs:
                    # an input, a constant (ONNX Identity, a no-op reduction, Shape folded to a
                    # constant) or a value returned twice: the program copies it (one DMA)
                    src = add_t("copy", "dtdu.copy", [src], t.shape, t.dtype, {},
                                Lowering("reshape"), op)
                outputs.append(src)
            continue
        if nm == "quant.scast":  # quantized <-> storage type: the same buffer
            src = op.operands[0]
            if src in consts:
                consts[op.results[0]] = consts[src]
            else:
                names[op.results[0]] = tname(src)
            continue
        if nm in ("quant.qcast", "quant.dcast"):
            src = op.operands[0]
            if src in consts and isinstance(consts[src], np.ndarray):
                consts[op.results[0]] = fold_cast(op, consts[src], where)
                continue
            stages = cast_stages(op, where)  # checks the quantized type first (one clear line)
            if src in consts:
                const_tensor(src, consts[src])
            ident_map = linear_map(AffineMap.identity(len(_shape(src))))
            lw = Lowering("cvu", stages=stages, in_maps=[ident_map])
            add("ew", "cvu.elementwise", [tname(src)], op.results[0], {"maps": lw.in_maps}, lw, op)
            continue
        if nm == "linalg.fill":
            val = scalar_const(op.operands[0])
            if val is None:
                raise ScheduleError(f"{where}: fill with a non-constant value")
            fills[op.results[0]] = float(val)
            continue
        if nm == "tensor.pad":
            low_p = list(op.static_low.get_values())  # type: ignore[attr-defined]
            high_p = list(op.static_high.get_values())  # type: ignore[attr-defined]
            yld = list(op.regions[0].blocks[0].ops)[-1]
            pv = scalar_const(yld.operands[0])
            if pv is None:
                raise ScheduleError(f"{where}: padding with a non-constant value")
            src = op.operands[0]
            users_ = [u.operation for u in op.results[0].uses]
            if len(users_) == 1 and (users_[0].name.startswith("linalg.pooling") or
                                     (users_[0].name in _TCU_CONVS and pv == 0.0)):
                pad_fold[op.results[0]] = (src, low_p, high_p, float(pv))
                continue
            s_in = _shape(src)
            if src in consts:
                const_tensor(src, consts[src])
            t_src = tname(src)
            add("pad", "dtdu.copy", [t_src], op.results[0], {},
                Lowering("pad", params=dict(low=low_p, high=high_p, value=float(pv),
                                            src_shape=s_in)), op)
            continue
        if nm == "linalg.broadcast":
            src = op.operands[0]
            users_ = [u.operation for u in op.results[0].uses]
            if src in consts and users_ and all(
                    u.name in ("linalg.matmul", "linalg.batch_matmul") + _TCU_CONVS
                    and u.operands[-1] is op.results[0] for u in users_) and \
                    list(op.dimensions.get_values()) == list(  # type: ignore[attr-defined]
                        range(len(_shape(op.results[0])) - 1)):
                consts[op.results[0]] = ("bias", consts[src], src)  # type: ignore[assignment]
                continue
            dims = list(op.dimensions.get_values())  # type: ignore[attr-defined]
            oshape = _shape(op.results[0])
            if src not in consts and users_ and len(_shape(src)) == 1 and \
                    dims == list(range(len(oshape) - 1)) and all(
                    u.name in ("linalg.matmul",) + _TCU_CONVS
                    and u.operands[-1] is op.results[0]
                    and u.operands[0] is not op.results[0] and u.operands[1] is not op.results[0]
                    for u in users_):
                # a runtime per-channel vector broadcast into a contraction's accumulator (ONNX
                # Conv/Gemm with the bias as a graph input): the TCU epilogue's bias operand
                runtime_bias[op.results[0]] = src
                continue
            if src in consts:
                const_tensor(src, consts[src])
            dims = list(op.dimensions.get_values())  # type: ignore[attr-defined]
            add("bcast", "dtdu.copy", [tname(src)], op.results[0], {},
                Lowering("broadcast", params=dict(dims=dims)), op)
            continue
        if nm == "linalg.transpose":
            perm = list(op.permutation.get_values())  # type: ignore[attr-defined]
            src = op.operands[0]
            if src in consts:
                const_tensor(src, consts[src])
            add("transpose", "dtdu.copy", [tname(src)], op.results[0], {},
                Lowering("transpose", params=dict(perm=perm)), op)
            continue
        if nm == "tensor.concat":
            ins_ = []
            for v in op.operands:
                if v in consts:
                    const_tensor(v, consts[v])
                ins_.append(tname(v))
            add("concat", "dtdu.copy", ins_, op.results[0], {},
                Lowering("concat", params=dict(dim=op.dim.value.data)), op)  # type: ignore
            continue
        if nm == "tensor.extract_slice":
            if len(op.operands) != 1:
                raise ScheduleError(f"{where}: dynamic slices are not supported")
            src = op.operands[0]
            if src in consts:
                const_tensor(src, consts[src])
            add("slice", "dtdu.copy", [tname(src)], op.results[0], {},
                Lowering("slice", params=dict(
                    offsets=list(op.static_offsets.get_values()),  # type: ignore[attr-defined]
                    sizes=list(op.static_sizes.get_values()),  # type: ignore[attr-defined]
                    strides=list(op.static_strides.get_values()))), op)  # type: ignore[attr-defined]
            continue
        if unit in ("cvu.softmax", "cvu.layernorm", "cvu.rmsnorm"):
            gid = op.attributes[GROUP].value.data  # type: ignore[union-attr]
            idiom_members.setdefault(gid, []).append(op)
            if IDIOM_ROOT not in op.attributes:
                continue
            members = idiom_members.pop(gid)
            mset = {id(x) for x in members}
            ext: list[SSAValue] = []
            for mo in members:
                ins_of = list(getattr(mo, "inputs", mo.operands))
                for v in ins_of:
                    owner = v.owner
                    if isinstance(owner, Operation) and id(owner) in mset:
                        continue
                    if v in fills or v not in names and v not in consts:
                        continue
                    if v in consts and not _shape(v):
                        continue  # a scalar (eps) constant: the stage's fparam
                    if v not in ext:
                        ext.append(v)
            out_v = op.results[0]
            oshape = _shape(out_v)
            axis = op.attributes[IDIOM_AXIS].value.data  # type: ignore[union-attr]
            xs = [v for v in ext if v not in consts and _shape(v) == oshape]
            if len(xs) != 1:
                raise ScheduleError(f"{where}: {unit} group has {len(xs)} main inputs")
            x = xs[0]
            params = [v for v in ext if v is not x]
            if axis % len(oshape) != len(oshape) - 1:
                if unit != "cvu.softmax" or params:
                    raise ScheduleError(f"{where}: {unit} along axis {axis} (only the last axis "
                                        f"of {list(oshape)} is supported)")
                dt = _dtype(out_v.type)
                sm_stage = (Stage(CvuOp.SOFTMAX, (Ref(RefKind.INPUT, 0),), axis=-1),)

                def _sm(t: str, ts: tuple, _dt=dt, _st=sm_stage, _op=op) -> str:
                    im = [linear_map(AffineMap.identity(len(ts)))]
                    return add_t("softmax", "cvu.softmax", [t], ts, _dt, {"maps": im},
                                 Lowering("cvu", stages=_st, in_maps=im), _op)
                softmax_any_axis(walk, op, x, axis, _sm)
                continue
            eps = float(op.attributes[IDIOM_EPS].value.data) if IDIOM_EPS in op.attributes else 0.0
            kind = unit.split(".")[1]
            roles = _norm_roles(members, params, mset) if params else []
            names_in = [tname(x)]
            maps = [linear_map(AffineMap.identity(len(oshape)))]
            for v in roles:
                if v in consts:
                    names_in.append(const_tensor(v, consts[v]))
                else:
                    names_in.append(tname(v))
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
                          axis=-1, fparam=eps if kind != "softmax" else 0.0)
            lw = Lowering("cvu", stages=(stage,), in_maps=maps)
            add(kind, unit, names_in, out_v, {"maps": maps}, lw, op)
            continue
        if nm in ("tensor.collapse_shape", "tensor.expand_shape", "tensor.reshape", "linalg.copy",
                  "tensor.cast"):
            src = op.operands[0]
            if src in consts:
                const_tensor(src, consts[src])
            add("reshape", "dtdu.copy", [tname(src)], op.results[0], {}, Lowering("reshape"), op)
            continue
        if unit == "tcu.epilogue":
            gid = op.attributes[FUSED_INTO].value.data  # type: ignore[union-attr]
            if gid not in group_out:
                raise ScheduleError(f"{where}: fused into group {gid}, which has no contraction")
            names[op.results[0]] = group_out[gid]
            continue
        if nm == "linalg.batch_matmul":
            batch_matmul(op, where)
            continue
        if nm in ("linalg.matmul",) + _TCU_CONVS:
            ins = list(op.operands[:2])
            outs = op.operands[2]
            epi = [s.data for s in op.attributes[EPILOGUE].data] if EPILOGUE in op.attributes else []
            lw = Lowering("matmul" if nm == "linalg.matmul" else "conv")
            acts = [s for s in epi if s in ACTS]
            if len(acts) > 1 or any(s not in ACTS and s not in ("bias", "requant", "store")
                                    for s in epi):
                raise ScheduleError(f"{where}: epilogue {epi} is not supported (bias + one "
                                    "activation + requant)")
            if "requant" in epi:
                lw.requant = requant_params(op, where)
                if len(lw.requant["mult"]) > 1:
                    tab = requant_table(lw.requant)
                    counter[0] += 1
                    lw.requant_table = f"c{counter[0]}"
                    g.add_tensor(Tensor(lw.requant_table, tab.shape, "i32", "weight"))
                    data[lw.requant_table] = tab
            if acts:
                lw.act = ACTS[acts[0]]
            init = consts.get(outs)
            if outs in runtime_bias:
                lw.bias = tname(runtime_bias[outs])
                if "bias" not in epi:
                    epi = ["bias"] + epi
            elif isinstance(init, tuple) and init[0] == "bias":
                lw.bias = const_tensor(init[2], init[1])
            elif outs in fills and fills[outs] == 0.0:
                pass
            elif outs in fills or (isinstance(init, np.ndarray) and init.ndim >= 1):
                # a constant init that repeats one vector along the output channels: a bias
                arr = np.full(_shape(outs), fills[outs], np.float32) if outs in fills else init
                vec = arr.reshape(-1, arr.shape[-1])[0]
                if not np.array_equal(arr, np.broadcast_to(vec, arr.shape)):
                    raise ScheduleError(f"{where}: the accumulator init is not a per-channel bias")
                counter[0] += 1
                lw.bias = f"c{counter[0]}"
                g.add_tensor(Tensor(lw.bias, (arr.shape[-1],), _dtype(outs.type), "weight"))
                data[lw.bias] = np.ascontiguousarray(vec)
                if "bias" not in epi:
                    epi = ["bias"] + epi
            else:
                raise ScheduleError(f"{where}: the accumulator init must be a zero fill or a bias "
                                    "broadcast")
            post = _post_add_bias(op, where)
            if post is not None:
                # A bias fused from an add after the contraction (fuse-epilogue's ``bias`` stage
                # with a constant per-channel operand; fold-batchnorm normally moves it into the
                # init, but not for integer accumulators or with fold-bn=false). Until issue 10 it
                # was silently dropped here. Combined with a bias from the init into a new tensor
                # (the init's constant may be shared with other ops).
                if lw.bias is not None and lw.bias not in data:
                    raise ScheduleError(f"{where}: a runtime bias and a constant bias after it are "
                                        "not supported together")
                if lw.bias is not None:
                    post = np.asarray(data[lw.bias]).reshape(-1) + post
                counter[0] += 1
                lw.bias = f"c{counter[0]}"
                g.add_tensor(Tensor(lw.bias, (post.size,), _dtype(outs.type), "weight"))
                data[lw.bias] = np.ascontiguousarray(post)  # cast to the tensor dtype when emitted
            if nm == "linalg.matmul":
                a, b = ins
                if a in consts:
                    const_tensor(a, consts[a])
                tb = const_tensor(b, consts[b]) if b in consts else tname(b)
                sa, sb = _shape(a), _shape(b)
                if len(sa) != 2 or len(sb) != 2:
                    raise ScheduleError(f"{where}: only 2-D matmuls are supported")
                attrs = dict(m=sa[0], n=sb[1], k=sa[1])
                o = add("matmul", "tcu.matmul", [tname(a), tb] + ([lw.bias] if lw.bias else [])
                        + ([lw.requant_table] if lw.requant_table else []),
                        op.results[0], attrs, lw, op)
            else:
                x, w = ins
                pads = [0, 0, 0, 0]
                if x in pad_fold:
                    src, lo_p, hi_p, _ = pad_fold[x]
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
                    wk = consts[w].reshape(kh, kw, 1, f) if w in consts else None
                else:
                    kh, kw, cw, f = _shape(w)
                    groups = 1
                    if cw != c:
                        raise ScheduleError(f"{where}: grouped convolutions are not supported yet")
                    wk = consts.get(w)
                attrs = dict(n=n_, h=h, w=wd, c=c, f=f, kh=kh, kw=kw, stride=tuple(st),
                             pad=tuple(pads), dilation=tuple(dl), groups=groups)
                if x in consts:
                    const_tensor(x, consts[x])
                tw = const_tensor(w, wk) if wk is not None else tname(w)  # runtime filter
                o = add("conv", "tcu.conv2d", [tname(x), tw] + ([lw.bias] if lw.bias else [])
                        + ([lw.requant_table] if lw.requant_table else []),
                        op.results[0], attrs, lw, op)
            o.epilogue = tuple(epi)
            if lw.requant is not None or "store" in epi:
                # the requantized (i8) or rounded-on-store (f16) result: the last fused op's type
                t = g.tensors[o.outputs[0]]
                g.tensors[o.outputs[0]] = Tensor(t.name, t.shape, "i8" if lw.requant else
                                                 _dtype(epilogue_result(op).type), t.kind)
                if lw.requant_table:
                    o.attrs["rq_table"] = lw.requant_table
            if GROUP in op.attributes:
                gid = op.attributes[GROUP].value.data  # type: ignore[union-attr]
                group_out[gid] = o.outputs[0]
                group_op[gid] = o
            continue
        if nm.startswith("linalg.pooling_"):
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
            if x in pad_fold:
                src, lo_p, hi_p, pv = pad_fold[x]
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
            init = fills.get(outs)
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
            if x in consts:
                const_tensor(x, consts[x])
            add("pool", "cvu.pool", [tname(x)], op.results[0], attrs,
                Lowering("pool", params=dict(kind=kind, layout=layout)), op)
            continue
        if nm == "linalg.generic" and unit == "dtdu.copy":
            maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
            ins = list(op.inputs)  # type: ignore[attr-defined]
            if len(ins) != 1 or linear_map(maps[1]) != linear_map(
                    AffineMap.identity(maps[1].num_dims)):
                raise ScheduleError(f"{where}: only single-input copy generics are supported")
            src = ins[0]
            if src in consts:
                const_tensor(src, consts[src])
            add("copy", "dtdu.copy", [tname(src)], op.results[0], {},
                Lowering("gcopy", params=dict(map=linear_map(maps[0]))), op)
            continue
        if nm == "linalg.generic" and unit == "cvu.reduction":
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
            acc_args = [a for a in e.args if a.kind == "out"]
            if red is None or len(acc_args) != 1 or outs not in fills or \
                    fills[outs] != neutral[red]:
                raise ScheduleError(f"{where}: a reduction must be sum/max/min/product of its "
                                    "input into a neutral fill")
            other = e.args[1] if e.args[0].kind == "out" else e.args[0]
            pre = _expr_stages([other], len(ins), where) if other.kind != "in" else ()
            src_ref = Ref(RefKind.STAGE, len(pre) - 1) if pre else Ref(RefKind.INPUT, int(other.val))
            stages = tuple(pre) + (Stage(red, (src_ref,), axis=-1),)
            if not last_axis:  # any axes: transposing walk onto a last-axis reduction
                try:
                    in_names, flat, _ = walk_inputs(walk, op, ins, maps, its)
                except ScheduleError as err:
                    raise ScheduleError(f"{where}: {err}") from None
                dt = _dtype(op.results[0].type)
                red_t = add_t("reduce", "cvu.reduction", in_names, (flat[0], 1), dt,
                              {"keep": True}, Lowering("reduce", stages=stages,
                                                       params=dict(keep=True)), op)
                add_t("reshape", "dtdu.copy", [red_t], _shape(op.results[0]), dt, {},
                      Lowering("reshape"), op, op.results[0])
                continue
            in_names = []
            for v in ins:
                in_names.append(const_tensor(v, consts[v]) if v in consts else tname(v))
            add("reduce", "cvu.reduction", in_names, op.results[0], {"keep": keep},
                Lowering("reduce", stages=stages, params=dict(keep=keep)), op)
            continue
        if nm == "linalg.generic" and unit == "cvu.elementwise":
            ins = list(op.inputs)  # type: ignore[attr-defined]
            exprs = body_exprs(op)
            if exprs is None or len(exprs) != 1:
                raise ScheduleError(f"{where}: the elementwise body can not be mapped to CVU stages")
            maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
            in_names = []
            for v in ins:
                if v in consts:
                    if isinstance(consts[v], tuple):
                        raise ScheduleError(f"{where}: broadcast constant input not supported")
                    in_names.append(const_tensor(v, consts[v]))
                elif v in fills:
                    raise ScheduleError(f"{where}: a fill as an elementwise input is not supported")
                else:
                    in_names.append(tname(v))
            # integer bodies: what the CVU's integer lane reproduces exactly (it also makes
            # maxsi/minsi exact at any width: quant_facts.check_int_minmax's f32 limit is gone)
            int_body_check(op, where)
            lw = Lowering("cvu", stages=_expr_stages(exprs, len(ins), where),
                          in_maps=[linear_map(m) for m in maps[:len(ins)]])
            out_map = maps[len(ins)]
            if linear_map(out_map) != linear_map(AffineMap.identity(out_map.num_dims)):
                raise ScheduleError(f"{where}: the output indexing map must be the identity")
            if len(lw.stages) <= max_cvu_stages:
                add("ew", "cvu.elementwise", in_names, op.results[0], {"maps": lw.in_maps}, lw, op)
                continue
            # longer than one pipeline: several CVU ops through intermediate tensors
            oshape, odt = _shape(op.results[0]), _dtype(op.results[0].type)
            ident = linear_map(AffineMap.identity(len(oshape)))
            parts = split_stages.split(lw.stages, max_cvu_stages)
            # a cut value keeps its CVU lane: i32 for an integer-lane stage, else f32 (the
            # output's type would round a float intermediate of an integer/bool output)
            lanes = cvu_stage_lanes(lw.stages, [g.tensors[n].dtype.startswith("i")
                                                for n in in_names])
            cut_t: dict[int, str] = {}
            for pi, (root, part) in enumerate(parts):
                st_, keys = split_stages.remap(lw.stages, part)
                p_names = [in_names[k] if kind == "in" else cut_t[k] for kind, k in keys]
                p_maps = [lw.in_maps[k] if kind == "in" else ident for kind, k in keys]
                last = pi == len(parts) - 1
                cut_t[root] = add_t("ew", "cvu.elementwise", p_names, oshape,
                                    odt if last else ("i32" if lanes[root] else "f32"),
                                    {"maps": p_maps}, Lowering("cvu", stages=st_, in_maps=p_maps),
                                    op, op.results[0] if last else None)
            continue
        if nm == "linalg.generic" and unit == "csu.gather" and flip_map(op) is not None:
            src, lin = flip_map(op)  # type: ignore[misc]
            if src in consts:
                const_tensor(src, consts[src])
            add("copy", "dtdu.copy", [tname(src)], op.results[0], {},
                Lowering("gcopy", params=dict(map=lin)), op)
            continue
        if nm == "linalg.generic" and unit == "csu.gather":
            gi = gather_info(op, where)
            tt = const_tensor(gi.table, consts[gi.table]) if gi.table in consts else \
                tname(gi.table)
            it = tname(gi.indices)
            V, inner, outer = gi.table_shape[gi.axis], gi.inner, gi.outer
            if gi.elements:  # flat element index: idx * stride(axis) + the other coordinates
                o_sh = gi.out_shape
                strides = [math.prod(gi.table_shape[q + 1:]) for q in range(len(o_sh))]
                grids = np.meshgrid(*[np.arange(n) for n in o_sh], indexing="ij")
                base = sum(g_ * strides[q] for q, g_ in enumerate(grids) if q != gi.axis)
                counter[0] += 1
                cb = f"c{counter[0]}"
                g.add_tensor(Tensor(cb, o_sh, "i32", "weight"))
                data[cb] = np.ascontiguousarray(base, dtype=np.int32)
                r = len(o_sh)
                ident = linear_map(AffineMap.identity(r))
                st = (Stage(CvuOp.MUL, (Ref(RefKind.INPUT, 0), Ref(RefKind.IMM, 0,
                                                                    float(strides[gi.axis])))),
                      Stage(CvuOp.ADD, (Ref(RefKind.STAGE, 0), Ref(RefKind.INPUT, 1))))
                rows = add_t("ew", "cvu.elementwise", [it, cb], o_sh, "i32", {"maps": [ident, ident]},
                             Lowering("cvu", stages=st, in_maps=[ident, ident]), op)
                prm = dict(V=math.prod(gi.table_shape), D=1, N=math.prod(o_sh))
            elif outer > 1:  # row index o * V + idx[n] of the table viewed as [outer * V, inner]
                N = gi.out_shape[gi.axis]
                counter[0] += 1
                cb = f"c{counter[0]}"
                g.add_tensor(Tensor(cb, (outer, 1), "i32", "weight"))
                data[cb] = (np.arange(outer, dtype=np.int32) * V).reshape(outer, 1)
                mi = [((0, 1), 0)]
                mb = [((1, 0), 0), ((0, 0), 0)]
                st = (Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.INPUT, 1))),)
                rows = add_t("ew", "cvu.elementwise", [it, cb], (outer, N), "i32",
                             {"maps": [mi, mb]}, Lowering("cvu", stages=st, in_maps=[mi, mb]), op)
                prm = dict(V=outer * V, D=inner, N=outer * N)
            else:
                rows = it
                prm = dict(V=V, D=inner, N=gi.out_shape[gi.axis])
            add("gather", "csu.gather", [tt, rows], op.results[0], dict(prm),
                Lowering("gather", params=prm), op)
            continue
        if nm == "linalg.generic" and unit == "csu.topk" and iota_dim(op) is not None:
            iotas[op.results[0]] = iota_dim(op)  # consumed by the sort (the routine's indices)
            continue
        if nm == "tm_tensor.sort":
            si_ = sort_info(op, where, iotas)
            sh = si_.shape
            prm = dict(outer=math.prod(sh[:si_.axis]), L=sh[si_.axis],
                       inner=math.prod(sh[si_.axis + 1:]), largest=int(si_.largest))
            xt = const_tensor(si_.x, consts[si_.x]) if si_.x in consts else tname(si_.x)
            outs_ = [new_tensor(r) for r in op.results]
            idx += 1
            o_ = Op(f"topk{idx}", "csu.topk", (xt,), tuple(outs_), dict(prm), loc=where)
            g.add_op(o_)
            low[o_.name] = Lowering("topk", params=prm)
            continue
        if nm == "linalg.generic" and unit == "csu.argmax":
            ai = argmax_info(op, where, fills)
            sh = ai.in_shape
            prm = dict(outer=math.prod(sh[:ai.axis]), L=sh[ai.axis],
                       inner=math.prod(sh[ai.axis + 1:]), largest=int(ai.largest), last=int(ai.last))
            xt = const_tensor(ai.x, consts[ai.x]) if ai.x in consts else tname(ai.x)
            add("argmax", "csu.argmax", [xt], ai.result, dict(prm), Lowering("argmax", params=prm),
                op)
            continue
        if unit is not None or nm.startswith("linalg."):
            raise ScheduleError(f"{where}: {nm} ({unit or 'unclassified'}) is not supported by "
                                "m100-schedule yet")
        if nm.startswith(("arith.", "math.")):
            if any(isinstance(r.type, TensorType) for r in op.results):
                raise ScheduleError(f"{where}: tensor-level {nm} is not supported")
            continue
        raise ScheduleError(f"{where}: {nm} is not supported by m100-schedule")
    for o in outputs:
        t = g.tensors[o]
        g.tensors[o] = Tensor(t.name, t.shape, t.dtype, "output")
    if not g.ops:
        raise ScheduleError(f"@{fn.sym_name.data}: nothing to schedule")
    _, out_syms = symbol_names(fn, len(block.args), len(outputs))
    return IRGraph(g, low, data, inputs, outputs, fn.sym_name.data, in_syms, out_syms,
                   weight_syms)


def _is_weight_arg(fn: func.FuncOp, i: int) -> bool:
    """Argument ``i`` of ``fn`` is a shape-only weight (``{m100.weight}``, :mod:`m100.frontend.shape_only`)."""
    from m100.frontend.shape_only import WEIGHT_ATTR
    attrs = fn.arg_attrs
    return attrs is not None and i < len(attrs.data) and WEIGHT_ATTR in attrs.data[i].data


def symbol_names(fn: func.FuncOp, n_in: int, n_out: int) -> tuple[list[str], list[str]]:
    """The program symbol names of ``fn``'s arguments and results: the model's names recorded by
    the frontend (``{m100.name = "x"}`` in ``arg_attrs`` / ``res_attrs``), else ``arg<i>`` /
    ``result<i>``; positional names throughout when the recorded ones are not all distinct."""
    from m100.frontend.onnx_import import NAME_ATTR

    def recorded(attrs, n: int, prefix: str) -> list[str]:
        out = [f"{prefix}{i}" for i in range(n)]
        if attrs is not None and len(attrs.data) == n:
            for i, d in enumerate(attrs.data):
                a = d.data.get(NAME_ATTR)
                if isinstance(a, StringAttr) and a.data:
                    out[i] = a.data
        return out

    ins = recorded(fn.arg_attrs, n_in, "arg")
    outs = recorded(fn.res_attrs, n_out, "result")
    if len(set(ins + outs)) != len(ins) + len(outs):
        return [f"arg{i}" for i in range(n_in)], [f"result{i}" for i in range(n_out)]
    return ins, outs


__all__ = ["IRGraph", "Lowering", "from_module", "linear_map"]
