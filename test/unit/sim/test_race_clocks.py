"""The clock rows made after a functional loop (``sim/race_clocks.py``) against the loop's own
arithmetic written out here: a small event-by-event functional run of random units, blocks,
monitors and counter updates (every block one cycle; arrivals at its end's time, before the
units they wake start; joins the prefix maxima of the arrivals' clocks, ``bisect_left`` on the
counter's values; a row kept at each start). The run's call log, start times and arrival log go
to :func:`~m100.sim.race_clocks.clock_rows`, which must give every kept row. Random runs have
counters updated by unordered units (an arrival that does not dominate the join before it: the
general path) and ordered chains (the fast path); both paths are checked on every run, and the
end-to-end comparison with the loop's own rows is ``test/e2e/test_race_log_after.py``."""

from __future__ import annotations

import random
from bisect import bisect_left
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from m100.sim import race_clocks
from m100.sim.race_batch import RaceBatch
from m100.targets.m100.isa_base import Monitor

_MAXB = 8


def _program(rng: random.Random, units: int, keys: int):
    """Records by index: (unit, blocks, monitors, updates); an update: (key, amount, per
    block?)."""
    recs = []
    for u in range(units):
        for _ in range(rng.randint(1, 6)):
            nb = rng.choice([1, 1, 1, 2, 3])
            mons = []
            for _ in range(rng.choice([0, 1, 1, 2, 3])):
                key = rng.randrange(keys)
                pb = rng.choice([0, 0, 1])
                mons.append(Monitor(key // 4, key % 4, rng.randint(-1, 3), pb))
            ups = [(rng.randrange(keys), rng.randint(1, 2), rng.random() < 0.3)
                   for _ in range(rng.choice([0, 1, 1, 2]))]
            recs.append(SimpleNamespace(index=len(recs), unit=u, nb=nb, ups=ups,
                                        inst=SimpleNamespace(sync=SimpleNamespace(
                                            monitors=tuple(mons)))))
    return recs


def _run(recs: list, units: int):
    """The functional loop's events and clocks, written out: (calls, start times, arrivals,
    the kept rows in start order)."""
    queues = [deque(r for r in recs if r.unit == u) for u in range(units)]
    vc = np.eye(units, dtype=np.int64)
    counters: dict = {}
    cums: dict = {}
    joins: dict = {}
    waiting: dict = {}
    cur = [None] * units  # (record, block) running or next
    calls, times, arrivals, rows = [], [], [], []
    nxt: list = []
    fifo: deque = deque()
    now = 0

    def start(u):
        if cur[u] is None:
            if not queues[u]:
                return
            cur[u] = (queues[u].popleft(), 0)
        rec, b = cur[u]
        for mon in rec.inst.sync.monitors:
            if mon.per_block == 0 and b > 0:
                continue
            need = mon.expected + b * mon.per_block
            key = (mon.tpb, mon.counter)
            if counters.get(key, 0) < need:
                waiting.setdefault(key, set()).add(u)
                return
        for mon in rec.inst.sync.monitors:
            if mon.per_block == 0 and b > 0:
                continue
            need = mon.expected + b * mon.per_block
            if need <= 0:
                continue
            key = (mon.tpb, mon.counter)
            k = bisect_left(cums[key], need)
            np.maximum(vc[u], joins[key][k], out=vc[u])
        rows.append(vc[u].copy())
        calls.append((rec.index, b))
        times.append(float(now))
        nxt.append((u, rows[-1]))

    for u in range(units):
        start(u)
    while True:
        while fifo:
            key, amount, snap, ri, b, su = fifo.popleft()
            val = counters[key] = counters.get(key, 0) + amount
            cums.setdefault(key, []).append(val)
            js = joins.setdefault(key, [])
            js.append(snap if not js else np.maximum(js[-1], snap))
            arrivals.append((key[0], key[1], val, ri, b, su))
            for w in sorted(waiting.pop(key, ())):  # (a waiting unit: not running)
                start(w)
        if not nxt:
            return calls, np.array(times), arrivals, rows
        now += 1
        ending, nxt = nxt, []
        for u, snap in ending:
            rec, b = cur[u]
            calls.append((rec.index, -1))
            vc[u, u] += 1
            last = b == rec.nb - 1
            for key, amount, per_block in rec.ups:
                if per_block or last:
                    fifo.append(((key // 4, key % 4), amount, snap, rec.index, b, u))
            cur[u] = None if last else (rec, b + 1)
            start(u)


def _clock_rows(recs, units, calls, times, arrivals, general):
    n_starts = sum(1 for _, b in calls if b >= 0)
    rb = RaceBatch(units, rows=max(1, n_starts))
    d = np.array(calls, dtype=np.int64).reshape(-1, 2)
    st = d[:, 1] >= 0
    unit_of = np.array([r.unit for r in recs], dtype=np.int64)
    sid = np.full(len(recs) * _MAXB, -1, dtype=np.int64)
    sid[d[st, 0] * _MAXB + d[st, 1]] = np.arange(n_starts)
    mons = [recs[r].inst.sync.monitors for r in d[st, 0].tolist()]
    race_clocks.clock_rows(rb, unit_of[d[st, 0]], mons, d, times, arrivals,
                           lambda r, b: sid[r * _MAXB + b], general=general)
    return rb


@pytest.mark.parametrize("seed", range(6))
def test_rows_equal_the_loops_arithmetic(seed, monkeypatch):
    rng = random.Random(seed)
    took = {"general": 0, "fast": 0, "unforced": 0}
    orig = race_clocks._rows_general

    def general(*a):
        took["general"] += 1
        return orig(*a)

    monkeypatch.setattr(race_clocks, "_rows_general", general)
    for trial in range(60):
        units = rng.randint(1, 6)
        keys = rng.choice([2, 4, 8])
        recs = _program(rng, units, keys)
        calls, times, arrivals, rows = _run(recs, units)
        if not rows:
            continue
        want = np.array(rows)
        for forced in (False, True):
            before = took["general"]
            rb = _clock_rows(recs, units, calls, times, arrivals, forced)
            if not forced:
                took["fast" if took["general"] == before else "unforced"] += 1
            assert rb.used == len(rows)
            assert np.array_equal(rb.buf[:rb.used], want), (seed, trial, forced)
    # (both paths taken without forcing: some runs' arrivals do not dominate)
    assert took["fast"] and took["unforced"]


def test_a_monitor_without_its_arrival_is_refused():
    """A start whose monitor no arrival reaches (a log not of a run) is refused."""
    rb = RaceBatch(1, rows=1)
    d = np.array([(0, 0), (0, -1)], dtype=np.int64)
    with pytest.raises(AssertionError):
        race_clocks.clock_rows(rb, np.zeros(1, dtype=np.int64), [(Monitor(0, 1, 2, 0),)], d,
                               np.zeros(1),
                               [(0, 1, 1, 0, 0, 0)], lambda r, b: r * 0 + b * 0)
