"""twu-materialize's per-operand loop against the one it replaced (session 35), written out here.

The pass reads an op's slots from its properties and operand tuple and keeps, per (buffer value,
access) entry, the walk's TPB as the root buffer decides it (its TPB in HBSM, else 0), turned
into the op's own rule only for a destination (a DRB broadcast's: TPB 0; a DTDU broadcast's: its
own TPB). The reference below is the pass's ``_materialize`` before that: ``slot_buffers`` /
``slot_accesses`` and a ``tpb_of`` asked per operand. Both run on clones of the same allocated
modules; the printed modules must be the same text, on programs that have every kind of
destination (the census; the written program has each).
"""

import pytest

from m100.dialects.tpb import BroadcastOp, DmaOp, InstrOp, ProgramOp
from m100.dialects.twu import WalkAttr, dict_attr
from m100.frontend import models
from m100.frontend.mlir_load import default_context
from m100.passes.backend import twu_materialize as tm
from m100.passes.backend.hbsm_allocate import HbsmAllocate
from m100.passes.backend.twu_materialize import TwuMaterialize
from m100.passes.schedule.m100_schedule import M100Schedule
from m100.targets.m100.isa import Space, Walk
from m100.tools.onnx_backend import compile_onnx


def _old_materialize(self, op, max_levels, memo, views, flats, synth, walks, shapes):
    """twu-materialize's ``_materialize`` as it was (lead 4f6a128), the split branch cut: the
    programs here never split an instruction (asserted)."""
    bufs, accs = op.slot_buffers(), op.slot_accesses()
    todo = {}
    for name, buf in bufs.items():
        acc = accs.get(name)
        if acc is not None and tm._is_walk(acc):
            continue
        got = memo.get((id(buf), id(acc)))
        if got is None:
            got = memo[(id(buf), id(acc))] = [tm.operand_access(buf, acc, views, flats),
                                              None, {}, acc, buf]
        todo[name] = got
    if not todo:
        return
    split = False
    for got in todo.values():
        pieces = got[1]
        if pieces is None:
            bounds, flat = got[0][0], got[0][1]
            key = (tuple(bounds), flat)
            pieces = synth.get(key)
            if pieces is None:
                pieces = synth[key] = tm.synthesize(bounds, [flat], max_levels)
            got[1] = pieces
        split |= len(pieces) > 1
    assert not split
    k = tm._kind(op)
    bcast = k == tm._DMA and op.tpb_mask is not None and op.tpb_mask.value.data != 0

    def tpb_of(name, rt):
        if rt.space.data != "hbsm" or (bcast and name == "dst"):
            return 0
        if k == tm._BCAST and name == "dst":
            return op.unit_index
        return rt.tpb_index

    new = dict(accs)
    for name, got in todo.items():
        (_, _, rt, base), pieces, made, _, _ = got
        t = tpb_of(name, rt)
        w = made.get(t)
        if w is None:
            gk = (id(pieces), rt.space_enum, rt.dtype)
            wk = (gk, t, base)
            w = walks.get(wk)
            if w is None:
                g = shapes.get(gk)
                if g is None:
                    w = shapes[gk] = WalkAttr.from_isa(Walk(
                        rt.space_enum, t, base, rt.dtype, pieces[0].levels[0]))
                elif g.tpb.value.data == t and g.base.value.data == base:
                    w = g
                else:
                    w = g.at(t, base)
                walks[wk] = w
            made[t] = w
        new[name] = w
    op.properties["walks"] = dict_attr(new)


class _OldTwu(TwuMaterialize):
    _materialize = _old_materialize


def _allocated(model, **opts):
    ctx = default_context()
    mod = compile_onnx(model, ctx, graph=True)
    M100Schedule(**opts).apply(ctx, mod)
    HbsmAllocate().apply(ctx, mod)
    return ctx, mod


def _census(mod) -> dict:
    """Destinations by kind: a DRB broadcast's (DMA with a TPB mask), a DTDU broadcast's, and the
    operands in HBSM on a TPB other than 0 (the walks whose TPB is the buffer's)."""
    got = {"drb_dst": 0, "dtdu_dst": 0, "hbsm_tpb_not_0": 0, "memory": 0}
    for o in mod.walk():
        if not isinstance(o, InstrOp):
            continue
        for name, b in o.slot_buffers().items():
            t = b.type
            if t.space_enum is not Space.HBSM:
                got["memory"] += 1
            elif name == "dst" and isinstance(o, DmaOp) and o.tpb_mask is not None \
                    and o.tpb_mask.value.data:
                got["drb_dst"] += 1
            elif name == "dst" and isinstance(o, BroadcastOp):
                got["dtdu_dst"] += 1
            elif t.tpb_index:
                got["hbsm_tpb_not_0"] += 1
    return got


@pytest.mark.parametrize("machine,model,tpbs", [
    ("m100", "convnet", 4), ("m100", "convnet_bcast", 8), ("tiny", "mlp", 0)])
def test_materialize_is_the_old_loop(machine, model, tpbs):
    """The pass's walks against the old loop's, text for text (the printed modules), on
    scheduled programs with DRB broadcast destinations, HBSM operands on TPBs other than 0 and
    memory operands (``_census``; a census without DTDU broadcasts is skipped for that kind
    only by the tiny MLP)."""
    m = {"convnet": lambda: models.conv_relu_maxpool(hw=16, f=8),
         "convnet_bcast": lambda: models.conv_relu_maxpool(hw=32, f=32),
         "mlp": lambda: models.mlp(batch=16, d_in=64, hidden=32, d_out=10)}[model]()
    ctx, mod = _allocated(m, machine=machine, tpbs=tpbs)
    a, b = mod.clone(), mod.clone()
    TwuMaterialize().apply(ctx, a)
    _OldTwu().apply(ctx, b)
    census = _census(mod)
    assert census["memory"] > 0
    if machine == "m100":
        assert census["drb_dst"] > 0 and census["hbsm_tpb_not_0"] > 0, census
    progs = [p for p in a.walk() if isinstance(p, ProgramOp)]
    assert progs and all(isinstance(w, WalkAttr) for p in progs for o in p.walk()
                         if isinstance(o, InstrOp) for w in o.slot_accesses().values())
    assert str(a) == str(b)


#: every kind of destination on one (buffer, access) pair read again by another kind of op: a DTDU
#: broadcast from TPB 1 into a buffer of TPB 2 (its walk names TPB 1) read by TPB 2's CVU (TPB
#: 2); a DRB broadcast into a buffer of TPB 3 (TPB 0) read by TPB 3's CVU and written again by a
#: plain DMA (TPB 3); a DRB broadcast from TPB 2's HBSM (its source names TPB 2: only the
#: destination takes the broadcast's rule); DDR operands (TPB 0)
_TEXT = """
tpb.program "m100" placed {
  %s = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[1], 16x4xf32>
  %d = hbsm.alloc offset 1024 : !hbsm.buffer<hbsm[2], 16x4xf32>
  %r = hbsm.alloc offset 2048 : !hbsm.buffer<hbsm[2], 16x4xf32>
  %t0 = tpb.fill tpb 1 dst(%s) {value = 0.0}
  %t1 = tpb.broadcast tpb 1 src(%s) dst(%d) after(%t0) {tpb_mask = 6}
  %t2 = tpb.cvu tpb 2 in0(%d) out(%r) after(%t1) {in_shapes = [array<i64: 16, 4>], out_shape = array<i64: 16, 4>, stages = [#tpb.stage<relu(in0)>]}
  %table = hbsm.alloc offset 64 : !hbsm.buffer<ddr, 100x16xf32>
  %fb = hbsm.alloc offset 4096 : !hbsm.buffer<hbsm[3], 16xf32>
  %o = hbsm.alloc offset 8192 : !hbsm.buffer<hbsm[3], 16xf32>
  %t3 = tpb.dma engine 0 src(%table, #twu.access<affine_map<(d0) -> (2, d0)>, [16]>) dst(%fb) {tpb_mask = 8}
  %t4 = tpb.cvu tpb 3 in0(%fb) out(%o) after(%t3) {in_shapes = [array<i64: 16>], out_shape = array<i64: 16>, stages = [#tpb.stage<relu(in0)>]}
  %t5 = tpb.dma engine 1 src(%o) dst(%table, #twu.access<affine_map<(d0) -> (7, d0)>, [16]>) after(%t4)
  %t6 = tpb.dma engine 1 src(%table, #twu.access<affine_map<(d0) -> (2, d0)>, [16]>) dst(%fb) after(%t5)
  %t7 = tpb.dma engine 0 src(%r, #twu.access<affine_map<(d0) -> (1, d0)>, [16]>) dst(%fb) after(%t6) {tpb_mask = 8}
}
"""


def test_materialize_is_the_old_loop_on_every_destination_kind():
    """The same on a written program with each destination rule, and the walks' TPBs as the ISA
    names them (written out: the walk's TPB, per op and slot)."""
    from xdsl.parser import Parser

    from m100.context import make_context

    ctx = make_context()
    mod = Parser(ctx, _TEXT).parse_module()
    assert _census(mod) == {"drb_dst": 2, "dtdu_dst": 1, "hbsm_tpb_not_0": 9, "memory": 3}
    a, b = mod.clone(), mod.clone()
    TwuMaterialize().apply(ctx, a)
    _OldTwu().apply(ctx, b)
    assert str(a) == str(b)
    tpbs = [(o.name, n, w.to_isa().tpb) for o in a.walk() if isinstance(o, InstrOp)
            for n, w in o.slot_accesses().items()]
    assert sorted(tpbs) == sorted([
        ("tpb.fill", "dst", 1), ("tpb.broadcast", "src", 1), ("tpb.broadcast", "dst", 1),
        ("tpb.cvu", "in0", 2), ("tpb.cvu", "out", 2), ("tpb.dma", "src", 0), ("tpb.dma", "dst", 0),
        ("tpb.cvu", "in0", 3), ("tpb.cvu", "out", 3), ("tpb.dma", "src", 3), ("tpb.dma", "dst", 0),
        ("tpb.dma", "src", 0), ("tpb.dma", "dst", 3), ("tpb.dma", "src", 2), ("tpb.dma", "dst", 0)])
