"""A conv run by a race-free schedule stores its output block at once (``Conv2DExec.run_free``,
``replay.calls`` with ``race_free``), the float epilogue works in place on the block's own
product, a group-1 conv skips the group reshapes, and ``Memory.write_walk`` stores a contiguous
walk's values of its storage type without ``_to_bytes`` (session 34): the same bytes as the code
before, written out here as the reference -- on random convs and matmuls (every float type and
activation, bias, accumulate, groups, block splits, random bytes as operands: NaNs and infinities
included) and random contiguous writes (values of another type, strided values, every type)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.sim import Simulator, twu
from m100.sim.memory import _to_bytes
from m100.sim.semantics import make_exec
from m100.sim.semantics_base import PendingWrite, quiet, quiet_run
from m100.sim.semantics_tcu import Conv2DExec, _act, _operand
from m100.targets.m100.isa import Conv2D, DType, MatMul, Space, Sync, Walk
from m100.targets.m100.machine import get_machine

import m100_isa_strategies as S  # (put in sys.modules by conftest.py)

from .test_copy_run_free import _memory, _spaces  # (random operand bytes; the spaces' bytes)

TINY = get_machine("tiny")


# --- the code before session 34, written out ---------------------------------------------------
def _old_epilogue(ex, prod, old, out, nchan, integer):
    """``TcuExec._epilogue`` before session 34 (its float branch made new arrays)."""
    if integer:
        return type(ex)._epilogue(ex, prod, old, out, nchan, integer)  # (unchanged)
    ep = ex.inst.epilogue
    with quiet():
        acc = prod.astype(np.float32, copy=False)
        if old is not None:
            acc = acc + old.astype(np.float32, copy=False)
        if ep.bias is not None:
            acc = acc + ex.mem.read_walk(ep.bias, ep.bias.tpb, None, False).astype(
                np.float32, copy=False)
        return _act(acc, ep.act, ep.clamp_lo, ep.clamp_hi, False).astype(np.float32, copy=False)


def _old_conv_run(ex, b):
    """``Conv2DExec.run`` before session 34 (the general group reshapes, the old epilogue)."""
    i = ex.inst
    integer, dtype, M, g, cg, fg, kk, plans = ex._consts()
    bb = i.w.dtype.bits
    idx = ex._index(b) if not twu.STRIDED or min(i.pad) < 0 else None
    xa, uniq = ex._x(b, idx)
    if idx is None and isinstance(uniq, tuple):
        p = plans.get(b)
        if p is None:
            p = plans[b] = ex._shared_box_plan(b, uniq, dtype)
        if p[0]:
            cols = np.array(ex.read(xa, False), dtype=dtype, order="C").reshape(p[1])
        else:
            _, counts, sl, key, pshape, wshape, (sh, sw, dh, dw), sel, shape = p
            scratch = ex.mem.scratch
            xp = scratch.get(key)
            if xp is None:
                xp = scratch[key] = np.zeros(pshape, dtype=dtype)
            xp[sl] = ex.read(xa, False).reshape(counts)
            s = xp.strides
            win = np.ndarray(wshape, dtype, xp, 0, (
                s[0], sh * s[1], sw * s[2], dh * s[1], dw * s[2], s[3]))
            cols = win[sel].reshape(shape)
    elif idx is None:
        xp, x4 = ex._padded(dtype)
        if xa.offsets is None:
            x4[...] = ex.read(xa, False).reshape(x4.shape)
        else:
            x4[np.unravel_index(uniq, x4.shape)] = ex.read(xa, False)
        cols = ex._windows(b, xp)
    else:
        xfull = np.zeros(i.n * i.h * i.width * i.c + 1, dtype=dtype)
        if xa.offsets is None:
            xfull[:-1] = ex.read(xa, False)
        else:
            xfull[uniq] = ex.read(xa, False)
        cols = xfull[idx]
    cols = cols.reshape(M, i.kh, i.kw, g, cg).transpose(3, 0, 1, 2, 4).reshape(
        g, M, i.kh * i.kw * cg)
    W = _operand(ex.mem.read_walk(i.w, i.tpb, None, False), integer, kk, bb).reshape(
        i.kh, i.kw, cg, g, fg)
    W = W.transpose(3, 0, 1, 2, 4).reshape(g, i.kh * i.kw * cg, fg)
    with quiet():
        prod = np.matmul(cols, W).transpose(1, 0, 2).reshape(M, i.f)
    y = ex._y(b)
    old = ex.read(y, False).reshape(M, i.f) if i.accumulate else None
    return [PendingWrite(y, _old_epilogue(ex, prod, old, i.y, i.f, integer))]


def _old_write_walk(mem, walk, values, tpb=None):
    """``Memory.write_walk``'s contiguous path before session 34."""
    t = walk.tpb if tpb is None else tpb
    dt = walk.dtype
    start = twu.contiguous_start(walk)
    assert start is not None and dt is not DType.I4
    mem.space(walk.space, t).write_range(walk.base + start * (dt.bits // 8),
                                         _to_bytes(np.asarray(values).reshape(-1), dt))


# --- helpers ---------------------------------------------------------------------------------
def _old_run(ex, b):
    if isinstance(ex, Conv2DExec):
        return _old_conv_run(ex, b)
    ex._epilogue = lambda *a: _old_epilogue(ex, *a)  # (MatMulExec.run itself is unchanged)
    try:
        return ex.run(b)
    finally:
        del ex._epilogue


def _runs(inst, seed, how: str) -> dict:
    """Every space's bytes after each block's calls: ``old`` (the code before, ``run`` +
    ``apply``), ``run`` (``run`` + ``apply``), ``free`` (``run_free`` + ``apply``)."""
    mem = _memory(inst, seed)
    ex = make_exec(inst, mem)
    with quiet_run():
        for b in range(inst.sync.blocks):
            if how == "old":
                pending = _old_run(ex, b)
            else:
                pending = ex.run_free(b) if how == "free" else ex.run(b)
            ex.apply(pending)
    return _spaces(mem)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.instructions(TINY, kinds=(Conv2D, MatMul), executable=True), st.integers(0, 2**32 - 1))
def test_tcu_blocks_write_what_the_code_before_wrote(inst, seed):
    inst = dataclasses.replace(inst, sync=Sync(blocks=inst.sync.blocks))
    try:
        ref = _runs(inst, seed, "old")
    except Exception as e:  # noqa: BLE001 - a fault: the new paths fault the same way
        for how in ("run", "free"):
            try:
                _runs(inst, seed, how)
            except type(e):
                continue
            raise AssertionError(f"the old run faults with {type(e).__name__}, {how} not") from e
        return
    assert _runs(inst, seed, "run") == ref
    assert _runs(inst, seed, "free") == ref


def _hb(base, dt, shape):
    return Walk.strided(Space.HBSM, 0, base, dt, shape)


def test_float_epilogues_on_nan_and_signed_zero_products():
    """The in-place float epilogue on products holding NaN, infinities and signed zeros, with an
    old output and a bias (relu, clamp, none, a CVU activation): the old arrays' bytes."""
    from m100.targets.m100.isa import Act, Epilogue

    r = np.random.default_rng(5)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38],
                       dtype=np.float32)
    for act in Act:
        lo, hi = (-0.5, 0.75) if act is Act.CLAMP else (0.0, 0.0)
        conv = Conv2D(0, _hb(0, DType.F32, (1, 3, 3, 2)), _hb(256, DType.F32, (1, 1, 2, 3)),
                      _hb(512, DType.F32, (1, 3, 3, 3)), 1, 3, 3, 2, 3, 1, 1, accumulate=True,
                      epilogue=Epilogue(bias=_hb(768, DType.F32, (3,)), act=act, clamp_lo=lo,
                                        clamp_hi=hi))
        mem = _memory(conv, 1)
        ex = make_exec(conv, mem)
        for _ in range(4):
            prod = r.choice(special, (9, 3)).astype(np.float32)
            old = r.choice(special, (9, 3)).astype(np.float32)
            with quiet_run():
                want = _old_epilogue(ex, prod.copy(), old, conv.y, 3, False)
                got = ex._epilogue(prod.copy(), old, conv.y, 3, False)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), act


_TYPES = [DType.I8, DType.I16, DType.I32, DType.F16, DType.BF16, DType.F32]


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("vdt", [np.int8, np.int32, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("dt", _TYPES)
def test_contiguous_writes_store_the_old_bytes(dt, vdt, strided):
    """``write_walk`` of a contiguous walk: the bytes of the old path (``_to_bytes`` +
    ``write_range``) for every walk type and values of every type (a conversion unless the
    walk's storage type), strided values, unaligned bases, into the memory's random bytes."""
    sz = dt.bits // 8
    for seed in range(6):
        r = np.random.default_rng(seed)
        n, base = int(r.integers(1, 40)), int(r.integers(0, 64)) * sz + (seed % 3 if sz > 1 else 0)
        walk = _hb(base, dt, (n,))
        src = (r.standard_normal(2 * n) * 50).astype(vdt) if np.dtype(vdt).kind == "f" \
            else r.integers(-100, 100, 2 * n).astype(vdt)
        values = src[::2] if strided else src[:n]
        out = []
        for write in (_old_write_walk, lambda m, w, v: m.write_walk(w, v)):
            sim = Simulator([], TINY, mode="functional")
            mem = sim.memory
            mem.write_bytes(Space.HBSM, 0, 0, np.random.default_rng(seed + 1).integers(
                0, 256, 512, dtype=np.uint8))
            with quiet_run():
                write(mem, walk, values)
            out.append(_spaces(mem))
        assert out[0] == out[1], (seed, n, base)


def test_a_write_past_the_space_still_raises():
    """The fast path checks the bounds: a contiguous walk ending past its space falls back to
    ``write_range``, which raises as before."""
    sim = Simulator([], TINY, mode="functional")
    size = sim.memory.space(Space.HBSM, 0).size
    walk = _hb(size - 8, DType.F32, (4,))
    with pytest.raises(IndexError):
        sim.memory.write_walk(walk, np.ones(4, dtype=np.float32))
