"""Counters: a two-TPB pipeline through 2-slot ring buffers with back-pressure; its race and
deadlock variants; block-granular overlap; counter overflow."""

import numpy as np
import pytest

from m100.sim.testing import hb, run
from m100.targets.m100.isa import (CvuOp, CvuPipeline, Copy, DType, Fill, MatMul, Monitor, Ref,
                                   RefKind, Stage, Sync, Trigger, Update, mask_of)

N, M, K, F = 6, 16, 32, 16
TILE = M * F * 4  # bytes of one i32 tile
A_BASE, W_BASE, L_BASE, R_BASE, OUT_BASE = 0, 4096, 8192, 16384, 24576
FULL, EMPTY, DONE, FREE = 0, 1, 2, 3  # counters: TPB1 c0 full; TPB0 c1 empty, c2 done, c3 free


def pipeline(drop=None, bp_expected=None, full_expected=None):
    """TPB0.TCU: L[i%2] = A_i @ W; TPB0.DTDU: R[i%2]@TPB1 = L[i%2]; TPB1.CVU: out_i = relu(R[i%2]).

    ``drop``: name of a monitor to remove; ``bp_expected``: replace the DTDU's back-pressure
    expectation ``i - 1`` by ``bp_expected(i)``.
    """
    insts = []
    for i in range(N):
        s = i % 2
        mons = (Monitor(0, FREE, i - 1),) if i >= 2 else ()
        insts.append(MatMul(0, hb(0, A_BASE + i * M * K, DType.I8, (M, K)),
                            hb(0, W_BASE, DType.I8, (K, F)), hb(0, L_BASE + s * TILE, DType.I32, (M, F)),
                            M, F, K, sync=Sync(monitors=mons, updates=(Update(DONE, mask_of(0)),))))
        mons = [Monitor(0, DONE, i + 1)]
        want = bp_expected(i) if bp_expected else i - 1
        if want >= 1 and drop != "empty":
            mons.append(Monitor(0, EMPTY, want))
        insts.append(Copy(0, hb(0, L_BASE + s * TILE, DType.I32, (M, F)),
                          hb(1, R_BASE + s * TILE, DType.I32, (M, F)),
                          sync=Sync(blocks=2, monitors=tuple(mons),
                                    updates=(Update(FULL, mask_of(1), trigger=Trigger.END),
                                             Update(FREE, mask_of(0))))))
        want = full_expected(i) if full_expected else i + 1
        mons = () if drop == "full" or want < 1 else (Monitor(1, FULL, want),)
        insts.append(CvuPipeline(1, (hb(1, R_BASE + s * TILE, DType.I32, (M, F)),), ((M, F),),
                                 hb(1, OUT_BASE + i * M * F * 4, DType.F32, (M, F)), (M, F),
                                 (Stage(CvuOp.RELU, (Ref(RefKind.INPUT, 0),)),),
                                 sync=Sync(monitors=mons, updates=(Update(EMPTY, mask_of(0)),))))
    return insts


def data(rng):
    a = rng.integers(-128, 128, (N, M, K))
    w = rng.integers(-128, 128, (K, F))
    return a, w, [(hb(0, A_BASE, DType.I8, (N * M * K,)), a), (hb(0, W_BASE, DType.I8, (K, F)), w)]


OUT = hb(1, OUT_BASE, DType.F32, (N, M, F))


@pytest.mark.parametrize("mode", ["full", "functional"])
def test_pipeline_right_result(rng, mode):
    a, w, d = data(rng)
    res, (out,) = run(pipeline(), d, [OUT], mode=mode)
    assert res.ok, [str(r) for r in res.reports]
    want = np.maximum(np.einsum("imk,kf->imf", a, w), 0).astype(np.float32)
    assert np.array_equal(out.reshape(N, M, F), want)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pipeline_right_result_under_random_latency(rng, seed):
    a, w, d = data(rng)
    res, (out,) = run(pipeline(), d, [OUT], random_latency=seed)
    assert res.ok, [str(r) for r in res.reports]
    assert np.array_equal(out.reshape(N, M, F),
                          np.maximum(np.einsum("imk,kf->imf", a, w), 0).astype(np.float32))


@pytest.mark.parametrize("drop,kind", [("full", "read-write"), ("empty", "write-read"),
                                        ("full", None)])
def test_removing_a_monitor_is_a_race(rng, drop, kind):
    _, _, d = data(rng)
    res, _ = run(pipeline(drop=drop), d, [], random_latency=7 if kind is None else None)
    races = res.reports_of("race")
    assert races, "the race checker must report the missing monitor"
    msgs = " | ".join(r.message for r in races)
    assert "HBSM of TPB 1" in msgs
    assert "dtdu.copy" in msgs and "cvu.pipeline" in msgs
    if kind == "write-read":
        assert "write-read race" in msgs or "read-write race" in msgs


@pytest.mark.parametrize("drop", ["full", "empty"])
def test_race_byte_sets_kept_on_instructions_give_the_same_reports(rng, drop):
    """A block's race byte sets are kept on the instruction (``Checks._race_items``, per block,
    reads/writes and ``twu.STRIDED``): running the same instruction objects again, or with the
    index paths, reports exactly what a run on fresh (equal) instructions reports."""
    import copy

    from m100.sim import twu

    _, _, d = data(rng)
    insts = pipeline(drop=drop)
    for strided in (True, True, False, True):
        old, twu.STRIDED = twu.STRIDED, strided
        try:
            again, _ = run(insts, d, [], mode="functional")
            fresh, _ = run(copy.deepcopy(pipeline(drop=drop)), d, [], mode="functional")
        finally:
            twu.STRIDED = old
        assert again.reports_of("race")
        assert [str(r) for r in again.reports] == [str(r) for r in fresh.reports]
        assert again.stats == fresh.stats
    from m100.sim.engine_checks import _items
    from m100.sim.semantics import make_exec

    def key(items):
        return [(sp, bs.lo, bs.hi, None if bs.arr is None else bs.arr.tolist()) for sp, bs, _ in items]

    for inst in insts:  # what is kept is each block's own accesses
        ex, kept = make_exec(inst, None), inst.__dict__["_sim_race"][1]
        for b in range(inst.sync.blocks):
            assert key(kept[(b, False)]) == key(_items(ex.reads(b)))
            assert key(kept[(b, True)]) == key(_items(ex.writes(b)))


def test_lowered_expected_value_is_a_race(rng):
    """The consumer waits for i full slots instead of i + 1: it may read slot i before it is
    written; whatever the timing, happens-before does not order them."""
    _, _, d = data(rng)
    for seed in (None, 3):
        res, _ = run(pipeline(full_expected=lambda i: i), d, [], random_latency=seed)
        races = res.reports_of("race")
        assert races and all("HBSM of TPB 1" in r.message for r in races)
        assert any("#2 cvu.pipeline" in r.message and "#1 dtdu.copy" in r.message for r in races)


def test_raised_back_pressure_expectation_deadlocks_with_cycle(rng):
    _, _, d = data(rng)
    res, _ = run(pipeline(bp_expected=lambda i: i + 1), d, [])
    dl = res.reports_of("deadlock")
    assert len(dl) == 1
    msg = dl[0].message
    assert "wait-for cycle" in msg
    # DTDU #1 waits for TPB0 c1 (EMPTY) >= 1, which only TPB1.CVU #2 would raise; the CVU waits
    # for TPB1 c0 (FULL) >= 1, which only the DTDU would raise.
    assert "TPB0.DTDU #1 dtdu.copy (block 0) waits for counter c1 of TPB 0 >= 1 (it is 0)" in msg
    assert "it would be updated by TPB1.CVU #2 cvu.pipeline" in msg
    assert "TPB1.CVU #2 cvu.pipeline (block 0) waits for counter c0 of TPB 1 >= 1 (it is 0)" in msg
    assert "it would be updated by TPB0.DTDU #1 dtdu.copy" in msg


def test_starved_monitor_names_no_updater():
    w = hb(0, 0, DType.I8, (8,))
    res, _ = run([Fill(0, w, 1.0, sync=Sync(monitors=(Monitor(0, 5, 1),)))], [], [])
    msg = res.reports_of("deadlock")[0].message
    assert "waits for counter c5 of TPB 0 >= 1 (it is 0), but no remaining instruction updates it" in msg


def test_block_granular_overlap():
    """A consumer waiting per block starts block 0 while the producer still writes later blocks."""
    n = 4096
    src, mid, dst = hb(0, 0, DType.I8, (n,)), hb(0, 8192, DType.I8, (n,)), hb(0, 16384, DType.I8, (n,))
    prod = Copy(0, src, mid, sync=Sync(blocks=4, updates=(Update(0, mask_of(0), trigger=Trigger.BLOCK),)))
    cons = CvuPipeline(0, (mid,), ((4, n // 4),), dst, (4, n // 4),
                       (Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.IMM, imm=1.0))),),
                       sync=Sync(blocks=4, monitors=(Monitor(0, 0, 1, per_block=1),)))
    x = np.arange(n) % 100
    res, (y,) = run([prod, cons], [(src, x)], [dst])
    assert res.ok, [str(r) for r in res.reports]
    assert np.array_equal(y, x + 1)
    pb, cb = res.records[0].blocks, res.records[1].blocks
    assert cb[0][0] < pb[-1][1]  # the consumer's first block starts before the producer ends
    for b in range(4):
        assert cb[b][0] >= pb[b][1]  # ... but never before its block is written


def test_counter_overflow_reported():
    from m100.targets.m100.machine import get_machine
    m = get_machine("tiny").with_overrides(su_counter_bits=2, name="tiny2")
    w = hb(0, 0, DType.I8, (8,))
    insts = [Fill(0, w, 1.0, sync=Sync(updates=(Update(0, mask_of(0), amount=2),))) for _ in range(2)]
    res, _ = run(insts, [], [], machine=m)
    ov = res.reports_of("overflow")
    assert ov and "counter c0 of TPB 0 overflows (4 > 3)" in ov[0].message


def test_random_latency_finds_a_race_one_timing_hides():
    """Two producers bump one counter; the consumer waits for >= 1 but reads only the first
    producer's buffer. With the nominal timing that producer always arrives first (no race);
    perturbed latencies let the other one arrive first, and the checker reports the race."""
    x, y = hb(0, 0, DType.I8, (64,)), hb(0, 4096, DType.I8, (4096,))
    p_slow = CvuPipeline(0, (hb(0, 8192, DType.I8, (4096,)),), ((4096,),), y, (4096,),
                         (Stage(CvuOp.COPY, (Ref(RefKind.INPUT, 0),)),),
                         sync=Sync(updates=(Update(0, mask_of(0)),)))
    p_fast = Fill(0, x, 5.0, sync=Sync(updates=(Update(0, mask_of(0)),)))
    cons = MatMul(0, hb(0, 0, DType.I8, (1, 64)), hb(0, 0, DType.I8, (64, 1)),
                  hb(0, 16384, DType.I32, (1, 1)), 1, 1, 64, sync=Sync(monitors=(Monitor(0, 0, 1),)))
    insts = [p_slow, p_fast, cons]
    res, _ = run(insts, [], [])
    assert res.ok and res.records[1].end < res.records[0].end  # nominal: the fill lands first
    found = [s for s in range(12) if run(insts, [], [], random_latency=s)[0].reports_of("race")]
    assert found, "some perturbed timing must let the slow producer release the monitor"
    r = run(insts, [], [], random_latency=found[0])[0].reports_of("race")[0]
    assert "dtdu.fill" in r.message and "tcu.matmul" in r.message
