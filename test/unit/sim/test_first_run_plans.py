"""Derivations a first run shares instead of making per instruction or walk (issue 15): conv box
plans by geometry (``Conv2DExec._shared_box_plan``), conv operand types without an array
(``_operand_dtype``), whole walk view plans per levels tuple (``memory._view_plan``), race batch
groups without ``np.unique``. Each against an oracle derived per instruction / per walk
(``Conv2DExec._box_plan``, ``_operand`` of an empty array, the walk's own contiguity and box),
on random cases; mutants of the shared keys are caught."""

from __future__ import annotations

import numpy as np
import pytest

from m100.sim import memory, race_batch, semantics_tcu, twu
from m100.sim.semantics_tcu import Conv2DExec, _operand, _operand_dtype
from m100.targets.m100.isa import Conv2D, DType, Level, Space, Sync, Walk


def _conv(r, n, h, wd, c, f, g, kh, kw, stride, pad, dil, dt):
    """A Conv2D instruction (operand walks at fixed places: the plans never read them) and one
    of its valid block counts."""
    x = Walk.strided(Space.HBSM, 0, 0, dt, (n, h, wd, c))
    w = Walk.strided(Space.HBSM, 0, 1 << 16, dt, (kh, kw, c // g, f))
    proto = Conv2D(0, x, w, x, n, h, wd, c, f, kh, kw, stride, pad, dil, g)
    oh, ow = proto.out_hw
    y = Walk.strided(Space.HBSM, 0, 1 << 17, DType.I32 if dt is DType.I8 else dt, (n, oh, ow, f))
    rows = n * oh
    blocks = int(r.choice([d for d in range(1, rows + 1) if rows % d == 0]))
    return Conv2D(0, x, w, y, n, h, wd, c, f, kh, kw, stride, pad, dil, g,
                  sync=Sync(blocks=blocks))


def _random_convs(seed: int, count: int) -> list:
    """Random geometries, many of them one field apart (the shared table's collisions)."""
    r = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        n, h, wd = int(r.integers(1, 3)), int(r.integers(2, 9)), int(r.integers(2, 9))
        g = int(r.choice([1, 1, 2]))
        c, f = g * int(r.integers(1, 4)), g * int(r.integers(1, 3))
        kh, kw = int(r.integers(1, 4)), int(r.integers(1, 4))
        stride = (int(r.integers(1, 3)), int(r.integers(1, 3)))
        pad = tuple(int(v) for v in r.integers(0, 2, 4))
        dil = (int(r.integers(1, 3)), int(r.integers(1, 3)))
        dt = DType.I8 if r.random() < 0.5 else DType.F32
        base = [n, h, wd, c, f, g, kh, kw, stride, pad, dil, dt]
        variants = [list(base)]
        for k in range(4):  # neighbours: one field changed
            v = list(base)
            j = int(r.integers(0, 12))
            if j == 8:
                v[8] = (v[8][1], v[8][0] + 1)
            elif j == 9:
                v[9] = tuple(int(x) for x in r.integers(0, 2, 4))
            elif j == 10:
                v[10] = (v[10][1], v[10][0])
            elif j == 11:
                v[11] = DType.F32 if dt is DType.I8 else DType.I8
            elif j == 5:
                continue
            else:
                v[j] = v[j] + 1 if j not in (3, 4) else v[j] + g
            variants.append(v)
        for v in variants:
            n_, h_, wd_, c_, f_, g_, kh_, kw_, st_, pd_, dl_, dt_ = v
            oh = (h_ + pd_[0] + pd_[2] - dl_[0] * (kh_ - 1) - 1) // st_[0] + 1
            ow = (wd_ + pd_[1] + pd_[3] - dl_[1] * (kw_ - 1) - 1) // st_[1] + 1
            if oh < 1 or ow < 1:
                continue
            out.append(_conv(r, *v))
    return out


def _plans(convs, shared: bool) -> list:
    """Every (instruction, block)'s box plan (or the error it raises), through the shared table
    (filled by all of them, in a shuffled order first) or made per instruction."""
    semantics_tcu._PLANS.clear()
    out = []
    order = list(range(len(convs)))
    if shared:
        np.random.default_rng(len(convs)).shuffle(order)
    got: dict = {}
    for k in order + list(range(len(convs))):
        conv = convs[k]
        ex = Conv2DExec(conv, None)
        dtype = ex._consts()[1]
        for b in range(conv.sync.blocks):
            sel = ex._box_sel(b)
            if sel is None:
                continue
            try:
                p = ex._shared_box_plan(b, sel, dtype) if shared else ex._box_plan(b, sel, dtype)
            except Exception as e:  # noqa: BLE001 - compared as its message
                p = ("raised", str(e))
            got[(k, b)] = p
    out = [got[key] for key in sorted(got)]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_shared_conv_plans_equal_per_instruction_plans(seed):
    convs = _random_convs(seed, 60)
    shared = _plans(convs, True)
    assert len(semantics_tcu._PLANS) < sum(c.sync.blocks for c in convs)  # shared, not per block
    assert shared == _plans(convs, False)


def test_shared_conv_plans_key_mutants_are_caught(monkeypatch):
    """Dropping a field the plan reads from the table's key makes two geometries share a plan
    they must not: the comparison above fails for each such mutant. (The key is redundant on
    purpose: the box carries the channels and the touched extent, oh / ow / rows follow from the
    rest, and the operand type is float32 for every geometry here -- dropping one of those alone
    is an equivalent mutant on these cases.)"""
    convs = [c for s in range(6) for c in _random_convs(s, 60)]
    ref = _plans(convs, False)
    orig = Conv2DExec._plan_key
    names = "n h w c kh kw stride pad dilation oh ow rows b box dtype".split()
    caught = set()
    for drop in range(len(names)):
        def key(self, b, box, dtype, drop=drop):
            k = orig(self, b, box, dtype)
            return k[:drop] + k[drop + 1:]
        monkeypatch.setattr(Conv2DExec, "_plan_key", key)
        if _plans(convs, True) != ref:
            caught.add(names[drop])
    assert {"n", "h", "kh", "stride", "pad", "b"} <= caught, caught
    monkeypatch.setattr(Conv2DExec, "_plan_key", lambda self, b, box, dtype: (b, box))
    assert _plans(convs, True) != ref


def test_operand_dtype_equals_operand():
    for integer in (False, True):
        for bits in (4, 8, 16, 32):
            for k in (1, 9, 127, 128, 129, 1023, 1024, 1025, 4096, 1 << 20):
                assert _operand_dtype(integer, k, bits) == \
                    _operand(np.zeros(0), integer, k, bits).dtype, (integer, bits, k)


def _random_walk(r) -> Walk:
    dt = DType(r.choice([DType.I8, DType.I16, DType.I32, DType.F16, DType.F32, DType.I4]))
    levels = []
    for _ in range(int(r.integers(1, 4))):
        count = int(r.integers(1, 5))
        step = int(r.choice([0, 1, 1, 2, 3, 4, 8, -1]))
        init = int(r.integers(0, 6)) + (count - 1) * max(0, -step)
        levels.append(Level(init, step, init + step * (count - 1)))
    if r.random() < 0.3:  # contiguous
        shape = tuple(int(x) for x in r.integers(1, 5, int(r.integers(1, 4))))
        return Walk.strided(Space.HBSM, 0, int(r.integers(0, 64)), dt, shape)
    return Walk(Space.HBSM, 0, int(r.integers(-8, 64)), dt, tuple(levels))


def _view_plan_of_walk(walk: Walk) -> tuple | None:
    """The oracle: ``memory._view_plan`` from the walk itself (its contiguous start or its box,
    ``twu.contiguous_start`` / ``twu.box``, the base included), as ``read_walk`` derived it per
    walk before the levels' part was shared."""
    vt = memory._SAME.get(walk.dtype)
    if vt is None:
        return None
    sz = walk.dtype.bits // 8
    start = twu.contiguous_start(walk)
    if start is not None:
        lo = walk.base + start * sz
        return None if lo < 0 else (lo, lo + walk.num_elements * sz, None, None, vt)
    bx = twu.box(walk)
    if bx is None:
        return None
    lo, hi, counts, steps = bx
    if walk.base + lo * sz < 0:
        return None
    first = walk.base + sum(lv.initial for lv in walk.levels) * sz
    return (first, walk.base + (hi + 1) * sz, counts, tuple(s * sz for s in steps), vt)


@pytest.mark.parametrize("strided", [True, False])
def test_view_plans_per_levels_equal_view_plans_per_walk(strided, monkeypatch):
    r = np.random.default_rng(7)
    walks = [_random_walk(r) for _ in range(3000)]
    monkeypatch.setattr(twu, "STRIDED", strided)
    fast = [memory._view_plan(w) for w in walks]
    assert fast == [_view_plan_of_walk(w) for w in walks]
    assert any(p is not None and p[2] is not None for p in fast) == strided
    assert any(p is not None and p[2] is None for p in fast)


def test_sorted_unique_equals_np_unique():
    r = np.random.default_rng(3)
    for _ in range(300):
        a = np.sort(r.integers(0, int(r.integers(1, 50)), int(r.integers(1, 80))))
        assert np.array_equal(race_batch.sorted_unique(a), np.unique(a))
        assert race_batch.sorted_unique(a).dtype == np.unique(a).dtype
