"""sync-insert's footprint stage (``footprint.py``: the bytes each block of an instruction touches)
against brute-force enumeration of the walks' bytes.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402

from m100.passes.backend.sync_insert import footprint  # noqa: E402
from m100.passes.backend.sync_insert.footprint import (Access, access_need,  # noqa: E402
                                                       conv_input_rows, is_dense, rows_meet)
from m100.targets.m100 import isa  # noqa: E402
from m100.targets.m100.isa import Sync  # noqa: E402


# ------------------------------------------------------------------------------------------------
# walk-level analysis against brute-force enumeration
# ------------------------------------------------------------------------------------------------
_levels = st.lists(st.tuples(st.integers(1, 4), st.integers(-3, 9), st.integers(0, 12)),
                   min_size=1, max_size=3)

def _walk(levels, base, dtype):
    lv = tuple(isa.Level.span(c, s, o) if s else isa.Level(o, 0, c) for c, s, o in levels)
    lo = sum(min(x.initial, x.last) for x in lv)
    shift = max(0, -lo)  # keep every offset non-negative
    lv = (isa.Level(lv[0].initial + shift, lv[0].step,
                    lv[0].final + (shift if lv[0].step else 0)),) + lv[1:]
    return isa.Walk(isa.Space.HBSM, 0, base, dtype, lv)

def _bytes(w, sel=slice(None)):
    off = w.offsets()[sel]
    nb = w.dtype.bits // 8
    return set((w.base + off[:, None] * nb + np.arange(nb)[None, :]).reshape(-1).tolist())

@settings(max_examples=200, deadline=None)
@given(_levels, st.sampled_from([isa.DType.I8, isa.DType.F16, isa.DType.F32]))
def test_is_dense_matches_enumeration(levels, dtype):
    w = _walk(levels, 64, dtype)
    lo, hi = w.byte_range()
    if is_dense(w):  # sound: only a walk that covers its whole interval may retire others
        assert _bytes(w) == set(range(lo, hi))
    shape = tuple(c for c, _, _ in levels)
    perm = isa.Walk.strided(isa.Space.HBSM, 0, 64, dtype, shape)  # row-major boxes are dense
    assert is_dense(perm)

@settings(max_examples=150, deadline=None)
@given(_levels, _levels, st.integers(0, 40), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2]),
       st.booleans(), st.booleans())
def test_block_need_matches_enumeration(la, lb, base_b, bi, bj, split_i, split_j):
    wi, wj = _walk(la, 0, isa.DType.F32), _walk(lb, 4 * base_b, isa.DType.F32)
    if split_i and wi.num_elements % bi or split_j and wj.num_elements % bj:
        return
    ai = Access((2, 0), wi, True, split_i, "i")
    aj = Access((2, 0), wj, False, split_j, "j")
    need = access_need(ai, bi, aj, bj)

    def part(w, split, nb, b):
        if not split:
            return _bytes(w)
        per = w.num_elements // nb
        return _bytes(w, slice(b * per, (b + 1) * per))

    for b in range(bj):
        touched = part(wj, split_j, bj, b)
        want = max((k for k in range(bi) if part(wi, split_i, bi, k) & touched), default=-1)
        assert need[b] == want

@settings(max_examples=80, deadline=None)
@given(st.integers(1, 2), st.integers(3, 9), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 2), st.integers(1, 2), st.integers(0, 2), st.integers(0, 2),
       st.sampled_from([1, 2, 3, 4]))
def test_conv_input_rows_match_window_enumeration(n, h, kh, c, sh, dh, pt, pb, nb):
    width = 2
    if (h + pt + pb - dh * (kh - 1) - 1) < 0:
        return
    mk = lambda cnt: progs.hw(0, 0, shape=(cnt,))  # noqa: E731
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    if (n * oh) % nb:
        return
    inst = isa.Conv2D(tpb=0, x=mk(n * h * width * c), w=mk(kh * c), y=mk(n * oh * width),
                      n=n, h=h, width=width, c=c, f=1, kh=kh, kw=1, stride=(sh, 1),
                      pad=(pt, 0, pb, 0), dilation=(dh, 1), sync=Sync(blocks=nb))
    rows = n * oh // nb
    for b, rng in enumerate(conv_input_rows(inst, nb)):
        got = {e for lo, hi in rng for e in range(lo, hi)}
        want = set()
        for r in range(b * rows, (b + 1) * rows):
            ni, oy = divmod(r, oh)
            for ky in range(kh):
                iy = oy * sh - pt + ky * dh
                if 0 <= iy < h:
                    want |= set(range((ni * h + iy) * width * c, (ni * h + iy + 1) * width * c))
        assert want <= got  # sound
        # and no wider than the envelope of the block's windows (padding rows clipped away)
        gr = {e // (width * c) for e in got}
        for ni in {r // oh for r in range(b * rows, (b + 1) * rows)}:
            oys = [r % oh for r in range(b * rows, (b + 1) * rows) if r // oh == ni]
            lo, hi = max(0, min(oys) * sh - pt), min(h - 1, max(oys) * sh - pt + dh * (kh - 1))
            assert {r - ni * h for r in gr if r // h == ni} == set(range(lo, hi + 1))

@settings(max_examples=300, deadline=None)
@given(_levels, st.sampled_from([isa.DType.I8, isa.DType.F16, isa.DType.F32, isa.DType.I4]),
       st.sampled_from([1, 2, 3, 4, 6]), st.booleans())
def test_chunk_runs_match_enumeration(levels, dtype, nchunks, use_ranges):
    w = _walk(levels, 64, dtype)
    n = w.num_elements
    if n % nchunks:
        return
    per = n // nchunks
    ranges = (tuple(((c * per, c * per + per // 2), (c * per + per // 2, (c + 1) * per))
                    for c in range(nchunks)) if use_ranges else None)
    footprint._chunk_cache.clear()
    ch = footprint.walk_chunks(w, nchunks, ranges)
    off = w.offsets()
    for c in range(nchunks):
        o = off[c * per:(c + 1) * per]
        if dtype.bits >= 8:
            nb = dtype.bits // 8
            want = set((w.base + o[:, None] * nb + np.arange(nb)[None, :]).reshape(-1).tolist())
        else:
            want = set((w.base + o * dtype.bits // 8).tolist())
        assert (ch.lol[c], ch.hil[c]) == (min(want), max(want) + 1)
        if ch.dense[c]:
            assert want == set(range(min(want), max(want) + 1))
        st_, ln = ch.runs(c)
        got = {int(x) + k for x in st_ for k in range(ln)}
        assert got == want
        assert all(st_[1:] >= st_[:-1] + ln)  # sorted, disjoint


# ------------------------------------------------------------------------------------------------
# row-shaped footprints (rows_meet) against enumeration
# ------------------------------------------------------------------------------------------------
def test_rows_meet_against_enumeration():
    """rows_meet against the byte sets enumerated, on random row shapes of equal periods and
    single runs."""
    rng = np.random.default_rng(5)
    for _ in range(3000):
        p = int(rng.integers(1, 12))

        def shape():
            n = int(rng.integers(1, 5))
            run = int(rng.integers(1, p + 1)) if n > 1 else int(rng.integers(1, 30))
            return int(rng.integers(0, 40)), (p if n > 1 else 0), n, run

        a, b = shape(), shape()
        bytes_of = [{s + k * per + u for k in range(n) for u in range(run)}
                    for s, per, n, run in (a, b)]
        dec, meet = rows_meet(*(np.array([x]) for x in a), *b)
        assert dec[0]
        assert bool(meet[0]) == bool(bytes_of[0] & bytes_of[1]), (a, b)


# ------------------------------------------------------------------------------------------------
# completeness: every operand an instruction reads or writes is in its footprint
# ------------------------------------------------------------------------------------------------
_S = progs.isa_strategies("m100_isa_strategies_footprint")
from m100.targets.m100.machine import get_machine  # noqa: E402

_TINY = get_machine("tiny")


@pytest.mark.parametrize("kind", list(_S.KIND_STRATEGIES), ids=lambda k: k.__name__)
def test_block_accesses_cover_every_operand(kind):
    """Per instruction kind (a matmul's optional operands are drawn rarely among all kinds)."""
    settings(max_examples=200, deadline=None)(given(_S.instructions(_TINY, [kind]))(
        _covers_every_operand))()


def _covers_every_operand(inst):
    """An operand walk missing from ``block_accesses`` is a buffer sync-insert does not protect:
    a DMA may refill it while the instruction still reads it (a race no check of the compiler
    reports). Each walk of ``inst.walks()`` must be an access with its write flag -- e.g. a
    matmul's ``post_in`` (session 15), read block by block like C."""
    acc = footprint.block_accesses(inst)
    for name, w, written in inst.walks():
        hits = [a for a in acc if a.walk == w and a.write == written]
        assert hits, f"{type(inst).__name__}: operand '{name}' ({'written' if written else 'read'}) " \
                     f"is not in its footprint {[(a.name, a.write) for a in acc]}"


# ------------------------------------------------------------------------------------------------
# transposed writes: short runs in walk order, long runs in address order (issue 13, session 20)
# ------------------------------------------------------------------------------------------------
def _tcols(c0: int, c1: int, rows: int, stride: int, dtype=isa.DType.F16):
    """Columns [c0, c1) of a [rows, stride] matrix written column by column (the walk's inner
    level steps by a row: one element per run in walk order, as RoPE's store into ``kT``)."""
    lv = (isa.Level(c0, 1, c1 - 1), isa.Level(0, stride, stride * (rows - 1)))
    return isa.Walk(isa.Space.DDR, 0, 4096, dtype, lv)


@pytest.mark.parametrize("a,b,rows", [((0, 18), (18, 36), 40), ((0, 18), (17, 35), 40),
                                      ((0, 5), (9, 14), 40), ((3, 9), (0, 12), 40),
                                      ((0, 18), (18, 37), 33)])
def test_transposed_writes_meet_exactly_past_the_run_limit(a, b, rows, monkeypatch):
    """With more runs in walk order than ``EXACT_LIMIT`` the runs are merged in address order
    (``footprint._coalesce``) and the exact test decides: two stores of disjoint columns of one
    matrix do not meet (the interval test ordered them), overlapping ones do -- against the
    bytes enumerated."""
    monkeypatch.setattr(footprint, "EXACT_LIMIT", 64)  # fewer runs than rows * columns
    monkeypatch.setattr(footprint, "_chunk_cache", {})
    wa, wb = _tcols(*a, rows, 64), _tcols(*b, rows, 64)
    assert wa.num_elements > 64 and wb.num_elements > 64
    need = access_need(Access((0, 0), wa, True, True, "a"), 1,
                       Access((0, 0), wb, True, True, "b"), 1)
    meet = bool(_bytes(wa) & _bytes(wb))
    assert (int(need[0]) >= 0) == meet
    assert footprint.walk_chunks(wa, 1).exact_ok  # coalesced: the exact test ran


def test_coalesce_merges_adjacent_runs_of_one_length():
    """``_coalesce``: adjacent runs merged; runs of different merged lengths are refused (the
    chunk then keeps the interval test, which is sound)."""
    from m100.passes.backend.sync_insert.footprint import _coalesce
    st, n = _coalesce(np.array([0, 2, 10, 12, 20, 22]), 2)
    assert st.tolist() == [0, 10, 20] and n == 4
    assert _coalesce(np.array([0, 2, 4, 10, 12]), 2) is None
    st, n = _coalesce(np.array([0, 5, 9]), 2)  # nothing adjacent: the runs as they were
    assert st.tolist() == [0, 5, 9] and n == 2
