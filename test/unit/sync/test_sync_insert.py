"""sync-insert on ISA objects, checked by an independent executor (toysim.py: vector-clock races,
deadlock by no progress, final memory vs a sequential numpy run) and by exhaustive/networkx oracles.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import networkx as nx
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402
import toysim  # noqa: E402

from m100.passes.backend.sync_insert import (DataEdge, RingBuffer, SyncDeadlockError,  # noqa: E402
                                             SyncError, check_deadlock, insert_sync)
from m100.passes.backend.sync_insert.codegen import linear_fit  # noqa: E402
from m100.passes.backend.sync_insert.graph import HbGraph  # noqa: E402
from m100.sim.certificate import verify_instructions as verify_certificate  # noqa: E402
from m100.targets.m100 import isa  # noqa: E402
from m100.targets.m100.isa import Monitor, Sync, Trigger, Update  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

TINY = get_machine("tiny")


def _ok(out: toysim.Outcome, ref) -> bool:
    return (not out.races and out.deadlock is None
            and all(np.array_equal(out.mem[k], ref[k]) for k in ref))


def _setup(prog, seed=0):
    mem = toysim.memories_for(prog, TINY, np.random.default_rng(seed))
    return mem, toysim.sequential(prog, mem)


# ------------------------------------------------------------------------------------------------
# random programs: race-free, deadlock-free, right values, in both modes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
@pytest.mark.parametrize("seed", range(12))
def test_random_program_is_race_free(seed, mode):
    prog = progs.random_program(seed, n=18)
    mem, ref = _setup(prog, seed)
    res = insert_sync(prog, TINY, sync_mode=mode)
    assert [type(i) for i in res.instructions] == [type(i) for i in prog]
    for lat_seed in (None, 1000 + seed):
        out = toysim.run(res.instructions, TINY, mem, seed=lat_seed)
        assert not out.races, out.races[:3]
        assert out.deadlock is None
        for k in ref:
            np.testing.assert_array_equal(out.mem[k], ref[k])
    assert all(0 < n <= TINY.su_counters for n in res.counters_used.values() if n)
    assert res.decisions == []
    assert verify_certificate(res.instructions, res.certificate) == []


def test_without_sync_the_checker_does_see_races():
    """The oracle is not blind: the raw programs (no sync at all) race."""
    racy = 0
    for seed in range(12):
        prog = progs.random_program(seed, n=18)
        mem, ref = _setup(prog, seed)
        racy += not _ok(toysim.run(prog, TINY, mem, seed=seed), ref)
    assert racy >= 10


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
def test_twenty_random_latency_seeds_identical(mode):
    prog = progs.random_program(101, n=24)
    mem, ref = _setup(prog)
    res = insert_sync(prog, TINY, sync_mode=mode, stream_blocks=4)
    cycles = set()
    for s in range(20):
        out = toysim.run(res.instructions, TINY, mem, seed=s)
        assert _ok(out, ref), (s, out.races[:2], out.deadlock)
        cycles.add(out.cycles)
    assert len(cycles) > 10  # the latencies really were perturbed


# ------------------------------------------------------------------------------------------------
# mutation test: every monitor matters, every expected value is tight
# ------------------------------------------------------------------------------------------------
def mutation_rate(seeds, n=18) -> tuple[int, int]:
    total = caught = 0
    for seed in seeds:
        prog = progs.random_program(seed, n=n)
        mem, ref = _setup(prog, seed)
        out = insert_sync(prog, TINY).instructions
        for i, inst in enumerate(out):
            mons = inst.sync.monitors
            for mi, mon in enumerate(mons):
                variants = [mons[:mi] + mons[mi + 1:]]
                if mon.expected >= 1:
                    variants.append(mons[:mi] + (dataclasses.replace(mon, expected=mon.expected - 1),)
                                    + mons[mi + 1:])
                for v in variants:
                    q = list(out)
                    q[i] = dataclasses.replace(inst, sync=dataclasses.replace(inst.sync, monitors=v))
                    r = toysim.run(q, TINY, mem, stop_on_race=True)
                    total += 1
                    caught += not _ok(r, ref)
    return caught, total


def test_mutants_are_caught():
    caught, total = mutation_rate(range(6))
    print(f"\nmutation test: {caught}/{total} mutants caught ({100 * caught / total:.1f} %)")
    assert total > 80
    assert caught / total >= 0.95


def test_mutants_pipeline():
    prog = progs.pipeline(tiles=5, slots=2, blocks=4)
    mem, ref = _setup(prog)
    out = insert_sync(prog, TINY).instructions
    total = caught = 0
    for i, inst in enumerate(out):
        for mi, mon in enumerate(inst.sync.monitors):
            lowered = dataclasses.replace(mon, expected=mon.expected - 1)
            for v in (inst.sync.monitors[:mi] + inst.sync.monitors[mi + 1:],
                      inst.sync.monitors[:mi] + (lowered,) + inst.sync.monitors[mi + 1:]):
                q = list(out)
                q[i] = dataclasses.replace(inst, sync=dataclasses.replace(inst.sync, monitors=v))
                total += 1
                caught += not _ok(toysim.run(q, TINY, mem, stop_on_race=True), ref)
    assert total >= 40 and caught / total >= 0.95


# ------------------------------------------------------------------------------------------------
# streaming, redundancy, exact overlap, rings, explicit edges
# ------------------------------------------------------------------------------------------------
def test_consumer_streams_behind_producer_per_block():
    prog = [isa.Dma(engine=0, src=progs.ddr(0), dst=progs.hw(0, 0), sync=Sync(blocks=4)),
            isa.Copy(tpb=0, src=progs.hw(0, 0), dst=progs.hw(1, 0), sync=Sync(blocks=4))]
    res = insert_sync(prog, TINY)
    dma, cp = res.instructions
    assert dma.sync.updates == (Update(counter=0, tpb_mask=1, amount=1, trigger=Trigger.BLOCK),)
    assert cp.sync.monitors == (Monitor(tpb=0, counter=0, expected=1, per_block=1),)
    # proportional mapping when the consumer has fewer blocks: waits for 2 producer blocks each
    prog[1] = dataclasses.replace(prog[1], sync=Sync(blocks=2))
    cp = insert_sync(prog, TINY).instructions[1]
    assert cp.sync.monitors == (Monitor(tpb=0, counter=0, expected=2, per_block=2),)


def test_dataflow_beats_barrier_all_on_a_pipeline():
    prog = progs.pipeline(tiles=8, slots=2, blocks=4)
    mem, ref = _setup(prog)
    cyc = {}
    for mode in ("dataflow", "barrier-all"):
        res = insert_sync(prog, TINY, sync_mode=mode)
        out = toysim.run(res.instructions, TINY, mem)
        assert _ok(out, ref)
        cyc[mode] = out.cycles
    print(f"\npipeline (8 tiles, 2-slot rings, 4 blocks): dataflow {cyc['dataflow']:.0f} cycles, "
          f"barrier-all {cyc['barrier-all']:.0f} cycles")
    assert cyc["dataflow"] * 2 < cyc["barrier-all"]


def test_redundant_orderings_get_no_traffic():
    # A (TPB0 DTDU) writes X; B (TPB0 CVU) reads X, writes Y; C (TPB1 DTDU) reads X and Y.
    # C->A is implied by C->B->A, so C has exactly one monitor.
    h = progs.hw
    prog = [isa.Fill(tpb=0, dst=h(0, 0), value=1.0),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 0), h(0, 0)], h(0, 1)),
            progs.cvu(1, isa.CvuOp.ADD, [h(1, 2), h(1, 2)], h(1, 3)),
            isa.Copy(tpb=0, src=h(0, 1), dst=h(0, 2))]
    res = insert_sync(prog, TINY)
    assert res.stats["redundant"] == 0
    prog.append(isa.Copy(tpb=1, src=h(1, 3), dst=h(1, 4)))  # CVU@1 -> DTDU@1 only
    res = insert_sync(prog, TINY)
    assert res.stats["kept"] == 3
    # a chain A -> B -> C with C also reading A's output: one ordering is implied
    prog = [isa.Fill(tpb=0, dst=h(0, 0), value=1.0),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 0), h(0, 0)], h(0, 1)),
            isa.MatMul(tpb=0, a=h(0, 0), b=h(0, 1), c=h(0, 2), m=16, n=16, k=16)]
    res = insert_sync(prog, TINY)
    assert res.stats["needs"] == 3 and res.stats["redundant"] == 1
    assert len(res.instructions[2].sync.monitors) == 1


def test_exact_overlap_interleaved_halves_need_no_sync():
    h = progs.hw
    prog = [isa.Copy(tpb=0, src=progs.half(h, 0, 1, parity=0), dst=progs.half(h, 0, 0, parity=0)),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 2), h(0, 2)], h(0, 3)),
            isa.Copy(tpb=1, src=progs.half(h, 1, 1, parity=1), dst=progs.half(h, 0, 0, parity=1))]
    res = insert_sync(prog, TINY)
    assert res.stats["needs"] == 0
    assert all(not i.sync.monitors for i in res.instructions)
    mem, ref = _setup(prog)
    assert _ok(toysim.run(res.instructions, TINY, mem, seed=3), ref)


def test_ring_buffer_and_explicit_edges():
    prog = progs.pipeline(tiles=4, slots=2, blocks=2)
    rb = RingBuffer(slots=2, producers=(0, 5, 10, 15), consumers=(1, 6, 11, 16))
    res = insert_sync(prog, TINY, rings=[rb], edges=[DataEdge(0, 4)])
    mem, ref = _setup(prog)
    assert _ok(toysim.run(res.instructions, TINY, mem, seed=5), ref)
    with pytest.raises(SyncError, match="waits for the later"):
        insert_sync(prog, TINY, edges=[DataEdge(4, 0)])
    with pytest.raises(SyncError, match="granularity"):
        insert_sync(prog, TINY, edges=[DataEdge(0, 4, granularity="bytes")])


def test_input_errors_are_one_line():
    p = [isa.Fill(tpb=0, dst=progs.hw(0, 0), value=1.0,
                  sync=Sync(monitors=(Monitor(0, 0, 1),)))]
    with pytest.raises(SyncError, match="empty Sync"):
        insert_sync(p, TINY)
    with pytest.raises(SyncError, match="unknown sync mode"):
        insert_sync([], TINY, sync_mode="fast")


# ------------------------------------------------------------------------------------------------
# budget: explicit merge / serialize decision, or an error
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget", [2, 3])
def test_small_budget_gives_reported_merge(budget):
    prog = progs.pipeline(tiles=6, slots=2, blocks=4)
    mem, ref = _setup(prog)
    full = insert_sync(prog, TINY)
    assert max(full.counters_used.values()) > budget
    small = get_machine("tiny").with_overrides(su_counters=budget)
    res = insert_sync(prog, small)
    assert res.decisions and all(d["kind"] == "merge" for d in res.decisions)
    assert "decision: merge" in res.report()
    assert all(n <= budget for n in res.counters_used.values())
    assert all(m.counter < budget for i in res.instructions for m in i.sync.monitors)
    for s in (None, 7, 8):
        assert _ok(toysim.run(res.instructions, small, mem, seed=s), ref)
    with pytest.raises(SyncError, match="budget"):
        insert_sync(prog, small, on_budget="error")


def test_budget_one_counter_serializes_remote_writers_through_their_own_tpb():
    prog = progs.pipeline(tiles=4, slots=2, blocks=2)
    mem, ref = _setup(prog)
    res = insert_sync(prog, TINY, counter_budget=1)
    assert all(n == 1 for n in res.counters_used.values())
    assert any("waits through its own TPB" in d["effect"] for d in res.decisions)
    assert res.stats["serialized"] > 0
    for s in (None, 4, 5):
        assert _ok(toysim.run(res.instructions, TINY, mem, seed=s), ref)
    assert verify_certificate(res.instructions, res.certificate) == []


def test_channels_over_budget_take_counters_per_instruction_without_merging():
    """Two DMA engines take turns loading one HBSM slot that a CVU reads: DMA0 -> CVU -> DMA1
    (WAR) -> CVU -> DMA0 ... Whole channels (DMA0, DMA1 and the CVU, each from its first event to
    its last) need three counters on TPB 0; every event is ordered after the one before it, so
    per instruction (segments) one counter serves them all: no merge, no serializing wait."""
    prog = []
    for k in range(6):
        prog.append(isa.Dma(engine=k % 2, src=progs.ddr(k), dst=progs.hw(0, 0)))
        prog.append(progs.cvu(0, isa.CvuOp.ADD, [progs.hw(0, 0), progs.hw(0, 0)],
                              progs.hw(0, 1 + k % 2)))
    prog.append(isa.Dma(engine=0, src=progs.hw(0, 1), dst=progs.ddr(8)))
    prog.append(isa.Dma(engine=1, src=progs.hw(0, 2), dst=progs.ddr(9)))
    mem, ref = _setup(prog)
    full = insert_sync(prog, TINY)
    assert full.counters_used[0] == 3 and not full.decisions
    res = insert_sync(prog, TINY, counter_budget=1)
    assert res.counters_used[0] == 1
    assert not res.decisions and res.stats["serialized"] == 0
    for s in (None, 3, 4):
        assert _ok(toysim.run(res.instructions, TINY, mem, seed=s), ref)
    assert verify_certificate(res.instructions, res.certificate) == []
    # one chain of 12 updates (DMA k the (2k+1)-th, CVU k the (2k+2)-th): CVU k waits for DMA k,
    # DMA k for CVU k-1, the two stores for the CVUs that wrote their slots
    assert [i.sync.monitors[0].expected for i in res.instructions if i.sync.monitors] == \
        list(range(1, 12)) + [10, 12]


@pytest.mark.parametrize("seed", range(4))
def test_random_programs_with_budget_two(seed):
    prog = progs.random_program(200 + seed, n=18)
    mem, ref = _setup(prog, seed)
    res = insert_sync(prog, TINY, counter_budget=2)
    assert all(n <= 2 for n in res.counters_used.values())
    for s in (None, seed):
        assert _ok(toysim.run(res.instructions, TINY, mem, seed=s), ref)


# ------------------------------------------------------------------------------------------------
# deadlock check
# ------------------------------------------------------------------------------------------------
def test_deadlock_cycle_is_named():
    h = progs.hw
    a = isa.Fill(tpb=0, dst=h(0, 0), value=1.0,
                 sync=Sync(monitors=(Monitor(0, 1, 1),), updates=(Update(0, 0b10),)))
    b = isa.Fill(tpb=1, dst=h(1, 0), value=1.0,
                 sync=Sync(monitors=(Monitor(1, 0, 1),), updates=(Update(1, 0b01),)))
    with pytest.raises(SyncDeadlockError) as ei:
        check_deadlock([a, b])
    msg = str(ei.value)
    assert "#0 dtdu.fill (TPB 0 DTDU)" in msg and "#1 dtdu.fill (TPB 1 DTDU)" in msg
    assert "wait-for cycle" in msg and "\n" not in msg
    # an expected value no update can reach
    c = isa.Fill(tpb=0, dst=h(0, 0), value=1.0, sync=Sync(monitors=(Monitor(0, 3, 2),)))
    d = isa.Fill(tpb=1, dst=h(1, 0), value=1.0, sync=Sync(updates=(Update(3, 0b01),)))
    with pytest.raises(SyncDeadlockError, match="even if every update ran: 1"):
        check_deadlock([c, d])
    assert check_deadlock([dataclasses.replace(c, sync=Sync(monitors=(Monitor(0, 3, 1),))), d])


def test_deadlock_check_agrees_with_toysim_on_lowered_and_raised_values():
    prog = progs.pipeline(tiles=3, slots=2, blocks=2)
    out = insert_sync(prog, TINY).instructions
    mem, _ = _setup(prog)
    for i, inst in enumerate(out):
        for mi, mon in enumerate(inst.sync.monitors):
            raised = dataclasses.replace(mon, expected=mon.expected + 50)
            q = list(out)
            q[i] = dataclasses.replace(inst, sync=dataclasses.replace(
                inst.sync, monitors=inst.sync.monitors[:mi] + (raised,) + inst.sync.monitors[mi + 1:]))
            with pytest.raises(SyncDeadlockError):
                check_deadlock(q)
            assert toysim.run(q, TINY, mem).deadlock is not None


# ------------------------------------------------------------------------------------------------
# algorithm pieces against independent oracles
# ------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=8))
@example([0, 1, 3])  # a zero-need block sets a breakpoint (found by hypothesis in CI)
def test_linear_fit(v):
    v = np.array(v)
    e, k = linear_fit(v)
    b = np.arange(len(v))
    assert (e + b * k >= v).all()
    assert e + (len(v) - 1) * k <= v.max()
    # no other (e', k') with the same constraints has less slack (exhaustive)
    best = min(int(((ee + b * kk - v)[v > 0]).sum()) for kk in range(0, 41) for ee in range(0, 41)
               if (ee + b * kk >= v).all() and ee + (len(v) - 1) * kk <= v.max())
    assert int(((e + b * k - v)[v > 0]).sum()) == best


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(10, 15, 2), (14, 60, 3)]))
def test_redundant_edges_match_networkx_transitive_reduction(seed, size):
    # (instructions, sync edges, max blocks): the larger size gives S-nodes with many sync
    # predecessors (several per executor, some also the hardware edge), as joins do
    n, edges, maxb = size
    rng = np.random.default_rng(seed)
    prog = progs.random_program(seed, n=n)
    blocks = [int(rng.integers(1, maxb + 1)) for _ in prog]
    g = HbGraph(prog, blocks)
    for _ in range(edges):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        g.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
    G = nx.DiGraph()
    G.add_nodes_from(range(g.num_nodes))
    for v in range(g.num_nodes):
        for p in g.preds(v):
            G.add_edge(p, v)
    tr = nx.transitive_reduction(G)
    sync = {(u, v) for v, s in g.sync_preds.items() for u in s}
    assert g.redundant_sync_edges() == {e for e in sync if not tr.has_edge(*e)}
    for v in range(0, g.num_nodes, 3):
        anc = nx.ancestors(G, v)
        assert {u for u in range(1, g.num_nodes, 2) if g.hb(u, v)} == {u for u in anc if u & 1}


def test_certificate_detects_a_missing_monitor():
    prog = progs.random_program(3, n=18)
    res = insert_sync(prog, TINY)
    cert = res.certificate
    assert cert["format"] == "m100-sync-certificate" and cert["edges"]
    e = cert["edges"][0]
    j = e["to"]
    q = list(res.instructions)
    q[j] = dataclasses.replace(q[j], sync=dataclasses.replace(q[j].sync, monitors=()))
    assert verify_certificate(q, cert)


# ------------------------------------------------------------------------------------------------
# long programs (hazard retirement by covering writes), coarse overlap path, streaming option
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_long_programs_with_heavy_buffer_reuse(seed):
    prog = progs.random_program(500 + seed, n=70, slots=4, ddr_slots=2)
    mem, ref = _setup(prog, seed)
    res = insert_sync(prog, TINY, stream_blocks=2)
    for s in (None, seed):
        out = toysim.run(res.instructions, TINY, mem, seed=s)
        assert _ok(out, ref), (out.races[:2], out.deadlock)
    assert verify_certificate(res.instructions, res.certificate) == []


@pytest.mark.parametrize("seed", range(6))
def test_dense_shortcut_gives_the_same_hazards(seed, monkeypatch):
    """derive_hazards' shortcut for two dense 1-block accesses (need [0], no chunks) against
    access_need on every pair: same hazards, need vectors and reasons, in the same order."""
    from m100.passes.backend.sync_insert import graph
    monkeypatch.setattr(graph, "ROWS_SHORTCUT", False)  # (it takes dense pairs too)
    prog = progs.random_program(700 + seed, n=60, slots=5, ddr_slots=3)
    if seed % 2:  # what the scheduler emits: one block each, so nearly every pair is a shortcut
        prog = [dataclasses.replace(p, sync=isa.Sync()) for p in prog]
    blocks = [p.sync.blocks for p in prog]
    calls = []
    need = graph.access_need
    monkeypatch.setattr(graph, "access_need", lambda *a: calls.append(1) or need(*a))
    fast = graph.derive_hazards(prog, blocks)
    n_fast = len(calls)
    monkeypatch.setattr(graph, "DENSE_SHORTCUT", False)
    slow = graph.derive_hazards(prog, blocks)
    assert n_fast < len(calls) - 10  # the shortcut was taken
    assert list(fast) == list(slow) and len(fast) > 10
    for k, h in fast.items():
        assert h.need.tolist() == slow[k].need.tolist() and h.why == slow[k].why


@pytest.mark.parametrize("seed", range(4))
def test_interval_only_overlap_is_sound(seed, monkeypatch):
    from m100.passes.backend.sync_insert import graph
    monkeypatch.setattr(graph, "EXACT_LIMIT", 64)
    graph._chunk_cache.clear()
    prog = progs.random_program(300 + seed, n=20)
    mem, ref = _setup(prog, seed)
    coarse = insert_sync(prog, TINY)
    graph._chunk_cache.clear()
    monkeypatch.undo()
    exact = insert_sync(prog, TINY)
    assert coarse.stats["needs"] >= exact.stats["needs"]
    assert _ok(toysim.run(coarse.instructions, TINY, mem, seed=seed), ref)


def test_stream_blocks_splits_and_streams():
    h = progs.hw
    prog = [isa.Dma(engine=0, src=progs.ddr(0), dst=h(0, 0)),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 0), h(0, 0)], h(0, 1)),
            isa.Copy(tpb=0, src=h(0, 1), dst=h(1, 0))]
    res = insert_sync(prog, TINY, stream_blocks=4)
    assert [i.sync.blocks for i in res.instructions] == [4, 4, 4]
    assert res.instructions[1].sync.monitors[0].per_block == 1
    plain = insert_sync(prog, TINY)
    assert [i.sync.blocks for i in plain.instructions] == [1, 1, 1]
    mem, ref = _setup(prog)
    fast = toysim.run(res.instructions, TINY, mem)
    slow = toysim.run(plain.instructions, TINY, mem)
    assert _ok(fast, ref) and _ok(slow, ref) and fast.cycles < slow.cycles


def test_broadcast_producer_signals_all_consumer_tpbs_with_one_update():
    h = progs.hw
    prog = [isa.Fill(tpb=1, dst=h(1, 5), value=2.0),  # occupies a counter id on TPB1 first
            progs.cvu(1, isa.CvuOp.ADD, [h(1, 5), h(1, 5)], h(1, 4)),
            isa.Dma(engine=0, src=progs.ddr(0), dst=h(0, 0), tpb_mask=0b11),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 0), h(0, 0)], h(0, 1)),
            progs.cvu(1, isa.CvuOp.ADD, [h(1, 0), h(1, 4)], h(1, 1))]
    res = insert_sync(prog, TINY)
    dma = res.instructions[2]
    assert len(dma.sync.updates) == 1 and dma.sync.updates[0].tpb_mask == 0b11
    mem, ref = _setup(prog)
    assert _ok(toysim.run(res.instructions, TINY, mem, seed=1), ref)


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
    from m100.passes.backend.sync_insert.graph import is_dense
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
    from m100.passes.backend.sync_insert.graph import Access, access_need
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
    from m100.passes.backend.sync_insert.graph import conv_input_rows
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


@pytest.mark.parametrize("seed", range(4))
def test_random_programs_with_csu_and_sram(seed):
    prog = progs.random_program(2000 + seed, n=20, extra=True)
    mem, ref = _setup(prog, seed)
    for mode in ("dataflow", "barrier-all"):
        res = insert_sync(prog, TINY, sync_mode=mode, counter_budget=[None, 2][seed % 2])
        assert _ok(toysim.run(res.instructions, TINY, mem, seed=seed), ref)


def test_stream_blocks_never_splits_a_row_normalization():
    h = progs.hw
    soft = isa.CvuPipeline(tpb=0, inputs=(h(0, 0),), in_shapes=((16, 16),), output=h(0, 1),
                           out_shape=(16, 16), stages=(isa.Stage(isa.CvuOp.SOFTMAX,
                                                                 (isa.Ref(isa.RefKind.INPUT),),
                                                                 axis=0),))
    along_cols = dataclasses.replace(soft, stages=(dataclasses.replace(soft.stages[0], axis=1),))
    res = insert_sync([soft, along_cols], TINY, stream_blocks=4)
    assert [i.sync.blocks for i in res.instructions] == [1, 4]


@settings(max_examples=300, deadline=None)
@given(_levels, st.sampled_from([isa.DType.I8, isa.DType.F16, isa.DType.F32, isa.DType.I4]),
       st.sampled_from([1, 2, 3, 4, 6]), st.booleans())
def test_chunk_runs_match_enumeration(levels, dtype, nchunks, use_ranges):
    from m100.passes.backend.sync_insert import graph
    w = _walk(levels, 64, dtype)
    n = w.num_elements
    if n % nchunks:
        return
    per = n // nchunks
    ranges = (tuple(((c * per, c * per + per // 2), (c * per + per // 2, (c + 1) * per))
                    for c in range(nchunks)) if use_ranges else None)
    graph._chunk_cache.clear()
    ch = graph.walk_chunks(w, nchunks, ranges)
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
# the certificate's text: certificate.dumps (compact JSON, one top-level key per line) reads back
# as the value it was given
# ------------------------------------------------------------------------------------------------
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda kids: st.lists(kids, max_size=5) | st.tuples(kids, kids)
    | st.dictionaries(st.text(max_size=6), kids, max_size=5),
    max_leaves=40)


def _canonical(value) -> str:
    import json
    return json.dumps(value, sort_keys=True)  # NaN/inf as json writes them, tuples as lists


def _reads_back(value) -> str:
    import json

    from m100.passes.backend.sync_insert.certificate import dumps
    text = dumps(value)
    assert _canonical(json.loads(text)) == _canonical(value)
    if isinstance(value, dict) and value:  # "{", a line per key in sorted order, "}"
        lines = text.split("\n")
        assert lines[0] == "{" and lines[-1] == "}" and len(lines) == len(value) + 2
        assert [json.loads("{" + ln.rstrip(",") + "}").popitem()[0] for ln in lines[1:-1]] == \
            sorted(value)
    return text


@settings(max_examples=300, deadline=None)
@given(_json)
@example({"a": [1, -2, 3.5, float("nan"), float("inf"), -float("inf"), True, None, "é\n\"x"],
          "b": {}, "c": [], "d": [[], {}, [[1]]], "e": (1, "t")})
def test_certificate_text_reads_back(value):
    _reads_back(value)


def test_certificate_text_of_real_certificates_and_errors():
    import json

    from m100.passes.backend.sync_insert.certificate import dumps
    for seed in range(3):
        cert = insert_sync(progs.random_program(seed, n=18), TINY).certificate
        assert json.loads(_reads_back(cert)) == cert
    # non-str keys (not a certificate): json's compact text; values json can not encode: its error
    assert json.loads(dumps({2: [1], 1: {None: 3}})) == {"1": {"null": 3}, "2": [1]}
    for bad in ({"a": [np.int64(1)]}, {1: 0, "x": 0}):
        with pytest.raises(TypeError):
            dumps(bad)


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


@pytest.mark.parametrize("scalar", [0, 4, 32])
@pytest.mark.parametrize("seed", range(8))
def test_rows_shortcut_gives_the_same_hazards(seed, scalar, monkeypatch):
    """derive_hazards' row-shape test (rows_meet) for pairs of 1-block accesses against
    access_need's run-by-run test on every pair: same hazards, need vectors and reasons, in the
    same order -- on programs of copies and DMAs between random pieces of one matrix (column
    slices of rows interleave in one bounding interval, most pairs do not meet). ``scalar``:
    ``ROWS_SCALAR``, up to how many candidates the test runs on Python ints (0: arrays only)."""
    from m100.passes.backend.sync_insert import graph
    monkeypatch.setattr(graph, "ROWS_SCALAR", scalar)
    rng = np.random.default_rng(900 + seed)
    rows, cols = int(rng.integers(2, 9)), int(rng.integers(2, 40))
    if seed == 7:  # force the coarse (interval-only) path on some walks: no shortcut there
        monkeypatch.setattr(graph, "EXACT_LIMIT", 3)
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
    calls = []
    need = graph.access_need
    monkeypatch.setattr(graph, "access_need", lambda *a: calls.append(1) or need(*a))
    fast = graph.derive_hazards(prog, blocks)
    n_fast = len(calls)
    monkeypatch.setattr(graph, "ROWS_SHORTCUT", False)
    slow = graph.derive_hazards(prog, blocks)
    assert n_fast < len(calls)  # the shortcut was taken
    assert list(fast) == list(slow) and len(fast) > 10
    for k, h in fast.items():
        assert h.need.tolist() == slow[k].need.tolist() and h.why == slow[k].why


def test_rows_meet_against_enumeration():
    """rows_meet against the byte sets enumerated, on random row shapes of equal periods and
    single runs."""
    from m100.passes.backend.sync_insert.graph import rows_meet, rows_meet1
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
        assert rows_meet1(*a, *b) == (True, bool(bytes_of[0] & bytes_of[1])), (a, b)


def test_rows_meet1_is_rows_meet():
    """The one-pair rows_meet1 (Python ints) against the array rows_meet on random shapes of
    any periods (undecided pairs too), negative offsets and large addresses."""
    from m100.passes.backend.sync_insert.graph import rows_meet, rows_meet1
    rng = np.random.default_rng(11)
    for _ in range(4000):
        base = int(rng.choice([0, 1 << 33]))

        def shape():
            n = int(rng.integers(1, 6))
            per = int(rng.integers(1, 50)) if n > 1 else 0
            return base + int(rng.integers(0, 300)), per, n, int(rng.integers(1, 60))

        a, b = shape(), shape()
        dec, meet = rows_meet(*(np.array([x]) for x in a), *b)
        assert rows_meet1(*a, *b) == (bool(dec[0]), bool(meet[0])), (a, b)


@pytest.mark.parametrize("seed", range(8))
def test_pruning_implied_needs_keeps_the_program(seed, monkeypatch):
    """graph.prune_implied drops a need i1 -> j when a later producer i2 of j on the same executor
    waits no later in j: the program (every sync field) and the kept orderings are the same as
    without it, the certificate lists a subset of the hazards, and every hazard of the full list
    -- the dropped ones too -- is ordered by the program (the independent checker's test)."""
    from m100.passes.backend.sync_insert import graph
    prog = progs.random_program(900 + seed, n=60, slots=4, ddr_slots=2, extra=seed % 2 == 1)
    rng = np.random.default_rng(seed)
    edges = [DataEdge(int(p), int(c)) for p, c in
             (sorted(rng.choice(len(prog), 2, replace=False)) for _ in range(25))]
    kw = dict(edges=edges, stream_blocks=2 if seed % 3 == 0 else None)
    pruned = insert_sync(prog, TINY, **kw)
    monkeypatch.setattr(graph, "PRUNE_IMPLIED", False)
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
    from m100.passes.backend.sync_insert.graph import Hazard, prune_implied
    execs = ["A", "B", "A", "C"]

    def needs(n0, n2):
        return {(0, 3): Hazard(0, 3, np.array(n0)), (1, 3): Hazard(1, 3, np.array([0, 0])),
                (2, 3): Hazard(2, 3, np.array(n2))}
    d = needs([-1, 0], [0, -1])  # 2 waits from block 0: implies 0's wait at block 1
    assert sorted(prune_implied(d, 3, [0, 1, 2], execs)) == [1, 2] and (0, 3) not in d
    d = needs([0, -1], [-1, 0])  # 2 only from block 1: 0's wait at block 0 stays
    assert sorted(prune_implied(d, 3, [0, 1, 2], execs)) == [0, 1, 2] and len(d) == 3


@pytest.mark.parametrize("seed", range(6))
def test_merged_chain_cost_equals_the_cost_of_the_union(seed):
    """allocate._merged_cost (a counter's kept cost plus what a channel's events change) is
    _chain_cost of the union, on the happens-before graph of a random program's needs."""
    import importlib
    from m100.passes.backend.sync_insert.analyze import analyze
    from m100.passes.backend.sync_insert.redundancy import reduce_needs
    A = importlib.import_module("m100.passes.backend.sync_insert.allocate")  # (not the function)
    prog = progs.random_program(950 + seed, n=50, slots=4, ddr_slots=2)
    g = reduce_needs(analyze(prog, TINY, stream_blocks=2)).graph
    rng = np.random.default_rng(seed)
    by_exec: dict = {}
    for i, inst in enumerate(prog):
        for k in range(g.blocks[i]):
            by_exec.setdefault(inst.executor, []).append((i, k))
    execs = list(by_exec)
    for _ in range(40):
        pick = rng.permutation(len(execs))[:int(rng.integers(2, min(5, len(execs)) + 1))]
        chans = [[e for e in by_exec[execs[x]] if rng.random() < .6] or by_exec[execs[x]][:1]
                 for x in pick]
        old = sorted(e for c in chans[:-1] for e in c)
        for t in (0, 1):
            assert A._merged_cost(g, old, A._chain_cost(g, old, t), chans[-1], t) == \
                A._chain_cost(g, old + chans[-1], t)


@pytest.mark.parametrize("seed", range(4))
def test_clock_kept_up_to_date_only_to_the_query_agrees_with_networkx(seed):
    """HbGraph.hb brings the clocks up to date only up to the queried node: sync edges added
    between queries (as allocate's serialization does) are seen by every later query, which
    answers as networkx's ancestors do on the graph at that moment."""
    rng = np.random.default_rng(seed)
    prog = progs.random_program(40 + seed, n=30)
    blocks = [int(rng.integers(1, 4)) for _ in prog]
    g = HbGraph(prog, blocks)
    for _ in range(30):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        g.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
        G = nx.DiGraph()
        G.add_nodes_from(range(g.num_nodes))
        for v in range(g.num_nodes):
            for p in g.preds(v):
                G.add_edge(p, v)
        for v in sorted(rng.choice(g.num_nodes, 4, replace=False)):
            anc = nx.ancestors(G, int(v))
            assert {u for u in range(1, g.num_nodes, 2) if g.hb(u, int(v))} == \
                {u for u in anc if u & 1}
