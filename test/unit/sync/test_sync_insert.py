"""sync-insert on ISA objects, end to end, checked by an independent executor (toysim.py:
vector-clock races, deadlock by no progress, final memory vs a sequential numpy run): random
programs in both modes, mutants, streaming, rings and explicit edges, input errors, the deadlock
check and codegen's monitor fit. The stages have their own files: test_footprint.py,
test_hazards.py, test_hb_graph.py, test_allocate.py, test_sync_certificate.py.
"""

from __future__ import annotations

import dataclasses
import os
import sys

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
from m100.sim.certificate import verify_instructions as verify_certificate  # noqa: E402
from m100.targets.m100 import isa  # noqa: E402
from m100.targets.m100.isa import Monitor, Sync, Trigger, Update  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

TINY = get_machine("tiny")


# ------------------------------------------------------------------------------------------------
# random programs: race-free, deadlock-free, right values, in both modes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
@pytest.mark.parametrize("seed", range(12))
def test_random_program_is_race_free(seed, mode):
    prog = progs.random_program(seed, n=18)
    mem, ref = toysim.setup(prog, TINY, seed)
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
        mem, ref = toysim.setup(prog, TINY, seed)
        racy += not toysim.ok(toysim.run(prog, TINY, mem, seed=seed), ref)
    assert racy >= 10

@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
def test_twenty_random_latency_seeds_identical(mode):
    prog = progs.random_program(101, n=24)
    mem, ref = toysim.setup(prog, TINY)
    res = insert_sync(prog, TINY, sync_mode=mode, stream_blocks=4)
    cycles = set()
    for s in range(20):
        out = toysim.run(res.instructions, TINY, mem, seed=s)
        assert toysim.ok(out, ref), (s, out.races[:2], out.deadlock)
        cycles.add(out.cycles)
    assert len(cycles) > 10  # the latencies really were perturbed

@pytest.mark.parametrize("seed", range(4))
def test_random_programs_with_csu_and_sram(seed):
    prog = progs.random_program(2000 + seed, n=20, extra=True)
    mem, ref = toysim.setup(prog, TINY, seed)
    for mode in ("dataflow", "barrier-all"):
        res = insert_sync(prog, TINY, sync_mode=mode, counter_budget=[None, 2][seed % 2])
        assert toysim.ok(toysim.run(res.instructions, TINY, mem, seed=seed), ref)


# ------------------------------------------------------------------------------------------------
# mutation test: every monitor matters, every expected value is tight
# ------------------------------------------------------------------------------------------------
def mutation_rate(seeds, n=18) -> tuple[int, int]:
    total = caught = 0
    for seed in seeds:
        prog = progs.random_program(seed, n=n)
        mem, ref = toysim.setup(prog, TINY, seed)
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
                    caught += not toysim.ok(r, ref)
    return caught, total

def test_mutants_are_caught():
    caught, total = mutation_rate(range(6))
    print(f"\nmutation test: {caught}/{total} mutants caught ({100 * caught / total:.1f} %)")
    assert total > 80
    assert caught / total >= 0.95

def test_mutants_pipeline():
    prog = progs.pipeline(tiles=5, slots=2, blocks=4)
    mem, ref = toysim.setup(prog, TINY)
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
                caught += not toysim.ok(toysim.run(q, TINY, mem, stop_on_race=True), ref)
    assert total >= 40 and caught / total >= 0.95


# ------------------------------------------------------------------------------------------------
# streaming, rings, explicit edges, input errors
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
    mem, ref = toysim.setup(prog, TINY)
    cyc = {}
    for mode in ("dataflow", "barrier-all"):
        res = insert_sync(prog, TINY, sync_mode=mode)
        out = toysim.run(res.instructions, TINY, mem)
        assert toysim.ok(out, ref)
        cyc[mode] = out.cycles
    print(f"\npipeline (8 tiles, 2-slot rings, 4 blocks): dataflow {cyc['dataflow']:.0f} cycles, "
          f"barrier-all {cyc['barrier-all']:.0f} cycles")
    assert cyc["dataflow"] * 2 < cyc["barrier-all"]

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
    mem, ref = toysim.setup(prog, TINY)
    fast = toysim.run(res.instructions, TINY, mem)
    slow = toysim.run(plain.instructions, TINY, mem)
    assert toysim.ok(fast, ref) and toysim.ok(slow, ref) and fast.cycles < slow.cycles

def test_stream_blocks_never_splits_a_row_normalization():
    h = progs.hw
    soft = isa.CvuPipeline(tpb=0, inputs=(h(0, 0),), in_shapes=((16, 16),), output=h(0, 1),
                           out_shape=(16, 16), stages=(isa.Stage(isa.CvuOp.SOFTMAX,
                                                                 (isa.Ref(isa.RefKind.INPUT),),
                                                                 axis=0),))
    along_cols = dataclasses.replace(soft, stages=(dataclasses.replace(soft.stages[0], axis=1),))
    res = insert_sync([soft, along_cols], TINY, stream_blocks=4)
    assert [i.sync.blocks for i in res.instructions] == [1, 4]

def test_ring_buffer_and_explicit_edges():
    prog = progs.pipeline(tiles=4, slots=2, blocks=2)
    rb = RingBuffer(slots=2, producers=(0, 5, 10, 15), consumers=(1, 6, 11, 16))
    res = insert_sync(prog, TINY, rings=[rb], edges=[DataEdge(0, 4)])
    mem, ref = toysim.setup(prog, TINY)
    assert toysim.ok(toysim.run(res.instructions, TINY, mem, seed=5), ref)
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
# deadlock check; codegen's monitor fit
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
    mem, _ = toysim.setup(prog, TINY)
    for i, inst in enumerate(out):
        for mi, mon in enumerate(inst.sync.monitors):
            raised = dataclasses.replace(mon, expected=mon.expected + 50)
            q = list(out)
            q[i] = dataclasses.replace(inst, sync=dataclasses.replace(
                inst.sync, monitors=inst.sync.monitors[:mi] + (raised,) + inst.sync.monitors[mi + 1:]))
            with pytest.raises(SyncDeadlockError):
                check_deadlock(q)
            assert toysim.run(q, TINY, mem).deadlock is not None

def test_counter_overflow_is_named():
    """check_deadlock with a machine checks every counter's final value against the counter
    width: one SyncError naming the first overflowing counter by (TPB, counter) -- whatever order
    the run reached them in (here TPB 1's counter 3 first)."""
    h = progs.hw
    top = TINY.su_counter_max
    fill = lambda t, c: isa.Fill(tpb=t, dst=h(t, 0), value=1.0, sync=Sync(  # noqa: E731
        updates=(Update(c, 1 << t, amount=top),)))
    prog = [fill(1, 3), fill(1, 3), fill(0, 0), fill(0, 0)]
    with pytest.raises(SyncError, match=f"counter 0 of TPB 0 reaches {2 * top}, more than"):
        check_deadlock(prog, TINY)
    assert check_deadlock(prog[1:3], TINY) == {(1, 3): top, (0, 0): top}  # at the width: fine


def _rounds(insts) -> tuple[dict, dict]:
    """The maximal state by rounds (deadlock.run_abstract until session 32, written out): every
    executor in turn runs the blocks whose monitors are met, until a round makes no progress."""
    queues: dict = {}
    for idx, inst in enumerate(insts):
        queues.setdefault(inst.executor, []).append(idx)
    pos = {e: [0, 0] for e in queues}
    ctr: dict = {}

    def fire(inst, trig):
        for u in inst.sync.updates:
            if u.trigger is trig:
                for t in isa.tpbs_of(u.tpb_mask):
                    ctr[(t, u.counter)] = ctr.get((t, u.counter), 0) + u.amount
    progress = True
    while progress:
        progress = False
        for e, q in queues.items():
            p = pos[e]
            while p[0] < len(q):
                inst = insts[q[p[0]]]
                if not all(ctr.get((m.tpb, m.counter), 0) >= m.expected + p[1] * m.per_block
                           for m in inst.sync.monitors):
                    break
                fire(inst, Trigger.BLOCK)
                p[1] += 1
                if p[1] == inst.sync.blocks:
                    fire(inst, Trigger.END)
                    p[0], p[1] = p[0] + 1, 0
                progress = True
    return ctr, pos


@pytest.mark.parametrize("seed", range(6))
def test_deadlock_worklist_reaches_the_rounds_state(seed):
    """run_abstract's worklist (an executor tried again only when a counter it waits on grows)
    reaches the state of the rounds written out (every executor tried until no progress): the
    same counters and positions -- on synchronized random programs (all done) and on them with
    monitors raised, dropped updates and updates moved to other counters (executors stuck at
    various points, chains of waits across many executors)."""
    from m100.passes.backend.sync_insert.deadlock import run_abstract
    rng = np.random.default_rng(seed)
    prog = progs.random_program(1300 + seed, n=70, slots=4, ddr_slots=2, extra=seed % 2 == 1)
    out = insert_sync(prog, TINY, stream_blocks=2 if seed % 3 == 0 else None).instructions
    cases = [out]
    for _ in range(6):
        q = list(out)
        for i in rng.choice(len(q), size=int(rng.integers(1, 4)), replace=False).tolist():
            sy = q[i].sync
            mons, ups = list(sy.monitors), list(sy.updates)
            kind = int(rng.integers(3))
            if kind == 0 and mons:
                k = int(rng.integers(len(mons)))
                mons[k] = dataclasses.replace(mons[k], expected=mons[k].expected
                                              + int(rng.integers(1, 3)))
            elif kind == 1 and ups:
                ups.pop(int(rng.integers(len(ups))))
            elif ups:
                k = int(rng.integers(len(ups)))
                ups[k] = dataclasses.replace(ups[k], counter=(ups[k].counter + 1) % 4)
            q[i] = dataclasses.replace(q[i], sync=dataclasses.replace(
                sy, monitors=tuple(mons), updates=tuple(ups)))
        cases.append(q)
    stuck = 0
    for q in cases:
        ctr, pos, _ = run_abstract(q)
        want_ctr, want_pos = _rounds(q)
        assert ctr == want_ctr and pos == want_pos and list(pos) == list(want_pos)
        stuck += any(p[0] < len(v) for p, v in zip(pos.values(), run_abstract(q)[2].values()))
    assert all(p[0] == len(v) for p, v in zip(*(lambda r: (r[1].values(), r[2].values()))(
        run_abstract(out))))  # the synchronized program runs to its end
    assert stuck >= 3  # most changed programs stop somewhere


def test_codegen_makers_are_the_constructors():
    """codegen's Monitor / Update / Sync makers (the fields set straight into ``__dict__``) give
    what the dataclasses' constructors give: equal, the same hash, repr and ``__dict__`` (keys in
    the same order), a pickle round trip, on random values; and the guard refuses a class that is
    not the frozen dataclass of those fields."""
    import pickle

    cg = sys.modules["m100.passes.backend.sync_insert.codegen"]  # (the package exports the
    # function ``codegen`` under the module's name)
    rng = np.random.default_rng(3)
    for _ in range(200):
        t, c, e, k, mask = (int(x) for x in rng.integers(0, 1 << 20, 5))
        trig = [Trigger.END, Trigger.BLOCK][int(rng.integers(2))]
        pairs = [(cg._monitor(t, c, e, k), Monitor(tpb=t, counter=c, expected=e, per_block=k)),
                 (cg._update(c, mask, 1 + k % 3, trig),
                  Update(counter=c, tpb_mask=mask, amount=1 + k % 3, trigger=trig))]
        pairs.append((cg._sync(1 + e % 4, (pairs[0][0],), (pairs[1][0],)),
                      Sync(blocks=1 + e % 4, monitors=(pairs[0][1],), updates=(pairs[1][1],))))
        for a, b in pairs:
            assert type(a) is type(b) and a == b and hash(a) == hash(b) and repr(a) == repr(b)
            assert list(a.__dict__.items()) == list(b.__dict__.items())
            assert pickle.loads(pickle.dumps(a)) == b
    with pytest.raises(AssertionError):
        cg._fields_only(Monitor, ("tpb", "counter", "per_block", "expected"))

    @dataclasses.dataclass(frozen=True)
    class Checked:
        tpb: int

        def __post_init__(self):
            pass
    with pytest.raises(AssertionError):
        cg._fields_only(Checked, ("tpb",))


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


def test_token_of_an_instruction_outside_the_body_is_one_error():
    """A token whose producer is a tpb instruction op that is not one of the program body's
    instructions (``index``) -- directly or through a join -- is one SyncError naming the
    waiting op, not a KeyError; an instruction of the body answers its own index."""
    import os
    import sys

    from m100.dialects.sync import JoinOp
    from m100.dialects.tpb_base import InstrOp
    from m100.passes.backend.sync_insert.sync_insert import _producers
    sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "dialects")))
    from tpb_all_ops import MODULES

    inst = next(op for op in MODULES["resolved_all_ops.mlir"].walk() if isinstance(op, InstrOp))
    assert _producers(inst.done, {id(inst): 7}, "'w'") == [7]
    join = JoinOp([inst.done])
    for v in (inst.done, join.results[0]):
        with pytest.raises(SyncError, match="'w' waits for the token of a tpb instruction "
                                            "outside the program's body"):
            _producers(v, {}, "'w'")
