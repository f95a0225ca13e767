"""A same-type copy, broadcast or DMA run by a race-free schedule writes its destinations from the
source view at once (``CopyExec.run_free``, ``replay.calls`` with ``race_free``): the same bytes
as its ``run`` and ``apply`` -- on random instructions, on a broadcast whose destination in the
source's TPB meets the source (read all, then write), and where the two views take no common
shape. The schedules it is used on are in ``test/e2e/test_deferred_data.py``."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.sim import Simulator, semantics_move
from m100.sim.semantics import make_exec
from m100.targets.m100.isa import Broadcast, Copy, Dma, DType, Space, Sync, Walk
from m100.targets.m100.machine import get_machine

import m100_isa_strategies as S  # (put in sys.modules by conftest.py)

TINY = get_machine("tiny")


def _memory(inst, seed):
    """A memory with random bytes under every operand of ``inst`` (in every TPB)."""
    sim = Simulator([inst], TINY, mode="functional")
    rng = np.random.default_rng(seed)
    for _, w, _ in inst.walks():
        lo, hi = w.byte_range()
        tpbs = range(TINY.num_tpbs) if w.space is Space.HBSM else [0]
        for t in tpbs:
            sim.memory.write_bytes(w.space, t, lo, rng.integers(0, 256, hi - lo, dtype=np.uint8))
    return sim.memory


def _spaces(mem) -> dict:
    return {k: bytes(s.read_range(0, s.size)) for k, s in sorted(mem._spaces.items())}


def _both(inst, seed) -> tuple[dict, dict, int]:
    """Every space's bytes after each block's ``run`` + ``apply``, and after its ``run_free`` +
    ``apply``; how many blocks ``run_free`` wrote itself."""
    out, fused = [], 0
    for free in (False, True):
        mem = _memory(inst, seed)
        ex = make_exec(inst, mem)
        for b in range(inst.sync.blocks):
            pending = ex.run_free(b) if free else ex.run(b)
            fused += pending is semantics_move._WRITTEN
            ex.apply(pending)
        out.append(_spaces(mem))
    return out[0], out[1], fused


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.instructions(TINY, kinds=(Broadcast, Copy, Dma), executable=True),
       st.integers(0, 2**32 - 1))
def test_run_free_writes_what_run_and_apply_write(inst, seed):
    inst = dataclasses.replace(inst, sync=Sync(blocks=inst.sync.blocks))
    try:
        ref, free, _ = _both(inst, seed)
    except Exception as e:  # noqa: BLE001 - a fault: run_free must fault the same way
        kind = type(e)
        try:
            _both_free_only(inst, seed)
        except kind:
            return
        raise AssertionError(f"run faults with {kind.__name__}, run_free does not") from e
    assert free == ref


def _both_free_only(inst, seed) -> None:
    mem = _memory(inst, seed)
    ex = make_exec(inst, mem)
    for b in range(inst.sync.blocks):
        ex.apply(ex.run_free(b))


def _hb(tpb, base, shape, strides=None):
    return Walk.strided(Space.HBSM, tpb, base, DType.F32, shape, strides)


def test_fused_copies_are_taken():
    """(Not vacuous: a copy between boxes of different shapes writes from the source view.)"""
    inst = Copy(tpb=0, src=_hb(0, 0, (4, 8), (16, 1)), dst=_hb(1, 4096, (32,)),
                sync=Sync(blocks=2))
    ref, free, fused = _both(inst, 3)
    assert fused == 2 and free == ref


def test_a_destination_meeting_the_source_is_not_fused():
    """A broadcast from TPB 0 into TPBs 0 and 1 at addresses that meet the source's in TPB 0:
    written from the source view, the first destination (TPB 0's) would change the source before
    the second is written; run_free leaves it to run / apply, which read all first."""
    inst = Broadcast(tpb=0, src=_hb(0, 0, (64,)), dst=_hb(0, 64, (64,)), tpb_mask=0b11)
    ref, free, fused = _both(inst, 4)
    assert fused == 0 and free == ref
    assert make_exec(inst, None)._make_view_spec(0)[2] is None
    # (the same broadcast to disjoint addresses is fused, and writes the same)
    far = dataclasses.replace(inst, dst=_hb(0, 1024, (64,)))
    ref, free, fused = _both(far, 4)
    assert fused == 1 and free == ref
    # a mutant that ignores the overlap writes other bytes into TPB 1
    real = semantics_move._fusion
    try:
        semantics_move._fusion = lambda parts, sz: tuple(
            semantics_move._aligned(parts[0][5], parts[0][6], p[5], p[6], sz) for p in parts[1:])
        _, bad, fused = _both(dataclasses.replace(inst), 4)  # (a new object: no kept spec)
    finally:
        semantics_move._fusion = real
    assert fused == 1 and bad != ref


def test_views_of_no_common_shape():
    """``_aligned``: the shape both views take without a copy (element order kept), or None."""
    f = semantics_move._aligned
    assert f((4, 8), (64, 4), (32,), (4,), 4) == ((4, 8), (64, 4), (32, 4))  # dst as src's shape
    assert f((32,), (4,), (4, 8), (64, 4), 4) == ((4, 8), (32, 4), (64, 4))  # src as dst's
    assert f((4, 8), (64, 4), (8, 4), (64, 4), 4) is None  # neither: each a strided box
    # element i of both walks in C order: the reshaped views list the same bytes
    buf = np.arange(512, dtype=np.float32)
    src = np.lib.stride_tricks.as_strided(buf, (4, 8), (64, 4))
    counts, ss, _ = f((4, 8), (64, 4), (32,), (4,), 4)
    assert np.array_equal(np.lib.stride_tricks.as_strided(buf, counts, ss).ravel(),
                          src.ravel())
