"""Whole K parts and wider K splits (issue 9, ``ksplit_refine``).

Oracles: the chunks and DMAs a whole-part K split must have follow from its configuration alone
(one weight chunk per column part and K part, every MAC once, one HBSM slot for a one-tile piece);
the refinements return the rebuilt plan of the segments they return, never a longer one; ``m100
check`` against onnxruntime for a whole-part conv (uneven K parts) and a widened GEMV.
"""

import pytest

from m100.passes.schedule import ksplit_refine, placement, refine
from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.examples import GraphBuilder
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.partition import k_part_range, tile_piece
from m100.passes.schedule.segment import SegmentCfg, StageCfg
from m100.passes.schedule.timeline import Scheduler
from m100.targets.m100.machine import get_machine

from .test_ksplit import _conv_model, _gemm_model

# the scenarios of these tests are ResNet plans with every partial row tile padded to 32 rows
# (before the 8-row TCU granule of session 9, which changes which tiles and splits win)
M100 = get_machine("m100").replace(name="m100-g32", tcu_row_granule=32)


def _conv_graph(hw, c, f):
    b = GraphBuilder()
    x = b.input((1, hw, hw, c))
    return b.output(b.conv(x, f, 3, epilogue=("relu",)))


@pytest.mark.parametrize("ks", [2, 7])
def test_whole_parts_one_weight_dma_per_part_and_one_slot(ks):
    """7x7 conv 256 -> 512 on 1 x 8 x ks TPBs with whole parts: per (column part, K part) exactly
    one weight DMA, holding that part's channels x the column part's filters; every MAC once;
    the tiling holds the weight in one slot (the piece is one instruction tile)."""
    hw, c, f, gc = 7, 256, 512, 8
    g = _conv_graph(hw, c, f)
    op = g.ops[0]
    s = Scheduler(CostModel(M100), g)
    st = StageCfg(op.name, tuple(range(gc * ks)), gc, 1, ks=ks, whole=True)
    tl = s.build([SegmentCfg((st,), "data-parallel")], isolated=True)
    tp = tl.plans[op.name]
    assert -(-tp.k // tp.tk) == ks  # one chunk per part
    w = [b for b in tp.buffers if b.role == "weight"]
    assert len(w) == 1 and w[0].slots == 1
    assert sum(t.macs for t in tl.tasks if t.unit == "tcu") == hw * hw * f * 9 * c
    wd = [t for t in tl.tasks if t.kind == "dma-in" and t.tensor == op.inputs[1]]
    assert len(wd) == gc * ks
    # channels per part as k_part_range deals them (uneven: 256 = 37 * 4 + 36 * 3 for 7)
    chans = sorted(round(t.nbytes / (9 * (f // gc) * 4)) for t in wd)
    per = [min(c, (q + 1) * (tp.tk // 9)) - q * (tp.tk // 9) for q in range(ks)]
    assert chans == sorted(per * gc) and sum(per) == c
    # without whole parts: at least two chunks per part, weight in two slots
    tl2 = s.build([SegmentCfg((StageCfg(op.name, st.tpbs, gc, 1, ks=ks),), "data-parallel")],
                  isolated=True)
    assert -(-tl2.plans[op.name].k // tl2.plans[op.name].tk) >= 2 * ks
    assert len([t for t in tl2.tasks if t.kind == "dma-in" and t.tensor == op.inputs[1]]) \
        >= 2 * gc * ks


def test_whole_parts_keeps_two_slots_for_several_tiles_and_refuses_without_k_split():
    g = _conv_graph(28, 256, 256)
    op = g.ops[0]
    cm = CostModel(M100)
    tp = tile_piece(cm, g, op, 28, 256, 200_000, kparts=2, whole_parts=True)
    assert -(-tp.k // tp.tk) == 2
    w = [b for b in tp.buffers if b.role == "weight"][0]
    assert (tp.tr < 28 or tp.tc < 256) and w.slots == 2  # several tiles: the chunk is re-read
    with pytest.raises(ScheduleError, match="whole K parts without a K split"):
        tile_piece(cm, g, op, 7, 64, kparts=1, whole_parts=True)
    assert k_part_range(7, 7, 3) == (3, 4)


def test_refinements_return_the_rebuilt_plan_and_never_a_longer_one(monkeypatch):
    """ResNet-18 64x64 on 56 TPBs, on the plan after ``weights_once``: widen and whole_parts each
    return segments whose rebuilt plan is the returned plan, no longer than the one given; a
    widened stage uses more TPBs of the pool, one round, its op unchanged; a whole-part stage
    keeps its TPBs and split."""
    from m100.frontend import models

    from .test_weights_once import _graph
    seen = []
    orig = placement.weights_once

    def spy(s, segs, tl, keep):
        out = orig(s, segs, tl, keep)
        seen.append((s, keep) + out)
        return out
    monkeypatch.setattr(placement, "weights_once", spy)
    placement.schedule(_graph(models.resnet18(hw=64)), M100)
    s, keep, segs, tl = seen[-1]
    for name in ("widen", "whole_parts"):
        segs2, tl2 = getattr(ksplit_refine, name)(s, segs, tl, keep)
        assert len(segs2) == len(segs) and tl2.makespan <= tl.makespan
        assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan
        for a, b in zip(segs, segs2):
            if a == b:
                continue
            sa, sb = a.stages[0], b.stages[0]
            assert sa.op == sb.op and sb.ks > 1 and sb.bands == sb.gr
            if name == "widen":
                assert len(sb.tpbs) > len(sa.tpbs) and set(sb.tpbs) <= set(s.tpbs)
            else:
                assert sb.whole and (sb.tpbs, sb.gc, sb.ks) == (sa.tpbs, sa.gc, sa.ks)


def _force(stage_of):
    """A ``weights_once`` replacement that forces ``stage_of(s, st)`` on every contraction."""
    used = []

    def force(s, segs, tl, keep):
        out = []
        for seg in segs:
            st = seg.stages[0]
            if seg.kind != "dma" and s.ops[st.op].unit in ("tcu.conv2d", "tcu.matmul"):
                seg = SegmentCfg((stage_of(s, st),), seg.kind)
                used.append(seg.stages[0])
            out.append(seg)
        return out, s.sched.build(out, keep=keep)
    return force, used


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
def test_whole_parts_conv_matches_onnxruntime(mode, monkeypatch):
    """7x7 conv 256 -> 512 + bias + ReLU on 1 x 8 x 7 TPBs with whole parts (K parts of 37 and
    36 channels, one weight DMA each): ``m100 check`` against onnxruntime."""
    from m100.tools import driver
    force, used = _force(lambda s, st: StageCfg(st.op, s.tpbs[:56], gc=8, bands=1, ks=7,
                                                whole=True))
    monkeypatch.setattr(placement, "weights_once", force)
    ck = driver.check(_conv_model(7, 256, 512), machine="m100", sync_mode=mode)
    assert used and used[0].whole and used[0].ks == 7
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()


def test_whole_parts_gemv_matches_onnxruntime(monkeypatch):
    """A GEMV (M = 1, K = 512, N = 1000, ResNet-18's FC) with bias + ReLU on 1 x 8 x 7 TPBs,
    whole parts (K parts of 74 and 73 rows): ``m100 check`` against onnxruntime."""
    from m100.tools import driver
    force, used = _force(lambda s, st: StageCfg(st.op, s.tpbs[:56], gc=8, bands=1, ks=7,
                                                whole=True))
    monkeypatch.setattr(placement, "weights_once", force)
    ck = driver.check(_gemm_model(1, 512, 1000), machine="m100")
    assert used and used[0].ks == 7 and used[0].whole
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()


def test_widen_limits():
    assert ksplit_refine.MAX_WIDEN >= 1 and ksplit_refine.MAX_KPARTS <= refine.MAX_KPARTS
