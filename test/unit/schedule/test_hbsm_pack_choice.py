"""HBSM packing picks the offset its rule defines (issue 15: the faster search must not change it).

Oracle: the rule written out directly -- every candidate offset of a buffer (0, the end of a live
placed buffer, the start of a same-unit buffer no longer live), aligned; feasible when inside the
HBSM and clear of every live placed buffer; the one with the smallest (grows the footprint,
reuses another unit's bytes, offset) wins -- replayed buffer by buffer in the allocator's order and
compared with ``hbsm_pack.allocate`` on random workloads (with predicted spans and units).
"""

import random

import pytest

from m100.passes.backend.hbsm_pack import Buf, HbsmOverflow, _align, _overlap_t, allocate


def _rule(bufs, capacity, align):
    out = {}
    for tpb in sorted({b.tpb for b in bufs}):
        placed = []
        own = sorted((b for b in bufs if b.tpb == tpb),
                     key=lambda b: (-_align(b.size, align), b.start, b.name))
        for b in own:
            size = _align(b.size, align)
            cands = {0} | {o + s for o, s, p in placed if _overlap_t(p, b)} | \
                {o for o, s, p in placed if not _overlap_t(p, b) and p.released_by == b.unit}
            high = max((o + s for o, s, _ in placed), default=0)
            keys = []
            for c in cands:
                c = _align(c, align)
                if c + size > capacity or any(_overlap_t(p, b) and c < o + s and o < c + size
                                              for o, s, p in placed):
                    continue
                cross = any(not _overlap_t(p, b) and p.released_by != b.unit
                            and c < o + s and o < c + size for o, s, p in placed)
                keys.append((c + size > high, cross, c))
            if not keys:
                return None
            c = min(keys)[2]
            out[b.name] = c
            placed.append((c, size, b))
    return out


def _bufs(rng, n, cap, align, tpbs):
    out = []
    for i in range(n):
        s = rng.randrange(0, 100)
        e = s + rng.randrange(1, 40)
        ps = s * 10 + rng.randrange(-30, 30)
        pred = (ps, ps + rng.randrange(1, 300)) if rng.random() < 0.7 else None
        out.append(Buf(f"b{i}", rng.randrange(tpbs), align * rng.randrange(1, cap // align // 8),
                       rng.choice((1, 1, 2)), s, e, rng.choice("tcd"), rng.choice(("", "t", "c")),
                       pred))
    return out


CAP, ALIGN = 8192, 64


def _case(seed):
    rng = random.Random(1000 + seed)
    return _bufs(rng, rng.randrange(5, 60), CAP, ALIGN, rng.choice((1, 2, 3)))


@pytest.mark.parametrize("seed", range(60))
def test_allocate_takes_the_offset_the_rule_defines(seed):
    bufs = _case(seed)
    cap, align = CAP, ALIGN
    want = _rule(bufs, cap, align)
    try:
        got = allocate(bufs, cap, align)
    except HbsmOverflow:
        got = None
    if want is None:  # the rule finds no offset for some buffer: allocate falls back or fails
        return
    assert got == want


def test_most_random_workloads_fit():
    fit = sum(_rule(_case(s), CAP, ALIGN) is not None for s in range(60))
    assert fit >= 30  # the comparison above is not vacuous
