"""The fluid model's per-job arithmetic on Python floats (``sim/fluid.py``: ``finish_min``,
``advance``) against numpy's elementwise operations from their definition -- what the engine
computed before (session 29): the same bits, on random values and on the edges (negative and
zero remaining work, rates below 1e-300, infinite and NaN rates and work)."""

from __future__ import annotations

import numpy as np
import pytest

from m100.sim.fluid import advance, finish_min

EDGES = [0.0, -0.0, 1.0, 1e-9, 1e-310, 5e-324, -1e-12, 1e-300, 2e-300, 3.5, np.inf, np.nan]


def _numpy_min(rem, idx, rates, fin):
    idx = np.array(idx, dtype=np.int64)
    rates = np.array(rates, dtype=np.float64)
    rem = np.array(rem, dtype=np.float64)
    if fin is None:
        t = np.maximum(rem[idx], 0.0) / np.maximum(rates, 1e-300)
    else:
        f = np.array(fin, dtype=bool)
        t = np.zeros(idx.size)
        t[f] = np.maximum(rem[idx[f]], 0.0) / np.maximum(rates[f], 1e-300)
    return float(np.minimum.reduce(t))


def _same(a: float, b: float) -> bool:
    if a != a or b != b:
        return a != a and b != b
    return a == b  # (a signed zero: now + t is the same time either way)


@pytest.mark.parametrize("seed", range(200))
def test_finish_min_equals_numpy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    units = int(rng.integers(n, n + 30))
    rem = rng.uniform(-0.1, 1.0, units)
    rates = rng.uniform(1e-6, 2.0, n) * (10.0 ** rng.integers(-310, 3, n))
    if seed % 3 == 0:  # edge values
        k = int(rng.integers(1, n + 1))
        rates[rng.integers(0, n, k)] = rng.choice(EDGES, k)
        rem[rng.integers(0, units, k)] = rng.choice([e for e in EDGES if e == e and e < 2], k)
    idx = rng.permutation(units)[:n].tolist()
    rl, reml = rates.tolist(), rem.tolist()
    fin_all = bool(np.isfinite(rates).all())
    with np.errstate(all="ignore"):
        if fin_all:
            assert _same(finish_min(reml, idx, rl, None), _numpy_min(reml, idx, rl, None))
        fin = np.isfinite(rates).tolist()
        assert _same(finish_min(reml, idx, rl, fin), _numpy_min(reml, idx, rl, fin))


def test_finish_min_nan_wins_and_inf_stays():
    assert finish_min([1.0, np.nan], [0, 1], [1.0, 1.0], None) != \
        finish_min([1.0, np.nan], [0, 1], [1.0, 1.0], None)
    assert finish_min([1.0], [0], [0.0], None) == 1.0 / 1e-300  # (a rate below 1e-300)
    assert finish_min([1.0, 1.0], [0, 1], [np.inf, np.inf], None) == 0.0
    assert finish_min([1.0], [0], [np.inf], [False]) == 0.0
    assert finish_min([-3.0], [0], [2.0], None) == 0.0


@pytest.mark.parametrize("seed", range(100))
def test_advance_equals_numpy(seed):
    rng = np.random.default_rng(seed)
    units = int(rng.integers(1, 80))
    n = int(rng.integers(0, units + 1))
    idx = rng.permutation(units)[:n]
    rem = rng.uniform(-1.0, 1.0, units)
    rates = rng.uniform(0.0, 3.0, n) * (10.0 ** rng.integers(-300, 5, n))
    dt = float(rng.uniform(0.0, 1e6))
    want = rem.copy()
    want[idx] = want[idx] - rates * dt
    got = rem.tolist()
    advance(got, idx.tolist(), rates.tolist(), dt)
    assert np.array_equal(np.array(got), want)
    assert np.array(got).tobytes() == want.tobytes()
