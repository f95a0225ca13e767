"""The kinds' checks format their messages only when they fail (session 33): ``if not cond: raise
IsaError(msg)`` instead of ``_need(cond, msg)``, whose f-string was built on every call -- on
ResNet-50 sync-insert's input check (17 090 instructions, ~0.3 CPU-s) spent ~0.05 CPU-s
formatting messages never shown. The checks as they were (every ``_check`` and its helpers,
eager ``_need``) are written out below as the reference; on valid instructions of every kind and
on the same instructions with fields corrupted at random (type-preserving: a check's message can
not fail to format) both give the same verdict and the same error, type and text.
"""

from __future__ import annotations

import dataclasses
import enum
import math

import m100_isa_strategies as S
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.targets.m100 import isa
from m100.targets.m100.isa import (ROUTINE_ARITY, ROUTINE_OPERANDS, Act, CvuOp, DType, Epilogue,
                                   IsaError, Level, RefKind, Routine, Space, Unit, Walk)
from m100.targets.m100.machine import Machine, get_machine

MACHINES = [get_machine("tiny"), get_machine("m100")]


# ---- the reference: the checks before session 33, every message formatted eagerly --------------
def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise IsaError(msg)


def _need_elems(name: str, w: Walk, shape: tuple[int, ...], mnem: str) -> None:
    n = math.prod(shape)
    _need(w.num_elements == n, f"{mnem}: operand '{name}' walks {w.num_elements} elements but the "
                               f"logical shape {list(shape)} has {n}")


def _ref_check_all(self, machine: Machine) -> None:
    unit, idx = self.executor
    if unit is Unit.DMA:
        if not 0 <= idx < machine.ccb_dma_engines:
            raise IsaError(f"{self.MNEMONIC}: DMA engine {idx} does not exist "
                           f"(the CCB has {machine.ccb_dma_engines})")
        self.sync.check(machine, None)
    else:
        machine.check_tpb(idx)
        self.sync.check(machine, idx)
    for name, w, _ in self.walks():
        w._check_on(machine, f"{self.MNEMONIC} operand '{name}'")  # (no memo)
    _REF[type(self)](self, machine)


def _ref_check_tcu_types(mn: str, a: DType, b: DType, acc_out: DType, ep: Epilogue,
                     accumulate: bool, acc_in: bool = False) -> None:
    if a.is_int:
        _need(a is DType.I8 and b in (DType.I8, DType.I4),
              f"{mn}: integer TCU operands must be i8 x i8 or i8 x i4, got {a.short} x {b.short}")
        if ep.requant is not None:
            _need(ep.dequant is None, f"{mn}: requant and dequant exclude each other")
            _need(acc_out is DType.I8, f"{mn}: a requantized result must be i8, not {acc_out.short}")
            _need(not accumulate, f"{mn}: accumulate needs the raw i32 result, not a requantized one")
        elif ep.dequant is not None:
            _need(acc_out in (DType.F16, DType.BF16, DType.F32),
                  f"{mn}: a dequantized result must be f16/bf16/f32, not {acc_out.short}")
            _need(not accumulate or acc_in, f"{mn}: accumulate onto a dequantized result needs "
                  "the i32 accumulator as 'acc'")
        else:
            _need(acc_out is DType.I32, f"{mn}: an integer result without requant must be i32")
        _need(ep.act in (Act.NONE, Act.RELU, Act.CLAMP),
              f"{mn}: integer epilogues support none/relu/clamp, not {ep.act.name.lower()}")
        if ep.bias is not None:
            _need(ep.bias.dtype is DType.I32, f"{mn}: an integer bias must be i32")
    else:
        _need((b.is_float or b is DType.I4) and (a == b or b is DType.I4
                                                  or {a, b} <= {DType.F16, DType.BF16}),
              f"{mn}: float TCU operands must share a type (or use i4 weights), "
              f"got {a.short} x {b.short}")
        _need(acc_out.is_float, f"{mn}: a float matmul writes a float result, not {acc_out.short}")
        _need(ep.requant is None, f"{mn}: requantization applies to integer matmuls only")
        _need(ep.dequant is None, f"{mn}: dequantization applies to integer matmuls only")
        if accumulate and not acc_in:
            _need(acc_out is DType.F32, f"{mn}: accumulate needs an f32 result")
        if ep.bias is not None:
            _need(ep.bias.dtype is DType.F32, f"{mn}: a float bias must be f32")


def _ref_check_post(mn: str, i: "MatMul", machine: Machine) -> None:
    """The ``post`` stages of a matmul (:class:`MatMul`): after a dequantization, 1..
    ``tcu_post_stages`` stages (the machine's; 0: a TCU without them) reading input 0 (the value), input 1 (``post_in``) or earlier
    stages; an integer C needs a last ``FTOI``, a float C none."""
    _need(bool(i.post), f"{mn}: 'post_in' without post stages")
    _need(i.a.dtype.is_int and i.epilogue.dequant is not None,
          f"{mn}: post stages follow the dequantization of an integer matmul")
    _need(machine.tcu_post_stages > 0,
          f"{mn}: machine '{machine.name}' has no TCU post stages (tcu_post_stages = 0)")
    _need(len(i.post) <= machine.tcu_post_stages,
          f"{mn}: 1..{machine.tcu_post_stages} post stages (tcu_post_stages), got {len(i.post)}")
    n_in = 1 if i.post_in is None else 2
    for si, st in enumerate(i.post):
        lo, hi = st.op.arity
        _need(lo <= len(st.args) <= hi,
              f"{mn}: post stage {si} ({st.op.name.lower()}) takes {lo}..{hi} args, "
              f"got {len(st.args)}")
        _need(int(st.op) < 64,  # reductions (64..) and fused idioms (96..) are not
              f"{mn}: post stage {si} ({st.op.name.lower()}) is not elementwise")
        for r in st.args:
            if r.kind is RefKind.INPUT:
                _need(0 <= r.index < n_in, f"{mn}: post stage {si} reads input {r.index}, "
                                           "which does not exist")
            elif r.kind is RefKind.STAGE:
                _need(0 <= r.index < si, f"{mn}: post stage {si} reads stage {r.index}, "
                                         "which is not an earlier stage")
    last_ftoi = i.post[-1].op is CvuOp.FTOI
    _need(last_ftoi == i.c.dtype.is_int,
          f"{mn}: an integer C needs a last ftoi post stage, a float C none "
          f"(C is {i.c.dtype.short})")
    if i.post_in is not None:
        _need(i.post_in.dtype in (DType.F16, DType.BF16, DType.F32),
              f"{mn}: 'post_in' must be f16/bf16/f32, not {i.post_in.dtype.short}")
        _need_elems("post_in", i.post_in, (i.m, i.n), mn)
        _need(i.post_in.space is Space.HBSM and i.post_in.tpb == i.tpb,
              f"{mn}: operand 'post_in' must be in the HBSM of TPB {i.tpb}")


def _ref_check_epilogue_shapes(mn: str, ep: Epilogue, f: int) -> None:
    if ep.bias is not None:
        _need_elems("bias", ep.bias, (f,), mn)
    if ep.requant is not None:
        rq = ep.requant
        _need(0 <= rq.shift < 64, f"{mn}: requant shift must be in [0, 63]")
        _need(rq.qmin <= rq.qmax, f"{mn}: requant qmin > qmax")
        if rq.per_channel is not None:
            _need(rq.per_channel.dtype is DType.I32, f"{mn}: per-channel requant params must be i32")
            _need_elems("requant.per_channel", rq.per_channel, (f, 2), mn)
    if ep.dequant is not None:
        _need(ep.dequant.dtype is DType.F32, f"{mn}: dequantization scales must be f32")
        _need_elems("dequant", ep.dequant, (f,), mn)
    if ep.act is Act.CLAMP:
        _need(ep.clamp_lo <= ep.clamp_hi, f"{mn}: clamp_lo > clamp_hi")


def _ref_MatMul(self, machine) -> None:
    mn = self.MNEMONIC
    _need(min(self.m, self.n, self.k) >= 1, f"{mn}: m, n, k must be >= 1")
    if self.post or self.post_in is not None:
        _ref_check_post(mn, self, machine)
    if self.scale is not None:
        _need(self.b.dtype is DType.I4 and self.a.dtype in (DType.F16, DType.BF16),
              f"{mn}: on-the-fly dequantization needs f16/bf16 activations and i4 weights, "
              f"got {self.a.dtype.short} x {self.b.dtype.short}")
        _need(self.scale.dtype is self.a.dtype,
              f"{mn}: the dequantization scales must be {self.a.dtype.short}")
        _need(self.block >= 1 and self.k % self.block == 0,
              f"{mn}: block ({self.block}) must be >= 1 and divide k ({self.k})")
        _need_elems("scale", self.scale, (self.k // self.block, self.n), mn)
        _need(self.scale.space is Space.HBSM and self.scale.tpb == self.tpb,
              f"{mn}: operand 'scale' must be in the HBSM of TPB {self.tpb}")
    else:
        _need(self.block == 0, f"{mn}: block without scale")
    if self.acc is not None:
        _need(self.accumulate and ((self.a.dtype.is_float and self.acc.dtype is DType.F32) or
                                   (self.a.dtype.is_int and self.epilogue.dequant is not None
                                    and self.acc.dtype is DType.I32)),
              f"{mn}: 'acc' is the f32 accumulator of a float accumulate or the i32 "
              "accumulator of a dequantized integer one")
        _need_elems("acc", self.acc, (self.m, self.n), mn)
        _need(self.acc.space is Space.HBSM and self.acc.tpb == self.tpb,
              f"{mn}: operand 'acc' must be in the HBSM of TPB {self.tpb}")
    _need_elems("a", self.a, (self.m, self.k), mn)
    _need_elems("b", self.b, (self.k, self.n), mn)
    _need_elems("c", self.c, (self.m, self.n), mn)
    _ref_check_tcu_types(mn, self.a.dtype, self.b.dtype, DType.F32 if self.post else self.c.dtype,
                     self.epilogue, self.accumulate, self.acc is not None)
    _ref_check_epilogue_shapes(mn, self.epilogue, self.n)
    _need(self.m % self.sync.blocks == 0, f"{mn}: blocks ({self.sync.blocks}) must divide m")
    for nm, w in (("a", self.a), ("b", self.b), ("c", self.c)):
        _need(w.space is Space.HBSM and w.tpb == self.tpb,
              f"{mn}: operand '{nm}' must be in the HBSM of TPB {self.tpb}")


def _ref_Conv2D(self, machine) -> None:
    mn = self.MNEMONIC
    _need(min(self.n, self.h, self.width, self.c, self.f, self.kh, self.kw) >= 1,
          f"{mn}: every size must be >= 1")
    _need(min(self.stride + self.dilation) >= 1 and min(self.pad) >= 0,
          f"{mn}: strides/dilations must be >= 1 and pads >= 0")
    _need(self.groups >= 1 and self.c % self.groups == 0 and self.f % self.groups == 0,
          f"{mn}: groups ({self.groups}) must divide c ({self.c}) and f ({self.f})")
    oh, ow = self.out_hw
    _need(oh >= 1 and ow >= 1, f"{mn}: the window does not fit the padded input")
    _need_elems("x", self.x, (self.n, self.h, self.width, self.c), mn)
    _need_elems("w", self.w, (self.kh, self.kw, self.c // self.groups, self.f), mn)
    _need_elems("y", self.y, (self.n, oh, ow, self.f), mn)
    _ref_check_tcu_types(mn, self.x.dtype, self.w.dtype, self.y.dtype, self.epilogue,
                     self.accumulate)
    _ref_check_epilogue_shapes(mn, self.epilogue, self.f)
    _need((self.n * oh) % self.sync.blocks == 0,
          f"{mn}: blocks ({self.sync.blocks}) must divide n*oh ({self.n * oh})")
    for nm, w in (("x", self.x), ("w", self.w), ("y", self.y)):
        _need(w.space is Space.HBSM and w.tpb == self.tpb,
              f"{mn}: operand '{nm}' must be in the HBSM of TPB {self.tpb}")


def _ref_CvuPipeline(self, machine) -> None:
    mn = self.MNEMONIC
    _need(len(self.inputs) == len(self.in_shapes), f"{mn}: one shape per input walk")
    _need(1 <= len(self.stages) <= machine.cvu_max_stages,
          f"{mn}: 1..{machine.cvu_max_stages} stages, got {len(self.stages)}")
    for s in self.in_shapes + (self.out_shape,):
        _need(all(d >= 1 for d in s), f"{mn}: shape {list(s)} has a dimension < 1")
    for i, (w, s) in enumerate(zip(self.inputs, self.in_shapes)):
        _need_elems(f"inputs[{i}]", w, s, mn)
    _need_elems("output", self.output, self.out_shape, mn)
    for si, st in enumerate(self.stages):
        lo, hi = st.op.arity
        _need(lo <= len(st.args) <= hi,
              f"{mn}: stage {si} ({st.op.name.lower()}) takes {lo}..{hi} args, got {len(st.args)}")
        for r in st.args:
            if r.kind is RefKind.INPUT:
                _need(0 <= r.index < len(self.inputs), f"{mn}: stage {si} reads input "
                                                       f"{r.index}, which does not exist")
            elif r.kind is RefKind.STAGE:
                _need(0 <= r.index < si, f"{mn}: stage {si} reads stage {r.index}, "
                                         "which is not an earlier stage")
    _need(bool(self.out_shape) and self.out_shape[0] % self.sync.blocks == 0,
          f"{mn}: blocks ({self.sync.blocks}) must divide out_shape[0]")
    for nm, w, _ in self.walks():
        _need(w.space is Space.HBSM and w.tpb == self.tpb,
              f"{mn}: operand '{nm}' must be in the HBSM of TPB {self.tpb}")


def _ref_Copy(self, machine) -> None:
    mn = self.MNEMONIC
    _need(self.src.num_elements == self.dst.num_elements,
          f"{mn}: src walks {self.src.num_elements} elements, dst {self.dst.num_elements}")
    _need(self.src.space is Space.HBSM and self.src.tpb == self.tpb,
          f"{mn}: src must be in the HBSM of TPB {self.tpb}")
    _need(self.dst.space is Space.HBSM, f"{mn}: dst must be in an HBSM")
    _need(self.src.num_elements % self.sync.blocks == 0,
          f"{mn}: blocks ({self.sync.blocks}) must divide the element count")


def _ref_Fill(self, machine) -> None:
    _need(self.dst.space is Space.HBSM and self.dst.tpb == self.tpb,
          f"{self.MNEMONIC}: dst must be in the HBSM of TPB {self.tpb}")
    _need(math.isfinite(self.value), f"{self.MNEMONIC}: fill value must be finite")
    _need(self.dst.num_elements % self.sync.blocks == 0,
          f"{self.MNEMONIC}: blocks ({self.sync.blocks}) must divide the element count")


def _ref_Broadcast(self, machine) -> None:
    mn = self.MNEMONIC
    _need(self.src.num_elements == self.dst.num_elements,
          f"{mn}: src walks {self.src.num_elements} elements, dst {self.dst.num_elements}")
    _need(self.src.space is Space.HBSM and self.src.tpb == self.tpb
          and self.dst.space is Space.HBSM and self.dst.tpb == self.tpb,
          f"{mn}: src and dst must be HBSM walks of TPB {self.tpb}")
    _need(0 < self.tpb_mask and not self.tpb_mask & ~machine.all_tpbs_mask,
          f"{mn}: TPB mask {self.tpb_mask:#x} names no TPB or a missing TPB")
    _need(self.src.num_elements % self.sync.blocks == 0,
          f"{mn}: blocks ({self.sync.blocks}) must divide the element count")


def _ref_CsuCall(self, machine) -> None:
    mn = f"{self.MNEMONIC} {self.routine.name.lower()}"
    want = ROUTINE_OPERANDS[self.routine]
    _need(len(self.operands) == want, f"{mn}: takes {want} operands, got {len(self.operands)}")
    lo, hi = ROUTINE_ARITY[self.routine]
    _need(lo <= len(self.params) <= hi, f"{mn}: takes {lo}..{hi} params, got {len(self.params)}")
    ops, p = self.operands, self.params
    if self.routine in (Routine.GATHER, Routine.SCATTER):
        v, d, n = p
        tab, idx = (ops[0], ops[1]) if self.routine is Routine.GATHER else (ops[2], ops[1])
        data = ops[2] if self.routine is Routine.GATHER else ops[0]
        _need_elems("table", tab, (v, d), mn)
        _need_elems("indices", idx, (n,), mn)
        _need_elems("rows", data, (n, d), mn)
        _need(idx.dtype is DType.I32, f"{mn}: indices must be i32")
    elif self.routine is Routine.TOPK:
        r, ln, k = p[:3]
        _need(1 <= k <= ln, f"{mn}: k must be in [1, {ln}]")
        _need_elems("x", ops[0], (r, ln), mn)
        _need_elems("values", ops[1], (r, k), mn)
        _need_elems("indices", ops[2], (r, k), mn)
        _need(ops[2].dtype is DType.I32, f"{mn}: indices must be i32")
    elif self.routine is Routine.ARGMAX:
        r, ln = p[:2]
        _need_elems("x", ops[0], (r, ln), mn)
        _need_elems("out", ops[1], (r,), mn)
        _need(ops[1].dtype is DType.I32, f"{mn}: argmax output must be i32")
    else:
        _need(ops[0].num_elements == ops[1].num_elements,
              f"{mn}: src and dst element counts differ")
    _need(self.sync.blocks == 1, f"{mn}: CSU routines run as one block")


def _ref_Dma(self, machine) -> None:
    mn = self.MNEMONIC
    _need(self.src.num_elements == self.dst.num_elements,
          f"{mn}: src walks {self.src.num_elements} elements, dst {self.dst.num_elements}")
    _need(self.src.dtype == self.dst.dtype, f"{mn}: DMA does not convert types "
                                            f"({self.src.dtype.short} -> {self.dst.dtype.short})")
    if self.tpb_mask:
        _need(self.dst.space is Space.HBSM and self.dst.tpb == 0,
              f"{mn}: a broadcast DMA writes HBSM with dst tpb 0")
        _need(not self.tpb_mask & ~machine.all_tpbs_mask,
              f"{mn}: TPB mask {self.tpb_mask:#x} names a TPB the machine does not have")
    _need(self.src.num_elements % self.sync.blocks == 0,
          f"{mn}: blocks ({self.sync.blocks}) must divide the element count")


_REF = {isa.MatMul: _ref_MatMul, isa.Conv2D: _ref_Conv2D, isa.CvuPipeline: _ref_CvuPipeline,
        isa.Copy: _ref_Copy, isa.Fill: _ref_Fill, isa.Broadcast: _ref_Broadcast,
        isa.CsuCall: _ref_CsuCall, isa.Dma: _ref_Dma}


# ---- random corruptions that keep every field's type ---------------------------------------------
@st.composite
def _corrupt(draw, v, ints: tuple[int, ...]):
    """``v`` with one part changed, of the same type (``ints``: the instruction's own integers,
    so equalities and divisibilities are hit as well as near misses)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, enum.Enum):
        return draw(st.sampled_from(list(type(v))))
    if isinstance(v, int):
        return draw(st.one_of(st.integers(-2, 6), st.integers(v - 2, v + 2),
                              st.sampled_from(ints + _EDGES), st.integers(2 ** 31 - 2, 2 ** 33)))
    if isinstance(v, float):
        return draw(S.ANY_FLOATS)
    if isinstance(v, tuple):
        if not v:
            return v
        k = draw(st.integers(0, len(v) - 1))
        how = draw(st.sampled_from(["change", "drop", "repeat"]))
        if how == "drop":
            return v[:k] + v[k + 1:]
        if how == "repeat":
            return v[:k + 1] + v[k:]
        return v[:k] + (draw(_corrupt(v[k], ints)),) + v[k + 1:]
    if isinstance(v, Walk) and draw(st.booleans()):
        # another element count (or the same one in other levels), in the same place
        n = draw(st.sampled_from(ints + (1, 2, 3)))
        shape = (n,) if n < 1 or draw(st.booleans()) else (1, n)
        if n < 1:
            return dataclasses.replace(v, levels=(Level(0, 1, n - 1),))
        return Walk.strided(v.space, v.tpb, v.base, v.dtype, shape)
    if dataclasses.is_dataclass(v):
        fs = [f.name for f in dataclasses.fields(v) if getattr(v, f.name) is not None
              and not isinstance(getattr(v, f.name), str)]
        if not fs:
            return v
        f = draw(st.sampled_from(fs))
        return dataclasses.replace(v, **{f: draw(_corrupt(getattr(v, f), ints))})
    return v


_EDGES = (0, 1, 31, 32, 63, 64, 127, 128, 255, 256, -1)


def _ints_of(inst) -> tuple[int, ...]:
    out = [1]
    for f in dataclasses.fields(inst):
        x = getattr(inst, f.name)
        if isinstance(x, int) and not isinstance(x, (bool, enum.Enum)):
            out.append(x)
        elif isinstance(x, tuple):
            out += [y for y in x if isinstance(y, int) and not isinstance(y, bool)]
        elif isinstance(x, Walk):
            out.append(x.num_elements)
    return tuple(out)


@st.composite
def _instruction(draw, machine, kind=None, least: int = 0):
    inst = draw(S.instructions(machine, [kind] if kind else None))
    for _ in range(draw(st.integers(least, 3))):
        inst = draw(_corrupt(inst, _ints_of(inst)))
    return inst


def _outcome(f, inst, machine):
    try:
        f(inst, machine)
    except Exception as e:  # noqa: BLE001 -- the error is part of what must agree
        return type(e), str(e)
    return "ok"


def _same(inst, machine) -> tuple:
    fresh = dataclasses.replace(inst)  # (no remembered check or walk list)
    got = _outcome(type(fresh)._check_all, fresh, machine)
    want = _outcome(_ref_check_all, dataclasses.replace(inst), machine)
    assert got == want, (inst, got, want)
    return got


@pytest.mark.parametrize("kind", list(_REF), ids=lambda k: k.__name__)
@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_lazy_messages_give_the_eager_checks_verdicts(machine, kind, data):
    _same(data.draw(_instruction(machine, kind, least=1)), machine)


def test_the_corruptions_reach_the_kinds_checks():
    """Not vacuous: of a fixed sample, most corrupted instructions fail -- many in a kind's own
    ``_check`` (not only the walks' or the sync's) -- and the valid ones pass."""
    seen: dict[str, int] = {}

    @settings(max_examples=300, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data):
        inst = data.draw(_instruction(MACHINES[1]))
        got = _same(inst, MACHINES[1])
        key = "ok" if got == "ok" else (
            "kind" if str(got[1]).startswith(inst.MNEMONIC + ":") else "other")
        seen[key] = seen.get(key, 0) + 1

    run()
    # (the derandomized sample gives ok 211, kind 49, other 40: the bounds keep a margin -- 'other
    # >= 40' failed once under -n 2 at load ~15, where hypothesis' sample can differ)
    assert seen.get("ok", 0) >= 50 and seen.get("kind", 0) >= 30 and seen.get("other", 0) >= 25, seen
