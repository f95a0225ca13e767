"""The wave offsets of a segment's stages from pairs kept per scheduler (issue 15, session 31).

``PlanBuilder._lags`` gives each stage of a pipeline its wave offset from every producer stage in
the segment: the largest ``qmax - b`` over the consumer's bands (``qmax`` the last producer band
band ``b``'s row window reads). That number depends only on the two ops, the input and the two
stages' bands and work cuts, so it is kept per scheduler (``Scheduler.lag_pairs``) instead of
being recomputed band by band in every build of every candidate. Oracle: the loop as it was
(written out below), on every segment real searches and their whole-plan builds ask about.
"""

import pytest

from m100.passes.schedule import build_segments, placement
from m100.passes.schedule.segment import input_window, reads_whole, stage_rows
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _lags_reference(bld, seg):
    """``PlanBuilder._lags`` before session 31: every pair and band computed again."""
    g, s = bld.g, bld.s
    lag = {}
    by_op = {st.op: st for st in seg.stages}
    for st in seg.stages:
        op = s.ops[st.op]
        geo = s.geo(op)
        need = 0
        for tname in op.inputs:
            prod = s.producers.get(tname)
            if prod is None or prod.name not in by_op or prod.name not in lag:
                continue
            pst = by_op[prod.name]
            pgeo = s.geo(prod)
            for b in range(st.bands):
                lo, hi = stage_rows(st, geo.rows, b)
                if hi <= lo:
                    continue
                win = None if reads_whole(op, tname) else input_window(g, op, tname, lo, hi)
                if win is None:
                    qmax = pst.bands - 1
                else:
                    qmax = s.band_of(pst, pgeo.rows, max(win[1], win[0] + 1) - 1)
                need = max(need, lag[prod.name] + qmax - b)
        lag[st.op] = need
    return lag


@pytest.mark.parametrize("tpbs", [8, 0])
def test_lags_from_kept_pairs_are_the_reference(resnet_graph, monkeypatch, tpbs):
    orig = build_segments.PlanBuilder._lags
    seen = {"calls": 0, "pipelines": 0, "offsets": 0}

    def spy(self, seg):
        got = orig(self, seg)
        want = _lags_reference(self, seg)
        assert got == want and list(got) == list(want), (seg, got, want)
        seen["calls"] += 1
        seen["pipelines"] += len(seg.stages) > 1
        seen["offsets"] += any(got.values())
        return got

    monkeypatch.setattr(build_segments.PlanBuilder, "_lags", spy)
    placement.schedule(resnet_graph, M100, tpbs=tpbs)
    # the searches asked about many pipelines, some with offsets, and pairs repeated
    assert seen["pipelines"] > 50 and seen["offsets"] > 10, seen
