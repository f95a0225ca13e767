"""``SharePack`` (sim/share_pack.py): share's demand entries kept from call to call give the same
rates and causes, bit for bit, as ``share`` on the same jobs built afresh and as the definition
(``test_timing._share_reference``), over random sequences of job sets that change the way the
engine's do (finished jobs removed, started ones appended with higher numbers) and ways it does
not (numbers out of order: built afresh)."""

from __future__ import annotations

import numpy as np
import pytest

import importlib.util
from pathlib import Path

from m100.sim.share_pack import SharePack
from m100.sim.timing import Cost, share

_spec = importlib.util.spec_from_file_location("_sim_test_timing",
                                               Path(__file__).with_name("test_timing.py"))
_tt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tt)
_share_reference = _tt._share_reference  # the definition, written as loops


def _cost(rng, caps, banks) -> Cost:
    """A job at a capacity now and then, as the engine's are, or idle (test_timing's generator)."""
    return _tt.random_cost(rng, caps, banks, busy_draws=2, dma=0.35, tpbs=4)


@pytest.mark.parametrize("seed", range(30))
def test_share_pack_equals_share_afresh_and_the_definition(seed):
    rng = np.random.default_rng(2000 + seed)
    banks = 8
    axi = float(rng.choice([85.33333333333333, 64.0, 7.3]))
    caps = {("axi", 0): axi, ("axi", 1): axi, ("drb",): 2 * axi,
            ("ddr",): float(rng.choice([2 * axi, 1.5 * axi])), ("mesh", 0, 1): axi}
    pool = [_cost(rng, caps, banks) for _ in range(12)]
    pack = SharePack()
    jobs: list = []  # (serial, cost): the engine's jobs, numbered in start order
    serial = 0
    limited = 0
    for step in range(60):
        r = rng.random()
        if r < 0.05:  # not the engine's way: numbers out of order (built afresh)
            jobs = [jobs[i] for i in rng.permutation(len(jobs))]
        elif r < 0.1:
            jobs = []
        else:
            keep = rng.random(len(jobs)) < 0.75
            jobs = [j for j, k in zip(jobs, keep) if k]
            for _ in range(int(rng.integers(0, 4))):  # one cost may be several jobs'
                serial += int(rng.integers(1, 3))
                jobs.append((serial, pool[int(rng.integers(0, len(pool)))]))
        costs = [c for _, c in jobs]
        serials = np.array([s for s, _ in jobs], dtype=np.int64)
        with np.errstate(invalid="ignore"):
            got_c: list[str] = []
            got = pack.share(serials, costs, caps, banks, got_c)
            want_c: list[str] = []
            want = share(costs, caps, banks, want_c)
            ref, ref_c = _share_reference(costs, caps, banks, [])
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes() == ref.tobytes(), step
        assert got_c == want_c == ref_c, step
        limited += any(got_c)
    assert limited  # some job sets were limited (causes compared)
