"""Every TPB's HBSM in one mapping (``memory.HBSM_GROUP``, ``HbsmGroup``; session 34): the same
bytes as one mapping per TPB (each TPB's part disjoint from the others, zero until written, the
group back to the pool and zero when taken again), and a broadcast's or DMA's destinations in a
TPB range written as one strided view by ``CopyExec.run_free`` -- the bytes of the per-TPB
mappings and of ``run`` + ``apply``, on random broadcasts and DMAs and on TPB ranges of every
step, with sources in DDR and in an HBSM of the range."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.sim import Simulator, memory, mempool, semantics_move
from m100.sim.semantics import make_exec
from m100.targets.m100.isa import Broadcast, Dma, DType, Space, Sync, Walk, mask_of, space_size
from m100.targets.m100.machine import get_machine

import m100_isa_strategies as S  # (put in sys.modules by conftest.py)

TINY = get_machine("tiny")
# (the tiny machine with 16 TPBs: small spaces, TPB ranges of several steps)
WIDE = dataclasses.replace(TINY, name="tiny-16", clusters=2, tpbs_per_cluster=8)


def _memory(inst, seed, machine, group: bool):
    """A memory (grouped HBSMs or one mapping per TPB) with random bytes under every operand of
    ``inst``, in every TPB."""
    old = memory.HBSM_GROUP
    memory.HBSM_GROUP = group
    try:
        sim = Simulator([inst], machine, mode="functional")
        mem = sim.memory
        rng = np.random.default_rng(seed)
        for _, w, _ in inst.walks():
            lo, hi = w.byte_range()
            tpbs = range(machine.num_tpbs) if w.space is Space.HBSM else [0]
            for t in tpbs:
                mem.write_bytes(w.space, t, lo, rng.integers(0, 256, hi - lo, dtype=np.uint8))
    finally:
        memory.HBSM_GROUP = old
    if not group:
        assert mem.group in (None, False)
    return mem


def _spaces(mem, inst) -> dict:
    """Every HBSM's bytes; the bytes of the other spaces in each walk's range (a DDR is large)."""
    out = {k: bytes(s.read_range(0, s.size)) for k, s in sorted(mem._spaces.items())
           if k[0] == int(Space.HBSM)}
    for _, w, _ in inst.walks():
        if w.space is not Space.HBSM:
            lo, hi = w.byte_range()
            out[(int(w.space), lo)] = bytes(mem.read_bytes(w.space, 0, lo, hi - lo))
    return out


def _run(inst, seed, machine, group: bool, free: bool) -> tuple[dict, int]:
    """Every space's bytes after each block's ``run_free`` (or ``run``) and ``apply``; how many
    blocks wrote their destinations as one view."""
    mem = _memory(inst, seed, machine, group)
    ex = make_exec(inst, mem)
    at_once = 0
    real = np.ndarray
    for b in range(inst.sync.blocks):
        spec = ex._view_spec(b)
        pending = ex.run_free(b) if free else ex.run(b)
        at_once += bool(free and group and spec is not None and spec[2] is not None
                        and spec[3] is not None and pending is semantics_move._WRITTEN)
        ex.apply(pending)
    assert np.ndarray is real
    return _spaces(mem, inst), at_once


def _all_ways(inst, seed, machine=TINY) -> int:
    """The bytes of the grouped run_free equal the per-TPB mappings' run + apply and run_free,
    and the grouped run + apply; the blocks written as one view."""
    ref, _ = _run(inst, seed, machine, False, False)
    assert _run(inst, seed, machine, False, True)[0] == ref
    assert _run(inst, seed, machine, True, False)[0] == ref
    got, at_once = _run(inst, seed, machine, True, True)
    assert got == ref
    return at_once


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.instructions(TINY, kinds=(Broadcast, Dma), executable=True), st.integers(0, 2**32 - 1))
def test_random_broadcasts_and_dmas_write_the_per_tpb_bytes(inst, seed):
    inst = dataclasses.replace(inst, sync=Sync(blocks=inst.sync.blocks))
    try:
        _run(inst, seed, TINY, False, False)
    except Exception:  # noqa: BLE001 - a fault: the grouped paths fault the same way
        with pytest.raises(Exception):  # noqa: B017
            _run(inst, seed, TINY, True, True)
        return
    _all_ways(inst, seed)


def _hb(tpb, base, shape, strides=None, dt=DType.F32):
    return Walk.strided(Space.HBSM, tpb, base, dt, shape, strides)


@pytest.mark.parametrize("step", [1, 2, 3, 6])
@pytest.mark.parametrize("src_space", ["ddr", "hbsm-in-range", "hbsm-outside"])
def test_a_tpb_range_is_one_view(step, src_space):
    """Broadcasts and DMAs into TPBs ``t0, t0 + step, ...`` of a 16-TPB machine (a strided
    box destination, an f16 and an i8 one), from DDR or from an HBSM in or outside the range
    (bytes disjoint from the destinations'): every block is written as one view, and the bytes
    are those of the per-TPB mappings."""
    t0 = 1
    tpbs = list(range(t0, WIDE.num_tpbs, step))
    mask = mask_of(*tpbs)
    stpb = {"hbsm-in-range": tpbs[1], "hbsm-outside": tpbs[0] + 1 if step > 1 else 0}.get(src_space)
    for dt, shape, strides in ((DType.F32, (4, 8), (16, 1)), (DType.F16, (64,), None),
                               (DType.I8, (2, 3, 5), (40, 10, 1))):
        n = int(np.prod(shape))
        src = Walk.strided(Space.DDR, 0, 4096, dt, (n,)) if stpb is None \
            else _hb(stpb, 8192, (n,), dt=dt)
        dst = _hb(0, 256, shape, strides, dt)
        if stpb is None:
            inst = Dma(engine=0, src=src, dst=dst, tpb_mask=mask, sync=Sync(blocks=2))
        else:
            inst = Broadcast(tpb=stpb, src=src, dst=dst, tpb_mask=mask, sync=Sync(blocks=2))
        assert _all_ways(inst, step, WIDE) == 2, (dt, inst)


def test_the_tpb_range_of_a_spec():
    f = semantics_move._tpb_range
    A = semantics_move.Access
    w = _hb(0, 0, (4,))
    assert f([A(w, t) for t in (2, 5, 8)]) == (2, 3, 3)
    assert f([A(w, t) for t in (0, 1)]) == (0, 1, 2)
    assert f([A(w, t) for t in (0, 1, 3)]) is None
    assert f([A(w, t) for t in (4, 2)]) is None
    assert f([A(w, t) for t in (4, 4)]) is None


def test_parts_are_disjoint_and_the_group_is_pooled(monkeypatch):
    """Each TPB's part is its own ``size`` bytes of the group (a write to one TPB is read in no
    other); the group mapping goes back to the pool when its memory goes and comes back zero."""
    if mempool._MINCORE is None:
        pytest.skip("no mincore(2) here")
    monkeypatch.setattr(mempool, "_free", {})
    monkeypatch.setattr(mempool, "POOL", True)
    size = space_size(TINY, Space.HBSM)
    mem = Simulator([], TINY, mode="functional").memory
    for t in range(TINY.num_tpbs):
        mem.write_bytes(Space.HBSM, t, 0, np.full(size, t + 1, dtype=np.uint8))
    g = mem.group
    assert g.size == size and g.count == TINY.num_tpbs and g.buf.size == size * g.count
    for t in range(TINY.num_tpbs):
        s = mem.space(Space.HBSM, t)
        assert s.whole and s.size == size and s.group is g
        assert (s.read_range(0, size) == t + 1).all()
        assert s.buf.ctypes.data == g.buf.ctypes.data + t * size
    addr = g.buf.ctypes.data
    del mem, g, s
    assert len(mempool._free.get(size * TINY.num_tpbs, [])) == 1
    again = Simulator([], TINY, mode="functional").memory
    again.space(Space.HBSM, 1)
    assert again.group.buf.ctypes.data == addr and not again.group.buf.any()


def test_no_group_when_off_or_on_demand(monkeypatch):
    for group, whole in ((False, True), (True, False)):
        monkeypatch.setattr(memory, "HBSM_GROUP", group)
        monkeypatch.setattr(memory, "WHOLE", whole)
        mem = Simulator([], TINY, mode="functional").memory
        mem.write_bytes(Space.HBSM, 1, 8, b"\x01\x02")
        assert mem.group is False and mem.space(Space.HBSM, 1).group is None
        assert bytes(mem.read_bytes(Space.HBSM, 1, 8, 2)) == b"\x01\x02"
