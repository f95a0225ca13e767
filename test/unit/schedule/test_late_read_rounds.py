"""Late read stores past the first round (``build_segments.LATE_READ_ROUNDS``, docs/llm.md section
5, session 24): each of the V projection's stores is built just before the first head that reads
its columns, however many heads ran on the same TPBs before (session 23 built every store no
first-round head reads at the end of that round, where on the 7B layer they took the DMA engines
ahead of round 2's q / kT loads).

Oracles: the program built with the stores at the end of the first round (the same bits), the
interpreter's race / deadlock checks (full mode), and in the plan every store built at the end of
the segment just before its first reader, some of them after the first round, and every load of a
head's V columns after every store that wrote them (``test_late_read_stores._plan_checks``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from m100.passes.schedule import build_segments, list_schedule
from m100.passes.schedule.graph import dtype_bytes

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
from test_bench_llm import _prefill_feed  # noqa: E402
from test_late_read_stores import T, _layer, _plan_checks  # noqa: E402


def _first_readers(pl) -> tuple[int, dict[int, int], dict[int, int], int]:
    """(the producer segment, late store (its piece's index) -> the segment the plan builds it
    at the end of, late store -> the first later segment reading its columns, the first reader
    on a TPB of an earlier reader: the second round's start)."""
    tl, g = pl.timeline, pl.graph
    (si, reads), = tl.late_reads.items()
    op = tl.segments[si].stages[0].op
    root = g.ops[[o.name for o in g.ops].index(op)].outputs[0]
    eb = dtype_bytes(g.tensors[root].dtype)
    built = {i: j for j, ix in reads.items() for i in ix}  # (indices into the pieces)
    last = dict((i, tl.pieces[si][i]) for i in built)
    first: dict[int, int] = {}
    seen: set[int] = set()
    second = None
    for j in range(si + 1, len(tl.segments)):
        seg = tl.segments[j]
        tpbs = {x for st in seg.stages for x in st.tpbs}
        cols = []
        for st in seg.stages:
            for t in g.ops[[o.name for o in g.ops].index(st.op)].inputs:
                cv = g.cviews.get(t)
                if cv is not None and cv[0] == root:
                    c0 = cv[1] // eb
                    cols.append((c0, c0 + g.tensors[t].shape[-1]))
        if cols and second is None and tpbs & seen:
            second = j
        if cols:
            seen |= tpbs
        for i, p in last.items():
            if i not in first and any(min(b, p.c1) > max(a, p.c0) for a, b in cols):
                first[i] = j
    return si, built, first, second


def test_stores_before_their_first_reader_past_round_one(monkeypatch, placements):
    from m100.tools import driver
    cfg, model, _ = _layer("w8a8")
    feed = _prefill_feed(cfg, T, 1, 7)
    got = {}
    # (without the heads' kT / v prefetch: with it the plan with the rounds off builds no late
    # store; test_act_prefetch checks the prefetch with the late stores)
    monkeypatch.setattr(list_schedule, "ACT_PREFETCH", False)
    for on in (True, False):
        monkeypatch.setattr(build_segments, "LATE_READ_ROUNDS", on)
        prog = driver.compile(model, machine="m100").program
        pl = placements[-1]
        _plan_checks(pl)
        tl = pl.timeline
        si, built, first, second = _first_readers(pl)
        assert second is not None, "the heads run in one round: the test checks nothing"
        assert set(first) == set(built), "a store no head reads"
        built_any = sorted({t.segment for t in tl.tasks if t.segment > si})  # (not views)
        before = {r: max([si] + [j for j in built_any if j < r]) for r in set(first.values())}
        if on:  # each store at the end of the last segment with pieces before its first reader
            for i, j in built.items():
                assert j == before[first[i]], (i, j, first[i])
            assert max(built.values()) >= second  # past the first round
        else:  # the rest at the end of the first round
            assert max(built.values()) < second
        res = driver.run(prog, feed)  # full mode: races and deadlocks checked
        assert res.ok and not res.reports, res.reports[:3]
        got[on] = res.outputs
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got[True][k], got[False][k])
