"""The first full run's race verdict from the first functional run's by the counters' arrivals
(``m100.sim.engine.ARRIVAL_CERT``): the full run keeps no clocks; every join must take the
arrivals the functional run's join of the same block and monitor took (the same first ``k + 1``
arrivals of the counter, and the functional join took ``k + 1``), which makes every block's
clock row the functional run's -- the row certificate (``clock_cert.same``, the reference here)
holds whenever this one does. Full runs with it equal the engine's own (outputs, stats, reports,
records); a racy full run after a race-free functional one (the short copy's update arrives first
with timing) and a join that takes more arrivals with timing than without are not certified.
Mutants: every arrivals certificate holds (the racy run then reports nothing); the join's count
test dropped (``test_a_join_of_more_arrivals_is_not_certified`` fails)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from m100.sim import arrival_cert, engine
from m100.sim.testing import hb
from m100.targets.m100.isa import Copy, DType, Monitor, Space, Sync, Update
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import Program, Symbol
from m100.tools import driver
from test_clock_cert import _feed, _late_writer
from test_replay import CASES, _engine_run, _same


@pytest.fixture
def certs(monkeypatch):
    """Per engine run: (mode, took a certificate, by arrivals, it held)."""
    seen = []
    run = engine.Engine.run

    def spied(self):
        run(self)
        seen.append((self.mode, self.cert is not None, self.arr_ids is not None,
                     self.clocks_ok))

    monkeypatch.setattr(engine.Engine, "run", spied)
    return seen


def _functional_then_full(prog: Program, feed: dict):
    assert driver.run(prog, feed, mode="functional").ok  # (kept, with its race log)
    return driver.run(prog, feed, mode="full")


def _compile(name: str) -> Program:
    build, machine, tpbs = CASES[name]
    return driver.compile(build(), machine=machine, tpbs=tpbs).program


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama"])
def test_full_run_with_the_arrivals_certificate_is_the_engines(name, monkeypatch, certs):
    prog = _compile(name)
    feed = driver.random_inputs(prog, 5)
    want = _engine_run(monkeypatch, prog, feed, "full")  # (its own log and sweep)
    assert want.ok
    del certs[:]
    driver.run(prog, driver.random_inputs(prog, 6), mode="functional")  # (kept, race-free)
    _same(driver.run(prog, feed, mode="full"), want)
    assert certs == [("functional", False, False, None), ("full", True, True, True)]
    # the row certificate (the reference) holds on the same runs
    prog = _compile(name)
    monkeypatch.setattr(engine, "ARRIVAL_CERT", False)
    del certs[:]
    _same(_functional_then_full(prog, driver.random_inputs(prog, 6)),
          driver.run(prog, driver.random_inputs(prog, 6), mode="full"))
    assert ("full", True, False, True) in certs


def test_other_arrivals_with_timing_run_the_race_checks(monkeypatch, certs):
    want = _engine_run(monkeypatch, _late_writer(), _feed(), "full")
    assert [r.kind for r in want.reports] == ["race"]
    del certs[:]
    _same(_functional_then_full(_late_writer(), _feed()), want)
    assert ("full", True, True, False) in certs  # (taken, did not hold: made again)


def test_arrivals_certificate_without_its_test_would_differ(monkeypatch):
    """The mutant: every arrivals certificate holds. The racy full run reports nothing."""
    monkeypatch.setattr(engine, "verdict", lambda *a: True)
    assert _functional_then_full(_late_writer(), _feed()).ok


SHAPE = (64, 128)


def _heavy_first() -> Program:
    """As ``_late_writer``, but the long copy X adds 5 and Z waits for 5: without timing X
    arrives first and Z joins X's clock alone; with timing the short copy Y (adding 1) arrives
    first, so Z's join takes both arrivals -- the functional run's first two, but its join took
    one. Z's row then holds Y's clock too: not the functional run's row (no race either way)."""
    m = get_machine("m100")
    x, r, z = hb(1, 0, DType.F32, SHAPE), hb(0, 0, DType.F32, SHAPE), \
        hb(0, 65536, DType.F32, SHAPE)
    insts = [Copy(tpb=1, src=x, dst=r, sync=Sync(updates=(Update(0, 1 << 0, 5),))),
             Copy(tpb=2, src=hb(2, 0, DType.F32, (4,)), dst=hb(2, 64, DType.F32, (4,)),
                  sync=Sync(updates=(Update(0, 1 << 0, 1),))),
             Copy(tpb=0, src=r, dst=z, sync=Sync(monitors=(Monitor(0, 0, 5),)))]
    syms = [Symbol("x", "input", SHAPE, DType.F32, Space.HBSM, 0, 1),
            Symbol("z", "output", SHAPE, DType.F32, Space.HBSM, 65536, 0)]
    return Program(m.name, m.fingerprint(), {m.cluster_of(0): insts}, symbols=syms)


@pytest.mark.parametrize("arrivals", [True, False])
def test_a_join_of_more_arrivals_is_not_certified(arrivals, monkeypatch, certs):
    """Neither certificate holds (the rows differ), and the run is the engine's."""
    want = _engine_run(monkeypatch, _heavy_first(), _feed(), "full")
    assert want.ok
    monkeypatch.setattr(engine, "ARRIVAL_CERT", arrivals)
    del certs[:]
    _same(_functional_then_full(_heavy_first(), _feed()), want)
    assert ("full", True, arrivals, False) in certs


def test_functional_race_log_names_each_arrival(monkeypatch):
    """The kept functional run's per-counter running values and arrival identities are the
    general loop's and the functional loop's alike, as the certificate reads them (sender record,
    sender block): the flat log grouped by ``by_counter``, the histories by ``hist_ids``."""
    from m100.sim import engine_untimed
    logs = []
    for fast in (True, False):
        monkeypatch.setattr(engine_untimed, "FAST", fast)
        prog = _compile("convnet")
        assert driver.run(prog, driver.random_inputs(prog, 1), mode="functional").ok
        (sched,) = prog.__dict__["_sim_schedule"].values()
        log = sched.race_log[2]
        recs = [SimpleNamespace(index=r[0], stream=r[1], pos=r[2], inst=r[3], unit=r[4])
                for r in sched.recs]
        logs.append(arrival_cert.by_counter(log) if isinstance(log, list) else
                    arrival_cert.hist_ids(log, recs))
    assert logs[0] == logs[1] and logs[0]
    for cums, ids in logs[0].values():
        assert len(cums) == len(ids) and all(i >= 0 and b >= 0 for i, b in ids)


@pytest.mark.parametrize("name", ["convnet", "llama"])
def test_hist_identities_by_block_start_times(name, monkeypatch):
    """``arrival_cert.hist_ids`` (the general loop's per-counter (unit, epoch) identities as (record,
    block)) against an oracle independent of the queues: a unit's epochs named by its blocks'
    start times; and a full run whose race log is those arrivals written out flat (the functional
    loop's other form, grouped by ``by_counter``) takes the certificate and it holds."""
    from m100.sim import engine_untimed
    monkeypatch.setattr(engine_untimed, "FAST", False)  # (the general loop: hist kept)
    prog = _compile(name)
    feed = driver.random_inputs(prog, 1)
    res = driver.run(prog, feed, mode="functional")
    (sched,) = prog.__dict__["_sim_schedule"].values()
    raw = sched.race_log[2]  # (per counter: values, (unit, epoch))
    grouped = arrival_cert.hist_ids(raw, res.records)
    blocks = {}  # (unit, epoch) -> (record index, block): by start time within the unit
    for u in {r.unit for r in res.records}:
        mine = sorted((s, r.index, b) for r in res.records if r.unit == u
                      for b, (s, _) in enumerate(r.blocks))
        for e, (_, i, b) in enumerate(mine, 1):
            blocks[(u, e)] = (i, b)
    assert grouped == {k: (cums, [blocks[x] for x in ids])
                       for k, (cums, ids) in raw.items()} and grouped
    unit_of = {r.index: r.unit for r in res.records}
    flat = []
    order = sorted((k, j) for k, (cums, _) in grouped.items() for j in range(len(cums)))
    for (tpb, c), j in order:  # (an arrival order: per counter as the run's)
        cums, ids = grouped[(tpb, c)]
        flat.append((tpb, c, cums[j]) + ids[j] + (unit_of[ids[j][0]],))
    assert arrival_cert.by_counter(flat) == grouped
    seen = []
    run = engine.Engine.run

    def spied_run(self):
        run(self)
        seen.append((self.mode, self.arr_ids is not None, self.clocks_ok))

    monkeypatch.setattr(engine.Engine, "run", spied_run)
    sched.race_log = sched.race_log[:2] + (flat,)
    assert driver.run(prog, feed, mode="full").ok and seen == [("full", True, True)]


def _by_counter_one_at_a_time(flat):
    """``arrival_cert.by_counter`` written one arrival at a time (the definition)."""
    out: dict = {}
    for tpb, c, val, i, b, su in flat:
        got = out.get((tpb, c))
        if got is None:
            got = out[(tpb, c)] = ([], [])
        got[0].append(val)
        got[1].append((i, b))
    return out


def test_by_counter_equals_one_arrival_at_a_time():
    """Random queues and arrival logs (counters of several TPBs, sizes 0..300): the numpy grouping
    equals the one-at-a-time definition (the dicts' order aside: the certificate reads them by
    counter). Mutants: an unstable sort (kind="quicksort") or the key without the TPB fail it."""
    from types import SimpleNamespace as NS
    rng = np.random.default_rng(11)
    for trial in range(40):
        nrec = int(rng.integers(1, 60))
        blocks = rng.integers(1, 5, nrec)
        perm = rng.permutation(nrec)
        units = []
        for part in np.array_split(perm, int(rng.integers(1, 6))):
            units.append(NS(queue=[NS(index=int(i), inst=NS(sync=NS(blocks=int(blocks[i]))))
                                   for i in part]))
        unit_of = {r.index: u for u, us in enumerate(units) for r in us.queue}
        flat = []
        for _ in range(int(rng.integers(0, 300))):
            i = int(rng.integers(0, nrec))
            flat.append((int(rng.integers(0, 4)), int(rng.integers(0, 3)),
                         int(rng.integers(1, 50)), i, int(rng.integers(0, blocks[i])),
                         unit_of[i]))
        got, want = arrival_cert.by_counter(flat), _by_counter_one_at_a_time(flat)
        assert got == want


def _verdict_in_the_loop(fun, events):
    """The arrivals certificate as the engine tested it before its loop logged the arrivals and
    joins (session 35, the definition): per counter the functional run's ranks by identity (an
    identity it had twice: its last), at each arrival the running value and the running maximum
    of the ranks, at each join (``events``' ``("join", tpb, c, need)``, in the run's order)
    ``k`` by bisection on the values so far, the test there."""
    import bisect
    by = arrival_cert.by_counter(fun)
    hist, ok = {}, True
    for ev in events:
        if ev[0] == "arr":
            _, t, c, val, src, b = ev
            a = hist.get((t, c))
            if a is None:
                f = by.get((t, c))
                a = hist[(t, c)] = ([], [], {x: i for i, x in enumerate(f[1])}, f[0]) \
                    if f is not None else ([], [], {}, [])
            a[0].append(val)
            r = a[2].get((src, b), arrival_cert.NEVER)
            if a[1] and a[1][-1] > r:
                r = a[1][-1]
            a[1].append(r)
        else:
            _, t, c, need = ev
            cums, pmax, _, fcums = hist[(t, c)]
            k = bisect.bisect_left(cums, need)
            if pmax[k] != k or (k > 0 and fcums[k - 1] >= need):
                ok = False
    return ok


def test_verdict_after_the_loop_equals_the_test_at_each_join():
    """``arrival_cert.verdict`` on a run's logged arrivals and joins against the test made at
    each join in the run's order (``_verdict_in_the_loop``): random functional arrival logs
    (several TPBs' counters, repeated identities, amounts 1..4), the full run's arrivals the
    functional's in their order, with a few swapped, dropped, foreign or renamed, joins at random
    points of the run with needs the counter's value reaches by then; both verdicts occur.
    Mutants caught: the join's count test dropped; k by ``side="right"``; the first rank of a
    repeated identity instead of its last; the running maximum not restarted per counter."""
    rng = np.random.default_rng(7)
    seen = set()
    for trial in range(400):
        fun, arr, vals = [], [], {}  # (the full run's arrivals: the functional ones in their
        for _ in range(int(rng.integers(1, 40))):  # order, as (tpb, c, sender, block, amount))
            t, c, a = int(rng.integers(0, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 5))
            i, b = int(rng.integers(0, 12)), int(rng.integers(0, 3))
            v = vals[(t, c)] = vals.get((t, c), 0) + a
            fun.append((t, c, v, i, b, 0))
            arr.append((t, c, i, b, a))
        for _ in range(int(rng.integers(0, 4))):
            kind = int(rng.integers(0, 4))
            j = int(rng.integers(0, len(arr)))
            same = [x for x in range(j + 1, len(arr)) if arr[x][:2] == arr[j][:2]]
            if kind == 0 and same:  # (the next arrival on the same counter first)
                arr[j], arr[same[0]] = arr[same[0]], arr[j]
            elif kind == 1 and len(arr) > 1:
                del arr[j]
            elif kind == 2:
                arr.insert(j, (arr[j][0], arr[j][1], 50, 0, int(rng.integers(1, 5))))
            else:
                t, c, i, b, a = arr[j]
                arr[j] = (t, c, i, (b + 1) % 3, a)
        events, logged, joins, cur = [], [], [], {}
        for t, c, i, b, a in arr:
            v = cur[(t, c)] = cur.get((t, c), 0) + a
            events.append(("arr", t, c, v, i, b))
            logged.append((t, c, v, i, b))
            for _ in range(int(rng.integers(0, 3))):  # joins whose monitor holds now
                (jt, jc), jv = list(cur.items())[int(rng.integers(0, len(cur)))]
                near = [v for t, c, v, *_ in fun if (t, c) == (jt, jc) and v <= jv]
                need = int(rng.integers(1, jv + 1)) if not near or rng.random() < 0.5 else \
                    near[int(rng.integers(0, len(near)))]  # (a functional join's boundary)
                events.append(("join", jt, jc, need))
                joins.append((jt, jc, need))
        want = _verdict_in_the_loop(fun, events)
        assert arrival_cert.verdict(fun, logged, joins) is want, trial
        assert arrival_cert._verdict_python(*(arrival_cert._rows(x, w) for x, w in
                                              ((fun, 5), (logged, 5), (joins, 3)))) is want
        seen.add(want)
    assert seen == {True, False}
    assert arrival_cert.verdict([], [], []) is True
