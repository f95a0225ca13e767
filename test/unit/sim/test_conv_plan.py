"""A float conv block's ``run_free`` by one plan per geometry (``sim/conv_plan.py``, session 35)
writes the bytes of the code before it -- ``Conv2DExec.run`` + ``apply`` and the code before
session 34 written out in ``test_tcu_run_free`` -- on random float32 convs (shapes, strides,
paddings, dilations, 1x1 and kxk, x as a contiguous or a row-padded box, in an HBSM or the DDR,
an old output, a bias in another TPB, every activation) over random bytes (NaNs, infinities),
several instructions of one geometry at other bases and TPBs sharing a plan, and the fallbacks:
a walk out of range faults as before, the preconditions that do not hold take the general path."""

from __future__ import annotations

import numpy as np
import pytest

from m100.sim import Simulator, conv_plan, twu
from m100.sim.semantics import make_exec
from m100.sim.semantics_base import quiet_run
from m100.targets.m100.isa import Act, Conv2D, DType, Epilogue, Space, Walk
from m100.targets.m100.machine import get_machine

from .test_tcu_run_free import _old_conv_run

TINY = get_machine("tiny")


def _geometry(r):
    while True:
        n, h, w, c, f = (int(r.integers(1, 3)), int(r.integers(1, 8)), int(r.integers(1, 8)),
                         int(r.integers(1, 7)), int(r.integers(1, 7)))
        kh, kw = int(r.choice([1, 1, 2, 3])), int(r.choice([1, 1, 2, 3]))
        stride = (int(r.integers(1, 3)), int(r.integers(1, 3)))
        dil = (int(r.integers(1, 3)), int(r.integers(1, 3)))
        pad = tuple(int(v) for v in r.integers(0, 3, 4)) if r.random() < 0.6 else (0, 0, 0, 0)
        oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w + pad[1] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        if oh >= 1 and ow >= 1:
            return n, h, w, c, f, kh, kw, stride, pad, dil, oh, ow


def _convs(r, count):
    """``count`` float convs of one random geometry: their walks share levels tuples (moved to
    other bases and TPBs, as twu-materialize makes them), their operands do not overlap."""
    n, h, w, c, f, kh, kw, stride, pad, dil, oh, ow = _geometry(r)
    space = Space.DDR if r.random() < 0.25 else Space.HBSM
    pitch = c + (int(r.integers(1, 3)) if r.random() < 0.4 else 0)  # a row-padded x: a box
    x = Walk.strided(space, 0, 0, DType.F32, (n, h, w, c), (h * w * pitch, w * pitch, pitch, 1))
    wt = Walk.strided(Space.HBSM, 0, 0, DType.F32, (kh, kw, c, f))
    y = Walk.strided(Space.HBSM, 0, 0, DType.F32, (n, oh, ow, f))
    bias = Walk.strided(Space.HBSM, 0, 0, DType.F32, (f,)) if r.random() < 0.6 else None
    act = [Act.NONE, Act.RELU, Act.CLAMP][int(r.integers(0, 3))]
    lo, hi = (float(r.standard_normal()), float(r.standard_normal()) + 2) \
        if act is Act.CLAMP else (0.0, 0.0)
    acc = bool(r.random() < 0.5)
    out, at = [], int(r.integers(0, 9))
    xsz, wsz, ysz = 4 * n * h * w * pitch, 4 * kh * kw * c * f, 4 * n * oh * ow * f
    for _ in range(count):
        tpb = int(r.integers(0, TINY.num_tpbs))
        bx, at = at, at + xsz + int(r.integers(0, 3)) * 4 + 1  # (unaligned bases too)
        bw, at = at, at + wsz + int(r.integers(0, 3))
        by, at = at, at + ysz + int(r.integers(0, 3))
        bb, at = at, at + 4 * f + int(r.integers(0, 3))
        ep = Epilogue(bias=None if bias is None else bias.moved(1 - tpb, bb), act=act,
                      clamp_lo=lo, clamp_hi=hi)
        out.append(Conv2D(tpb, x.moved(tpb, bx), wt.moved(tpb, bw), y.moved(tpb, by), n, h, w, c,
                          f, kh, kw, stride=stride, pad=pad, dilation=dil, accumulate=acc,
                          epilogue=ep))
    return out


def _spaces(mem) -> dict:
    """Every space's first 64 KiB (the operands are in the first 32 KiB)."""
    return {k: bytes(s.read_range(0, min(s.size, 1 << 16))) for k, s in sorted(mem._spaces.items())}


def _memory(insts, seed):
    sim = Simulator(list(insts), TINY, mode="functional")
    rng = np.random.default_rng(seed)
    for sp in (Space.DDR, Space.HBSM):
        for t in range(TINY.num_tpbs if sp is Space.HBSM else 1):
            sim.memory.write_bytes(sp, t, 0, rng.integers(0, 256, 1 << 15, dtype=np.uint8))
    return sim.memory


def _run(insts, seed, how, mem_insts=None):
    """Every space's bytes after each conv's block: ``old`` (the code before session 34),
    ``run`` (``run`` + ``apply``), ``free`` (``run_free``: the plan where it applies)."""
    mem = _memory(insts if mem_insts is None else mem_insts, seed)
    with quiet_run():
        for inst in insts:
            ex = make_exec(inst, mem)
            if how == "old":
                pending = _old_conv_run(ex, 0)
            else:
                pending = ex.run_free(0) if how == "free" else ex.run(0)
            ex.apply(pending)
    return _spaces(mem)


@pytest.fixture
def taken(monkeypatch):
    """How many blocks the plan stored itself."""
    got = [0]
    real = conv_plan.run_free

    def counted(ex, b):
        done = real(ex, b)
        got[0] += done
        return done
    monkeypatch.setattr(conv_plan, "run_free", counted)
    return got


@pytest.mark.parametrize("seed", range(40))
def test_plans_write_the_bytes_of_the_code_before(seed, taken):
    r = np.random.default_rng(seed)
    insts = _convs(r, int(r.integers(1, 5)))
    ref = _run(insts, seed, "old")
    assert _run(insts, seed, "run") == ref
    assert _run(insts, seed, "free") == ref
    assert taken[0] == len(insts)  # (every one by its plan: the test is not of the old path)


def test_one_plan_per_geometry(taken):
    """Instructions of one geometry at other bases and TPBs share one plan (made once)."""
    conv_plan._PLANS.clear()
    insts = _convs(np.random.default_rng(7), 4)
    ref = _run(insts, 7, "old")
    assert _run(insts, 7, "free") == ref and taken[0] == 4
    assert len([p for p in conv_plan._PLANS.values() if p is not False]) == 1


def test_nan_and_special_values_keep_their_bits(taken):
    """x, w, the old output and the bias drawn from NaNs (two payloads), infinities, signed
    zeros and denormals, every activation: the same bytes."""
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38,
                        1.5, -2.25], dtype=np.float32)
    special = np.concatenate([special, np.frombuffer(
        np.array([0x7FC00001, 0xFFA00000], dtype=np.uint32).tobytes(), dtype=np.float32)])
    for seed in range(8):
        r = np.random.default_rng(100 + seed)
        insts = _convs(r, 2)
        vals = {(sp, t): r.choice(special, 1 << 13) for sp in (Space.DDR, Space.HBSM)
                for t in range(TINY.num_tpbs if sp is Space.HBSM else 1)}
        outs = []
        for how in ("old", "free"):
            mem = _memory(insts, seed)
            for (sp, t), v in vals.items():
                mem.write_bytes(sp, t, 0, v.view(np.uint8))
            with quiet_run():
                for inst in insts:
                    ex = make_exec(inst, mem)
                    ex.apply(_old_conv_run(ex, 0) if how == "old" else ex.run_free(0))
            outs.append(_spaces(mem))
        assert outs[0] == outs[1], seed
    assert taken[0] == 16


def test_out_of_range_faults_as_before(taken):
    """A conv whose output reaches past its HBSM: no plan store (nothing written by it) and the
    general path raises what it raised."""
    insts = _convs(np.random.default_rng(3), 1)
    i = insts[0]
    size = _memory(insts, 3).space(Space.HBSM, i.tpb).size
    far = Conv2D(i.tpb, i.x, i.w, i.y.moved(i.tpb, size - 4), i.n, i.h, i.width, i.c, i.f, i.kh,
                 i.kw, stride=i.stride, pad=i.pad, dilation=i.dilation,
                 accumulate=i.accumulate, epilogue=i.epilogue)
    errs = []
    for how in ("old", "free"):
        try:
            _run([far], 3, how, mem_insts=insts)
        except Exception as e:  # noqa: BLE001 - compared below
            errs.append(type(e))
            assert "outside" in str(e) or "past" in str(e) or "bytes" in str(e), e
        else:
            errs.append(None)
    assert errs[0] is not None and errs[0] == errs[1] and taken[0] == 0


def test_what_the_plan_does_not_take_runs_the_general_path(taken, monkeypatch):
    """Without ``twu.STRIDED`` (the box path the plan is made of): the general path."""
    insts = _convs(np.random.default_rng(11), 2)
    monkeypatch.setattr(twu, "STRIDED", False)
    ref = _run(insts, 11, "old")
    assert _run(insts, 11, "free") == ref and taken[0] == 0


# --- session 36: the box as the im2col matrix, the product stored in y's bytes ------------------
def _flat_convs(r, count):
    """``count`` 1x1 float convs of one geometry whose windows are all inside x, x contiguous:
    the plans whose box is the [M, K] matrix itself (``Plan.flat``)."""
    while True:
        insts = _convs(r, count)
        i = insts[0]
        if i.kh == i.kw == 1 and i.stride == (1, 1) and i.pad == (0, 0, 0, 0) \
                and i.x.levels[-1].step == 1 and i.x.shape[-1] == i.c \
                and all(lv.step == lv2.count * lv2.step for lv, lv2 in
                        zip(i.x.levels, i.x.levels[1:]) if lv.count > 1):
            return insts


@pytest.mark.parametrize("seed", range(12))
def test_flat_boxes_are_the_matrix(seed, taken):
    """A 1x1 conv with a C-ordered box multiplies the box's own bytes (no copy): the bytes of
    the code before; its plan is ``flat``, a row-padded box's is not (and still copies)."""
    conv_plan._PLANS.clear()
    r = np.random.default_rng(500 + seed)
    insts = _flat_convs(r, int(r.integers(1, 4)))
    ref = _run(insts, seed, "old")
    assert _run(insts, seed, "free") == ref and taken[0] == len(insts)
    plans = [p for p in conv_plan._PLANS.values() if p is not False]
    assert len(plans) == 1 and plans[0].direct and plans[0].flat


def test_c_order():
    """``_c_order`` against numpy's own flag on views with those counts and strides."""
    r = np.random.default_rng(0)
    buf = np.zeros(1 << 16, dtype=np.uint8)
    for _ in range(400):
        counts = tuple(int(v) for v in r.integers(1, 4, int(r.integers(1, 5))))
        strides = tuple(int(v) * 4 for v in r.integers(0, 40, len(counts)))
        if r.random() < 0.5:  # (C strides, some perturbed)
            strides = tuple(int(np.prod(counts[k + 1:])) * 4 for k in range(len(counts)))
        v = np.ndarray(counts, np.float32, buf, 0, strides)
        assert conv_plan._c_order(counts, strides) == v.flags.c_contiguous, (counts, strides)


def _overlapping(which, seed):
    """One conv (from ``_convs``) whose y bytes meet ``which`` ("x", "w" or "bias") in the same
    HBSM: the product cannot be stored in y before those are read."""
    r = np.random.default_rng(seed)
    while True:
        i = _convs(r, 1)[0]
        if i.x.space is Space.HBSM and i.epilogue.bias is not None:
            break
    ep = i.epilogue
    ysz = 4 * i.y.num_elements
    if which == "bias":  # the bias inside y's bytes
        ep = Epilogue(bias=ep.bias.moved(i.tpb, i.y.base + 4 * int(r.integers(0, i.f))),
                      act=ep.act, clamp_lo=ep.clamp_lo, clamp_hi=ep.clamp_hi)
        y = i.y
    else:  # y over x's or w's first bytes
        y = i.y.moved(i.tpb, (i.x if which == "x" else i.w).base + 4 * int(r.integers(0, 3)))
    j = Conv2D(i.tpb, i.x, i.w, y, i.n, i.h, i.width, i.c, i.f, i.kh, i.kw, stride=i.stride,
               pad=i.pad, dilation=i.dilation, accumulate=i.accumulate, epilogue=ep)
    other = {"x": j.x, "w": j.w, "bias": j.epilogue.bias}[which]
    lo = other.base
    assert lo < y.base + ysz and y.base < lo + 4 * other.num_elements  # (they overlap)
    return j


@pytest.mark.parametrize("which", ["x", "w", "bias"])
@pytest.mark.parametrize("seed", range(6))
def test_y_over_an_operand_reads_it_first(which, seed, taken):
    """y's bytes over x's, w's or the bias's: every operand read before y is written, as ``run``
    then ``apply`` (the plan's product goes to a new array, stored at the end)."""
    insts = [_overlapping(which, 40 * seed + len(which))]
    ref = _run(insts, seed, "old")
    assert _run(insts, seed, "free") == ref and taken[0] == 1


# the geometries of ResNet-50's conv blocks (M, K, F): products as large as the models' (several
# of OpenBLAS's K panels); the small ones of the random convs above are a few elements
_R50 = [(224, 147, 64), (56, 64, 64), (56, 576, 64), (112, 32, 64), (56, 64, 256), (56, 256, 64),
        (28, 594, 64), (28, 288, 64), (28, 512, 128), (98, 171, 64), (14, 256, 256),
        (49, 333, 64), (7, 128, 1024), (14, 512, 128), (28, 128, 512), (49, 137, 64)]


@pytest.mark.parametrize("M,K,F", _R50)
def test_the_product_bits_do_not_depend_on_where_the_operands_are(M, K, F):
    """The plan's two changes to the product: a C-ordered box multiplied where it is (a view at
    an offset of the space's bytes, not a copy), and the product written into y's bytes
    (``out=``, a view at an offset) -- numpy makes the same ``cblas_sgemm`` call (row-major, no
    transposes, the same m, n, k and leading dimensions; only the addresses differ, and an
    operand that is not aligned is first copied by numpy itself). Checked here bit for bit on
    ResNet-50's shapes at every 4-byte offset within a cache line, on random floats whose
    summation order shows in the rounding."""
    r = np.random.default_rng(M * K + F)
    a = r.standard_normal((1, M, K)).astype(np.float32)
    w = r.standard_normal((1, K, F)).astype(np.float32)
    want = np.matmul(np.array(a, order="C"), w).view(np.uint32)
    buf = np.zeros(4 * (M * K + K * F + M * F) + 256, dtype=np.uint8)
    for off in range(0, 64, 4):
        av = np.ndarray((1, M, K), np.float32, buf, off)
        av[...] = a
        wv = np.ndarray((1, K, F), np.float32, buf, off + 4 * M * K)
        wv[...] = w
        yv = np.ndarray((1, M, F), np.float32, buf, off + 4 * (M * K + K * F))
        yv[...] = np.nan  # (old bytes: not read)
        assert np.array_equal(np.matmul(av, wv).view(np.uint32), want), off
        np.matmul(av, wv, out=yv)
        assert np.array_equal(yv.view(np.uint32), want), off
