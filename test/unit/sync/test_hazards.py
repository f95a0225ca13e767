"""sync-insert's hazards stage (``hazards.py``: conflicting pairs as need vectors): exact overlap,
retirement by covering writes, the shortcuts against the general path, the pruning of implied
needs, checked on toysim.py and against the unpruned / general computation.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402
import toysim  # noqa: E402

from m100.passes.backend.sync_insert import (DataEdge, certificate, footprint, hazards,  # noqa: E402
                                             insert_sync, sweep)
from m100.passes.backend.sync_insert.hazards import Hazard, prune_implied  # noqa: E402
from m100.sim.certificate import verify_instructions as verify_certificate  # noqa: E402
from m100.targets.m100 import isa  # noqa: E402
from m100.targets.m100.isa import DType, Walk  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

TINY = get_machine("tiny")


# ------------------------------------------------------------------------------------------------
# exact overlap, long programs (hazard retirement by covering writes), coarse overlap path
# ------------------------------------------------------------------------------------------------
def test_exact_overlap_interleaved_halves_need_no_sync():
    h = progs.hw
    prog = [isa.Copy(tpb=0, src=progs.half(h, 0, 1, parity=0), dst=progs.half(h, 0, 0, parity=0)),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 2), h(0, 2)], h(0, 3)),
            isa.Copy(tpb=1, src=progs.half(h, 1, 1, parity=1), dst=progs.half(h, 0, 0, parity=1))]
    res = insert_sync(prog, TINY)
    assert res.stats["needs"] == 0
    assert all(not i.sync.monitors for i in res.instructions)
    mem, ref = toysim.setup(prog, TINY)
    assert toysim.ok(toysim.run(res.instructions, TINY, mem, seed=3), ref)

@pytest.mark.parametrize("seed", range(3))
def test_long_programs_with_heavy_buffer_reuse(seed):
    prog = progs.random_program(500 + seed, n=70, slots=4, ddr_slots=2)
    mem, ref = toysim.setup(prog, TINY, seed)
    res = insert_sync(prog, TINY, stream_blocks=2)
    for s in (None, seed):
        out = toysim.run(res.instructions, TINY, mem, seed=s)
        assert toysim.ok(out, ref), (out.races[:2], out.deadlock)
    assert verify_certificate(res.instructions, res.certificate) == []

@pytest.mark.parametrize("seed", range(4))
def test_interval_only_overlap_is_sound(seed, monkeypatch):
    monkeypatch.setattr(footprint, "EXACT_LIMIT", 64)
    monkeypatch.setattr(sweep, "ENABLED", False)
    footprint._chunk_cache.clear()
    prog = progs.random_program(300 + seed, n=20)
    mem, ref = toysim.setup(prog, TINY, seed)
    coarse = insert_sync(prog, TINY)
    footprint._chunk_cache.clear()
    monkeypatch.undo()
    # needs derived, not skipped: the one-sweep path skips producers already waited for
    monkeypatch.setattr(sweep, "ENABLED", False)
    exact = insert_sync(prog, TINY)
    assert coarse.stats["needs"] >= exact.stats["needs"]
    assert toysim.ok(toysim.run(coarse.instructions, TINY, mem, seed=seed), ref)


# ------------------------------------------------------------------------------------------------
# the reference: the per-access sweep without shortcuts, written out from the definitions
# ------------------------------------------------------------------------------------------------
def _reference_hazards(prog, blocks, calls: list | None = None) -> dict:
    """derive_hazards written out from its definition -- the product's per-access sweep until
    session 32 (``hazards.BULK = False`` with both shortcuts off), no arrays: per memory in the
    order of its first access, every access in global order meets the *live* earlier accesses
    (those of earlier instructions, in their order, not yet retired) whose byte intervals
    overlap its own, one of the two writing, of another executor; each such pair's need is
    ``access_need``'s (``calls`` counts them), kept when some block waits, merged by maximum,
    with its reason (kind, memory, overlap); after an instruction's accesses in a memory, if it
    got a new producer there, ``prune_implied`` of all its producers so far (when
    ``PRUNE_IMPLIED``); then that instruction's dense writes retire the live accesses whose
    intervals they cover, and its accesses join the live ones."""
    execs = [p.executor for p in prog]
    per_mem: dict = {}
    for j, inst in enumerate(prog):
        for a in footprint.block_accesses(inst):
            per_mem.setdefault(a.mem, []).append((j, a, *a.walk.byte_range()))
    out: dict = {}
    prods: dict[int, list[int]] = {}
    for mem, rows in per_mem.items():
        live: list = []
        start, grew = 0, False
        for r, (j, aj, lo_j, hi_j) in enumerate(rows):
            for i, ai, lo_i, hi_i in live:
                if not (lo_i < hi_j and lo_j < hi_i) or not (ai.write or aj.write) \
                        or execs[i] == execs[j]:
                    continue
                if calls is not None:
                    calls.append((i, j))
                need = footprint.access_need(ai, blocks[i], aj, blocks[j])
                if need.max() < 0:
                    continue
                h = out.get((i, j))
                if h is None:
                    h = out[(i, j)] = Hazard(i, j, need)
                    prods.setdefault(j, []).append(i)
                    grew = True
                else:
                    h.need = np.maximum(h.need, need)
                kind = "WAW" if ai.write and aj.write else ("RAW" if ai.write else "WAR")
                h.why.append((kind, mem, max(lo_i, lo_j), min(hi_i, hi_j)))
            if r + 1 < len(rows) and rows[r + 1][0] == j:
                continue
            if grew and hazards.PRUNE_IMPLIED and len(prods[j]) > 1:
                prods[j] = prune_implied(out, j, prods[j], execs)
            grew = False
            mine = rows[start:r + 1]
            kills = [(lo, hi) for _, a, lo, hi in mine if a.write and footprint.is_dense(a.walk)]
            live = [x for x in live if not any(lo <= x[2] and x[3] <= hi for lo, hi in kills)]
            live += mine
            start = r + 1
    return out


# ------------------------------------------------------------------------------------------------
# the shortcuts (dense pairs, row-shaped pairs) give what access_need gives
# ------------------------------------------------------------------------------------------------
def _shortcuts_same_as_access_need(monkeypatch, prog, blocks, fewer: int) -> None:
    """derive_hazards against the reference (every pair through access_need): the shortcuts
    were taken (more than ``fewer`` access_need calls saved) and the hazards, need vectors and
    reasons are the same, in the same order."""
    calls = []
    need = hazards.access_need
    monkeypatch.setattr(hazards, "access_need", lambda *a: calls.append(1) or need(*a))
    fast = hazards.derive_hazards(prog, blocks)
    ref_calls: list = []
    slow = _reference_hazards(prog, blocks, ref_calls)
    assert len(calls) < len(ref_calls) - fewer  # the shortcuts were taken
    assert list(fast) == list(slow) and len(fast) > 10
    for k, h in fast.items():
        assert h.need.tolist() == slow[k].need.tolist() and h.why == slow[k].why


@pytest.mark.parametrize("seed", range(6))
def test_dense_shortcut_gives_the_same_hazards(seed, monkeypatch):
    """derive_hazards' shortcut for two dense 1-block accesses (need [0], no chunks) against
    access_need on every pair (the reference): same hazards, need vectors and reasons, in the
    same order."""
    prog = progs.random_program(700 + seed, n=60, slots=5, ddr_slots=3)
    if seed % 2:  # what the scheduler emits: one block each, so nearly every pair is a shortcut
        prog = [dataclasses.replace(p, sync=isa.Sync()) for p in prog]
    _shortcuts_same_as_access_need(monkeypatch, prog, [p.sync.blocks for p in prog],
                                   fewer=100 if seed % 2 else 0)

def _slice_walk(rng, space: isa.Space, tpb: int, rows: int, cols: int) -> isa.Walk:
    """A random piece of a [rows, cols] i8/f16/f32 matrix at address 0: a column slice of some
    rows (RoPE halves, per-head columns), sometimes reversed, a whole (dense) box, a transposed
    or a 3-level walk (not row-shaped), or a strided one that is not injective-foldable."""
    dt = [isa.DType.I8, isa.DType.F16, isa.DType.F32][int(rng.integers(3))]
    r0 = int(rng.integers(rows))
    nr = int(rng.integers(1, rows - r0 + 1))
    c0 = int(rng.integers(cols))
    nc = int(rng.integers(1, cols - c0 + 1))
    kind = rng.integers(6)
    if kind == 0:  # dense box: whole rows
        return isa.Walk.strided(space, tpb, 0, dt, (nr, cols), offset=r0 * cols)
    if kind == 1:  # transposed column slice (columns outer): not row-shaped
        return isa.Walk.strided(space, tpb, 0, dt, (nc, nr), (1, cols), offset=r0 * cols + c0)
    if kind == 2 and nc % 2 == 0:  # every other column: inner level not contiguous
        return isa.Walk.strided(space, tpb, 0, dt, (nr, nc // 2), (cols, 2),
                                offset=r0 * cols + c0)
    if kind == 3 and nr > 1:  # rows in reverse order
        return isa.Walk(space, tpb, 0, dt, (
            isa.Level((r0 + nr - 1) * cols + c0, -cols, r0 * cols + c0), isa.Level.span(nc, 1)))
    return isa.Walk.strided(space, tpb, 0, dt, (nr, nc), (cols, 1), offset=r0 * cols + c0)

@pytest.mark.parametrize("seed", range(8))
def test_rows_shortcut_gives_the_same_hazards(seed, monkeypatch):
    """derive_hazards' row-shape test (rows_meet) for pairs of 1-block accesses against
    access_need's run-by-run test on every pair (the reference): same hazards, need vectors and
    reasons, in the same order -- on programs of copies and DMAs between random pieces of one
    matrix (column slices of rows interleave in one bounding interval, most pairs do not
    meet)."""
    rng = np.random.default_rng(900 + seed)
    rows, cols = int(rng.integers(2, 9)), int(rng.integers(2, 40))
    if seed == 7:  # force the coarse (interval-only) path on some walks: no shortcut there
        monkeypatch.setattr(footprint, "EXACT_LIMIT", 3)
    prog = []
    for _ in range(70):
        a = _slice_walk(rng, isa.Space.HBSM, 0, rows, cols)
        for _ in range(40):  # a piece of as many elements (else a contiguous run)
            b = _slice_walk(rng, isa.Space.HBSM, 0, rows, cols)
            if b.num_elements == a.num_elements:
                break
        else:
            b = isa.Walk.strided(b.space, 0, 0, b.dtype, (a.num_elements,))
        b = dataclasses.replace(b, dtype=a.dtype)
        n = a.num_elements
        if rng.random() < .5:
            prog.append(isa.Copy(tpb=0, src=a, dst=b))
        else:
            d = isa.Walk.strided(isa.Space.DDR, 0, 0, a.dtype, (n,))
            prog.append(isa.Dma(engine=int(rng.integers(2)), src=d, dst=b)
                        if rng.random() < .5 else isa.Dma(engine=int(rng.integers(2)), src=a,
                                                          dst=d))
    blocks = [1 if rng.random() < .9 else 2 for _ in prog]
    _shortcuts_same_as_access_need(monkeypatch, prog, blocks, fewer=0)


# ------------------------------------------------------------------------------------------------
# the bulk derivation (candidate pairs as arrays per memory) is the per-access sweep
# ------------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _reasons(monkeypatch):
    """These tests compare the needs' reasons too: keep them in the bulk sweep (which drops them
    when no version 2 certificate is written; test_bulk_without_reasons_gives_the_same_needs)."""
    monkeypatch.setattr(hazards, "REASONS", True)


@pytest.mark.parametrize("seed", range(4))
def test_bulk_without_reasons_gives_the_same_needs(seed, monkeypatch):
    prog, blocks = _matrix_program(seed)
    with_r = hazards.derive_hazards(prog, blocks)
    monkeypatch.setattr(hazards, "REASONS", False)
    without = hazards.derive_hazards(prog, blocks)
    assert list(with_r) == list(without) and len(without) > 5
    assert all(h.need.tolist() == with_r[k].need.tolist() and h.why == [] and with_r[k].why
               for k, h in without.items())


def _same_hazards(a: dict, b: dict) -> None:
    assert list(a) == list(b)  # the same pairs in the same order
    for k, h in a.items():
        assert h.need.tolist() == b[k].need.tolist() and h.why == b[k].why, k


def _matrix_program(seed: int) -> tuple[list, list[int]]:
    """Copies and DMAs between random pieces of one matrix (test_rows_shortcut's programs)."""
    rng = np.random.default_rng(1900 + seed)
    rows, cols = int(rng.integers(2, 9)), int(rng.integers(2, 40))
    prog = []
    for _ in range(60):
        a = _slice_walk(rng, isa.Space.HBSM, 0, rows, cols)
        b = isa.Walk.strided(isa.Space.HBSM, 0, 0, a.dtype, (a.num_elements,),
                             offset=int(rng.integers(0, rows * cols - a.num_elements + 1)))
        if rng.random() < .5:
            prog.append(isa.Copy(tpb=0, src=a, dst=b) if rng.random() < .5 else
                        isa.Copy(tpb=0, src=b, dst=a))
        else:
            d = isa.Walk.strided(isa.Space.DDR, 0, 0, a.dtype, (a.num_elements,))
            prog.append(isa.Dma(engine=int(rng.integers(2)), src=d, dst=a)
                        if rng.random() < .5 else isa.Dma(engine=int(rng.integers(2)), src=a,
                                                          dst=d))
    return prog, [1 if rng.random() < .8 else 2 for _ in prog]


@pytest.mark.parametrize("seed", range(12))
def test_bulk_derivation_is_the_sweep(seed, monkeypatch):
    """derive_hazards' bulk path (each access's candidates are the later rows up to the dense
    write that retires it, found and filtered as arrays per memory) against the per-access sweep
    written out (the reference): the same hazards, need vectors and reasons, in the same order --
    with and without the pruning, with tiny array slices (``BULK_PAIRS``), on random programs with
    heavy buffer reuse, blocks, CSU/SRAM traffic and on pieces of one matrix."""
    if seed % 3 == 2:
        prog, blocks = _matrix_program(seed)
    else:
        prog = progs.random_program(1700 + seed, n=90, slots=4 + seed % 3, ddr_slots=2,
                                    extra=seed % 2 == 1)
        if seed % 4 == 1:  # one block each (what the scheduler emits)
            prog = [dataclasses.replace(p, sync=isa.Sync()) for p in prog]
        blocks = [p.sync.blocks for p in prog]
    if seed % 4 == 3:
        monkeypatch.setattr(hazards, "PRUNE_IMPLIED", False)
    if seed % 2:
        monkeypatch.setattr(hazards, "BULK_PAIRS", 1 + seed)  # many slices, some rows alone
    bulk = hazards.derive_hazards(prog, blocks)
    ref = _reference_hazards(prog, blocks)
    assert len(ref) > 20
    _same_hazards(bulk, ref)


def test_bulk_prunes_a_group_whose_need_grew(monkeypatch):
    """A need that grows in a later memory (no new producer on its executor) can make an earlier
    producer implied: the bulk path prunes that executor's producers again when another
    executor's new hazard triggers the pruning, as prune_implied of all producers does."""
    f32 = isa.DType.F32
    hb = lambda off, n, t=0: isa.Walk.strided(isa.Space.HBSM, t, 0, f32, (n,), offset=off)  # noqa
    dd = lambda off, n: isa.Walk.strided(isa.Space.DDR, 0, 0, f32, (n,), offset=off)  # noqa
    prog = [isa.Fill(tpb=0, dst=hb(64, 16), value=1.0),  # HBSM 0 is the first memory swept
            isa.Dma(engine=0, src=dd(100, 16), dst=hb(0, 16)),  # i1: all of X
            isa.Dma(engine=0, src=dd(0, 8), dst=hb(8, 8)),  # i2: X's second half, reads E[0:8]
            isa.Dma(engine=1, src=dd(8, 8), dst=hb(0, 8, 1)),  # i3: reads E[8:16]
            isa.Dma(engine=2, src=hb(0, 16), dst=dd(0, 16), sync=isa.Sync(blocks=2))]  # j
    blocks = [p.sync.blocks for p in prog]
    bulk = hazards.derive_hazards(prog, blocks)
    # HBSM 0: (1, 4) waits from block 0, (2, 4) from block 1: both kept; DDR: (2, 4) grows to
    # [0, 0] and (3, 4) is new, so (1, 4) is implied by (2, 4) through engine 0's order
    assert (1, 4) not in bulk and bulk[(2, 4)].need.tolist() == [0, 0] and (3, 4) in bulk
    _same_hazards(bulk, _reference_hazards(prog, blocks))


# ------------------------------------------------------------------------------------------------
# needs implied through program order
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
def test_pruning_implied_needs_keeps_the_program(seed, monkeypatch):
    """hazards.prune_implied drops a need i1 -> j when a later producer i2 of j on the same executor
    waits no later in j: the program (every sync field) and the kept orderings are the same as
    without it, the certificate lists a subset of the hazards, and every hazard of the full list
    -- the dropped ones too -- is ordered by the program (the independent checker's test)."""
    prog = progs.random_program(900 + seed, n=60, slots=4, ddr_slots=2, extra=seed % 2 == 1)
    rng = np.random.default_rng(seed)
    edges = [DataEdge(int(p), int(c)) for p, c in
             (sorted(rng.choice(len(prog), 2, replace=False)) for _ in range(25))]
    kw = dict(edges=edges, stream_blocks=2 if seed % 3 == 0 else None)
    monkeypatch.setattr(certificate, "LIST_HAZARDS", True)  # (version 2: the hazards listed)
    pruned = insert_sync(prog, TINY, **kw)
    monkeypatch.setattr(hazards, "PRUNE_IMPLIED", False)
    full = insert_sync(prog, TINY, **kw)
    assert [i.sync for i in pruned.instructions] == [i.sync for i in full.instructions]
    assert pruned.certificate["edges"] == full.certificate["edges"]
    hp = {tuple(h) for h in pruned.certificate["hazards"]}
    hf = {tuple(h) for h in full.certificate["hazards"]}
    assert hp < hf  # something was pruned (random programs reuse executors a lot)
    assert verify_certificate(pruned.instructions, dict(pruned.certificate,
                                                        hazards=full.certificate["hazards"])) == []
    assert set(map(tuple, pruned.certificate["redundant"])) < set(
        map(tuple, full.certificate["redundant"]))

def test_prune_implied_by_first_waiting_block():
    """Producers 0 < 2 on one executor, 1 on another: 0 is implied by 2 only when 2's first
    waiting block of j is no later than 0's."""
    execs = ["A", "B", "A", "C"]

    def needs(n0, n2):
        return {(0, 3): Hazard(0, 3, np.array(n0)), (1, 3): Hazard(1, 3, np.array([0, 0])),
                (2, 3): Hazard(2, 3, np.array(n2))}
    d = needs([-1, 0], [0, -1])  # 2 waits from block 0: implies 0's wait at block 1
    assert sorted(prune_implied(d, 3, [0, 1, 2], execs)) == [1, 2] and (0, 3) not in d
    d = needs([0, -1], [-1, 0])  # 2 only from block 1: 0's wait at block 0 stays
    assert sorted(prune_implied(d, 3, [0, 1, 2], execs)) == [0, 1, 2] and len(d) == 3


@pytest.mark.parametrize("seed", range(8))
def test_chunked_kill_ends_are_the_loops(seed, monkeypatch):
    """_bulk_memory's kill ends (per row: the end of the first later instruction with a dense
    write covering it) tested a chunk of kill rows at a time (``KILL_CHUNK``) against one kill row
    at a time, on random intervals in random instruction groups with heavy reuse, with chunks of
    1, a few and many rows and pair budgets that shrink them."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    lo = rng.integers(0, 64, n).astype(np.int64)
    hi = lo + rng.integers(1, 24, n)
    sizes = rng.integers(1, 5, n)
    gid = np.repeat(np.arange(n), sizes)[:n]
    starts = np.flatnonzero(np.r_[True, np.diff(gid) != 0])
    ends = np.r_[starts[1:], n]
    kill_rows = np.flatnonzero(rng.random(n) < 0.3)
    want = hazards._kill_ends_loop(lo, hi, gid, starts, ends, kill_rows)
    assert (want < n).any() or not kill_rows.size
    for chunk, pairs in ((1, 1 << 20), (3, 1 << 20), (hazards.KILL_CHUNK, 1 << 20), (256, 1 << 20),
                         (256, 7)):
        monkeypatch.setattr(hazards, "KILL_CHUNK", chunk)
        monkeypatch.setattr(hazards, "BULK_PAIRS", pairs)
        assert np.array_equal(hazards._kill_ends(lo, hi, gid, starts, ends, kill_rows), want)


def _pairs_by_definition(lo, hi, wr, ex, gend, kend) -> set:
    """Every pair of rows q < r: intervals meet, one writes, executors differ, r live for q."""
    n = len(lo)
    return {(q, r) for q in range(n) for r in range(q + 1, n)
            if lo[q] < hi[r] and hi[q] > lo[r] and (wr[q] or wr[r]) and ex[q] != ex[r]
            and gend[q] <= r < kend[q]}


@pytest.mark.parametrize("seed", range(10))
def test_overlap_pairs_are_the_live_pairs(seed, monkeypatch):
    """bulk_pairs' candidates from the intervals sorted by their first byte (``_overlap_pairs``)
    against an enumeration of every pair of rows by the definition, and against the expansion of
    every live pair (``_window_pairs``): random intervals with many equal starts and touching
    ends (a pair that only touches does not meet), reads and writes, instruction groups, live
    ends from real kill rows, and slices from one element to all."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 160))
    lo = rng.integers(0, 40, n).astype(np.int64)
    hi = lo + rng.integers(1, 12, n)
    wr = rng.random(n) < (0.2 + 0.6 * (seed % 3) / 2)
    ex = rng.integers(0, 3, n).astype(np.int64)
    gid = np.repeat(np.arange(n), rng.integers(1, 4, n))[:n]
    starts = np.flatnonzero(np.r_[True, np.diff(gid) != 0])
    ends = np.r_[starts[1:], n]
    gend = ends[gid]
    kill_rows = np.flatnonzero(wr & (rng.random(n) < 0.3))
    kend = hazards._kill_ends_loop(lo, hi, gid, starts, ends, kill_rows)
    want = _pairs_by_definition(lo, hi, wr, ex, gend, kend)
    assert want or n < 10
    for slices in (1 << 20, 1, 7):
        monkeypatch.setattr(hazards, "BULK_PAIRS", slices)
        for fn in (hazards._overlap_pairs, hazards._window_pairs):
            got = [(q, r) for qa, ra in fn(lo, hi, wr, ex, gend, kend)
                   for q, r in zip(qa.tolist(), ra.tolist())]
            assert len(got) == len(set(got)) and set(got) == want, fn.__name__


def _reuse_program(seed: int, base: int) -> tuple[list, list[int]]:
    """A random program with heavy buffer reuse (seed ``base + seed``), or every third seed
    pieces of one matrix; with its blocks."""
    if seed % 3 == 2:
        return _matrix_program(seed)
    prog = progs.random_program(base + seed, n=90, slots=4 + seed % 3, ddr_slots=2,
                                extra=seed % 2 == 1)
    return prog, [p.sync.blocks for p in prog]


@pytest.mark.parametrize("seed", range(6))
def test_bulk_pairs_overlap_is_the_window(seed, monkeypatch):
    """bulk_pairs with both enumerations (the sorted intervals, and every live pair expanded as
    before session 28) gives the same arrays (pairs, order, ``known``) on each memory of random
    programs with heavy buffer reuse and on pieces of one matrix."""
    prog, blocks = _reuse_program(seed, 2700)
    if seed % 2:
        monkeypatch.setattr(hazards, "BULK_PAIRS", 5 + seed)
    st = hazards._Sweep([p.executor for p in prog], blocks)
    seen = 0
    for _, cols in hazards.memory_columns(prog, blocks, st):
        a = hazards.bulk_pairs(cols, st)
        monkeypatch.setattr(hazards, "_overlap_pairs", hazards._window_pairs)
        b = hazards.bulk_pairs(cols, st)
        monkeypatch.undo()
        if seed % 2:
            monkeypatch.setattr(hazards, "BULK_PAIRS", 5 + seed)
        assert (a is None) == (b is None)
        if a is not None:
            seen += a[0].size
            assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert seen > 20


def _shared_levels(prog: list, rng) -> list:
    """``prog`` with every walk remade on one levels tuple per distinct levels value (as
    ``Walk.moved`` shares them), a third of them with another element type (I4: never dense,
    or I16 / F32), each distinct walk remade once (shared walks stay shared)."""
    pool: dict = {}
    made: dict[int, Walk] = {}

    def remake(w):
        if not isinstance(w, Walk):
            return w
        got = made.get(id(w))
        if got is None:
            lv = pool.setdefault(w.levels, w.levels)
            dt = w.dtype if rng.random() < 0.67 else (DType.I4, DType.I16, DType.F32)[
                int(rng.integers(3))]
            got = made[id(w)] = Walk(w.space, w.tpb, w.base, dt, lv)
        return got

    out = []
    for inst in prog:
        kw = {}
        for f in dataclasses.fields(inst):
            v = getattr(inst, f.name)
            if isinstance(v, Walk):
                kw[f.name] = remake(v)
            elif isinstance(v, tuple) and v and all(isinstance(x, Walk) for x in v):
                kw[f.name] = tuple(remake(x) for x in v)
        out.append(dataclasses.replace(inst, **kw))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_memory_columns_are_each_access_s_own(seed):
    """``memory_columns`` works out each distinct walk's ``is_dense`` once and its ``walk_rows``
    once (for a 1-block access), by walk number: every memory's columns equal each access's
    own, recomputed from the definitions -- its bytes (``byte_range``), instruction, direction,
    ``is_dense``, and for a 1-block instruction the row shape (a dense walk: its interval as
    one run; else when ``walk_rows`` gives one exact for ``access_need``) -- on random programs with shared walks (one walk object in several
    instructions and memories) and on pieces of one matrix, with blocks changed; walks sharing
    one levels tuple with other element types (``is_dense`` is found once per levels object and
    element bits, session 34: mutant -- keyed by the levels alone)."""
    prog, blocks = _reuse_program(seed, 2900)
    k = len(prog) // 3  # copies of the first third later on: the same walk objects again
    prog, blocks = prog + [dataclasses.replace(p) for p in prog[:k]], blocks + blocks[:k]
    if seed % 3 != 1:  # walks sharing levels objects, some of them with other element bits
        prog = _shared_levels(prog, np.random.default_rng(seed))
    if seed % 2:  # some instructions re-blocked (copies too): their accesses take no row shape
        blocks = [b if n % 4 else b + 1 for n, b in enumerate(blocks)]
    st = hazards._Sweep([p.executor for p in prog], blocks)
    seen = shaped = 0
    for mem, cols in hazards.memory_columns(prog, blocks, st):
        assert len(cols.accl) == cols.lo.size
        for r, a in enumerate(cols.accl):
            i = int(cols.ins[r])
            assert a.mem == mem and any(a.walk is w for _, w, _ in prog[i].walks())
            assert (int(cols.lo[r]), int(cols.hi[r])) == a.walk.byte_range()
            assert bool(cols.wr[r]) is a.write
            d = footprint.is_dense(a.walk)
            assert cols.dense[r] is d
            got = footprint.walk_rows(a.walk) if blocks[i] == 1 else None
            if d and blocks[i] == 1:  # a dense walk's bytes are its interval: one run
                lo, hi = a.walk.byte_range()
                got = (lo, 0, 1, hi - lo)
            want = got is not None and (got[2] <= footprint.EXACT_LIMIT or d)
            assert bool(cols.el[r]) is want
            assert cols.shape[r].tolist() == (list(got) if want else [0, 0, 0, 0])
            seen += 1
            shaped += want
    assert seen > 100 and shaped > 10 and len(st.walks) < seen  # walks were shared
