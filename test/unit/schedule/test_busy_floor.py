"""The busiest TPB's TCU cycles as a search floor (issue 15, :func:`.search_floor.busy_floor`).

Oracles: the full isolated build of every configuration real searches cost -- its TCU compute
tasks summed per TPB over the stages the floor covers must give exactly the floor (it is computed
from the builder's pieces and chunk costs, so anything else is a mistake in it), and the floor is
<= the build's makespan; the whole placement with the floor equals the one without it.
"""

import os
import sys

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule import search as search_mod
from m100.passes.schedule.examples import conv_chain, matmul_graph, resnet18
from m100.passes.schedule.graph import ScheduleError
from m100.passes.schedule.search import Search
from m100.passes.schedule.search_floor import TCU_UNITS, busy_floor
from m100.passes.schedule.segment import SegmentCfg, StageCfg, lockstep
from m100.targets.m100.machine import get_machine

sys.path.insert(0, os.path.dirname(__file__))

from search_spy import costed_segments  # noqa: E402

M100 = get_machine("m100")


def _covered(s: Search, st: StageCfg) -> bool:
    op = s.ops[st.op]
    return op.unit in TCU_UNITS and op.attrs.get("groups", 1) == 1 and st.ks == 1 and \
        not st.act_resident


def _check(g, segs, tpbs):
    s = Search(g, M100, tuple(range(tpbs)))
    covered = lock = 0
    for seg in segs:
        f = busy_floor(s.sched, seg)
        try:
            tl = s.sched.build([seg], isolated=True)
        except ScheduleError:
            continue
        assert f <= tl.makespan, seg
        want: dict[int, float] = {}
        for st in seg.stages:
            if not _covered(s, st) or tl.plans[st.op].act_resident:
                continue
            covered += 1
            lock += len(seg.stages) == 1 and lockstep(tl.plans[st.op], s.ops[st.op])
            for t in tl.tasks:
                if t.kind == "compute" and t.unit == "tcu" and t.op == st.op:
                    want[t.tpb] = want.get(t.tpb, 0.0) + t.cycles
        assert f == pytest.approx(max(want.values(), default=0.0), rel=1e-12), seg
    return covered, lock


def test_busy_floor_is_the_builds_tcu_busy_time_resnet(monkeypatch):
    g, tpbs = resnet18(hw=32, classes=10), 8
    covered, lock = _check(g, costed_segments(monkeypatch, g, M100, tpbs), tpbs)
    assert covered > 100 and lock > 10  # the wave order's pieces and lockstep groups


def test_busy_floor_is_the_builds_tcu_busy_time_gemms(monkeypatch):
    """Chunked K, streamed weights, a runtime B: the lockstep groups' pieces (row tiles aligned
    to the TCU row tile) and the wave order's."""
    for g in (matmul_graph(m=512, k=2048, n=768),
              matmul_graph(m=200, k=4096, n=1000, runtime_b=True), conv_chain(hw=28)):
        segs = costed_segments(monkeypatch, g, M100, 16)
        covered, _ = _check(g, segs, 16)
        assert covered > 5
    g = matmul_graph(m=1024, k=2048, n=512, runtime_b=True)
    st = StageCfg(g.ops[0].name, tuple(range(8)), 2, 8)  # 2 rounds of 4 bands, 2 column parts
    covered, lock = _check(g, [SegmentCfg((st,), "data-parallel")], 8)
    assert covered == lock == 1


@pytest.mark.parametrize("make,tpbs", [(lambda: resnet18(hw=32, classes=10), 8),
                                       (lambda: conv_chain(hw=28), 16)])
def test_placement_with_the_busy_floor_is_the_one_without(monkeypatch, make, tpbs):
    got = placement.schedule(make(), M100, tpbs=tpbs)
    monkeypatch.setattr(search_mod, "busy_floor", lambda *a: 0.0)
    want = placement.schedule(make(), M100, tpbs=tpbs)
    assert got.segments == want.segments
    assert got.timeline.to_json() == want.timeline.to_json()
