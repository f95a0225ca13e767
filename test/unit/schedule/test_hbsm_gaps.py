"""``hbsm_gaps.Gaps.choose`` answers what the packer's loop answers (issue 15: a faster choice, the same
offsets).

Oracle: the old code path written out -- ``hbsm_pack._split`` (a Python loop over every placed
buffer: the candidates, the live spans, the other units' spans) then ``hbsm_pack._choose`` -- on
random placed lists of one TPB (aligned as the packer places them, and some not: the fallback),
random buffers (predicted spans or none, a releasing unit the TPB has or has not seen, footprints
that do or do not grow), the placed list growing between the questions (the merged spans kept up
to date, not rebuilt).
"""

import random

import pytest

from m100.passes.backend.hbsm_gaps import Gaps, _merge
from m100.passes.backend.hbsm_pack import Buf, _choose, _split

UNITS = ("TCU", "CVU", "DMA", "DTDU", "")


def _buf(rng, name, units=UNITS):
    s = rng.randrange(0, 200)
    e = s + rng.randrange(1, 60)
    pred = None
    if rng.random() < 0.6:
        p0 = rng.randrange(0, 2000)
        pred = (float(p0), float(p0 + rng.randrange(1, 400)))
    return Buf(name, 0, rng.randrange(1, 5000), rng.choice((1, 1, 2)), float(s), float(e),
               rng.choice(units), rng.choice(("",) + units), pred)


def _case(rng, aligned=True):
    cap = rng.choice((1 << 14, 1 << 16))
    align = rng.choice((1, 16, 32, 64)) if aligned else rng.choice((16, 32, 48))
    units = UNITS[:rng.randrange(1, len(UNITS) + 1)]
    placed = []
    for i in range(rng.randrange(0, 80)):
        b = _buf(rng, f"p{i}", units)
        size = -(-b.size // align) * align
        off = align * rng.randrange(0, cap // align)
        if not aligned and rng.random() < 0.2:
            off += rng.randrange(1, align)  # an unaligned placed offset: the fallback
        placed.append((off, size, b))
    return cap, align, placed


def _ask(rng, cols, placed, cap, align, found):
    b = _buf(rng, "b")
    size = -(-b.size // align) * align
    high = rng.choice((0, cap // 4, cap // 2, cap, max((o + s for o, s, _ in placed), default=0)))
    want = _choose(*_split(b, placed), high, size, cap, align)
    got = cols.choose(b, high, size, cap, align)
    assert got == want, (b, high, size, cap, align)
    tag = "" if cols.aligned else "fallback "
    if want is None:
        found.add(tag + "none")
    else:
        found.add(tag + ("grows" if want + size > high else "flat"))
        other = any(not _live(p, b) and p.released_by != b.unit and want < o + s
                    and o < want + size for o, s, p in placed)
        found.add(tag + ("reuses another unit" if other else "clear"))
    return b, size, got


def _live(p, b):
    if p.start < b.end and b.start < p.end:
        return True
    return p.pred is not None and b.pred is not None and p.pred[0] < b.pred[1] and \
        b.pred[0] < p.pred[1]


@pytest.mark.parametrize("seed", range(40))
def test_choose_is_split_then_choose(seed):
    """Each answer equals ``_choose(*_split(b, placed))``; between the questions the chosen
    offset (or a random one) is placed, so the merged spans of each unit asked before are
    updated by ``add``, not made anew."""
    rng = random.Random(seed)
    cap, align, placed = _case(rng, aligned=seed % 4 != 3)
    placed = list(placed)
    cols = Gaps(placed, 16, align)
    found: set = set()
    for _ in range(60):
        b, size, got = _ask(rng, cols, placed, cap, align, found)
        off = got if got is not None else align * rng.randrange(0, cap // align)
        placed.append((off, size, b))
        cols.add(off, size, b)
    assert found  # (the kinds of answer are counted over the seeds below)


def test_the_cases_are_not_vacuous():
    """Over the seeds every kind of answer occurs on the gaps' path: none, a footprint that
    grows and one that does not, an offset clear of other units' bytes and one that reuses them
    (no clear one was there); and the fallback for unaligned placed lists answers too."""
    found: set = set()
    fallback = 0
    for seed in range(40):
        rng = random.Random(seed)
        cap, align, placed = _case(rng, aligned=seed % 4 != 3)
        cols = Gaps(list(placed), 16, align)
        fallback += not cols.aligned
        for _ in range(30):
            _ask(rng, cols, list(placed), cap, align, found)
    assert {"none", "grows", "flat", "clear", "reuses another unit"} <= found
    assert {"fallback grows", "fallback clear"} <= found
    assert fallback >= 3


@pytest.mark.parametrize("seed", range(20))
def test_merge_is_the_union(seed):
    """``_merge`` keeps sorted, disjoint spans whose bytes are the union of those added."""
    rng = random.Random(seed)
    us, ue, cover = [], [], set()
    for _ in range(40):
        o = rng.randrange(0, 500)
        e = o + rng.randrange(1, 60)
        _merge(us, ue, o, e)
        cover |= set(range(o, e))
        assert all(ue[i] < us[i + 1] for i in range(len(us) - 1))  # disjoint, not touching
        assert set().union(*(range(a, b) for a, b in zip(us, ue))) == cover
