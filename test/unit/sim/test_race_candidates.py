"""The sweep's byte tests of its candidate pairs (``race_batch.first_meeting``, session 33: two
whole-walk accesses tested once per (levels, element type, base difference); session 34: the
pairs' keys from the packed rows' geometry at once, or pair by pair) against each pair's
byte sets made afresh and tested one by one (``access_byte_set(a).first_overlap(b)``, the
per-access checker's test) -- on random accesses that share levels tuples and repeat base
differences, of every whole-byte and 4-bit type, box / strided / contiguous walks, element subsets,
HBSM and DDR."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.sim import race_batch
from m100.sim.engine_checks import _pack_halves, access_byte_set
from m100.sim.semantics_base import Access
from m100.targets.m100.isa import DType, Space, Walk

from .test_first_run_consts import _levels

SPECS = [((0, 1, 16),), ((0, 4, 4), (0, 1, 3)), ((0, 2, 5), (1, 0, 2)), ((3, 8, 4), (0, 1, 2)),
         ((0, 64, 3), (0, 1, 8)), ((20, -2, 4),), ((0, 1, 4), (0, 2, 3)), ((0, 17, 2), (5, 1, 3))]


def _accesses(seed: int, n: int) -> list:
    rng = random.Random(seed)
    pool = [_levels(s) for s in SPECS]  # shared tuples: the geometry keys repeat
    out = []
    for _ in range(n):
        lv = rng.choice(pool)
        dt = rng.choice([DType.I8, DType.F16, DType.F32, DType.I32, DType.I4])
        sp = rng.choice([Space.HBSM, Space.DDR])
        w = Walk(sp, 0, rng.choice([0, 8, 16, 40, 64, 100, 128, 256]), dt, lv)
        offs = None
        if rng.random() < 0.2:
            k = w.num_elements
            offs = np.array(sorted(rng.sample(range(k), rng.randint(1, k))), dtype=np.int64)
        out.append(Access(w, rng.randrange(4) if sp is Space.HBSM else 0, offs))
    return out


def _rows(accs, geo: bool = True):
    """(row count, byte sets) of ``accs`` packed three a half; ``geo`` False: without the rows'
    keys (``first_meeting``'s pair-by-pair loop)."""
    kept: dict = {}
    halves = [accs[i:i + 3] for i in range(0, len(accs), 3)]
    keys = [(kept, (i, False, 0)) for i in range(len(halves))]
    rows, _ = _pack_halves(halves, keys)
    if not geo:
        rows.geo = None
    nums, _, bss = race_batch._gather([kept[k] for _, k in keys])
    assert (bss.geometry() is not None) == geo
    return nums.shape[0], bss


def _reference(pairs, tot, bss) -> int:
    for n, yx in enumerate(pairs):
        y, x = divmod(yx, tot)
        (ry, jy), (rx, jx) = bss._row(y), bss._row(x)
        a, b = access_byte_set(ry.src[jy]), access_byte_set(rx.src[jx])  # made afresh
        if a.first_overlap(b) is not None:
            return n
    return -1


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(4, 40), st.booleans())
def test_first_meeting_equals_each_pair_made_afresh(seed, n, geo):
    tot, bss = _rows(_accesses(seed, n), geo)
    rng = random.Random(seed + 1)
    every = [y * tot + x for y in range(tot) for x in range(tot) if y != x]
    for pairs in (every, rng.sample(every, min(len(every), 30))):
        # the pairs one by one (each answer), then as lists (the first meeting, keys reused)
        for p in pairs[:60]:
            assert race_batch.first_meeting([p], tot, bss) == _reference([p], tot, bss)
        assert race_batch.first_meeting(pairs, tot, bss) == _reference(pairs, tot, bss)
        disjoint = [p for p in pairs if _reference([p], tot, bss) < 0]
        assert race_batch.first_meeting(disjoint, tot, bss) == -1


def test_the_geometry_path_is_taken_and_repeats():
    """Most pairs of these accesses are whole walks (the geometry path), keys repeat, and both
    answers occur (the comparisons above are not vacuous)."""
    tot, bss = _rows(_accesses(7, 60))
    whole = [i for i in range(tot) if bss.whole_walk(i) is not None]
    assert len(whole) > tot // 2
    answers = {_reference([y * tot + x], tot, bss) for y in whole[:20] for x in whole[:20]
               if x != y}
    assert answers == {0, -1}


@pytest.mark.parametrize("seed", range(3))
def test_the_sweep_verdict_is_unchanged(seed, monkeypatch):
    """A whole bulk sweep over racy and race-free logs of packed accesses gives the verdict of
    its candidates tested one by one afresh (the loop ``first_meeting`` replaced)."""
    accs = _accesses(100 + seed, 45)
    kept: dict = {}
    halves = [accs[i:i + 3] for i in range(0, len(accs), 3)]
    keys = [(kept, (i, i % 2 == 0, 0)) for i in range(len(halves))]
    _pack_halves(halves, keys)
    verdicts = {}
    for name, fn in (("new", race_batch.first_meeting), ("ref", _reference)):
        monkeypatch.setattr(race_batch, "first_meeting", fn)
        for unordered in (False, True):
            rb = race_batch.RaceBatch(3)
            for i, (_, key) in enumerate(keys):
                u = i % 3
                row = np.zeros(3, dtype=np.int64)
                row[u] = i + 1
                if not unordered:
                    row[:] = i + 1  # every earlier block known: no race
                    row[u] = i + 1
                snap = rb.keep(row)
                rb.log_rows.append(kept[key])
                rb.log_meta.append((u, i + 1, key[1], snap))
            try:
                rb.sweep()
                verdicts[(name, unordered)] = False
            except race_batch.RaceFound:
                verdicts[(name, unordered)] = True
    assert verdicts[("new", False)] == verdicts[("ref", False)] is False
    assert verdicts[("new", True)] == verdicts[("ref", True)]
