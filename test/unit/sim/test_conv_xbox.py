"""A conv block's x box access made by geometry (``Conv2DExec._box_access``, session 36): the
``(Access, box)`` of the code before -- ``_box_sel``, ``twu.sub_box`` and the whole-x test per
instruction, written out below -- for random geometries, block splits, row-padded x walks,
several instructions of one geometry at other bases and TPBs, and instructions that share x's
levels tuple but differ in one shape field (stride, padding, dilation, kernel, blocks)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from m100.sim import semantics_tcu, twu
from m100.sim.semantics_base import Access
from m100.sim.semantics_tcu import Conv2DExec
from m100.targets.m100.isa import Conv2D, DType, Space, Sync, Walk


def _old_box_access(ex, b):
    """``Conv2DExec._x``'s box access before session 36 (derived per instruction)."""
    i = ex.inst
    sel = ex._box_sel(b)
    sub = None if sel is None else twu.sub_box(i.x, (i.n, i.h, i.width, i.c), sel)
    return (None,) if sub is None else (
        Access(i.x if all(f == 0 and c == n for (f, _, c), n in
                          zip(sel, (i.n, i.h, i.width, i.c))) else sub, i.tpb), sel)


def _conv(r, x=None, **kw):
    """A random conv (``kw`` overrides fields, None: random); ``x`` reused when given (its
    levels shared)."""
    kw = {k: v for k, v in kw.items() if v is not None}
    while True:
        n, h, w, c, f = (int(r.integers(1, 3)), int(r.integers(1, 9)), int(r.integers(1, 9)),
                         int(r.integers(1, 5)), int(r.integers(1, 5)))
        if x is not None:
            n, h, w, c = x.shape
        f = kw.pop("f", f)
        kh, kw_ = int(kw.get("kh", r.choice([1, 2, 3]))), int(kw.get("kw", r.choice([1, 2, 3])))
        stride = kw.get("stride", (int(r.integers(1, 3)), int(r.integers(1, 3))))
        dil = kw.get("dilation", (int(r.integers(1, 3)), int(r.integers(1, 3))))
        pad = kw.get("pad", tuple(int(v) for v in r.integers(0, 3, 4)) if r.random() < 0.6
                     else (0, 0, 0, 0))
        oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w + pad[1] + pad[3] - dil[1] * (kw_ - 1) - 1) // stride[1] + 1
        if oh < 1 or ow < 1:
            continue
        divs = [d for d in range(1, n * oh + 1) if n * oh % d == 0]
        blocks = kw.get("blocks", int(r.choice(divs)))
        if (n * oh) % blocks:
            continue
        if x is None:
            pitch = c + (int(r.integers(1, 3)) if r.random() < 0.4 else 0)
            x = Walk.strided(Space.HBSM, 0, 0, DType.F32, (n, h, w, c),
                             (h * w * pitch, w * pitch, pitch, 1))
        tpb = int(r.integers(0, 4))
        base = int(r.integers(0, 1 << 12)) * 4
        y = Walk.strided(Space.HBSM, tpb, 1 << 16, DType.F32, (n, oh, ow, f))
        wt = Walk.strided(Space.HBSM, tpb, 1 << 17, DType.F32, (kh, kw_, c, f))
        return Conv2D(tpb, x.moved(tpb, base), wt, y, n, h, w, c, f, kh, kw_, stride=stride,
                      pad=pad, dilation=dil, sync=Sync(blocks=blocks))


def _check(inst):
    ex = Conv2DExec(inst, None)
    for b in range(ex.blocks):
        got, want = ex._box_access(b), _old_box_access(ex, b)
        assert got == want, (inst, b)
        if want[0] is not None and want[0].walk is inst.x:
            assert got[0].walk is inst.x  # (all of x: the instruction's own walk)
    return ex


@pytest.mark.parametrize("seed", range(30))
def test_box_access_is_the_old_derivation(seed):
    r = np.random.default_rng(seed)
    semantics_tcu._XBOX.clear()
    first = _conv(r)
    _check(first)
    for _ in range(3):  # the same geometry at other bases and TPBs: one entry, each one's base
        i = first
        _check(dataclasses.replace(i, tpb=(i.tpb + 1) % 4,
                                   x=i.x.moved((i.tpb + 1) % 4, int(r.integers(0, 99)) * 4)))


@pytest.mark.parametrize("seed", range(30))
def test_one_field_changed_with_x_levels_shared(seed):
    """Instructions sharing x's levels tuple that differ in one field ``_box_sel`` reads get
    their own boxes (the table's key has every such field)."""
    r = np.random.default_rng(1000 + seed)
    semantics_tcu._XBOX.clear()
    base = _conv(r)
    _check(base)
    x = base.x
    checked = [0]
    for field in ("stride", "pad", "dilation", "kh", "kw", "blocks"):
        i = None
        for _ in range(50):  # (another value of that field that makes a conv)
            try:
                i = _conv(r, x=x, **{"stride": base.stride, "pad": base.pad,
                                     "dilation": base.dilation, "kh": base.kh, "kw": base.kw,
                                     "blocks": base.sync.blocks, "f": base.f,
                                     field: None})
            except ValueError:  # (no divisor of n * oh: another draw)
                i = None
            if i is not None and i.x.levels is x.levels:
                break
        if i is not None:
            _check(i)
            checked[0] += 1
    assert checked[0] >= 3  # (most fields found another value: the test is not empty)
