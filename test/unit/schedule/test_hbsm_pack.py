"""HBSM allocation by liveness: an independent checker, random workloads, overflow diagnostics."""

import random

import pytest

from m100.passes.backend.hbsm_pack import Buf, HbsmOverflow, allocate, check_allocation, peak
from m100.targets.m100.machine import get_machine


def brute_force_valid(bufs, offs, cap):
    """Byte-level oracle: paint every live byte at every instant; no byte painted twice."""
    instants = sorted({b.start for b in bufs})
    for t in instants:
        for tpb in {b.tpb for b in bufs}:
            used = bytearray(cap)
            for b in bufs:
                if b.tpb == tpb and b.start <= t < b.end:
                    o = offs[b.name]
                    if o < 0 or o + b.size > cap:
                        return False
                    if any(used[o:o + b.size]):
                        return False
                    used[o:o + b.size] = b"\x01" * b.size
    return True


def random_bufs(rng, n, cap, align, tpbs=2):
    bufs = []
    for i in range(n):
        s = rng.randrange(0, 100)
        bufs.append(Buf(f"b{i}", rng.randrange(tpbs), align * rng.randrange(1, cap // align // 6),
                        rng.choice((1, 1, 2)), s, s + rng.randrange(1, 40), rng.choice("tc")))
    return bufs


@pytest.mark.parametrize("seed", range(40))
def test_random_workloads_allocate_validly_or_report(seed):
    rng = random.Random(seed)
    cap, align = 4096, 32
    bufs = random_bufs(rng, rng.randrange(2, 14), cap, align)
    try:
        offs = allocate(bufs, cap, align)
    except HbsmOverflow as e:
        msg = str(e)
        assert "TPB" in msg and "live buffers" in msg
        return
    assert check_allocation(bufs, offs, cap, align) == []
    assert brute_force_valid(bufs, offs, cap)
    assert all(o % align == 0 for o in offs.values())


def test_checker_catches_overlap_and_overflow():
    a = Buf("a", 0, 64, 1, 0, 10)
    b = Buf("b", 0, 64, 1, 5, 15)
    c = Buf("c", 0, 64, 1, 20, 30)
    assert check_allocation([a, b, c], {"a": 0, "b": 32, "c": 0}, 256, 32)  # a/b overlap
    assert check_allocation([a, b, c], {"a": 0, "b": 64, "c": 0}, 256, 32) == []  # c reuses a
    assert check_allocation([a], {"a": 224}, 256, 32)  # past the end
    assert check_allocation([a], {"a": 16}, 256, 32)  # misaligned


def test_dead_buffers_are_reused():
    bufs = [Buf(f"x{i}", 0, 1024, 1, 10 * i, 10 * i + 10, "tcu") for i in range(10)]
    offs = allocate(bufs, 2048, 32)
    assert set(offs.values()) == {0}


def test_same_unit_reuse_preferred():
    # a (cvu) dies, b (tcu) dies; c (tcu) may take a's or b's bytes: it must take b's (same unit)
    a = Buf("a", 0, 512, 1, 0, 10, "cvu")
    b = Buf("b", 0, 512, 1, 0, 10, "tcu")
    c = Buf("c", 0, 512, 1, 20, 30, "tcu")
    offs = allocate([a, b, c], 1024, 32)
    assert offs["c"] == offs["b"] != offs["a"]


def test_reuse_is_judged_by_the_last_user():
    # a conv output: written by the TCU, last read by the CVU (a pool); b: TCU only. The next TCU
    # output c must take b's bytes: a's are released by the CVU, so reusing them would make the
    # TCU wait for the pool (a cross-unit write after read), although both were *first* used by
    # the TCU
    a = Buf("a", 0, 512, 1, 0, 10, "TCU", "CVU")
    b = Buf("b", 0, 512, 1, 0, 10, "TCU")
    c = Buf("c", 0, 512, 1, 20, 30, "TCU")
    offs = allocate([a, b, c], 1024, 32)
    assert offs["c"] == offs["b"] != offs["a"]
    # and the other way round: a DMA-written input last read by the TCU is the TCU's to reuse
    d = Buf("d", 0, 512, 1, 0, 10, "DMA", "TCU")
    e = Buf("e", 0, 512, 1, 0, 10, "DMA", "CVU")
    f = Buf("f", 0, 512, 1, 20, 30, "TCU")
    offs = allocate([d, e, f], 1024, 32)
    assert offs["f"] == offs["d"] != offs["e"]


def test_planned_concurrency_keeps_buffers_apart():
    # x: the input of piece 1 (program positions 0-2, predicted cycles 0-100); y: the input of
    # piece 2, loaded after piece 1 in program order (3-5) but predicted at 50-150, while piece 1
    # computes (double buffering). By positions they may share bytes; by the plan they must not.
    x = Buf("x", 0, 512, 1, 0, 3, "DMA", "TCU", (0, 100))
    y = Buf("y", 0, 512, 1, 3, 6, "DMA", "TCU", (50, 150))
    offs = allocate([x, y], 1024, 32)
    assert offs["x"] != offs["y"]
    assert not check_allocation([x, y], offs, 1024, 32)
    # without predictions (or when they do not overlap) the bytes are reused as before
    assert len(set(allocate([Buf("x", 0, 512, 1, 0, 3), Buf("y", 0, 512, 1, 3, 6)], 1024,
                            32).values())) == 1
    # no room for both: packed by program order alone (correct, single-buffered), no overflow
    offs = allocate([x, y], 512, 32)
    assert offs == {"x": 0, "y": 0} and not check_allocation([x, y], offs, 512, 32)
    # strict: that fallback is an overflow (m100-pipeline then tries a smaller prefetch share),
    # for a TPB's own buffers and for a broadcast group alike
    with pytest.raises(HbsmOverflow, match="TPB 0"):
        allocate([x, y], 512, 32, strict=True)
    x1, y1 = Buf("x1", 1, 512, 1, 0, 3, "DMA", "TCU", (0, 100)), \
        Buf("y1", 1, 512, 1, 3, 6, "DMA", "TCU", (50, 150))
    grp = [["x", "x1"], ["y", "y1"]]
    assert allocate([x, y, x1, y1], 512, 32, grp) == {n: 0 for n in ("x", "y", "x1", "y1")}
    with pytest.raises(HbsmOverflow, match="strict"):
        allocate([x, y, x1, y1], 512, 32, grp, strict=True)
    assert allocate([x, y], 1024, 32, strict=True) == allocate([x, y], 1024, 32)


def test_overflow_diagnostic_names_tpb_peak_live_buffers_and_fix():
    m = get_machine("tiny")
    cap = m.hbsm_bytes
    bufs = [Buf("conv1.act", 1, 24 * 1024, 2, 0, 100, "tcu"),
            Buf("conv1.weight", 1, 16 * 1024, 1, 0, 100, "tcu"),
            Buf("conv1.out", 1, 8 * 1024, 2, 50, 100, "tcu")]
    t, tot, live = peak(bufs, m.hbsm_bank_width)
    assert t == 50 and tot == 80 * 1024 and len(live) == 3
    with pytest.raises(HbsmOverflow) as e:
        allocate(bufs, cap, m.hbsm_bank_width)
    msg = str(e.value)
    assert "TPB 1" in msg and "cycle 50" in msg and "81920 B" in msg and "65536 B" in msg
    assert "conv1.act 49152 B (2 slots)" in msg
    assert "16384 B too many" in msg
    assert "give conv1.act 1 slot instead of 2 (saves 24576 B)" in msg
    assert "shrink conv1.act to <= 32768 B" in msg


@pytest.mark.parametrize("seed", range(20))
def test_broadcast_groups_share_an_offset_and_stay_valid(seed):
    rng = random.Random(100 + seed)
    cap, align = 8192, 32
    bufs = random_bufs(rng, rng.randrange(2, 10), cap, align, tpbs=3)
    # a broadcast receiver on each TPB, live over different intervals
    grp = []
    for t in range(3):
        s = rng.randrange(0, 60)
        b = Buf(f"w{t}", t, 32 * rng.randrange(4, 20), 1, s, s + rng.randrange(5, 40), "d")
        bufs.append(b)
        grp.append(b.name)
    try:
        offs = allocate(bufs, cap, align, groups=[grp])
    except HbsmOverflow:
        return
    assert len({offs[n] for n in grp}) == 1
    assert check_allocation(bufs, offs, cap, align) == []
    assert brute_force_valid(bufs, offs, cap)


def test_groups_and_own_buffers_packed_jointly_when_groups_first_fragments():
    """Two broadcast groups of equal size: placed largest first (then in the given order) the
    later-starting group takes offset 0, the other offset 1 on TPB 2 -- and on TPB 0 a 3-byte own
    buffer finds no hole next to it (capacity 4). Packed in one order (earliest group first) it
    fits. Oracle: the byte-painting brute force; the group members share one offset."""
    import m100.passes.backend.hbsm_pack as H
    bufs = [Buf("g0t1", 1, 1, 1, 6, 11), Buf("g0t2", 2, 1, 1, 6, 11),
            Buf("g1t0", 0, 1, 1, 1, 8), Buf("g1t2", 2, 1, 1, 1, 8),
            Buf("o0", 0, 3, 1, 3, 7)]
    groups = [["g0t1", "g0t2"], ["g1t0", "g1t2"]]
    with pytest.raises(HbsmOverflow):
        H._allocate_split(bufs, 4, 1, groups, True)  # the first way alone does not fit
    offs = allocate(bufs, 4, 1, groups, strict=True)
    assert brute_force_valid(bufs, offs, 4)
    assert not check_allocation(bufs, offs, 4, 1)
    assert offs["g0t1"] == offs["g0t2"] and offs["g1t0"] == offs["g1t2"]


def test_joint_packing_largest_first_when_groups_first_fragments():
    """TPB 0 (capacity 8): b2 (6 B, cycles 1-2), b3 (2 B, 0-4), b4 (5 B, 2-6) and a broadcast
    group (3 B, 4-8, with TPB 1). Groups first (both the split and the joint order) put the
    group at 0 and b4 above it, b2 at 0, and b3 -- live with both -- finds no 2 bytes; largest
    first (b2 at 0, b4 at 0, b3 at 6, the group at 5) it packs. Found by a random search over
    small workloads; oracle: the byte-painting brute force, the group at one offset."""
    import m100.passes.backend.hbsm_pack as H
    bufs = [Buf("b0", 1, 2, 1, 0, 1), Buf("b1", 1, 3, 1, 0, 1), Buf("b2", 0, 6, 1, 1, 2),
            Buf("b3", 0, 2, 1, 0, 4), Buf("b4", 0, 5, 1, 2, 6),
            Buf("g0t0", 0, 3, 1, 4, 8), Buf("g0t1", 1, 3, 1, 4, 8)]
    groups = [["g0t0", "g0t1"]]
    with pytest.raises(HbsmOverflow):
        H._allocate_split(bufs, 8, 1, groups, True)
    with pytest.raises(HbsmOverflow):
        H._allocate_joint(bufs, 8, 1, groups)
    with pytest.raises(HbsmOverflow):  # the third order only when asked for (largest_first)
        allocate(bufs, 8, 1, groups, strict=True)
    offs = allocate(bufs, 8, 1, groups, strict=True, largest_first=True)
    assert brute_force_valid(bufs, offs, 8)
    assert not check_allocation(bufs, offs, 8, 1)
    assert offs["g0t0"] == offs["g0t1"]


def _unit_workload(rng, seed, slot_bytes):
    """Random TPB workloads with predicted spans (some None), several units with distinct last
    users; for an odd seed, three broadcast groups (one buffer per TPB each)."""
    bufs = []
    for i in range(rng.randrange(20, 90)):
        s = rng.randrange(0, 200)
        pred = None if rng.random() < 0.3 else (float(rng.randrange(0, 900)),
                                                 float(rng.randrange(900, 2000)))
        bufs.append(Buf(f"b{i}", rng.randrange(3), slot_bytes(),
                        rng.choice((1, 1, 2)), float(s), float(s + rng.randrange(1, 60)),
                        rng.choice(("TCU", "CVU", "DTDU")), rng.choice(("", "", "CVU", "DMA")),
                        pred))
    groups = None
    if seed % 2:  # broadcast receivers: one buffer per TPB, three groups
        by_tpb = [[b.name for b in bufs if b.tpb == t] for t in range(3)]
        groups = [[names[k] for names in by_tpb if len(names) > k] for k in range(3)]
    return bufs, groups


@pytest.mark.parametrize("seed", range(30))
def test_vector_packing_is_the_loop(seed, monkeypatch):
    """The numpy columns (every group: ``VECTOR_MIN`` 0) choose the offsets of the Python loop
    (never: ``_split``, what groups under ``VECTOR_MIN`` get): random
    TPB workloads with predicted spans (some None), several units with distinct last users,
    broadcast groups placed first, overflow or not; the same offsets or the same error."""
    from m100.passes.backend import hbsm_pack as H

    rng = random.Random(seed)
    cap, align = 1 << 14, 32
    bufs, groups = _unit_workload(rng, seed, lambda: align * rng.randrange(1, cap // align // 10))

    def switch(vector):
        monkeypatch.setattr(H, "VECTOR_MIN", 0 if vector else 10**9)
    _same_both_ways(switch, bufs, cap, align, groups)


def _same_both_ways(switch, bufs, cap, align, groups, **kw) -> None:
    """``allocate`` with ``switch(False)`` then ``switch(True)``: the same offsets (valid ones)
    or the same error."""
    def run(on):
        switch(on)
        try:
            return allocate(bufs, cap, align, groups, **kw)
        except HbsmOverflow as e:
            return str(e)

    off, on = run(False), run(True)
    assert on == off
    if isinstance(off, dict):
        assert check_allocation(bufs, off, cap, align) == []


def _joint_one_call_a_buffer(bufs, capacity, align, groups, by_size):
    """The joint packing as written until session 28 (the oracle of the kept columns): each single
    buffer through ``_allocate_tpb`` with its TPB's placed list (the high-water mark and the
    candidate sets taken anew from every placed buffer per call)."""
    from collections import defaultdict

    import m100.passes.backend.hbsm_pack as H
    by_name = {b.name: b for b in bufs}
    grouped = {n for grp in groups for n in grp}
    items = [[by_name[n] for n in grp] for grp in groups] + \
        [[b] for b in bufs if b.name not in grouped]
    items.sort(key=lambda it: (0 if by_size else -len(it), -H._align(max(b.size for b in it), align),
                               min(b.start for b in it), it[0].name))
    by_tpb = defaultdict(list)
    for b in bufs:
        by_tpb[b.tpb].append(b)
    placed, cols, out = defaultdict(list), {}, {}
    for it in items:
        if len(it) == 1:
            b = it[0]
            out.update(H._allocate_tpb(b.tpb, [b], capacity, align, placed[b.tpb], by_tpb[b.tpb]))
            continue
        size = H._align(max(b.size for b in it), align)
        ok = H._group_offset(it, size, placed, capacity, align, cols)
        if ok is None:
            b = it[0]
            raise H._Overflow(b.tpb, by_tpb[b.tpb], capacity, align,
                              f"broadcast buffer {b.name} ({size} B) finds no offset free on "
                              f"TPBs {sorted(m.tpb for m in it)}")
        for b in it:
            out[b.name] = ok
            placed[b.tpb].append((ok, size, b))
    return out


@pytest.mark.parametrize("seed", range(30))
def test_joint_packing_keeps_the_choice_of_one_call_a_buffer(seed, monkeypatch):
    """``_allocate_joint`` keeps each TPB's columns and high-water mark across its one buffer at
    a time (session 28): the same offsets, or the same error, as one ``_allocate_tpb`` call per
    buffer (the definition, written out above), in both orders, with the columns from the first
    placed buffer on (``VECTOR_MIN`` 0), from the default size, and never (the loop); random
    workloads with predicted spans, units, broadcast groups, at capacities that fit and that
    overflow."""
    import m100.passes.backend.hbsm_pack as H

    rng = random.Random(seed)
    align = 32
    bufs, groups = _unit_workload(rng, seed, lambda: align * rng.randrange(1, 40))
    cap = align * rng.choice((64, 160, 400, 2000))
    for by_size in (False, True):
        def run(fn):
            try:
                return fn(bufs, cap, align, groups or [], by_size)
            except HbsmOverflow as e:
                return str(e)
        want = run(_joint_one_call_a_buffer)
        for least in (0, 24, 10**9):
            monkeypatch.setattr(H, "VECTOR_MIN", least)
            assert run(H._allocate_joint) == want, (by_size, least)
        if isinstance(want, dict):
            assert check_allocation(bufs, want, cap, align) == []


@pytest.mark.parametrize("seed", range(40))
def test_vector_check_is_the_loop(seed, monkeypatch):
    """``check_allocation`` with its numpy pre-check (tiny blocks too) reports exactly the pairs
    a loop over every pair finds (written out here), the same reports whatever the block, on
    random allocations of random workloads: valid packings, and offsets shuffled or nudged so
    that some live buffers share bytes."""
    from m100.passes.backend import hbsm_pack as H

    rng = random.Random(seed)
    cap, align = 1 << 13, 32
    bufs = []
    for i in range(rng.randrange(2, 70)):
        s = rng.randrange(0, 100)
        bufs.append(Buf(f"b{i}", rng.randrange(3), align * rng.randrange(1, 12), rng.choice((1, 2)),
                        float(s), float(s + rng.choice((0, 1, 3, 30))), "TCU"))
    offs = {b.name: align * rng.randrange(0, cap // align // 2) for b in bufs}
    if seed % 3 == 0:
        try:
            offs = allocate(bufs, cap, align)
        except HbsmOverflow:
            pass
        if seed % 2 and len(bufs) > 1:  # one buffer moved onto another
            a, c = rng.sample(bufs, 2)
            offs[a.name] = offs[c.name]
    if seed % 5 == 0:
        offs.pop(bufs[0].name)  # a buffer without an offset is reported and paired with none
    want = []
    for k, a in enumerate(bufs):
        for c in bufs[k + 1:]:
            if a.name in offs and c.name in offs and a.tpb == c.tpb and a.start < c.end and \
                    c.start < a.end and offs[a.name] < offs[c.name] + c.size and \
                    offs[c.name] < offs[a.name] + a.size:
                want.append({a.name, c.name})
    results = []
    for block in (256, 1, 3, 10**6):
        monkeypatch.setattr(H, "CHECK_BLOCK", block)
        results.append(check_allocation(bufs, offs, cap, align))
    assert all(r == results[0] for r in results)
    pairs = [m for m in results[0] if "overlap while both are live" in m]
    assert len(pairs) == len(want)
    assert sorted(sorted(p) for p in want) == sorted(
        sorted(w.split()[0] for w in m.split(": ", 1)[1].split(" and ")) for m in pairs)


def _random_spans(rng, n, cap):
    from m100.passes.backend.hbsm_pack import _reach
    return _reach([(rng.randrange(0, cap), rng.randrange(1, cap // 4)) for _ in range(n)])


def _meets_def(at, reach, lo, hi) -> bool:
    """Some span of ``_reach``'s ``(at, reach)`` meets bytes ``[lo, hi)``: one of them starts
    below ``hi`` and (the largest end up to it) ends above ``lo`` -- a linear scan."""
    return any(a < hi and r > lo for a, r in zip(at, reach))


def _choose_by_definition(cands, live, other, high, size, capacity, align):
    """The least key (grows the footprint, reuses another unit's bytes, offset) over every
    aligned candidate that fits below the capacity and meets no live span."""
    keys = []
    for c in cands:
        c = -(-c // align) * align
        if c + size <= capacity and not _meets_def(*live, c, c + size):
            keys.append((c + size > high, _meets_def(*other, c, c + size), c))
    return min(keys)[2] if keys else None


def _lowest_gap_by_definition(spans, size, capacity, align):
    """Every candidate (0 and each span's end) aligned, kept when ``size`` bytes there fit below
    the capacity and meet no span (each span tested): the lowest."""
    ok = [c for c in (-(-x // align) * align for x in {0} | {e for _, e in spans})
          if c + size <= capacity and not any(o < c + size and c < e for o, e in spans)]
    return min(ok) if ok else None


@pytest.mark.parametrize("seed", range(20))
def test_choice_is_the_definition(seed):
    """``_choose`` (candidates in order, stopping early) and ``_lowest_gap`` (the spans' free
    gaps in order) answer what their definitions (the least key over all candidates; the lowest
    free one) answer: random candidates (aligned or not, past the capacity too), live and other
    units' spans (overlapping, nested, touching), footprints and alignments (1 to 48 bytes, not
    only powers of 2)."""
    from m100.passes.backend import hbsm_pack as H

    rng = random.Random(seed)
    cap = rng.choice((256, 1000, 4096))
    found, gaps = set(), set()
    for _ in range(1500):
        align = rng.choice((1, 8, 32, 48))
        cands = {0} | {rng.randrange(0, cap + 64) for _ in range(rng.randrange(0, 40))}
        live = _random_spans(rng, rng.randrange(0, 12), cap)
        other = _random_spans(rng, rng.randrange(0, 12), cap)
        high, size = rng.randrange(0, cap + 1), rng.randrange(1, cap // 3)
        args = (cands, live, other, high, size, cap, align)
        want = _choose_by_definition(*args)
        assert H._choose(*args) == want, args
        spans = [(o, o + rng.randrange(1, cap // 4)) for o in
                 (rng.randrange(0, cap) for _ in range(rng.randrange(0, 12)))]
        free = _lowest_gap_by_definition(spans, size, cap, align)
        assert H._lowest_gap(list(spans), size, cap, align) == free, (spans, size, cap, align)
        gaps.add(free is None or free in {-(-e // align) * align for _, e in spans})
        if want is not None:  # which of the keys decided: both kinds must occur
            found.add((want + size > high, _meets_def(*other, want, want + size)))
        else:
            found.add(None)
    assert len(found) >= 3
    assert gaps == {True, False}  # the lowest gap at 0 and at a span's end both occur


@pytest.mark.parametrize("seed", range(30))
def test_packing_is_the_definitions(seed, monkeypatch):
    """Whole allocations (groups first or jointly, the loop or the columns) with ``_choose`` /
    ``_lowest_gap`` and with their definitions: the same offsets or the same error, on random
    workloads whose sizes are not all multiples of the alignment. (With the columns a TPB's
    own buffers choose through ``hbsm_gaps.Gaps``, which calls neither: ``test_hbsm_gaps``
    compares it with ``_split`` + ``_choose``; the groups and the loop here.)"""
    from m100.passes.backend import hbsm_pack as H

    rng = random.Random(seed)
    cap, align = 1 << 13, 32
    bufs, groups = _unit_workload(rng, seed, lambda: rng.randrange(1, cap // 8))
    monkeypatch.setattr(H, "VECTOR_MIN", rng.choice((0, 24, 10**9)))
    kept = H._choose, H._lowest_gap

    def switch(on):
        monkeypatch.setattr(H, "_choose", kept[0] if on else _choose_by_definition)
        monkeypatch.setattr(H, "_lowest_gap", kept[1] if on else _lowest_gap_by_definition)
    _same_both_ways(switch, bufs, cap, align, groups, largest_first=bool(seed % 3))
