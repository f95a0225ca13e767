"""Strided views of affine-box walks (``sim/twu.py``, ``sim/memory.py``, ``sim/checks.py``) against
element-by-element numpy written from the walk definition (``Walk.offsets()``: beat k reads element
``offsets[k]``, bytes ``base + offsets[k] * size ...``)."""

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from m100.sim import twu
from m100.sim.checks import ByteSet, walk_byte_set
from m100.sim.memory import Memory, element_byte_set
from m100.targets.m100.isa import DType, Level, Space, Walk
from m100.targets.m100.machine import get_machine

M = get_machine("tiny")
level = st.tuples(st.integers(0, 40), st.sampled_from([0, 1, 2, 3, -1, -2, 5, 8, 17, 64]),
                  st.integers(1, 6))
dtypes = st.sampled_from([DType.I8, DType.F16, DType.BF16, DType.F32, DType.I32])


def make_walk(levels, dt, base):
    lv = []
    for i, s, n in levels:
        if s < 0:
            i += -s * (n - 1)  # keep every offset >= 0
        lv.append(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n))
    return Walk(Space.HBSM, 0, base, dt, tuple(lv))


def memory_with_random_bytes(lo, n, seed=0):
    mem = Memory(M)
    data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    mem.write_bytes(Space.HBSM, 0, lo, data)
    return mem, data


def beat_bytes(w):
    """[beats, size] byte addresses of every beat, from the definition."""
    sz = w.dtype.bits // 8
    return w.base + w.offsets()[:, None] * sz + np.arange(sz)


@settings(max_examples=60, deadline=None)
@given(st.lists(level, min_size=1, max_size=4), dtypes, st.integers(0, 300))
@example([(0, 2, 3), (1, 0, 2)], DType.F32, 4)  # a repeat level (stride 0)
def test_read_walk_matches_the_definition(levels, dt, base):
    w = make_walk(levels, dt, base)
    assume(beat_bytes(w).max() < 4096)  # the walk fits the 4 KiB memory of the oracle
    mem, data = memory_with_random_bytes(0, 4096)
    raw = data[beat_bytes(w)].reshape(-1)
    from m100.targets.m100 import numerics
    want = numerics.from_bytes(raw, dt)
    got = mem.read_walk(w)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    view = mem.read_walk(w, copy=False)  # maybe a view of the memory: read-only
    assert view.dtype == want.dtype and view.tobytes() == want.tobytes()
    assert not view.flags.writeable or not np.may_share_memory(view, mem.space(Space.HBSM).buf)
    mem.write_bytes(Space.HBSM, 0, 0, 255 - data)  # a copy does not follow later writes
    assert got.tobytes() == want.tobytes()


@settings(max_examples=60, deadline=None)
@given(st.lists(level, min_size=1, max_size=4), dtypes, st.integers(0, 300))
@example([(0, 64, 6), (0, 64, 6), (26, 64, 6)], DType.F32, 149)  # reaches past the memory: skipped
def test_write_walk_matches_the_definition(levels, dt, base):
    w = make_walk(levels, dt, base)
    assume(beat_bytes(w).max() < 4096)  # hypothesis found a walk reaching byte 4096 (test bug)
    mem, data = memory_with_random_bytes(0, 4096, seed=1)
    vals = np.random.default_rng(2).standard_normal(w.num_elements) * 50
    from m100.targets.m100 import numerics
    raw = numerics.to_bytes(vals, dt).reshape(-1, dt.bits // 8)
    want = data.copy()
    addrs = beat_bytes(w)
    for k in range(addrs.shape[0]):  # in walk order: a later beat overwrites an earlier one
        want[addrs[k]] = raw[k]
    mem.write_walk(w, vals)
    got = mem.read_bytes(Space.HBSM, 0, 0, 4096)
    assert np.array_equal(got, want)


@settings(max_examples=80, deadline=None)
@given(st.lists(level, min_size=1, max_size=4), st.sampled_from([1, 2, 3, 4, 6, 8]), st.data())
def test_walk_block_is_the_chunk_of_the_beats(levels, blocks, data):
    w = make_walk(levels, DType.I8, 0)
    b = data.draw(st.integers(0, blocks - 1))
    sub = twu.walk_block(w, blocks, b)
    off = w.offsets()
    if sub is None:  # only when the chunk is not a box: n % blocks, or no level splits evenly
        return
    per = off.size // blocks
    assert off.size % blocks == 0
    assert np.array_equal(sub.offsets(), off[b * per:(b + 1) * per])


def test_walk_block_splits_outer_and_inner_levels():
    w = Walk.strided(Space.HBSM, 0, 0, DType.I8, (2, 6, 4), (100, 10, 1))
    assert twu.walk_block(w, 4, 3) is not None  # 2 x 2: pin the outer level, halve the next
    assert twu.walk_block(w, 5, 0) is None  # 48 beats do not split in 5


@settings(max_examples=60, deadline=None)
@given(st.lists(level, min_size=1, max_size=4), dtypes, st.integers(0, 300))
@example([(0, 3000, 4), (0, 1, 3)], DType.F32, 8)  # a sparse box: sorted addresses, lazily
@example([(2, 2500, 3), (1, 0, 2)], DType.F16, 0)  # sparse, with a repeat level
def test_walk_byte_set_is_the_set_of_beat_bytes(levels, dt, base):
    w = make_walk(levels, dt, base)
    want = np.unique(element_byte_set(w))
    bs = walk_byte_set(w)
    assert (bs.lo, bs.hi) == (int(want[0]), int(want[-1]) + 1)
    got = np.arange(bs.lo, bs.hi) if bs.arr is None else bs.arr
    assert np.array_equal(got, want)
    # the same first overlap as the element-by-element set, against a probe interval
    ref = ByteSet(element_byte_set(w))
    for lo in range(base, base + 200, 37):
        probe = ByteSet.interval(lo, lo + 5)
        assert bs.first_overlap(probe) == ref.first_overlap(probe)


@pytest.fixture
def reference_path():
    twu.STRIDED = False
    yield
    twu.STRIDED = True


def test_reference_switch_turns_every_strided_path_off(reference_path):
    w = Walk.strided(Space.HBSM, 0, 0, DType.I8, (4, 4), (16, 1))
    assert twu.box(w) is None and twu.walk_block(w, 2, 0) is None


@pytest.mark.parametrize("strided", [True, False])
@pytest.mark.parametrize("blocks", [1, 2, 4])
def test_blocked_fill_and_copy_of_a_strided_walk(strided, blocks):
    """Every block of a blocked fill/copy covers its own chunk (a sub-walk on the strided path):
    the whole walk is written once, nothing else is touched."""
    from m100.sim.simulator import Simulator
    from m100.targets.m100.isa import Copy, Fill, Sync

    dst = Walk.strided(Space.HBSM, 0, 64, DType.F32, (4, 3, 2), (24, 4, 1))
    src = Walk.strided(Space.HBSM, 0, 2048, DType.F32, (24,))
    twu.STRIDED = strided
    try:
        sim = Simulator([Fill(0, dst, 2.5, Sync(blocks=blocks))], M)
        sim.write(Walk.strided(Space.HBSM, 0, 0, DType.F32, (256,)), np.full(256, -1.0))
        assert sim.run().ok
        got = sim.read(Walk.strided(Space.HBSM, 0, 0, DType.F32, (256,)))
        want = np.full(256, -1.0, dtype=np.float32)
        want[16 + dst.offsets()] = 2.5  # base 64 B = element 16
        assert np.array_equal(got, want)
        vals = np.arange(24, dtype=np.float32)
        sim = Simulator([Copy(0, src, dst, Sync(blocks=blocks))], M)
        sim.write(src, vals)
        assert sim.run().ok
        assert np.array_equal(sim.read(dst), vals)
    finally:
        twu.STRIDED = True


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 2), st.integers(0, 2), st.integers(1, 2), st.data())
def test_conv_block_box_is_the_touched_set(n, h, w, c, kh, kw, sh, sw, pt, pl, dh, data):
    """A conv block's input as a sub-box of x (``Conv2DExec._box_sel`` + ``twu.sub_box``, a
    strided read, an interval-bounded race set) reads exactly the elements of the reference set
    (``_touched``: per image the rows of its windows times the columns of every window), in the
    order the reference places them (sorted flat [n,h,w,c] indices)."""
    from m100.sim.semantics_base import walk_offsets
    from m100.sim.semantics_tcu import Conv2DExec
    from m100.targets.m100.isa import Conv2D, Sync

    oh = (h + pt - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl - (kw - 1) * 1 - 1) // sw + 1
    assume(oh >= 1 and ow >= 1)
    rows = n * oh
    blocks = data.draw(st.sampled_from([d for d in range(1, rows + 1) if rows % d == 0]))
    # x as a channel slice of a wider tensor (two levels merge only where they nest)
    wide = data.draw(st.sampled_from([c, c + 3]))
    x = Walk.strided(Space.HBSM, 0, 0, DType.F32, (n, h, w, c), (h * w * wide, w * wide, wide, 1))
    if wide == c and data.draw(st.booleans()):
        x = Walk.strided(Space.HBSM, 0, 0, DType.F32, (n * h * w * c,))
    wt = Walk.strided(Space.HBSM, 0, 0, DType.F32, (kh * kw * c,))
    y = Walk.strided(Space.HBSM, 0, 0, DType.F32, (rows * ow,))
    inst = Conv2D(0, x, wt, y, n, h, w, c, 1, kh, kw, (sh, sw), (pt, pl, 0, 0), (dh, 1),
                  sync=Sync(blocks=blocks))
    ex = Conv2DExec(inst, None)
    for b in range(blocks):
        want = walk_offsets(x)[ex._touched(b)]
        sel = ex._box_sel(b)
        if sel is None:
            continue
        sub = twu.sub_box(x, (n, h, w, c), sel)
        assert sub is not None and np.array_equal(sub.offsets(), want)
        idx = np.arange(n * h * w * c).reshape(n, h, w, c)[
            tuple(slice(f, f + s * (k - 1) + 1, s) for f, s, k in sel)].reshape(-1)
        assert np.array_equal(idx, ex._touched(b))


@settings(max_examples=100, deadline=None)
@given(st.lists(level, min_size=1, max_size=4), st.data())
def test_reshape_keeps_the_beats(levels, data):
    """``twu.reshape``: same beats in the same order under any factorization of the counts;
    a contiguous walk always reshapes."""
    w = make_walk(levels, DType.F32, 0)
    n = w.num_elements
    shape = []
    while n > 1:
        d = data.draw(st.sampled_from([k for k in range(2, n + 1) if n % k == 0]))
        shape.append(d)
        n //= d
    shape = data.draw(st.permutations(shape)) + [1] * data.draw(st.integers(not shape, 1))
    r = twu.reshape(w, tuple(shape))
    if r is not None:
        assert r.shape == tuple(shape) and np.array_equal(r.offsets(), w.offsets())
    flat = Walk.strided(Space.HBSM, 0, 0, DType.F32, (w.num_elements,))
    r = twu.reshape(flat, tuple(shape))
    assert r is not None and np.array_equal(r.offsets(), flat.offsets())


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 2), st.integers(1, 7), st.integers(1, 7), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 2), st.integers(0, 2), st.booleans(), st.data())
def test_conv_fast_path_equals_the_reference_path(n, h, w, c, kh, kw, sh, sw, pt, pl, wide,
                                                  data):
    """A conv (any block split, x a channel slice or contiguous) gives the same output bytes on
    the strided path (sub-box reads, padded windows by slices) as on the index path."""
    from m100.sim.simulator import Simulator
    from m100.targets.m100.isa import Conv2D, Sync

    oh = (h + pt + 1 - kh) // sh + 1
    ow = (w + pl + 1 - kw) // sw + 1
    assume(oh >= 1 and ow >= 1)
    rows = n * oh
    blocks = data.draw(st.sampled_from([d for d in range(1, rows + 1) if rows % d == 0]))
    cw = c + 2 if wide else c
    x = Walk.strided(Space.HBSM, 0, 0, DType.F32, (n, h, w, c), (h * w * cw, w * cw, cw, 1))
    f = 3
    wt = Walk.strided(Space.HBSM, 0, 4096, DType.F32, (kh * kw * c * f,))
    y = Walk.strided(Space.HBSM, 0, 8192, DType.F32, (rows * ow * f,))
    inst = Conv2D(0, x, wt, y, n, h, w, c, f, kh, kw, (sh, sw), (pt, pl, 1, 1),
                  sync=Sync(blocks=blocks))
    rng = np.random.default_rng(n * 1000 + h * 100 + w)
    outs = []
    for strided in (True, False):
        twu.STRIDED = strided
        try:
            sim = Simulator([inst], M, mode="functional")
            sim.write(Walk.strided(Space.HBSM, 0, 0, DType.F32, (1024,)),
                      rng.standard_normal(1024).astype(np.float32))
            sim.write(wt, rng.standard_normal(wt.num_elements).astype(np.float32))
            assert sim.run().ok
            outs.append(sim.read(y).tobytes())
        finally:
            twu.STRIDED = True
        rng = np.random.default_rng(n * 1000 + h * 100 + w)
    assert outs[0] == outs[1]


def test_geometry_is_shared_across_bases_and_shifted():
    """Walks with the same levels at other bases / TPBs share one derivation per levels tuple
    (``twu.GEOMETRY``) -- box, contiguity, block sub-walk, byte-set bitmap -- and each gets its
    own addresses: the byte set equals the definition's for every base, and the shared bitmap
    can not be written."""
    levels = ((0, 7, 3), (0, 1, 2))  # a box with gaps: a lazy bitmap byte set
    twu._GEO.clear()
    for base, dt in ((0, DType.I8), (1000, DType.I8), (37, DType.F32), (1000, DType.F32)):
        w = make_walk(levels, dt, base)
        want = np.unique(element_byte_set(w))
        bs = walk_byte_set(w)
        assert (bs.lo, bs.hi) == (int(want[0]), int(want[-1]) + 1)
        members = bs.lo + np.flatnonzero(bs.mask) if bs.mask is not None else \
            np.arange(bs.lo, bs.hi)
        assert np.array_equal(members, want), (base, dt)
        assert twu.box(w) == twu._box(w.levels)
        sub = twu.walk_block(w, 3, 1)
        assert sub.base == base and np.array_equal(sub.offsets(), w.offsets()[2:4])
    masks = [v for k, v in twu._GEO.items() if k[0] == "mask"]
    assert len(masks) == 2  # one per element size, whatever the base
    assert not any(m.flags.writeable for m in masks)
    with pytest.raises(ValueError):
        masks[0][0] = False


def test_per_levels_by_identity_equals_by_value():
    """:func:`twu.per_levels` (found by the levels tuple's identity first, then by its value)
    returns what ``make`` returns for that kind, tuple value and arguments, made afresh -- other
    kinds and other arguments on one tuple object, an equal tuple object, other levels, calls
    again; and an identity entry whose tuple is not the one asked about (an id reused after the
    tuple went) is not taken. (Session 24's ``BY_ID`` switch compared it with the by-value
    lookup alone; a mutant without the entry's tuple check fails the last part.)"""
    from m100.sim.semantics_move import _view_geo

    a = make_walk(((0, 7, 3), (0, 1, 2)), DType.I8, 0).levels
    a2 = tuple(Level(lv.initial, lv.step, lv.final) for lv in a)  # equal, another object
    c = make_walk(((0, 4, 6),), DType.I8, 0).levels
    calls = [(kind, lv, make, args) for lv in (a, a2, c, a, c) for kind, make, args in (
        ("view", _view_geo, (1,)), ("view", _view_geo, (4,)), ("box", lambda x: twu._box(x), ()),
        ("block", twu._block_levels, (2, 0)), ("block", twu._block_levels, (2, 1)),
        ("beats", twu._beats, ()))]
    twu._GEO.clear()
    twu._IDS.clear()
    got = [twu.per_levels(kind, lv, make, *args) for kind, lv, make, args in calls]
    want = [make(lv, *args) for kind, lv, make, args in calls]
    assert got == want and twu._IDS
    # a stale identity entry (another tuple under this one's id) is not taken
    twu._IDS[("box", id(c), ())] = (a, "stale")
    assert twu.per_levels("box", c, lambda x: twu._box(x)) == twu._box(c)

