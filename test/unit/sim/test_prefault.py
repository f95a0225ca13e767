"""The pages a run is about to write, backed at once (``Memory.prefault``, ``mempool.populate``;
session 33): no byte of any space changes, every page of every write range is resident
afterwards, no page farther than ``PREFAULT_GAP`` from a write range is backed, nothing is backed
with ``PREFAULT`` off -- against a brute-force merge of the ranges written out here -- and whole
first runs with and without it are the same runs."""

import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.sim import mempool
from m100.sim.memory import Memory
from m100.targets.m100.isa import Space
from m100.targets.m100.machine import get_machine

pytestmark = pytest.mark.skipif(mempool._MINCORE is None, reason="no mincore(2) here")

PAGE = mempool.PAGE
M = get_machine("tiny")
HB = int(Space.HBSM)
TPBS = min(M.num_tpbs, 4)


def _resident(buf) -> set:
    return {p for a, b in mempool.resident_runs(buf).tolist() for p in range(a, b)}


def _reference_pages(rows, size, gap) -> tuple[set, set]:
    """(pages that must be backed, pages that may be) of one space's ``rows`` (lo, hi): the
    ranges sorted and merged by hand, two closer than ``gap`` bytes joined."""
    need, hull = set(), set()
    iv = sorted((lo, hi) for lo, hi in rows if hi > lo)
    merged: list[list[int]] = []
    for lo, hi in iv:
        need.update(range(lo // PAGE, -(-min(hi, size) // PAGE)))
        if merged and lo <= merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    for lo, hi in merged:
        hull.update(range(lo // PAGE, -(-min(hi, size) // PAGE)))
    return need, hull


span = st.tuples(st.integers(0, TPBS - 1), st.integers(0, 300 * PAGE), st.integers(0, 40 * PAGE))


@pytest.fixture(autouse=True)
def _fresh_pool(monkeypatch):
    monkeypatch.setattr(mempool, "_free", {})  # (fresh mappings: nothing resident before)


@settings(max_examples=40, deadline=None)
@given(st.lists(span, min_size=1, max_size=12), st.sampled_from([0, PAGE, 1 << 16]),
       st.booleans())
def test_prefault_backs_the_written_pages_and_changes_no_byte(spans, gap, on):
    mempool._free.clear()
    mem = Memory(M)
    size = mem.space(Space.HBSM, 0).size
    rng = np.random.default_rng(len(spans))
    before = {}
    for t in range(TPBS):  # some bytes written already: they must stay
        sp = mem.space(Space.HBSM, t)
        data = rng.integers(1, 256, 3000, dtype=np.uint8)
        sp.write_range(t * 5000, data)
        before[t] = _resident(sp.buf)
    rows = np.array([(HB * 65536 + t, lo, lo + n) for t, lo, n in spans], dtype=np.int64)
    old_gap, old_on = mempool.PREFAULT_GAP, mempool.PREFAULT
    mempool.PREFAULT_GAP, mempool.PREFAULT = gap, on
    try:
        mem.prefault(rows)
    finally:
        mempool.PREFAULT_GAP, mempool.PREFAULT = old_gap, old_on
    for t in range(TPBS):  # (pages first: reading the bytes makes them resident)
        sp = mem.space(Space.HBSM, t)
        need, hull = _reference_pages([(lo, lo + n) for tt, lo, n in spans if tt == t], size, gap)
        res = _resident(sp.buf) - before[t]
        if on:
            assert need - before[t] <= res and res <= hull
        else:
            assert not res
    for t in range(TPBS):
        got = mem.space(Space.HBSM, t).buf
        assert not got[:t * 5000].any() and not got[t * 5000 + 3000:].any()
        assert got[t * 5000:t * 5000 + 3000].all()  # (written 1..255: still there)


def test_prefault_rows_of_other_spaces_and_empty_rows():
    """DDR rows are backed in the DDR's mapping; rows without bytes, and no rows, back nothing."""
    mem = Memory(M)
    ddr = mem.space(Space.DDR, 0)
    mem.prefault(np.zeros((0, 3), dtype=np.int64))
    mem.prefault(np.array([(int(Space.DDR) * 65536, 10 * PAGE, 10 * PAGE)], dtype=np.int64))
    assert not _resident(ddr.buf)
    mem.prefault(np.array([(int(Space.DDR) * 65536, 10 * PAGE + 5, 12 * PAGE + 1)],
                          dtype=np.int64))
    assert _resident(ddr.buf) == {10, 11, 12} and not ddr.buf[:14 * PAGE].any()


def _digest(res) -> str:
    d = hashlib.sha256()
    for k in sorted(res.outputs):
        d.update(np.asarray(res.outputs[k]).tobytes())
    d.update(json.dumps(res.stats, sort_keys=True, default=str).encode())
    d.update(json.dumps([r.to_dict() for r in res.reports], sort_keys=True).encode())
    d.update(repr([(r.index, r.unit, r.start, r.end, r.blocks) for r in res.records]).encode())
    return d.hexdigest()


@pytest.mark.parametrize("model", ["mlp", "conv_relu_maxpool"])
def test_first_runs_with_and_without_prefault_are_the_same(model, monkeypatch):
    """A compiled model's first functional and full runs (fresh program objects: no kept
    schedule) with the pages backed at once equal those without; the first functional run
    backs the HBSM pages it writes before its loop (resident after the pre-pass), not the DDR's
    (a DDR write may be sparse over a wide span)."""
    from m100.frontend import models
    from m100.sim import engine_checks
    from m100.tools import driver

    cr = driver.compile(getattr(models, model)(), machine="tiny")
    data = cr.program.to_bytes()
    from m100.targets.m100.program import Program

    inputs = driver.random_inputs(cr.program, 0)
    got = {}
    for on in (False, True):
        monkeypatch.setattr(mempool, "PREFAULT", on)
        mempool._free.clear()
        prog = Program.from_bytes(data)
        got[on] = [_digest(driver.run(prog, inputs, mode=m)) for m in ("functional", "full")]
    assert got[True] == got[False]
    # the pre-pass backs what the blocks write: hook the loop, look at the HBSMs there
    seen = {}
    orig = engine_checks.Checks._derive_blocks

    def derive(self):
        ddr = self.mem.space(Space.DDR, 0).buf
        seen["ddr"] = len(_resident(ddr))
        seen["before"] = sum(len(_resident(self.mem.space(Space.HBSM, t).buf))
                             for t in range(M.num_tpbs))
        orig(self)
        seen["res"] = {t: len(_resident(self.mem.space(Space.HBSM, t).buf))
                       for t in range(M.num_tpbs)}
        seen["ddr_after"] = len(_resident(ddr))

    monkeypatch.setattr(mempool, "PREFAULT", True)
    monkeypatch.setattr(engine_checks.Checks, "_derive_blocks", derive)
    mempool._free.clear()
    driver.run(Program.from_bytes(data), inputs, mode="functional")
    assert sum(seen["res"].values()) > seen["before"]
    assert seen["ddr_after"] == seen["ddr"]  # (DDR writes are left to the page faults)
    assert any(w.space is Space.DDR for r in cr.program.streams.values() for i in r
               for _, w, wr in i.walks() if wr)  # (the program does write DDR)


def test_the_pre_pass_backs_hbsm_writes_only(monkeypatch):
    """A program of two DMAs -- DDR -> TPB 1's HBSM at 16 KiB, HBSM -> DDR at 5 MiB: the
    first run's pre-pass backs the HBSM pages the first writes, not the DDR page of the second
    (a DDR write's bounds may span far more pages than it touches)."""
    from m100.sim import engine_checks
    from m100.sim.simulator import Simulator
    from m100.targets.m100.isa import Dma, DType, Level, Walk
    from m100.targets.m100.program import Program

    n = 2048
    a = Dma(engine=0, src=Walk(Space.DDR, 0, 0, DType.F32, (Level(0, 1, n - 1),)),
            dst=Walk(Space.HBSM, 1, 1 << 14, DType.F32, (Level(0, 1, n - 1),)))
    b = Dma(engine=1, src=Walk(Space.HBSM, 1, 1 << 15, DType.F32, (Level(0, 1, n - 1),)),
            dst=Walk(Space.DDR, 0, 5 << 20, DType.F32, (Level(0, 1, n - 1),)))
    prog = Program.empty(M)
    prog.streams = {-1: [a, b]}
    seen = {}
    orig = engine_checks.Checks._derive_blocks

    def derive(self):
        orig(self)
        seen["hbsm"] = _resident(self.mem.space(Space.HBSM, 1).buf)
        seen["ddr"] = _resident(self.mem.space(Space.DDR, 0).buf)

    monkeypatch.setattr(engine_checks.Checks, "_derive_blocks", derive)
    mempool._free.clear()
    res = Simulator(prog, M, mode="functional").run({})
    assert res.ok, res.reports
    assert set(range((1 << 14) // PAGE, ((1 << 14) + 4 * n) // PAGE)) <= seen["hbsm"]
    assert (5 << 20) // PAGE not in seen["ddr"]
