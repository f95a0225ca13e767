"""A one-block copy's op (``semantics_move._make_op``, session 36): ``run_free`` writes a one-block
copy, broadcast or DMA from two views made of a tuple kept per instruction, made from the source's
and destination's levels (``_pair``, kept per pair of levels tuples) without the view spec
(``CopyExec._view_spec``) that the pre-pass made for every copy before. The oracles: the op the
view spec gives (session 35's spec -> stores, written out below: ``_op_of_spec``), compared tuple
for tuple on random instructions and on every copy of compiled programs; and the bytes of ``run``
+ ``apply`` and of the spec's own path (``_run_free_spec``), with the HBSMs grouped and not."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.sim import Simulator, memory, semantics_move as sm, twu
from m100.sim.semantics import make_exec
from m100.targets.m100.isa import Broadcast, Copy, Dma, DType, Space, Sync, Walk, mask_of
from m100.targets.m100.machine import get_machine

import m100_isa_strategies as S  # (put in sys.modules by conftest.py)
TINY = get_machine("tiny")
# (the tiny machine with 16 TPBs: TPB ranges of several steps; as test_hbsm_group.py)
WIDE = dataclasses.replace(TINY, name="tiny-16", clusters=2, tpbs_per_cluster=8)


def _memory(inst, seed, machine, group: bool):
    """A memory (grouped HBSMs or one mapping per TPB) with random bytes under every operand of
    ``inst``, in every TPB (as test_hbsm_group.py)."""
    old = memory.HBSM_GROUP
    memory.HBSM_GROUP = group
    try:
        mem = Simulator([inst], machine, mode="functional").memory
        rng = np.random.default_rng(seed)
        for _, w, _ in inst.walks():
            lo, hi = w.byte_range()
            for t in range(machine.num_tpbs) if w.space is Space.HBSM else [0]:
                mem.write_bytes(w.space, t, lo, rng.integers(0, 256, hi - lo, dtype=np.uint8))
    finally:
        memory.HBSM_GROUP = old
    return mem


def _spaces(mem, inst) -> dict:
    """Every HBSM's bytes; the bytes of the other spaces in each walk's range."""
    out = {k: bytes(s.read_range(0, s.size)) for k, s in sorted(mem._spaces.items())
           if k[0] == int(Space.HBSM)}
    for _, w, _ in inst.walks():
        if w.space is not Space.HBSM:
            lo, hi = w.byte_range()
            out[(int(w.space), lo)] = bytes(mem.read_bytes(w.space, 0, lo, hi - lo))
    return out


def _op_of_spec(spec) -> tuple | None:
    """The op ``run_free`` would make of a view spec (the reference): a plan whose destinations
    are one (then the op's TPB range is None) or, with the spec's TPB range, HBSM destinations of
    one walk in that range; else None (the spec's path)."""
    if spec is None or spec[2] is None:
        return None
    vt, parts, plan, tpbs = spec
    ssp, stpb, slo, send, sfirst, _, _ = parts[0]
    if len(parts) == 2:
        dsp, dtpb, dlo, dend, dfirst, _, _ = parts[1]
        counts, ss, ds = plan[0]
        return vt, counts, ssp, stpb, slo, send, sfirst, ss, dsp, dtpb, dlo, dend, dfirst, ds, None
    if tpbs is None:
        return None
    dsp, _, dlo, dend, dfirst, _, _ = parts[1]
    assert all(p[0] == dsp and p[2:] == parts[1][2:] for p in parts[1:])  # (one walk)
    assert len(set(plan)) == 1
    counts, ss, ds = plan[0]
    return vt, counts, ssp, stpb, slo, send, sfirst, ss, dsp, None, dlo, dend, dfirst, ds, tpbs


def _check_op(inst) -> tuple | None:
    """The op of ``inst`` made afresh (nothing kept) equals the one its view spec gives."""
    sm._PAIRS.clear()
    ex = make_exec(inst, None)
    op = sm._make_op(ex._ends())
    assert op == _op_of_spec(ex._make_view_spec(0))
    return op


def _bytes(inst, seed, machine, group: bool, how: str) -> tuple[dict, bool]:
    """Every space's bytes after the block's ``run`` + ``apply`` (``how`` "run"), ``run_free`` +
    ``apply`` ("free") or the spec's path ("spec"); whether ``run_free`` wrote by the op."""
    mem = _memory(inst, seed, machine, group)
    ex = make_exec(dataclasses.replace(inst), mem)  # (a new object: nothing kept)
    by_op = False
    if how == "run":
        pending = ex.run(0)
    elif how == "spec":
        pending = ex._run_free_spec(0)
    else:
        real, taken = ex._run_free_spec, []
        ex._run_free_spec = lambda b: taken.append(b) or real(b)
        pending = ex.run_free(0)
        by_op = not taken
        assert not by_op or pending is sm._WRITTEN
    ex.apply(pending)
    return _spaces(mem, inst), by_op


def _all_ways(inst, seed, machine=TINY) -> bool:
    """The op's bytes equal run + apply's and the spec path's, HBSMs grouped or not; whether
    the op wrote them."""
    ref, _ = _bytes(inst, seed, machine, False, "run")
    assert _bytes(inst, seed, machine, True, "spec")[0] == ref
    assert _bytes(inst, seed, machine, False, "free")[0] == ref
    got, by_op = _bytes(inst, seed, machine, True, "free")
    assert got == ref
    return by_op


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.instructions(TINY, kinds=(Broadcast, Copy, Dma), executable=True),
       st.integers(0, 2**32 - 1))
def test_random_one_block_copies(inst, seed):
    inst = dataclasses.replace(inst, sync=Sync(blocks=1))
    op = _check_op(inst)
    try:
        _bytes(inst, seed, TINY, False, "run")
    except Exception:  # noqa: BLE001 - a fault: the op's path faults too
        with pytest.raises(Exception):  # noqa: B017
            _bytes(inst, seed, TINY, True, "free")
        return
    by_op = _all_ways(inst, seed)
    assert by_op == (op is not None)


def _hb(tpb, base, shape, strides=None, dt=DType.F32):
    return Walk.strided(Space.HBSM, tpb, base, dt, shape, strides)


def _dd(base, shape, strides=None, dt=DType.F32):
    return Walk.strided(Space.DDR, 0, base, dt, shape, strides)


@pytest.mark.parametrize("t0,step,k", [(0, 1, 16), (1, 2, 7), (3, 3, 4), (2, 6, 3), (5, 1, 1)])
@pytest.mark.parametrize("src", ["ddr", "in", "out"])
def test_tpb_ranges(t0, step, k, src):
    """Broadcasts / DMAs into one HBSM walk in TPBs t0, t0 + step, ...: one view with a TPB axis
    (one TPB: a single destination), from DDR, an HBSM of the range or one outside it."""
    tpbs = list(range(t0, t0 + step * k, step))
    mask = mask_of(*tpbs)
    dst = _hb(0, 8192, (6, 10))
    if src == "ddr":
        inst = Dma(engine=0, src=_dd(1 << 16, (60,)), dst=dst, tpb_mask=mask)
    else:
        outside = [x for x in range(WIDE.num_tpbs) if x not in tpbs]
        if src == "out" and not outside:
            return  # (every TPB in the range)
        t = t0 if src == "in" else outside[-1]
        inst = Broadcast(tpb=t, src=_hb(t, 256, (2, 30), (32, 1)), dst=dst, tpb_mask=mask)
    op = _check_op(inst)
    assert op is not None and (op[-1] is None) == (k == 1)
    assert _all_ways(inst, 11, WIDE)


def test_a_destination_meeting_the_source_has_no_op():
    """A broadcast whose destination in the source's TPB meets the source (read all, then
    write), or a copy onto its own bytes: no op -- the spec's path (run / apply) writes them."""
    bc = Broadcast(tpb=1, src=_hb(1, 0, (64,)), dst=_hb(0, 64, (64,)), tpb_mask=0b1110)
    assert _check_op(bc) is None and not _all_ways(bc, 4, WIDE)
    cp = Copy(tpb=2, src=_hb(2, 0, (8, 8)), dst=_hb(2, 32, (64,)))
    assert _check_op(cp) is None and not _all_ways(cp, 4, WIDE)
    # (in another TPB, or at disjoint bytes: an op, the same bytes)
    assert _check_op(dataclasses.replace(bc, tpb_mask=0b1100)) is not None
    assert _all_ways(dataclasses.replace(bc, tpb_mask=0b1100), 4, WIDE)
    assert _check_op(dataclasses.replace(cp, dst=_hb(3, 32, (64,)))) is not None
    assert _all_ways(dataclasses.replace(cp, dst=_hb(3, 32, (64,))), 4, WIDE)


def test_no_op_without_a_plan():
    """No common shape, another element type, a destination not injective, several blocks,
    TPBs not a range, several DDR destinations: no op (and the same bytes by the spec's path)."""
    for inst in (
            Copy(tpb=0, src=_hb(0, 0, (4, 8), (16, 1)), dst=_hb(1, 0, (8, 4), (16, 1))),
            Copy(tpb=0, src=_hb(0, 0, (32,)), dst=_hb(1, 0, (32,), dt=DType.F16)),
            Copy(tpb=0, src=_hb(0, 0, (32,)), dst=_hb(1, 0, (2, 16), (0, 1))),
            Broadcast(tpb=0, src=_hb(0, 0, (32,)), dst=_hb(0, 512, (32,)), tpb_mask=0b1011),
            Dma(engine=0, src=_hb(0, 0, (32,)), dst=_dd(4096, (32,)), tpb_mask=0b11)):
        assert _check_op(inst) is None, inst
        _all_ways(inst, 5, WIDE)
    two = Copy(tpb=0, src=_hb(0, 0, (4, 8)), dst=_hb(1, 4096, (32,)), sync=Sync(blocks=2))
    assert make_exec(two, None)._ends() is None


def test_pairs_kept_by_identity():
    """``_pair`` is kept per pair of levels tuples (held: their ids name them) and finds an
    equal value's tuple afresh; a stale entry under a reused id is not taken."""
    sm._PAIRS.clear()
    a, b = _hb(0, 0, (4, 8), (16, 1)).levels, _hb(0, 0, (32,)).levels
    got = sm._pair(a, b, 4)
    assert sm._pair(a, b, 4) is got and len(sm._PAIRS) == 1
    c = tuple(list(b))  # (an equal tuple: another object)
    sm._PAIRS[(id(a), id(c), 4)] = (a, b, "stale")  # (as if c's id had named b before)
    assert sm._pair(a, c, 4) == got
    old = twu.GEOMETRY
    twu.GEOMETRY = False
    try:
        assert sm._pair(a, b, 4) == got
    finally:
        twu.GEOMETRY = old


def _mutant(fn, *edits):
    """``fn`` of semantics_move with its source text edited (``(old, new)`` pairs)."""
    src = inspect.getsource(fn)
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    ns = dict(vars(sm))
    exec(compile(src, sm.__file__, "exec"), ns)  # noqa: S102 - a mutant of our own code
    return ns[fn.__name__]


_MUTANTS = {
    # the op without _fusion's overlap test
    "overlap": ("_make_op", (
        "if dsp == ssp and (dtpb == stpb or dsp is not Space.HBSM) and dlo < send and slo < dend:",
        "if False:"),
        ("if rng is None or (dsp == ssp and stpb in tpbs and dlo < send and slo < dend):",
         "if rng is None:")),
    # the destination's first byte without its base
    "base": ("_make_op", ("db + dfirst", "dfirst")),
    # the pair table trusting a reused id of the destination's levels
    "stale": ("_pair", ("got[0] is sl and got[1] is dl", "got[0] is sl")),
}


@pytest.mark.parametrize("name", sorted(_MUTANTS))
def test_mutants_fail(name):
    """The tests above catch each mutant."""
    fn, *edits = _MUTANTS[name]
    real = getattr(sm, fn)
    setattr(sm, fn, _mutant(real, *edits))
    try:
        with pytest.raises(AssertionError):
            if name == "overlap":
                test_a_destination_meeting_the_source_has_no_op()
            elif name == "base":
                _all_ways(Copy(tpb=0, src=_hb(0, 0, (4, 8), (16, 1)), dst=_hb(1, 4096, (32,))), 4,
                          WIDE)
            else:
                test_pairs_kept_by_identity()
    finally:
        setattr(sm, fn, real)
        sm._PAIRS.clear()
