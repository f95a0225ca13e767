"""A float convolution block's ``run_free`` by one plan per geometry (``Conv2DExec.run_free``).

What. :func:`run_free` computes and stores block ``b`` of a float32 Conv2D the way
``Conv2DExec._out`` and ``Memory.write_walk`` do -- the same box read into the same zero-padded
scratch (or, for a 1x1 conv whose windows are all inside x, the box itself as the im2col matrix),
the same C-ordered im2col copy, the same ``np.matmul`` of a ``[1, M, K]`` by a ``[1, K, F]`` array
with the same strides (so the same BLAS call and the same bits), the same float epilogue in the
same order (the old output added, then the bias, then relu / clamp, in place), the same bytes
stored -- but with the views built directly from the memory's mappings by byte offsets kept in a
:class:`Plan`, instead of an ``Access``, a view plan and a ``read_walk`` / ``write_walk`` call per
operand. Two copies are not made (session 36): a 1x1 box that is already C-ordered (``Plan.flat``)
is multiplied where it is, and the product and its epilogue are computed in y's bytes
(``np.matmul(..., out=)``) unless y's bytes meet x's, w's or the bias's -- numpy makes the same
``cblas_sgemm`` call either way (row-major, no transposes, the same sizes and leading
dimensions; only the addresses differ), which ``test_conv_plan`` also checks bit for bit on
ResNet-50's product shapes.

Why. ResNet-50 runs 5 880 conv instructions (one block each) of 82 geometries: a call's ~20-40
us of Python and small numpy calls beyond its product were ~2/3 of the convolutions' time in a
first functional run (session 35's profile). What depends on the instruction's shape, its
operands' levels tuples and element types (and not on their base addresses) is derived once per
geometry here, from the first instruction of that geometry, by the same functions the general
path calls; per call only the base addresses are added and the bounds checked.

Preconditions (else :func:`run_free` returns False and the caller takes the general path, which
also raises what it raises): float32 x, w, y (and bias); one group; one block; no requant /
dequant; activation none / relu / clamp; ``twu.STRIDED`` and no negative padding (the box path of
``_out``); x's box a strided view, w, y and the bias contiguous; every space mapped whole and
every byte in range. Postcondition: the memory holds what ``run(b)`` then ``apply`` would write
(``test/unit/sim/test_conv_plan.py`` compares the two on random convs and bytes, y over another
operand's bytes included)."""

from __future__ import annotations

import numpy as np

from m100.targets.m100.isa import Act, DType

from . import twu
from .memory import _view_plan_rel
from .semantics_base import quiet

_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)
_ZERO = np.float32(0)  # (relu's bound: a float32 0 as the int 0 was cast to; no cast per call)

#: Plans by geometry key (:func:`_key`) -> :class:`Plan` (or False: the general path).
_PLANS: dict = {}
_MAX = 1 << 12  # entries before the table is emptied (a process running many programs)


class Plan:
    """One conv geometry's constants (see the module doc). ``levels``: the operands' levels
    tuples the key names by identity (held, so their ids name no other object)."""
    __slots__ = ("levels", "direct", "flat", "xlo", "xfirst", "xend", "xcounts", "xstrides",
                 "counts", "cshape", "M", "K", "F", "wstart", "wbytes", "ystart", "ybytes", "bstart",
                 "bbytes", "bcount", "pkey", "pshape", "sl", "wshape", "wstrides", "sel",
                 "shape")


def _key(i, ep) -> tuple:
    bias = ep.bias
    return (id(i.x.levels), id(i.w.levels), id(i.y.levels),
            None if bias is None else (id(bias.levels), bias.dtype),
            i.x.dtype, i.w.dtype, i.y.dtype, i.n, i.h, i.width, i.c, i.f, i.kh, i.kw, i.stride,
            i.pad, i.dilation, i.groups, i.accumulate, ep.act, i.sync.blocks, twu.STRIDED)


def _contig(levels: tuple) -> tuple | None:
    """(first byte, byte count) of float32 beats that are contiguous, relative to the base."""
    rel = twu.per_levels("view-plan", levels, _view_plan_rel, 4, twu.STRIDED)
    return (rel[1], rel[2]) if rel is not None and rel[0] else None


def _c_order(counts: tuple, strides: tuple) -> bool:
    """Whether float32 elements of ``counts`` at byte ``strides`` are C-ordered and contiguous
    (the strides of the dims of one element do not matter)."""
    want = 4
    for c, s in zip(reversed(counts), reversed(strides)):
        if c != 1 and s != want:
            return False
        want *= c
    return True


def _make(ex, b: int):
    """The plan of ``ex``'s geometry, or False when the preconditions do not hold."""
    i = ex.inst
    ep = i.epilogue
    f32 = DType.F32
    if not twu.STRIDED or min(i.pad) < 0 or i.groups != 1 or ex.blocks != 1 \
            or i.x.dtype is not f32 or i.w.dtype is not f32 or i.y.dtype is not f32 \
            or ep.requant is not None or ep.dequant is not None \
            or ep.act not in (Act.NONE, Act.RELU, Act.CLAMP) \
            or (ep.bias is not None and ep.bias.dtype is not f32):
        return False
    integer, dtype, M, g, cg, fg, kk, plans = ex._consts()
    if integer or dtype != _F32:
        return False
    xa, box = ex._x(b)
    if not isinstance(box, tuple) or xa.offsets is not None or xa.walk.base != i.x.base:
        return False
    rel = twu.per_levels("view-plan", xa.walk.levels, _view_plan_rel, 4, twu.STRIDED)
    if rel is None:
        return False
    p = Plan()
    p.levels = (i.x.levels, i.w.levels, i.y.levels, None if ep.bias is None else ep.bias.levels)
    counts = tuple(c for _, _, c in box)
    if rel[0]:  # contiguous beats: the box is a C-ordered [n, h, w, c] block of them
        p.xlo, p.xfirst, p.xend = rel[1], rel[1], rel[1] + rel[2]
        p.xcounts, p.xstrides = counts, tuple(
            int(np.prod(counts[k + 1:], dtype=np.int64)) * 4 for k in range(len(counts)))
        if rel[2] != 4 * int(np.prod(counts, dtype=np.int64)):
            return False
    else:  # the box's levels view, reshaped to the box's counts when that is a view
        _, lo, first, end, lcounts, lstrides = rel
        probe = np.ndarray(lcounts, _F32, np.zeros(end - lo + 8, dtype=np.uint8), first - lo,
                           lstrides)
        v = probe.reshape(counts)
        if not np.may_share_memory(v, probe):
            return False
        p.xlo, p.xfirst, p.xend, p.xcounts, p.xstrides = lo, first, end, counts, v.strides
    p.counts = counts
    p.M, p.K, p.F = M, kk, fg
    w = _contig(i.w.levels)
    y = _contig(i.y.levels)
    if w is None or y is None or w[1] != 4 * kk * fg or y[1] != 4 * M * i.f:
        return False
    p.wstart, p.wbytes = w
    p.ystart, p.ybytes = y
    p.bstart = p.bbytes = p.bcount = None
    if ep.bias is not None:
        bb = _contig(ep.bias.levels)
        if bb is None:
            return False
        p.bstart, p.bbytes = bb
        p.bcount = bb[1] // 4
    pl = plans.get(b)
    if pl is None:
        pl = plans[b] = ex._shared_box_plan(b, box, dtype)
    p.direct = pl[0]
    p.flat = False
    if pl[0]:
        p.shape = pl[1]
        p.flat = _c_order(counts, p.xstrides) and int(np.prod(counts, dtype=np.int64)) == M * kk
    else:
        _, pc, p.sl, p.pkey, p.pshape, p.wshape, (sh, sw, dh, dw), p.sel, p.shape = pl
        if pc != counts:
            return False
        p.wstrides = (sh, sw, dh, dw)
    return p


def run_free(ex, b: int) -> bool:
    """Store block ``b`` of float conv executor ``ex`` (see the module doc); False when the
    preconditions do not hold (nothing was written: the caller takes the general path)."""
    i = ex.inst
    ep = i.epilogue
    key = _key(i, ep)
    p = _PLANS.get(key)
    if p is None:
        # (a plan holds the levels tuples its key names by id: while it is in the table no other
        # tuple has those ids, so a key found names the same tuples)
        if len(_PLANS) >= _MAX:
            _PLANS.clear()
        p = _PLANS[key] = _make(ex, b)
    if p is False:
        return False
    mem = ex.mem
    tpb = i.tpb
    x, w, y = i.x, i.w, i.y
    xsp = x.space
    xs = mem.space(xsp, tpb)
    ws = xs if w.space is xsp else mem.space(w.space, tpb)
    ys = xs if y.space is xsp else mem.space(y.space, tpb)
    base = x.base
    wlo = w.base + p.wstart
    ylo = y.base + p.ystart
    yhi = ylo + p.ybytes
    if not (xs.whole and ws.whole and ys.whole) or base + p.xlo < 0 or base + p.xend > xs.size \
            or wlo < 0 or wlo + p.wbytes > ws.size or ylo < 0 or yhi > ys.size:
        return False
    bias = ep.bias
    if bias is not None:
        bs = mem.space(bias.space, bias.tpb)
        blo = bias.base + p.bstart
        if not bs.whole or blo < 0 or blo + p.bbytes > bs.size:
            return False
    M, K, F = p.M, p.K, p.F
    if p.flat:  # 1x1, every window inside x, the box C-ordered: the box IS the [M, K] matrix
        cols = np.ndarray((1, M, K), _F32, xs.buf, base + p.xfirst)
    else:
        # x's box in [n, h, w, c] order (read-only: a view of the memory)
        xbox = np.ndarray(p.xcounts, _F32, xs.buf, base + p.xfirst, p.xstrides)
        if p.direct:  # 1x1, every window inside x: the box is the im2col matrix
            cols = np.array(xbox, dtype=_F32, order="C").reshape(1, M, K)
        else:
            scratch = mem.scratch
            got = scratch.get(p)
            if got is None:
                xp = scratch.get(p.pkey)
                if xp is None:
                    xp = scratch[p.pkey] = np.zeros(p.pshape, dtype=_F32)
                s = xp.strides
                sh, sw, dh, dw = p.wstrides
                win = np.ndarray(p.wshape, _F32, xp, 0,
                                 (s[0], sh * s[1], sw * s[2], dh * s[1], dw * s[2], s[3]))
                got = scratch[p] = (xp[p.sl], win[p.sel])
            got[0][...] = xbox
            cols = got[1].reshape(p.shape).reshape(1, M, K)
    W = np.ndarray((1, K, F), _F32, ws.buf, wlo)
    ybuf = ys.buf
    # the product and the epilogue straight into y's bytes, unless y's bytes meet x's, w's or
    # the bias's (read after the product is stored): then into a new array, stored at the end
    into = not ((ys is xs and ylo < base + p.xend and base + p.xlo < yhi)
                or (ys is ws and ylo < wlo + p.wbytes and wlo < yhi)
                or (bias is not None and ys is bs and ylo < blo + p.bbytes and blo < yhi))
    with quiet():
        if into:
            acc = np.ndarray((1, M, F), _F32, ybuf, ylo)
            if i.accumulate:
                np.add(np.matmul(cols, W), acc, out=acc)
            else:
                np.matmul(cols, W, out=acc)
        else:
            acc = np.matmul(cols, W)
            if i.accumulate:
                np.add(acc, np.ndarray((1, M, F), _F32, ybuf, ylo), out=acc)
        if bias is not None:
            np.add(acc, np.ndarray((p.bcount,), _F32, bs.buf, blo), out=acc)
        act = ep.act
        if act is Act.RELU:
            np.maximum(acc, _ZERO, out=acc)
        elif act is Act.CLAMP:
            np.clip(acc, np.float32(ep.clamp_lo), np.float32(ep.clamp_hi), out=acc)
    mem.writes += 1
    if not into:
        ybuf[ylo:yhi] = acc.reshape(-1).view(_U8)
    return True
