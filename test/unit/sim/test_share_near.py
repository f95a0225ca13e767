"""``near_rates`` (sim/share_near.py): max-min rates from the candidate columns only give the same
rates and causes, bit for bit, as ``share`` on every demand entry and as its definition
(``test_timing._share_reference``), on random job sets of the kinds the engine hands it (jobs at a
capacity exactly, several freezing steps, idle jobs), whatever other columns the candidates hold
and whatever numbers the links' columns have."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from m100.sim.share_near import near_rates, near_rates_entries
from m100.sim.timing import share

_spec = importlib.util.spec_from_file_location("_sim_test_timing",
                                               Path(__file__).with_name("test_timing.py"))
_tt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tt)
_share_reference = _tt._share_reference  # the definition, written as loops


def _columns(costs, caps, banks, tpbs, rng):
    """The engine's view of the jobs: per job ``{column: alone rate * demand}`` of its nonzero
    demands (bank column ``tpb * banks + bank``; the links numbered after the banks in a random
    order), the capacity and key per column."""
    nbank = tpbs * banks
    links = sorted({k for c in costs for k, v in c.links.items() if v != 0}, key=str)
    links = [links[i] for i in rng.permutation(len(links))]
    col = {k: nbank + i for i, k in enumerate(links)}
    caps_l = [1.0] * nbank + [caps[k] for k in links]
    keys = [None] * nbank + links
    maps = []
    for c in costs:
        w = c.alone
        m = {}
        if np.isfinite(w):
            for t, acc in c.banks.items():
                acc = np.asarray(acc, dtype=np.float64)
                nz = acc.nonzero()[0]
                m.update(zip((t * banks + nz).tolist(), (w * acc[nz]).tolist()))
            for k, v in c.links.items():
                if v != 0:
                    m[col[k]] = w * v
        maps.append(m)
    return maps, caps_l, nbank, keys


@pytest.mark.parametrize("seed", range(40))
def test_near_rates_equal_share_and_the_definition(seed):
    rng = np.random.default_rng(4000 + seed)
    banks, tpbs = 8, 4
    axi = float(rng.choice([85.33333333333333, 64.0, 7.3]))
    caps = {("axi", 0): axi, ("axi", 1): axi, ("drb",): 2 * axi,
            ("ddr",): float(rng.choice([2 * axi, 1.5 * axi])), ("mesh", 0, 1): axi}
    limited = 0
    for _ in range(6):
        costs = [_tt.random_cost(rng, caps, banks, busy_draws=2, dma=0.35, tpbs=tpbs)
                 for _ in range(int(rng.integers(1, 14)))]
        maps, caps_l, nbank, keys = _columns(costs, caps, banks, tpbs, rng)
        w = np.array([c.alone for c in costs], dtype=np.float64)
        # the candidates: every column whose job-order sum is over (1 - 2e-6) of its capacity
        # (what the engine's running sums give, up to their drift), and some others
        tot: dict[int, float] = {}
        for m in maps:
            for c, v in m.items():
                tot[c] = tot.get(c, 0.0) + v
        cands = {c for c, s in tot.items() if s > caps_l[c] * (1 - 2e-6)}
        cands |= {int(c) for c in rng.choice(len(caps_l), size=int(rng.integers(0, 5)))}
        with np.errstate(invalid="ignore"):
            got_c: list[str] = []
            got = near_rates(maps, w, sorted(cands), caps_l, nbank, keys, got_c)
            # the same from the candidates' entries (job order; within a job reversed)
            ents = [(j, c, m[c]) for j, m in enumerate(maps) for c in sorted(cands, reverse=True)
                    if c in m]
            ent_c: list[str] = []
            ent = near_rates_entries([e[0] for e in ents], [e[1] for e in ents],
                                     [e[2] for e in ents], w, sorted(cands), caps_l, nbank,
                                     keys, ent_c)
            assert ent.tobytes() == got.tobytes() and ent_c == got_c
            want_c: list[str] = []
            want = share(costs, caps, banks, want_c)
            ref, ref_c = _share_reference(costs, caps, banks, [])
        assert got.tobytes() == np.asarray(want).tobytes() == ref.tobytes()
        assert got_c == want_c == ref_c
        limited += any(got_c)
    assert limited or seed % 4  # (most seeds have limited job sets: causes compared)


def test_near_rates_need_every_near_column():
    """A near column missing from the candidates changes the rates (the test above would see
    a candidate set that is too small): two DMAs on one AXI master share it."""
    caps = {("axi", 0): 64.0, ("drb",): 128.0}
    maps = [{0: 64.0, 1: 64.0}, {0: 64.0, 1: 64.0}]  # column 0: axi 0, column 1: the DRB
    w = np.array([1 / 100.0, 1 / 100.0])
    keys, caps_l = [("axi", 0), ("drb",)], [caps[("axi", 0)], caps[("drb",)]]
    causes: list[str] = []
    full = near_rates(maps, w, [0, 1], caps_l, 0, keys, causes)
    assert full.tolist() == [w[0] / 2, w[1] / 2] and causes == ["axi", "axi"]
    # without the AXI master: the DRB alone (at its capacity exactly) limits nobody
    assert near_rates(maps, w, [1], caps_l, 0, keys, []).tolist() == w.tolist()
    assert near_rates(maps, w, [], caps_l, 0, keys, []).tolist() == w.tolist()


def test_near_rates_refuse_a_zero_alone_rate():
    with pytest.raises(ValueError, match="alone rate"):
        near_rates([{0: 1.0}], np.array([0.0]), [0], [1.0], 1, [None], [])
