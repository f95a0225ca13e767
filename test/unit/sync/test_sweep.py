"""sync-insert's one-sweep derivation and reduction (``sweep.py``) against ``analyze`` +
``reduce_needs`` (``sweep.ENABLED = False``): the same kept needs with the same need vectors, the
same happens-before clocks, the same program and certificate, on random programs with explicit
edges, block edges and rings, 1 or more blocks; the same input errors.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402
from test_hazards import _matrix_program  # noqa: E402

from m100.passes.backend.sync_insert import (DataEdge, RingBuffer, SyncError,  # noqa: E402
                                             WholeEdges, hazards, insert_sync, sweep)
from m100.passes.backend.sync_insert.analyze import analyze  # noqa: E402
from m100.passes.backend.sync_insert.certificate import dumps  # noqa: E402
from m100.passes.backend.sync_insert.redundancy import reduce_needs  # noqa: E402
from m100.sim.certificate import verify_instructions  # noqa: E402
from m100.targets.m100 import isa  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

TINY = get_machine("tiny")


def _case(seed: int):
    """A random program (one block each for half the seeds) with random explicit orderings."""
    rng = np.random.default_rng(4100 + seed)
    if seed % 5 == 4:
        prog, _ = _matrix_program(seed)
    else:
        prog = progs.random_program(4200 + seed, n=40 + 10 * (seed % 4), slots=3 + seed % 3,
                                    ddr_slots=2, extra=seed % 3 == 1)
    if seed % 2 == 0:
        prog = [dataclasses.replace(p, sync=isa.Sync()) for p in prog]
    n = len(prog)
    stream = 2 if seed % 6 == 3 else None  # (block counts change: no mappings then)
    edges = []
    for _ in range(int(rng.integers(0, 3 * n))):  # tokens: whole orderings
        p, c = sorted(int(x) for x in rng.choice(n, size=2, replace=False))
        edges.append(DataEdge(p, c))
    if seed % 3 == 0:  # block orderings with random mappings
        for _ in range(int(rng.integers(1, 8))):
            p, c = sorted(int(x) for x in rng.choice(n, size=2, replace=False))
            bp, bc = prog[p].sync.blocks, prog[c].sync.blocks
            mapping = tuple(int(x) for x in rng.integers(-1, bp, size=bc))
            edges.append(DataEdge(p, c, "block", mapping if seed % 2 and not stream else None))
    rings = []
    if seed % 4 == 1:
        idx = sorted(int(x) for x in rng.choice(n, size=8, replace=False))
        rings.append(RingBuffer(slots=2, producers=tuple(idx[0::2]), consumers=tuple(idx[1::2]),
                                block=bool(seed % 8 == 1)))
    return prog, edges, rings, stream


@pytest.mark.parametrize("small", [0, 2, 16])
@pytest.mark.parametrize("seed", range(30))
def test_sweep_is_analyze_then_reduce(seed, small, monkeypatch):
    # small: the 1-block consumers' skip test and reduction on Python ints up to this many
    # candidates / producers (0: arrays only; 2: both kinds in one program)
    monkeypatch.setattr(sweep, "SMALL", small)
    prog, edges, rings, stream = _case(seed)
    nd_s, red_s = sweep.analyze_reduce(prog, TINY, edges=edges, rings=rings,
                                       stream_blocks=stream)
    nd = analyze(prog, TINY, edges=edges, rings=rings, stream_blocks=stream)
    red = reduce_needs(nd)
    assert sorted(red_s.kept) == sorted(red.kept) and len(red.kept) > 3
    for k, h in red.kept.items():
        assert red_s.kept[k].need.tolist() == h.need.tolist(), k
    assert np.array_equal(red_s.graph.clock(), red.graph.clock())
    assert red_s.graph.sync_preds == red.graph.sync_preds
    new = insert_sync(prog, TINY, edges=edges, rings=rings, stream_blocks=stream)
    monkeypatch.setattr(sweep, "ENABLED", False)
    old = insert_sync(prog, TINY, edges=edges, rings=rings, stream_blocks=stream)
    assert [i.sync for i in new.instructions] == [i.sync for i in old.instructions]
    assert dumps(new.certificate) == dumps(old.certificate)
    assert verify_instructions(new.instructions, new.certificate) == []


def test_skipped_producers_are_counted_and_the_program_is_the_same(monkeypatch):
    """One-block programs with many tokens: the sweep skips producers (their needs are never
    built) and still keeps what the reduction keeps."""
    skipped = 0
    for seed in range(0, 12, 2):
        prog, edges, rings, stream = _case(seed)
        nd = analyze(prog, TINY, edges=edges, rings=rings, stream_blocks=stream)
        red = reduce_needs(nd)
        _, red_s = sweep.analyze_reduce(prog, TINY, edges=edges, rings=rings,
                                        stream_blocks=stream)
        skipped += red_s.skipped
        assert sorted(red_s.kept) == sorted(red.kept)
        assert len(red_s.kept) + red_s.implied <= len(nd.needs)  # fewer needs derived
    assert skipped > 0


def test_the_sweep_is_used_only_where_it_is_the_same(monkeypatch):
    assert sweep.usable("dataflow", True)
    assert not sweep.usable("barrier-all", True) and not sweep.usable("dataflow", False)
    monkeypatch.setattr(hazards, "REASONS", True)  # reasons: the per-pair path keeps them
    assert not sweep.usable("dataflow", True)


@pytest.mark.parametrize("bad", [
    dict(edges=[DataEdge(4, 0)]), dict(edges=[DataEdge(0, 40)]),
    dict(edges=[DataEdge(0, 4, granularity="bytes")]),
    dict(edges=[DataEdge(0, 4, "block", (0, 0, 0, 0, 0, 0, 0))]),
    dict(rings=[RingBuffer(slots=0, producers=(0,), consumers=(1,))]),
    dict(rings=[RingBuffer(slots=1, producers=(0, 3), consumers=(1, 2))]),
])
def test_input_errors_are_the_old_ones(bad, monkeypatch):
    prog = progs.pipeline(tiles=4, slots=2, blocks=2)
    with pytest.raises(SyncError) as new:
        insert_sync(prog, TINY, **bad)
    monkeypatch.setattr(sweep, "ENABLED", False)
    with pytest.raises(SyncError) as old:
        insert_sync(prog, TINY, **bad)
    assert str(new.value) == str(old.value)


@pytest.mark.parametrize("seed", range(0, 30, 3))
def test_whole_edges_as_lists_are_the_data_edges(seed, monkeypatch):
    """The pass's tokens as :class:`WholeEdges` (two lists, read as arrays by the sweep) give
    what the same orderings as :class:`DataEdge`\\ s give, on the sweep and the old path (which
    iterates them), duplicates and same-executor pairs included; a bad pair is the same error."""
    prog, edges, _, stream = _case(seed)
    whole = [e for e in edges if e.granularity == "whole"]
    whole += whole[:3]  # duplicates, as _latest_per_executor leaves them for a lone producer
    lists = WholeEdges([e.producer for e in whole], [e.consumer for e in whole])
    assert list(lists) == whole and len(lists) == len(whole)
    for enabled in (True, False):
        monkeypatch.setattr(sweep, "ENABLED", enabled)
        a = insert_sync(prog, TINY, edges=lists, stream_blocks=stream)
        b = insert_sync(prog, TINY, edges=whole, stream_blocks=stream)
        assert [i.sync for i in a.instructions] == [i.sync for i in b.instructions]
        assert dumps(a.certificate) == dumps(b.certificate)
        assert a.stats == b.stats
    monkeypatch.setattr(sweep, "ENABLED", True)
    for p, c in ((4, 0), (0, len(prog)), (-1, 3), (2, 2)):
        errs = []
        for es in (WholeEdges([0, p], [1, c]), [DataEdge(0, 1), DataEdge(p, c)]):
            with pytest.raises(SyncError) as e:
                insert_sync(prog, TINY, edges=es)
            errs.append(str(e.value))
        assert errs[0] == errs[1]


F32 = isa.DType.F32


def _hb(off: int, n: int, t: int = 0) -> isa.Walk:
    return isa.Walk.strided(isa.Space.HBSM, t, 0, F32, (n,), offset=off)


def _dd(off: int, n: int) -> isa.Walk:
    return isa.Walk.strided(isa.Space.DDR, 0, 0, F32, (n,), offset=off)


def _both(prog, monkeypatch, **kw):
    new = insert_sync(prog, TINY, **kw)
    with monkeypatch.context() as m:
        m.setattr(sweep, "ENABLED", False)
        old = insert_sync(prog, TINY, **kw)
    assert [i.sync for i in new.instructions] == [i.sync for i in old.instructions]
    assert dumps(new.certificate) == dumps(old.certificate)
    return new


def test_a_producer_waited_for_in_part_is_not_skipped(monkeypatch):
    """The program-order predecessor of j waits for block 0 of i only; j reads all of i's output:
    i is not skipped (its last block is not before j's predecessor) and j waits for block 1; the
    next copy reads i's first half again: that wait is implied by program order, not kept."""
    n = progs.N
    prog = [isa.Dma(engine=0, src=_dd(0, 2 * n), dst=_hb(0, 2 * n), sync=isa.Sync(blocks=2)),
            isa.Copy(tpb=0, src=_hb(0, n), dst=_hb(4 * n, n)),  # i's first half
            isa.Copy(tpb=0, src=_hb(0, 2 * n), dst=_hb(6 * n, 2 * n)),  # all of it
            progs.cvu(0, isa.CvuOp.ADD, [_hb(0, n)] * 2, _hb(8 * n, n)),  # another unit: a wait
            progs.cvu(0, isa.CvuOp.ADD, [_hb(0, n)] * 2, _hb(9 * n, n))]  # the same block: implied
    res = _both(prog, monkeypatch)
    edges = {(e["from"], e["to"]): e["need"] for e in res.certificate["edges"]}
    assert edges == {(0, 1): [0], (0, 2): [1], (0, 3): [0]}


def test_a_pruned_need_readded_keeps_the_old_vector(monkeypatch):
    """A need pruned in one memory (a later producer on the same engine waits from the same block)
    and added again in a later memory keeps only what it gets from then on -- as analyze builds
    it; the sweep builds a consumer with several blocks the same way."""
    prog = [isa.Fill(tpb=0, dst=_hb(200, 8), value=1.0),  # HBSM 0 is the first memory swept
            isa.Dma(engine=0, src=_hb(0, 4, 1), dst=_hb(24, 4)),  # i1
            isa.Dma(engine=0, src=_dd(0, 4), dst=_hb(28, 4)),  # i2
            isa.Copy(tpb=0, src=_hb(16, 16), dst=_hb(0, 16, 1), sync=isa.Sync(blocks=2))]  # j
    res = _both(prog, monkeypatch)
    edges = {(e["from"], e["to"]): e["need"] for e in res.certificate["edges"]}
    # HBSM 0: (1, 3) and (2, 3) both wait from block 1, (1, 3) is pruned; HBSM 1: (1, 3) again
    # for block 0 only
    assert edges[(1, 3)] == [0, -1] and edges[(2, 3)] == [-1, 0]
