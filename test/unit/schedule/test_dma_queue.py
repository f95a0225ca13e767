"""CCB DMA engines with several transfers in flight (``Machine.dma_outstanding``, session 11).

Oracle: the engine's definition, written out here by hand (:func:`_recurrence`): setups serial,
at most ``depth`` transfers in flight (from the setup's start to the data's end), data phases in
queue order. Every number comes from the machine's fields. The plan (the list scheduler, its
:class:`DmaQueue`) and the interpreter (``sim/dma_ahead.py``) must both give it, exactly, for
back-to-back transfers; at depth 1 it is the serial engine of sessions 1-10.
"""

from __future__ import annotations

import random

import pytest

from m100.passes.schedule import timeline as T
from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.dma_queue import DmaQueue
from m100.passes.schedule.examples import GraphBuilder
from m100.sim.testing import run
from m100.targets.m100.isa import DType, Dma, Space, Walk
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _recurrence(depth, S, jobs):
    """(setup start, data start, data end) of ``jobs`` [(ready, latency after the setup, data
    cycles)] run in this order by an engine of ``depth``: the definition."""
    s, d, e = [], [], []
    for i, (ready, lat, data) in enumerate(jobs):
        si = ready
        if i >= 1:
            si = max(si, s[i - 1] + S)
        if i >= depth:
            si = max(si, e[i - depth])
        di = si + S + lat
        if i >= 1:
            di = max(di, e[i - 1])
        s.append(si)
        d.append(di)
        e.append(di + data)
    return s, d, e


def _machine(depth):
    # one engine: every transfer of the test goes to it in the plan as in the program
    return M100.replace(dma_outstanding=depth, ccb_dma_engines=1)


def _ends(depth, n, k):
    m = _machine(depth)
    S = m.dma_setup_cycles
    lat = m.ddr_latency + m.hbsm_latency
    data = n / m.bytes_per_cycle(m.axi_bandwidth)  # AXI-bound (< the DDR)
    return _recurrence(depth, S, [(0.0, lat, data)] * k)[2]


def test_the_recurrence_by_hand():
    """The numbers of 64 KiB loads on the m100: 32 + 200 + 20 cycles, then 768 of data."""
    assert _ends(1, 65536, 3) == [1020, 2040, 3060]
    # the second one's setup and latency ran beside the first's: only its data is added; the
    # third waits for the first to end (depth 2), its latency then overlaps the second's data
    assert _ends(2, 65536, 3) == [1020, 1788, 2556]
    # 4 KiB (48 cycles of data): the latency is longer than the data, the depth binds
    assert _ends(2, 4096, 3) == [300, 348, 600]
    assert _ends(3, 4096, 3) == [300, 348, 396]


def _dma(i, n):
    return Dma(0, Walk.strided(Space.DDR, 0, i * (1 << 22), DType.I8, (n,)),
               Walk.strided(Space.HBSM, 0, i * n, DType.I8, (n,)))


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("n", [4096, 65536])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_interpreter_back_to_back(depth, n, k):
    res, _ = run([_dma(i, n) for i in range(k)], machine=_machine(depth), mode="timing")
    assert [r.end for r in res.records] == pytest.approx(_ends(depth, n, k), abs=1e-9)
    assert res.stats["total_cycles"] == pytest.approx(_ends(depth, n, k)[-1], abs=1e-9)


def _builder(m):
    b = GraphBuilder()
    x = b.input((1, 16, 16, 32))
    g = b.output(b.conv(x, 32, 3))
    s = T.Scheduler(CostModel(m), g)
    segs = [T.SegmentCfg((T.StageCfg(g.ops[0].name, (0, 1)),))]
    bld = T.PlanBuilder(s, T.Plan(segments=segs))
    bld.piece = None  # tasks outside a piece
    return bld


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("n", [4096, 65536])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_plan_back_to_back(depth, n, k):
    bld = _builder(_machine(depth))
    ts = [bld.add(kind="dma-in", unit="dma", tpb=-1, op="w", tensor="w", nbytes=float(n),
                  cycles=bld.cm.dma_cycles(n, "ddr"), deps=[], dst_tpbs=(0,), src="ddr",
                  dst="hbsm", role="w") for _ in range(k)]
    assert [t.end for t in ts] == pytest.approx(_ends(depth, n, k), abs=1e-9)
    assert [t.start for t in ts] == pytest.approx(
        _recurrence(depth, 32, [(0.0, 220, n / M100.bytes_per_cycle(M100.axi_bandwidth))] * k)[0])


def test_a_transfer_reading_what_the_one_in_flight_writes_is_not_issued_ahead():
    """DDR -> HBSM, then HBSM -> DDR of the same HBSM bytes on the same engine (no wait: queue
    order): the second starts only when the first ends, as at depth 1."""
    m = _machine(2)
    n = 65536
    load = _dma(0, n)
    store = Dma(0, load.dst, Walk.strided(Space.DDR, 0, 1 << 24, DType.I8, (n,)))
    other = Dma(0, Walk.strided(Space.HBSM, 0, n, DType.I8, (n,)), store.dst)  # not overlapping
    full = m.dma_setup_cycles + m.ddr_latency + m.hbsm_latency + n / m.bytes_per_cycle(
        m.axi_bandwidth)
    res, _ = run([load, store], machine=m, mode="timing")
    assert [r.end for r in res.records] == pytest.approx([full, 2 * full])
    res, _ = run([load, other], machine=m, mode="timing")
    assert res.records[1].end == pytest.approx(full + n / m.bytes_per_cycle(m.axi_bandwidth))


@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_queue_placements_are_the_in_order_engine(depth, seed):
    """Transfers placed in any order of readiness (gap filling: a later one may go before ones
    already placed): the final queue, run in its order by the definition, gives every placed
    time exactly -- the interpreter (which runs the queue in that order) agrees with the plan."""
    rng = random.Random(seed)
    S = 32.0
    q = DmaQueue(depth, S)
    placed = []
    for _ in range(300):
        ready = rng.choice([0.0, rng.uniform(0, 20000)])
        lat = rng.choice([0.0, 20.0, 220.0])
        data = rng.choice([0.75, 10.0, 48.0, 768.0, rng.uniform(0, 3000)])
        s0, d0, k = q.earliest(ready, lat, data)
        q.insert(k, s0, d0, d0 + data)
        placed.append((s0, ready, lat, data, d0))
    placed.sort()
    s, d, e = _recurrence(depth, S, [(r, la, da) for _, r, la, da, _ in placed])
    assert s == pytest.approx([p[0] for p in placed], abs=1e-6)
    assert d == pytest.approx([p[4] for p in placed], abs=1e-6)
    assert q.s == pytest.approx(s, abs=1e-6) and q.e == pytest.approx(e, abs=1e-6)
    # and nothing earlier was possible: appending each at its ready time is never earlier
    # than gap filling for the first one placed (an empty queue)
    q2 = DmaQueue(depth, S)
    assert q2.earliest(5.0, 220.0, 10.0) == (5.0, 5.0 + S + 220.0, 0)


@pytest.mark.parametrize("seed", range(4))
def test_stream_period_is_the_recurrence_steady_state(seed):
    """``Machine.dma_stream_period`` (what ``CostModel.dma_occupancy`` charges a transfer of a
    stream, and what the tiler counts) is the per-transfer time of a long back-to-back stream
    run by the definition: the average over D transfers once the stream is steady, exactly."""
    from fractions import Fraction
    rng = random.Random(seed)
    for _ in range(200):
        depth = rng.randint(1, 5)
        m = M100.replace(dma_outstanding=depth, dma_setup_cycles=rng.randint(1, 64),
                         ddr_latency=rng.randint(1, 400), hbsm_latency=rng.randint(1, 40))
        S = m.dma_setup_cycles
        fixed = m.dma_fixed_latency(True, True)
        data = rng.choice([0, rng.randint(0, 64), rng.randint(0, 3000)])
        n, k = 60 * depth, 10 * depth
        e = _recurrence(depth, Fraction(S), [(Fraction(0), Fraction(fixed - S),
                                               Fraction(data))] * n)[2]
        assert m.dma_stream_period(Fraction(fixed + data), Fraction(fixed)) == \
            (e[-1] - e[-1 - k]) / k


@pytest.mark.parametrize("src,dst", [("ddr", "hbsm"), ("hbsm", "ddr"), ("sram", "hbsm"),
                                     ("ddr", "sram"), ("sram", "sram")])
def test_plan_and_interpreter_charge_the_same_fixed_latency(src, dst):
    """A single transfer's cycles before its data: the interpreter's cost (``sim/timing.py``)
    and the plan's ``CostModel.dma_latency`` are both ``Machine.dma_fixed_latency``; the
    occupancy of a stream is the period of that latency and the data."""
    from m100.sim.timing import CostModel as SimCost
    m = _machine(2)
    sp = {"ddr": Space.DDR, "hbsm": Space.HBSM, "sram": Space.SRAM}
    walk = {s: Walk.strided(sp[s], 0, k << 20, DType.I8, (4096,))
            for k, s in enumerate(["ddr", "hbsm", "sram"])}
    dst_walk = walk[dst] if dst != src else Walk.strided(sp[dst], 0, 8 << 20, DType.I8, (4096,))
    c = SimCost(m).cost(Dma(0, walk[src], dst_walk), 0)
    cm = CostModel(m)
    assert c.latency == cm.dma_latency(src, dst) == m.dma_fixed_latency(
        "ddr" in (src, dst), "hbsm" in (src, dst))
    cyc = cm.dma_cycles(4096, src, dst=dst)
    assert cm.dma_occupancy(cyc, src, dst) == m.dma_stream_period(cyc, c.latency)


def _earliest_by_positions(q: DmaQueue, ready, lat, data):
    """:meth:`DmaQueue.earliest` by its definition: every open position from the first whose
    setup start could follow ``ready``, in order, each tested by ``_at``; else the end."""
    from bisect import bisect_left
    i = bisect_left(q.open, ready + q.setup - 1e-9)
    while i < len(q.open):
        k = bisect_left(q.s, q.open[i])
        r = q._at(k, ready, lat, data)
        if r is not None:
            return r[0], r[1], k
        i += 1
    r = q._at(len(q.s), ready, lat, data)
    return r[0], r[1], len(q.s)


def _insert_plain(q, k, s0, d0, e0):
    """``DmaQueue.insert`` by its definition: forget the ``open`` entries of the positions whose
    rule reads the neighbourhood of ``k``, insert, then test each of them again (``_free``)."""
    from bisect import bisect_left, insort
    s, op, D = q.s, q.open, q.depth
    lo_k, hi_k = max(0, k - D), min(len(s), k + D)
    for j in range(lo_k, hi_k):
        i = bisect_left(op, s[j])
        if i < len(op) and op[i] == s[j]:
            del op[i]
    s.insert(k, s0)
    q.d.insert(k, d0)
    q.e.insert(k, e0)
    for j in range(lo_k, min(len(s), hi_k + 1)):
        if q._free(j):
            i = bisect_left(op, s[j])
            if i >= len(op) or op[i] != s[j]:
                insort(op, s[j])


@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("seed", range(8))
def test_queue_shortcuts_are_the_plain_queue(depth, seed):
    """The queue's shortcuts for distinct setup starts (one slice update of ``open`` per
    insertion, the next open position searched after the last one; the session-27 switch
    ``DmaQueue.fast`` was dropped in session 31): the same placements, positions and queue
    state, exactly, as the plain definitions written out here (:func:`_earliest_by_positions`,
    :func:`_insert_plain`) -- with transfers ready together, back to back and into gaps."""
    rng = random.Random(seed)
    S = rng.choice([32.0, 1.0, 7.5])
    fast, plain = DmaQueue(depth, S), DmaQueue(depth, S)
    horizon = 0.0
    for step in range(400):
        ready = rng.choice([0.0, horizon, rng.uniform(0, horizon + 1000), 0.25 * rng.randrange(40)])
        lat = rng.choice([0.0, 20.0, 220.0])
        data = rng.choice([0.0, 0.75, 10.0, 48.0, 768.0, rng.uniform(0, 3000)])
        got = fast.earliest(ready, lat, data)
        assert got == _earliest_by_positions(fast, ready, lat, data), step
        want = _earliest_by_positions(plain, ready, lat, data)
        _insert_plain(plain, want[2], want[0], want[1], want[1] + data)
        assert got == want, step
        fast.insert(got[2], got[0], got[1], got[1] + data)
        assert (fast.s, fast.d, fast.e, fast.open) == (plain.s, plain.d, plain.e, plain.open), step
        horizon = max(horizon, fast.e[-1])
