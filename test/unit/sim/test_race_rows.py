"""The bulk race pre-pass packs every block half's race items at once (``engine_checks._pack_halves``:
bounds ``base + _relative(levels, type)`` per whole walk, numpy for the rest, byte sets made only
when the sweep asks) and the sweep gathers a run's rows from the halves' handles
(``race_batch._gather``). The oracle is the per-access derivation the pre-pass made before
(``engine_checks._items`` of each access, packed by ``_pack``): the same (space code, lo, hi) rows
in the same order and the same byte sets, member by member, on random walks of every element type
(4-bit included), repeat and negative-step levels, HBSM / DDR spaces, TPB masks, element subsets;
with the strided paths on and off."""

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from m100.sim import engine_checks, race_batch, twu
from m100.sim.engine_checks import _items, _pack, _pack_halves, _relative, access_byte_set
from m100.sim.semantics_base import Access
from m100.targets.m100.isa import DType, Level, Space, Walk

level = st.tuples(st.integers(0, 40), st.sampled_from([0, 1, 2, 3, -1, -2, 5, 8, 17, 64]),
                  st.integers(1, 6))
dtypes = st.sampled_from(list(DType))
spaces = st.sampled_from([Space.HBSM, Space.DDR])


def make_levels(levels):
    lv = []
    for i, s, n in levels:
        if s < 0:
            i += -s * (n - 1)  # keep every offset >= 0
        lv.append(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n))
    return tuple(lv)


def _members(bs):
    return None if bs is None else (bs.lo, bs.hi, None if bs.arr is None else bs.arr.tolist())


@pytest.fixture(params=[True, False], ids=["strided", "reference"])
def strided(request, monkeypatch):
    monkeypatch.setattr(twu, "STRIDED", request.param)
    return request.param


@settings(max_examples=200, deadline=None)
@given(st.lists(level, min_size=0, max_size=4), dtypes, st.integers(0, 1 << 20), spaces)
@example([(3, 2, 5)], DType.I4, 7, Space.DDR)  # packed 4-bit elements, odd offsets
@example([(5, -1, 4), (1, 0, 3)], DType.I4, 0, Space.HBSM)  # negative step, repeat level
def test_relative_bounds_are_the_items_bounds_at_any_base(levels, dt, base, space):
    lv = make_levels(levels)
    for on in (True, False):
        twu.STRIDED = on
        try:
            it = _items((Access(Walk(space, 3, base, dt, lv), 3),))
        finally:
            twu.STRIDED = True
        rlo, rhi = _relative(lv, dt)
        if not it or it[0][1].hi <= it[0][1].lo:
            assert rlo == rhi == 0
        else:
            assert (base + rlo, base + rhi) == (it[0][1].lo, it[0][1].hi)


def test_relative_of_a_walk_without_elements():
    lv = (Level(0, 1, 3), Level(4, 1, 6))  # offsets 4 .. 9
    empty = (lv[0], Level(5, 1, 4))  # count 0 (a level Level.check refuses)
    assert empty[1].count == 0
    for dt in DType:  # (_items' own answer: here the box bounds of the levels' ends)
        it = _items((Access(Walk(Space.DDR, 0, 9, dt, empty), 0),))
        want = (it[0][1].lo - 9, it[0][1].hi - 9) if it and it[0][1].hi > it[0][1].lo else (0, 0)
        assert _relative(empty, dt) == want
    assert _relative(lv, DType.I8) == (4, 10) and _relative(lv, DType.F32) == (16, 40)


half = st.lists(st.tuples(st.lists(level, min_size=1, max_size=3), dtypes, spaces,
                          st.integers(0, 1 << 16), st.integers(0, 55), st.integers(0, 3)),
                min_size=0, max_size=4)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(halves=st.lists(half, min_size=1, max_size=8), data=st.data())
def test_packed_halves_equal_each_halfs_own_items(halves, data, strided):
    made, keys = [], []
    shared: dict = {}  # (a broadcast's destinations share one walk object)
    for h in halves:
        accs = []
        for levels, dt, space, base, tpb, subset in h:
            key = (tuple(levels), dt, space, base)
            w = shared.get(key)
            if w is None:
                w = shared[key] = Walk(space, tpb, base, dt, make_levels(levels))
            offs = None
            if subset:  # some elements: a block's rows of a walk that is no box
                n = w.num_elements
                k = data.draw(st.integers(0, n))
                offs = np.sort(data.draw(st.permutations(range(n)))[:k]).astype(np.int64)
                if subset == 2:  # contiguous elements
                    offs = np.arange(n // 3, n // 3 + k // 2, dtype=np.int64)
            accs.append(Access(w, tpb, offs))
        made.append(accs)
        keys.append(({}, (0, False, 0)))
    _pack_halves(made, keys)
    stores = set()
    for accs, (kept, key) in zip(made, keys):
        pk = kept[key]
        stores.add(id(pk[0]))
        nums, bss = race_batch.unpack(pk)
        want_nums, want_bss = race_batch.unpack(_pack(_items(accs)))
        assert nums == want_nums
        assert [_members(b) for b in bss] == [_members(b) for b in want_bss]
        # first_meeting's keys per row: (levels by identity, type) and base of a whole walk's
        # access, -1 for some elements (read per access here; per walk object by _pack_rows)
        rows, f, e = pk
        want_geo = [[-1 if a.offsets is not None else
                     id(a.walk.levels) * engine_checks._NTYPES + int(a.walk.dtype), a.walk.base]
                    for a in accs if (b := access_byte_set(a)) is not None and b.hi > b.lo]
        assert (rows.geo[f:e].tolist() if rows.geo is not None else []) == want_geo
    assert len(stores) == 1  # (one store for all: the sweep gathers from it)


def test_a_mutant_without_the_tpb_of_hbsm_spaces_is_caught(monkeypatch):
    """The test above compares the space codes: packing every HBSM access as TPB 0's fails."""
    w = Walk(Space.HBSM, 5, 64, DType.I8, (Level(0, 1, 8),))
    keys = [({}, (0, True, 0))]
    monkeypatch.setattr(engine_checks, "_HBSM", -1)  # (mutant: no TPB added)
    _pack_halves([[Access(w, 5)]], keys)
    nums, _ = race_batch.unpack(keys[0][0][(0, True, 0)])
    assert nums != race_batch.unpack(_pack(_items([Access(w, 5)])))[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 3)), min_size=1,
                max_size=30))
def test_gather_takes_each_handles_rows_in_log_order(ents):
    """Handles into several stores (the pre-pass's and one-half stores of CSU blocks), in any
    order, some empty: the gathered rows and byte sets are the handles' rows concatenated."""
    rng = np.random.default_rng(len(ents))
    stores = []
    for s in range(3):
        k = 6 + s
        nums = rng.integers(0, 1000, (k, 3))
        stores.append(race_batch.RaceRows(nums, [f"s{s}r{i}" for i in range(k)]))
    log = [(stores[s], f, min(f + c, stores[s].nums.shape[0])) for s, f, c in ents]
    nums, cnt, bss = race_batch._gather(log)
    want = [(r.nums[i].tolist(), r.src[i]) for r, f, e in log for i in range(f, e)]
    assert nums.tolist() == [w[0] for w in want]
    assert cnt.tolist() == [e - f for _, f, e in log]
    assert [bss[i] for i in range(len(bss))] == [w[1] for w in want]
