"""The activation DMAs of a candidate as a search floor (issue 15, :mod:`.search_dma_floor`).

Oracles: the full isolated build of every configuration real searches cost -- the data phases
(cycles after ``CostModel.dma_latency``) of its ``act`` and ``out`` DMA tasks summed per stage
the floor covers must give exactly the floor's count (it mirrors the builder's transfers, so
anything else is a mistake in it), and the floor is <= the build's makespan; the whole placement
with the floor equals the one without it.
"""

import os
import sys
from collections import Counter

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule import search as search_mod
from m100.passes.schedule.examples import conv_chain, matmul_graph, mlp_graph, resnet18
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.plan import op_family
from m100.passes.schedule.search import Search
from m100.passes.schedule.search_dma_floor import FAMILIES, dma_floor, stage_dma
from m100.passes.schedule.segment import lockstep, reads_whole
from m100.targets.m100.machine import get_machine

sys.path.insert(0, os.path.dirname(__file__))

from search_spy import costed_segments  # noqa: E402

M100 = get_machine("m100")


def _check(g, segs, tpbs) -> Counter:
    """Per op family, the stages whose count was compared with the build's."""
    s = Search(g, M100, tuple(range(tpbs)))
    cm, sched = s.cm, s.sched
    covered: Counter = Counter()
    for seg in segs:
        f = dma_floor(sched, seg)
        try:
            tl = sched.build([seg], isolated=True)
        except ScheduleError:
            continue
        assert f <= tl.makespan, seg
        if seg.kind not in ("data-parallel", "pipeline"):
            assert f == 0.0
            continue
        names = {st.op for st in seg.stages}
        for st in seg.stages:
            op, tp = s.ops[st.op], tl.plans[st.op]
            if st.ks != 1 or st.act_resident or op_family(op.unit) not in FAMILIES or \
                    tp.act_resident or (len(seg.stages) == 1 and lockstep(tp, op)):
                continue
            covered[op_family(op.unit)] += 1
            want = sum(max(0.0, t.cycles - cm.dma_latency(t.src, t.dst)) for t in tl.tasks
                       if t.unit == "dma" and t.op == st.op and t.role in ("act", "out"))
            # the segment's facts written out here from the graph (not the module's helpers)
            streamed = tuple(sched.producers.get(x) is not None and
                             sched.producers[x].name in names for x in op.inputs)
            o = op.outputs[0]
            users = sched.consumers.get(o, [])
            out = g.tensors[o].kind == "output" or not users or \
                any(u.name not in names or reads_whole(u, o) for u in users)
            got, lat = stage_dma(sched, st, op, tp, streamed, out)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-9), (seg, st.op)
            if want:
                assert lat <= min(cm.dma_latency(t.src, t.dst) for t in tl.tasks
                                  if t.unit == "dma" and t.op == st.op)
    return covered


def test_dma_floor_is_the_builds_activation_dma_resnet(monkeypatch):
    g, tpbs = resnet18(hw=32, classes=10), 8
    covered = _check(g, costed_segments(monkeypatch, g, M100, tpbs), tpbs)
    # convs in pipelines and alone, the residual adds, the pools
    assert covered["conv"] > 100 and covered["cvu"] > 20 and covered["pool"] > 0, covered


def test_dma_floor_is_the_builds_activation_dma_gemms(monkeypatch):
    """Whole-K rows broadcast to the column parts, matmul pipelines with a CVU stage, a conv
    chain; GEMMs alone whose pieces go in lockstep groups (not covered: the floor <= the build)."""
    for g, tpbs, least in ((conv_chain(hw=28), 16, 50), (mlp_graph(256, 512, 512, 256), 8, 50),
                           (matmul_graph(m=300, k=512, n=640), 8, 5),
                           (matmul_graph(m=512, k=2048, n=768), 16, 0),
                           (matmul_graph(m=200, k=4096, n=1000, runtime_b=True), 16, 0)):
        covered = _check(g, costed_segments(monkeypatch, g, M100, tpbs), tpbs)
        assert sum(covered.values()) >= least, covered


@pytest.mark.parametrize("make,tpbs", [(lambda: resnet18(hw=32, classes=10), 8),
                                       (lambda: conv_chain(hw=28), 16)])
def test_placement_with_the_dma_floor_is_the_one_without(monkeypatch, make, tpbs):
    floored = []
    run = Search.run

    def spy(self, strategy):
        try:
            return run(self, strategy)
        finally:
            floored.append(self.dma_floored)

    monkeypatch.setattr(Search, "run", spy)
    got = placement.schedule(make(), M100, tpbs=tpbs)
    assert sum(floored) > 0  # the floor answered some candidates: the comparison means something
    monkeypatch.setattr(search_mod, "dma_floor", lambda *a: 0.0)
    want = placement.schedule(make(), M100, tpbs=tpbs)
    assert got.segments == want.segments
    assert got.timeline.to_json() == want.timeline.to_json()
