"""Weights held by fewer TPB rows (issue 9, ``placement.weights_once``).

A K-split stage of ``gr`` TPB rows holds ``gr`` copies of each weight chunk in HBSM; the
refinement trades rows for K parts on the same TPBs where the whole plan gets shorter (more of the
late layers' weights then fit into the HBSM share during the early layers). Oracles: the
invariants of the trade from the configurations alone (same TPBs, fewer rows, rows x column parts
x K parts = TPBs), the plan rebuilt from the returned segments, and ``m100 check`` against
onnxruntime for the configuration it picks on ResNet-18 224 (one row, 8 column parts, 7 K parts of
uneven size).
"""

import pytest

from m100.passes.schedule import placement, refine
from m100.passes.schedule.graph import OpGraph
from m100.passes.schedule.segment import SegmentCfg, StageCfg
from m100.targets.m100.machine import get_machine

from .test_ksplit import _conv_model

# the m100 (8-row TCU granule; session 10: the tiler charges the weight DMAs of its row tiles and
# the plan the DMAs' sync updates, so the 32-row-granule scenario of session 9 no longer changes)
M100 = get_machine("m100")


def _graph(model) -> OpGraph:
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.tools import driver
    ctx = shared_context()
    module, _ = driver.load_model(model, ctx)
    M100Graph().apply(ctx, module)
    return from_module(module, M100.cvu_max_stages).graph


def test_weights_once_trades_rows_for_k_parts_on_the_same_tpbs(monkeypatch):
    """ResNet-18 64x64 on 56 TPBs (DMA depth 1): a K-split conv moves to fewer rows; every change keeps the
    TPBs, has fewer rows and as many TPBs in use; the returned plan is the plan of the returned
    segments (rebuilt) and is shorter."""
    from m100.frontend import models
    seen = []
    orig = placement.weights_once

    def spy(s, segs, tl, keep):
        out = orig(s, segs, tl, keep)
        seen.append((s, segs, tl, keep, out))
        return out

    monkeypatch.setattr(placement, "weights_once", spy)
    # at one DMA transfer in flight per engine: at M100's default depth 2 (session 11) the
    # weight transfers' latencies overlap and nothing is traded on this model
    placement.schedule(_graph(models.resnet18(hw=64)), M100.replace(dma_outstanding=1))
    s, segs, tl, keep, (segs2, tl2) = seen[-1]
    changed = [(a.stages[0], b.stages[0]) for a, b in zip(segs, segs2) if a != b]
    assert changed, "weights_once changed nothing: the test checks nothing"
    assert len(segs2) == len(segs) and tl2.makespan < tl.makespan
    for a, b in changed:
        assert b.op == a.op and b.tpbs == a.tpbs
        assert b.gr < a.gr and b.gr * b.gc * b.ks == len(b.tpbs)
        assert 2 <= b.ks <= refine.MAX_KPARTS and b.bands == b.gr
    assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
def test_one_row_seven_k_parts_match_onnxruntime(mode, monkeypatch):
    """The configuration weights_once picks for ResNet-18 224's layer-4 convs -- one TPB row, 8
    column parts, 7 K parts (256 input channels: parts of 37 and 34 channels) -- forced on a
    7x7 conv 256 -> 512 + bias + ReLU: ``m100 check`` against onnxruntime."""
    from m100.tools import driver
    used = []

    def force(s, segs, tl, keep):
        out = []
        for seg in segs:
            st = seg.stages[0]
            if seg.kind != "dma" and s.ops[st.op].unit == "tcu.conv2d":
                seg = SegmentCfg((StageCfg(st.op, s.tpbs[:56], gc=8, bands=1, ks=7),), seg.kind)
                used.append(seg.stages[0])
            out.append(seg)
        return out, s.sched.build(out, keep=keep)

    monkeypatch.setattr(placement, "weights_once", force)
    ck = driver.check(_conv_model(7, 256, 512), machine="m100", sync_mode=mode)
    assert used and used[0].gr == 1 and used[0].ks == 7
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
