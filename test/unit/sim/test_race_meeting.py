"""The sweep's pairs of meeting intervals (``race_batch._meeting``, session 36: the searches'
queries in key order, the second part for reads only) are the pairs the sweep enumerated before
(the searches' queries in arrival order, every access in the second part; written out below as
the reference) less that part's pairs of two writes: the same multiset of (a, b) index pairs
then, and the same set of unordered pairs (what the sweep tests) -- each dropped pair is in the
first part already -- on random logs of many spaces, equal starts and ends, touching intervals and
long runs of one address (the sweep's verdict is tested against a brute force in
``test_race_index.py``)."""

import numpy as np
import pytest

from m100.sim.race_batch import _ADDR, _meeting


def _old_pairs(key, hkey, w, reads_only=False):
    """The sweep's enumeration before session 36, written out: (i) each write (arrival order)
    against the accesses that start inside it, (ii) each access (arrival order) against the
    writes that start strictly inside it."""
    i32 = np.int32
    tot = key.size
    order = np.argsort(key, kind="stable").astype(i32)
    ks = key[order]
    wi = np.flatnonzero(w).astype(i32)
    f1 = np.searchsorted(ks, key[wi], "left")
    n1 = np.searchsorted(ks, hkey[wi], "left") - f1
    ow = order[w[order]]
    kw = key[ow]
    f2 = np.searchsorted(kw, key, "right")
    n2 = np.maximum(np.searchsorted(kw, hkey, "left") - f2, 0)
    out = []
    for av, first, cnt, src in ((wi, f1, n1, order), (np.arange(tot, dtype=i32), f2, n2, ow)):
        for a, f, c in zip(av.tolist(), first.tolist(), cnt.tolist()):
            if reads_only and src is ow and w[a]:
                continue
            out += [(a, int(b)) for b in src[f:f + c]]
    return sorted(out)


def _new_pairs(key, hkey, w):
    out = []
    for av, first, cnt, src in _meeting(key, hkey, w):
        assert first.size == av.size == cnt.size
        for a, f, c in zip(av.tolist(), first.tolist(), cnt.tolist()):
            out += [(int(a), int(b)) for b in src[f:f + c]]
    return sorted(out)


@pytest.mark.parametrize("seed", range(40))
def test_meeting_pairs_equal_the_arrival_order_enumeration(seed):
    rng = np.random.default_rng(seed)
    tot = int(rng.integers(1, 300))
    spaces = int(rng.integers(1, 4))
    span = int(rng.choice([8, 64, 4096]))
    code = rng.integers(0, spaces, tot)
    lo = rng.integers(0, span, tot)
    if seed % 3 == 0:  # long runs of one start (a buffer's many accesses)
        lo = (lo // max(1, span // 4)) * max(1, span // 4)
    size = rng.integers(1, max(2, span // int(rng.choice([1, 4, 16]))), tot)
    hi = lo + size
    if seed % 4 == 1:  # touching ends
        hi[::2] = np.maximum(np.roll(lo, 1)[::2], lo[::2] + 1)
    w = rng.random(tot) < rng.choice([0.1, 0.5, 0.9])
    key = code.astype(np.int64) * _ADDR + lo
    hkey = code.astype(np.int64) * _ADDR + hi
    new = _new_pairs(key, hkey, w)
    assert new == _old_pairs(key, hkey, w, reads_only=True)
    assert {tuple(sorted(p)) for p in new} == {tuple(sorted(p)) for p in _old_pairs(key, hkey, w)}


def test_meeting_pairs_edges():
    """A write [100, 110) against accesses touching it, inside it, across its ends, equal."""
    lo = np.array([100, 90, 110, 100, 95, 105, 109, 99], dtype=np.int64)
    hi = np.array([110, 100, 120, 110, 130, 106, 115, 101], dtype=np.int64)
    w = np.array([True, False, False, True, False, False, True, False])
    got = _new_pairs(lo, hi, w)
    assert got == _old_pairs(lo, hi, w, reads_only=True)
    assert {tuple(sorted(p)) for p in got} == {tuple(sorted(p)) for p in _old_pairs(lo, hi, w)}
    assert (0, 1) not in got and (1, 0) not in got  # touching below: no pair
    assert (0, 2) not in got and (2, 0) not in got  # touching above: no pair
    assert (0, 4) in got or (4, 0) in got  # across the end
