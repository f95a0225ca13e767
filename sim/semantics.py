"""Functional semantics of every instruction kind, one block at a time, vectorized with numpy.

Each instruction gets an :class:`Exec` that knows, for block ``b`` of its ``sync.blocks``:

* ``reads(b)`` / ``writes(b)``: the operand accesses (walk, TPB, element offsets) -- the byte sets the
  race checker compares;
* ``run(b)``: gather the block's inputs from :class:`~m100.sim.memory.Memory`, compute, and return
  the pending writes (applied by the engine when the block's timing ends, so a reader that overlaps a
  writer in time sees the old bytes, as in hardware).

How blocks split the work (the ISA docstrings): MatMul splits the ``m`` rows of A and C; Conv2D the
``n * oh`` output rows (reading only the input rows their windows touch); CvuPipeline splits
``out_shape[0]``: every input of the same rank whose leading dimension equals ``out_shape[0]`` is
sliced the same way, other inputs are read whole, and the pipeline is evaluated per block (a stage
reducing along axis 0 therefore reduces within the block); Copy/Fill/Broadcast/Dma split the flat
element sequence; CsuCall is one block.

Arithmetic (``docs/isa.md`` and the ``isa.py`` docstrings):

* integer TCU: i8 (or i4) products accumulate exactly; the accumulator (+ the old C if
  ``accumulate``, + bias) wraps to int32; activation (relu/clamp) on int32; then requantization
  ``clamp(((x * mult + round) >> shift) + zp)`` in int64 arithmetic. The products are computed with a
  BLAS matmul in float32 when every partial sum fits its 24-bit mantissa (i8 x i8, k <= 1024),
  float64 otherwise (exact while ``k * 2**14 < 2**53``).
* float TCU: operands as float32, ``np.matmul`` in float32, then + old C, + bias, activation in f32 and
  one rounding to the output type (:mod:`m100.targets.m100.numerics`).
* CVU: two lanes. Integer inputs feed the integer lane (exact int64 in numpy; every stage result
  must fit i32, else a run-time fault; division rounds toward zero, by zero faults), float inputs
  the float lane (float32); a stage mixing both lanes converts to float (f32, round to nearest
  even); comparisons give integer 0/1; ``ftoi``/``itof`` convert explicitly. The last stage's
  result is converted once to the output type (round to nearest even, saturating).
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import numpy as np

from m100.errors import M100Error
from m100.targets.m100 import numerics
from m100.targets.m100.isa import (Act, Broadcast, Conv2D, Copy, CsuCall, CvuOp, CvuPipeline,
                                   DType, Dma, Fill, Instruction, MatMul, RefKind, Routine, Space,
                                   Walk, tpbs_of)

from .memory import Memory
from . import twu
from .twu import walk_block

#: True while a simulation runs under ``np.errstate(all="ignore")`` (:func:`quiet_run`): the
#: per-operation contexts of :func:`quiet` (a ContextVar set each) are then no-ops. Floating-point
#: flags never change values, only whether numpy warns.
_QUIET = False
_NULL = contextlib.nullcontext()


def quiet(**kw):
    """``np.errstate(**kw)`` (default all="ignore"), or nothing inside :func:`quiet_run`."""
    return _NULL if _QUIET else np.errstate(**(kw or {"all": "ignore"}))


@contextlib.contextmanager
def quiet_run():
    """No floating-point warnings for the whole block (one context for a whole simulation)."""
    global _QUIET
    prev = _QUIET
    with np.errstate(all="ignore"):
        _QUIET = True
        try:
            yield
        finally:
            _QUIET = prev


class SimError(M100Error):
    """A run-time fault of the simulated program (e.g. a CSU gather index out of range)."""


@dataclass
class Access:
    """Elements ``offsets`` (None: all) of ``walk``, in the space of TPB ``tpb``."""
    walk: Walk
    tpb: int
    offsets: np.ndarray | None = None

    def elem_offsets(self) -> np.ndarray:
        return self.walk.offsets() if self.offsets is None else self.offsets

    @property
    def size(self) -> int:
        """Elements accessed."""
        return self.walk.num_elements if self.offsets is None else self.offsets.size


@dataclass
class PendingWrite:
    access: Access
    values: np.ndarray


def _rows(walk: Walk, shape0: int, blocks: int, b: int) -> np.ndarray | None:
    """Element offsets of block ``b`` when the walk's logical leading dim ``shape0`` is split."""
    if blocks == 1:
        return None
    off = walk_offsets(walk)
    per = off.size // blocks
    return off[b * per:(b + 1) * per]


@functools.lru_cache(maxsize=256)
def walk_offsets(walk: Walk) -> np.ndarray:
    """``walk.offsets()``, computed once per walk (read-only: shared by every block and run)."""
    off = walk.offsets()
    off.flags.writeable = False
    return off


def _block(w: Walk, tpb: int, blocks: int, b: int) -> Access:
    """Block ``b`` of ``blocks`` equal chunks of the beats of ``w``: a sub-walk when the chunk is a
    box (reads/writes become strided views), else the chunk's element offsets."""
    if blocks == 1:
        return Access(w, tpb)
    sub = walk_block(w, blocks, b)
    if sub is not None:
        return Access(sub, tpb)
    return Access(w, tpb, _rows(w, 0, blocks, b))


def _tpb_of(w: Walk) -> int:
    return w.tpb if w.space is Space.HBSM else 0


class Exec:
    """Base executor: subclasses define reads/writes/run for one instruction kind."""

    def __init__(self, inst: Instruction, mem: Memory | None):
        self.inst = inst
        self.mem = mem
        self.blocks = inst.sync.blocks

    def reads(self, b: int) -> list[Access]:
        raise NotImplementedError

    def writes(self, b: int) -> list[Access]:
        raise NotImplementedError

    def run(self, b: int) -> list[PendingWrite]:
        raise NotImplementedError

    def read(self, a: Access, copy: bool = True) -> np.ndarray:
        """The values of ``a``; ``copy=False``: maybe a read-only view of the memory, for values
        that are computed with at once (never for values returned as a pending write)."""
        assert self.mem is not None
        return self.mem.read_walk(a.walk, tpb=a.tpb, offsets=a.offsets, copy=copy)

    def apply(self, writes: list[PendingWrite]) -> None:
        assert self.mem is not None
        for w in writes:
            self.mem.write_walk(w.access.walk, w.values, tpb=w.access.tpb, offsets=w.access.offsets)


# ----------------------------------------------------------------------------------------------
# TCU
# ----------------------------------------------------------------------------------------------
def _act(x: np.ndarray, act: Act, lo: float, hi: float, integer: bool) -> np.ndarray:
    if act is Act.NONE:
        return x
    if act is Act.RELU:
        return np.maximum(x, 0).astype(x.dtype)
    if act is Act.CLAMP:
        if integer:  # bounds rounded inwards, then limited to the int32 accumulator's range
            i32 = (-(1 << 31), (1 << 31) - 1)
            lo_i = i32[0] if lo == -math.inf else min(max(math.ceil(lo), i32[0]), i32[1])
            hi_i = i32[1] if hi == math.inf else min(max(math.floor(hi), i32[0]), i32[1])
            return np.clip(x.astype(np.int64), lo_i, hi_i).astype(x.dtype)
        return np.clip(x, np.float32(lo), np.float32(hi)).astype(x.dtype)
    return cvu_unary(_ACT_TO_CVU[act], x)


_ACT_TO_CVU = {Act.GELU: CvuOp.GELU, Act.SILU: CvuOp.SILU, Act.SIGMOID: CvuOp.SIGMOID,
               Act.TANH: CvuOp.TANH}


def requantize(acc: np.ndarray, mult, shift, zp: int, qmin: int, qmax: int) -> np.ndarray:
    """int32 accumulator -> int8 by the ISA's Requant definition (vectorized, int64 arithmetic)."""
    p = acc.astype(np.int64) * np.asarray(mult, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    rnd = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    q = ((p + rnd) >> s) + zp
    return np.clip(q, qmin, qmax).astype(np.int8)


def _axis_set(out_idx: np.ndarray, stride: int, pad: int, k: int, dil: int,
              size: int) -> tuple[int, int, int] | None:
    """The input indices (along one axis) that the windows of outputs ``out_idx`` touch, as
    (first, step, count) when they form an arithmetic progression, else None."""
    ih = ((out_idx * stride - pad)[:, None] + (np.arange(k) * dil)[None, :]).ravel()
    v = np.flatnonzero(np.bincount(ih[(ih >= 0) & (ih < size)], minlength=size))
    if v.size == 0:
        return None
    step = int(v[1] - v[0]) if v.size > 1 else 1
    if v.size > 2 and not np.all(np.diff(v) == step):
        return None
    return int(v[0]), step, int(v.size)


@functools.lru_cache(maxsize=4096)
def _conv_box_sel(n, h, w, c, kh, kw, stride, pad, dilation, oh, ow, rows, b):
    """``Conv2DExec._box_sel`` by the conv's geometry (shared by the convs of one shape)."""
    r0, r1 = b * rows, (b + 1) * rows
    n0, n1 = r0 // oh, (r1 - 1) // oh
    if n1 > n0 and (r0 % oh or r1 % oh):
        return None  # images with different row sets
    oy = np.arange(r0 - n0 * oh, r1 - n0 * oh) if n1 == n0 else np.arange(oh)
    rs = _axis_set(oy, stride[0], pad[0], kh, dilation[0], h)
    cs = _axis_set(np.arange(ow), stride[1], pad[1], kw, dilation[1], w)
    if rs is None or cs is None:
        return None
    return (n0, 1, n1 - n0 + 1), rs, cs, (0, 1, c)


class TcuExec(Exec):
    """Shared epilogue and product for MatMul and Conv2D."""

    def _epilogue(self, prod: np.ndarray, old: np.ndarray | None, out: Walk, nchan: int,
                  integer: bool) -> np.ndarray:
        ep = self.inst.epilogue
        if integer:
            acc = prod.astype(np.int64)
            if old is not None:
                acc = acc + old.astype(np.int64)
            if ep.bias is not None:
                acc = acc + self.read(Access(ep.bias, ep.bias.tpb), False).astype(np.int64)
            acc = acc.astype(np.int32)  # two's complement wrap, like the hardware accumulator
            acc = _act(acc, ep.act, ep.clamp_lo, ep.clamp_hi, True)
            rq = ep.requant
            if rq is None:
                return acc
            if rq.per_channel is not None:
                pc = self.read(Access(rq.per_channel, rq.per_channel.tpb), False).reshape(nchan, 2)
                mult, shift = pc[:, 0], pc[:, 1]
                if np.any((shift < 0) | (shift > 63)):
                    raise SimError(f"{self.inst.MNEMONIC} on TPB {self.inst.tpb}: per-channel "
                                   "requant shift outside [0, 63]")
            else:
                mult, shift = rq.multiplier, rq.shift
            return requantize(acc, mult, shift, rq.zero_point, rq.qmin, rq.qmax)
        with quiet():  # (no copies of float32 values: prod is the block's own array)
            acc = prod.astype(np.float32, copy=False)
            if old is not None:
                acc = acc + old.astype(np.float32, copy=False)
            if ep.bias is not None:
                acc = acc + self.read(Access(ep.bias, ep.bias.tpb), False).astype(np.float32,
                                                                                   copy=False)
            return _act(acc, ep.act, ep.clamp_lo, ep.clamp_hi, False).astype(np.float32,
                                                                              copy=False)

    def _epi_reads(self) -> list[Access]:
        ep = self.inst.epilogue
        out = []
        if ep.bias is not None:
            out.append(Access(ep.bias, ep.bias.tpb))
        if ep.requant is not None and ep.requant.per_channel is not None:
            out.append(Access(ep.requant.per_channel, ep.requant.per_channel.tpb))
        return out


def _operand(vals: np.ndarray, integer: bool, k: int = 1 << 30, b_bits: int = 8) -> np.ndarray:
    """Operands for a BLAS product. Integer products are exact in floating point while every
    partial sum fits the mantissa: float32 when ``k * 128 * 2**(b_bits-1) <= 2**24`` (i8 x i8 with
    k <= 1024), float64 otherwise (exact for k < 2**39). Float operands compute in float32."""
    if not integer:
        return vals.astype(np.float32, copy=False)
    exact32 = k * 128 * (1 << (b_bits - 1)) <= 1 << 24
    return vals.astype(np.float32 if exact32 else np.float64, copy=False)


class MatMulExec(TcuExec):
    inst: MatMul

    def _a(self, b):
        i = self.inst
        return _block(i.a, i.tpb, self.blocks, b)

    def _c(self, b):
        i = self.inst
        return _block(i.c, i.tpb, self.blocks, b)

    def reads(self, b):
        i = self.inst
        r = [self._a(b), Access(i.b, i.tpb)] + self._epi_reads()
        if i.scale is not None:
            r.append(Access(i.scale, i.tpb))
        if i.accumulate and i.acc is not None:
            r.append(_block(i.acc, i.tpb, self.blocks, b))
        elif i.accumulate:
            r.append(self._c(b))
        return r

    def writes(self, b):
        return [self._c(b)]

    def run(self, b):
        i = self.inst
        rows = i.m // self.blocks
        integer = i.a.dtype.is_int
        bb = i.b.dtype.bits
        A = _operand(self.read(self._a(b), False), integer, i.k, bb).reshape(rows, i.k)
        B = _operand(self.read(Access(i.b, i.tpb), False), integer, i.k, bb).reshape(i.k, i.n)
        if i.scale is not None:  # i4 weights dequantized on the fly, blockwise along K
            s = self.read(Access(i.scale, i.tpb), False).astype(np.float32).reshape(
                i.k // i.block, i.n)
            with quiet():  # q * s is exact in f32 (|q| <= 8): one rounding
                B = numerics.convert(B * np.repeat(s, i.block, axis=0), i.a.dtype) \
                    .astype(np.float32)
        with quiet():
            prod = A @ B
        old = None
        if i.accumulate:
            old = self.read(_block(i.acc, i.tpb, self.blocks, b) if i.acc is not None
                            else self._c(b), False).reshape(rows, i.n)
        out = self._epilogue(prod, old, i.c, i.n, integer)
        return [PendingWrite(self._c(b), out)]


class Conv2DExec(TcuExec):
    inst: Conv2D

    def __init__(self, inst, mem):
        super().__init__(inst, mem)
        i = inst
        self.oh, self.ow = i.out_hw
        self.rows = i.n * self.oh // self.blocks

    _last: tuple[int, np.ndarray] | None = None  # the last block's index (reads, then run)

    def _index(self, b: int) -> np.ndarray:
        """[rows*ow, kh, kw, c] flat indices into x's logical [n,h,w,c] (-1 = padding)."""
        if self._last is not None and self._last[0] == b:
            return self._last[1]
        idx = self._make_index(b)
        idx.flags.writeable = False
        self._last = (b, idx)
        return idx

    def _make_index(self, b: int) -> np.ndarray:
        i = self.inst
        (sh, sw), (dh, dw) = i.stride, i.dilation
        pt, pl = i.pad[0], i.pad[1]
        r = np.arange(b * self.rows, (b + 1) * self.rows)
        ni, oy = r // self.oh, r % self.oh
        ox = np.arange(self.ow)
        ky, kx, ci = np.arange(i.kh), np.arange(i.kw), np.arange(i.c)
        ih = (oy * sh - pt)[:, None, None, None, None] + (ky * dh)[None, None, :, None, None]
        iw = (ox * sw - pl)[None, :, None, None, None] + (kx * dw)[None, None, None, :, None]
        valid = (ih >= 0) & (ih < i.h) & (iw >= 0) & (iw < i.width)
        idx = ((ni[:, None, None, None, None] * i.h + ih) * i.width + iw) * i.c \
            + ci[None, None, None, None, :]
        idx = np.where(valid, idx, -1)
        return idx.reshape(self.rows * self.ow, i.kh, i.kw, i.c)

    _last_x: tuple[int, Access, np.ndarray] | None = None

    def _touched(self, b: int) -> np.ndarray:
        """Sorted flat indices into x's logical [n,h,w,c] of every element block ``b`` reads:
        per image, the input rows of its output rows' windows times the input columns of every
        window (the two axes are independent), every channel; no [M, kh, kw, c] index array."""
        i = self.inst
        (sh, sw), (dh, dw) = i.stride, i.dilation
        pt, pl = i.pad[0], i.pad[1]
        r = np.arange(b * self.rows, (b + 1) * self.rows)
        ni, oy = r // self.oh, r % self.oh
        iw = ((np.arange(self.ow) * sw - pl)[:, None] + (np.arange(i.kw) * dw)[None, :]).ravel()
        cols = np.flatnonzero(np.bincount(iw[(iw >= 0) & (iw < i.width)], minlength=i.width))
        parts = []
        for n in np.unique(ni):
            ih = ((oy[ni == n] * sh - pt)[:, None] + (np.arange(i.kh) * dh)[None, :]).ravel()
            rows = np.flatnonzero(np.bincount(ih[(ih >= 0) & (ih < i.h)], minlength=i.h))
            parts.append((((n * i.h + rows)[:, None, None] * i.width + cols[None, :, None]) * i.c
                          + np.arange(i.c)[None, None, :]).ravel())
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _box_sel(self, b: int) -> tuple[tuple[int, int, int], ...] | None:
        """The elements block ``b`` reads as a box of x's logical [n,h,w,c] (every image of the
        block has the same input rows, rows and columns are arithmetic progressions): (first,
        step, count) per dim; else None. Equal to :meth:`_touched` when not None (tested)."""
        i = self.inst
        return _conv_box_sel(i.n, i.h, i.width, i.c, i.kh, i.kw, i.stride, i.pad, i.dilation,
                             self.oh, self.ow, self.rows, b)

    def _x(self, b: int, idx: np.ndarray | None = None) -> tuple[Access, np.ndarray | tuple]:
        """The access of x block ``b`` reads and where its values go in x's logical [n,h,w,c]:
        sorted flat indices, or a (first, step, count) box per dim (:meth:`_box_sel`)."""
        i = self.inst
        if self._last_x is not None and self._last_x[0] == b:
            return self._last_x[1], self._last_x[2]
        if idx is None and twu.STRIDED:
            sel = self._box_sel(b)
            sub = None if sel is None else twu.sub_box(i.x, (i.n, i.h, i.width, i.c), sel)
            if sub is not None:
                whole = all(f == 0 and c == n for (f, _, c), n in
                            zip(sel, (i.n, i.h, i.width, i.c)))
                acc = Access(i.x if whole else sub, i.tpb)
                self._last_x = (b, acc, sel)
                return acc, sel
        if idx is not None or not twu.STRIDED:
            if idx is None:
                idx = self._index(b)
            mask = np.zeros(i.n * i.h * i.width * i.c, dtype=bool)  # sorted unique, no sort
            mask[idx[idx >= 0]] = True
            uniq = np.flatnonzero(mask)
        else:
            uniq = self._touched(b)
        if twu.STRIDED and uniq.size == i.x.num_elements:  # every element: the whole walk
            acc = Access(i.x, i.tpb)
        else:
            acc = Access(i.x, i.tpb, walk_offsets(i.x)[uniq])
        self._last_x = (b, acc, uniq)
        return acc, uniq

    def _padded(self, dtype) -> tuple[np.ndarray, np.ndarray]:
        """x zero-padded to [n, hp, wp, c] and its [n, h, w, c] interior (a view).

        The buffer is the run's scratch buffer of that shape and type (``Memory.scratch``),
        shared by every conv block with the same padded shape *and* interior (the key has both):
        its padding is never written (zero), and a block writes every interior element its
        windows read (:meth:`_x`) before reading them, so values another block left there are
        never read."""
        i = self.inst
        (sh, sw), (dh, dw) = i.stride, i.dilation
        pt, pl = i.pad[0], i.pad[1]
        hp = max(pt + i.h, (self.oh - 1) * sh + (i.kh - 1) * dh + 1)
        wp = max(pl + i.width, (self.ow - 1) * sw + (i.kw - 1) * dw + 1)
        key = ("conv-pad", i.n, hp, wp, i.c, pt, pl, i.h, i.width, np.dtype(dtype).char)
        scratch = self.mem.scratch if self.mem is not None else {}
        xp = scratch.get(key)
        if xp is None:
            xp = scratch[key] = np.zeros((i.n, hp, wp, i.c), dtype=dtype)
        return xp, xp[:, pt:pt + i.h, pl:pl + i.width, :]

    def _windows(self, b: int, xp: np.ndarray) -> np.ndarray:
        """[rows*ow, kh, kw, c] windows of block ``b`` as a strided view of the zero-padded x
        ``xp`` (:meth:`_padded`), copied once; no index array."""
        i = self.inst
        (sh, sw), (dh, dw) = i.stride, i.dilation
        s = xp.strides
        win = np.ndarray((i.n, self.oh, self.ow, i.kh, i.kw, i.c), dtype=xp.dtype, buffer=xp,
                         strides=(s[0], sh * s[1], sw * s[2], dh * s[1], dw * s[2], s[3]))
        r0, r1 = b * self.rows, (b + 1) * self.rows
        shape = (self.rows * self.ow, i.kh, i.kw, i.c)
        if r0 % self.oh == 0 and r1 % self.oh == 0:  # whole images
            return win[r0 // self.oh:r1 // self.oh].reshape(shape)
        if r0 // self.oh == (r1 - 1) // self.oh:  # rows of one image
            n0 = r0 // self.oh
            return win[n0, r0 - n0 * self.oh:r1 - n0 * self.oh].reshape(shape)
        r = np.arange(r0, r1)
        return win[r // self.oh, r % self.oh].reshape(shape)

    def _y(self, b):
        i = self.inst
        return _block(i.y, i.tpb, self.blocks, b)

    def reads(self, b):
        i = self.inst
        r = [self._x(b)[0], Access(i.w, i.tpb)] + self._epi_reads()
        if i.accumulate:
            r.append(self._y(b))
        return r

    def writes(self, b):
        return [self._y(b)]

    def run(self, b):
        i = self.inst
        integer = i.x.dtype.is_int
        idx = self._index(b) if not twu.STRIDED or min(i.pad) < 0 else None
        xa, uniq = self._x(b, idx)
        g, cg, fg = i.groups, i.c // i.groups, i.f // i.groups
        kk, bb = i.kh * i.kw * cg, i.w.dtype.bits
        dtype = _operand(np.zeros(0), integer, kk, bb).dtype
        M = self.rows * self.ow
        if idx is None:  # x's touched elements into a zero-padded x, windows as a strided view
            xp, x4 = self._padded(dtype)
            if isinstance(uniq, tuple):  # a box of x's logical [n,h,w,c]
                sl = tuple(slice(f, f + s * (c - 1) + 1, s) for f, s, c in uniq)
                x4[sl] = self.read(xa, False).reshape(tuple(c for _, _, c in uniq))
            elif xa.offsets is None:  # every element (uniq is 0 .. n-1)
                x4[...] = self.read(xa, False).reshape(x4.shape)
            else:
                x4[np.unravel_index(uniq, x4.shape)] = self.read(xa, False)
            cols = self._windows(b, xp)
        else:
            xfull = np.zeros(i.n * i.h * i.width * i.c + 1, dtype=dtype)
            if xa.offsets is None:  # every element (uniq is 0 .. n-1)
                xfull[:-1] = self.read(xa, False)
            else:
                xfull[uniq] = self.read(xa, False)
            cols = xfull[idx]  # [M, kh, kw, c]; index -1 reads the trailing zero
        cols = cols.reshape(M, i.kh, i.kw, g, cg).transpose(3, 0, 1, 2, 4).reshape(
            g, M, i.kh * i.kw * cg)
        W = _operand(self.read(Access(i.w, i.tpb), False), integer, kk, bb).reshape(
            i.kh, i.kw, cg, g, fg)
        W = W.transpose(3, 0, 1, 2, 4).reshape(g, i.kh * i.kw * cg, fg)
        with quiet():
            prod = np.matmul(cols, W).transpose(1, 0, 2).reshape(M, i.f)
        old = self.read(self._y(b), False).reshape(M, i.f) if i.accumulate else None
        out = self._epilogue(prod, old, i.y, i.f, integer)
        return [PendingWrite(self._y(b), out)]


# ----------------------------------------------------------------------------------------------
# CVU
# ----------------------------------------------------------------------------------------------
def cvu_unary(op: CvuOp, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    with quiet():
        if op is CvuOp.COPY:
            return x
        if op is CvuOp.NEG:
            return -x
        if op is CvuOp.ABS:
            return np.abs(x)
        if op is CvuOp.EXP:
            return np.exp(x)
        if op is CvuOp.LOG:
            return np.log(x)
        if op is CvuOp.SQRT:
            return np.sqrt(x)
        if op is CvuOp.RSQRT:
            return np.float32(1) / np.sqrt(x)
        if op is CvuOp.RECIP:
            return np.float32(1) / x
        if op is CvuOp.RELU:
            return np.maximum(x, np.float32(0))
        if op is CvuOp.GELU:
            return (np.float32(0.5) * x * (np.float32(1) + numerics.erf(
                x.astype(np.float64) / math.sqrt(2.0)).astype(np.float32))).astype(np.float32)
        if op is CvuOp.SILU:
            return x / (np.float32(1) + np.exp(-x))
        if op is CvuOp.SIGMOID:
            return np.float32(1) / (np.float32(1) + np.exp(-x))
        if op is CvuOp.TANH:
            return np.tanh(x)
        if op is CvuOp.SQUARE:
            return x * x
        if op is CvuOp.ERF:
            return numerics.erf(x).astype(np.float32)
        if op is CvuOp.FLOOR:
            return np.floor(x)
        if op is CvuOp.CEIL:
            return np.ceil(x)
        if op is CvuOp.SIN:
            return np.sin(x)
        if op is CvuOp.COS:
            return np.cos(x)
        if op is CvuOp.ATAN:
            return np.arctan(x)
        if op is CvuOp.SIGN:
            return np.sign(x)
        if op is CvuOp.ROUND:
            return np.round(x)  # numpy rounds half to even
    raise SimError(f"cvu: {op.name.lower()} is not a unary op")


_BINARY = {CvuOp.ADD: np.add, CvuOp.SUB: np.subtract, CvuOp.MUL: np.multiply,
           CvuOp.DIV: np.divide, CvuOp.MAX: np.maximum, CvuOp.MIN: np.minimum, CvuOp.POW: np.power}
_CMP = {CvuOp.CMP_GT: np.greater, CvuOp.CMP_GE: np.greater_equal, CvuOp.CMP_EQ: np.equal}
_REDUCE = {CvuOp.RSUM: np.sum, CvuOp.RMAX: np.max, CvuOp.RMIN: np.min, CvuOp.RMEAN: np.mean,
           CvuOp.RPROD: np.prod}


def _pool(x: np.ndarray, ip: tuple[int, ...], is_max: bool) -> np.ndarray:
    kh, kw, sh, sw, pt, pl, pb, pr = ip[:8]
    include_pad = len(ip) > 8 and ip[8] != 0
    n, h, w, c = x.shape
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w + pl + pr - kw) // sw + 1
    ih = (np.arange(oh) * sh - pt)[:, None, None, None] + np.arange(kh)[None, None, :, None]
    iw = (np.arange(ow) * sw - pl)[None, :, None, None] + np.arange(kw)[None, None, None, :]
    valid = (ih >= 0) & (ih < h) & (iw >= 0) & (iw < w)  # [oh, ow, kh, kw]
    win = x[:, np.clip(ih, 0, h - 1), np.clip(iw, 0, w - 1), :]  # [n, oh, ow, kh, kw, c]
    v = valid[None, :, :, :, :, None]
    if is_max:
        return np.where(v, win, -np.inf).max(axis=(3, 4)).astype(np.float32)
    s = np.where(v, win, 0).sum(axis=(3, 4), dtype=np.float32)
    cnt = np.float32(kh * kw) if include_pad else valid.sum(axis=(2, 3)).astype(np.float32)[
        None, :, :, None]
    return (s / cnt).astype(np.float32)


# The CVU has two lanes (docs/isa.md, "CVU lanes"): a float lane (f32) and an integer lane
# (exact two's complement, every stage result must fit i32 else a run-time fault). A stage
# computes in the integer lane iff every non-immediate argument it combines is integer-typed
# and every immediate is integral; comparisons yield integer 0/1 masks.
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_INT_UNARY = numerics.CVU_INT_UNARY
_INT_BINARY = frozenset({CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.DIV, CvuOp.MAX, CvuOp.MIN})


class _Imm(float):
    """A stage's immediate: its lane follows the other arguments (see above)."""


def _is_int(a) -> bool:
    return not isinstance(a, _Imm) and np.asarray(a).dtype.kind in "iub"


def _int_lane(args) -> bool:
    real = [a for a in args if not isinstance(a, _Imm)]
    return bool(real) and all(_is_int(a) for a in real) and \
        all(float(a).is_integer() for a in args if isinstance(a, _Imm))


def _lane(args, integer: bool) -> list:
    t = np.int64 if integer else np.float32
    return [t(a) if isinstance(a, _Imm) else np.asarray(a).astype(t, copy=False) for a in args]


def _fits_i32(r: np.ndarray, op: CvuOp) -> np.ndarray:
    r = np.asarray(r, dtype=np.int64)
    if r.size and (int(r.min()) < _I32_MIN or int(r.max()) > _I32_MAX):
        raise SimError(f"cvu {op.name.lower()}: integer overflow (a result outside the i32 range "
                       "of the integer lane)")
    return r


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C / ONNX Div of integers); b == 0 is a fault."""
    a, b = np.broadcast_arrays(a, b)
    if np.any(b == 0):
        raise SimError("cvu div: integer division by zero")
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _ftoi(x: np.ndarray) -> np.ndarray:
    """float -> integer lane: round toward zero, saturate to i32, NaN -> 0."""
    x = np.asarray(x, dtype=np.float64)
    with quiet(invalid="ignore"):
        r = np.nan_to_num(np.trunc(x), nan=0.0, posinf=_I32_MAX, neginf=_I32_MIN)
    return np.clip(r, _I32_MIN, _I32_MAX).astype(np.int64)


def _width(op: CvuOp, st) -> int:
    if not st.iparams or not 1 <= st.iparams[0] <= 64:
        raise SimError(f"cvu {op.name.lower()}: iparams[0] must be the integer width 1..64, "
                       f"not {list(st.iparams)}")
    return int(st.iparams[0])


def _low_bits(x: np.ndarray, w: int) -> np.ndarray:
    """``x mod 2**w`` (uint64): the w-bit pattern of an integer-lane value."""
    u = np.asarray(x, dtype=np.int64).view(np.uint64)
    return u if w == 64 else u & np.uint64((1 << w) - 1)


def _signed_bits(u: np.ndarray, w: int) -> np.ndarray:
    """The w-bit patterns ``u`` (uint64) as signed two's complement numbers (int64)."""
    if w == 64:
        return np.asarray(u, dtype=np.uint64).view(np.int64)
    u = np.asarray(u, dtype=np.uint64) & np.uint64((1 << w) - 1)
    s = u.astype(np.int64)
    return np.where(s >= (1 << (w - 1)), s - (1 << w), s)


def _zext(x: np.ndarray, w: int, op: CvuOp) -> np.ndarray:
    """``x mod 2**w`` as an exact non-negative number; beyond i32 a fault."""
    x = np.asarray(x, dtype=np.int64)
    if w == 64:
        if x.size and int(x.min()) < 0:
            raise SimError(f"cvu {op.name.lower()}: integer overflow (an unsigned 64-bit value "
                           "outside the i32 range of the integer lane)")
        return x
    return _fits_i32(_low_bits(x, w).astype(np.int64), op)


def _shift(op: CvuOp, a: np.ndarray, b: np.ndarray, st) -> np.ndarray:
    """SHL / SHR with MLIR's w-bit operands and the ONNX BitShift rule for amounts outside
    [0, w): a left shift gives 0, a right shift the sign fill (0 if logical)."""
    w = _width(op, st)
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    bu = _low_bits(b, w)  # the amount as MLIR's unsigned w-bit value
    ok = bu < np.uint64(w)
    s = np.where(ok, bu, np.uint64(0)).astype(np.uint64)
    if op is CvuOp.SHL:
        r = _signed_bits(_low_bits(a, w) << s, w)
        return _fits_i32(np.where(ok, r, 0), op)
    logical = len(st.iparams) > 1 and st.iparams[1] != 0
    if logical:
        r = _signed_bits(_low_bits(a, w) >> s, w)
        return _fits_i32(np.where(ok, r, 0), op)
    x = _signed_bits(_low_bits(a, w), w)
    return _fits_i32(np.where(ok, x >> s.astype(np.int64), np.where(x < 0, -1, 0)), op)


def _int_only_stage(op: CvuOp, args: list, st) -> np.ndarray:
    """The integer-lane-only ops (numerics.CVU_INT_ONLY); a float argument faults."""
    if not _int_lane(args):
        raise SimError(f"cvu {op.name.lower()}: integer-lane op on a float (or non-integral "
                       "immediate) argument")
    xs = _lane(args, True)
    if op is CvuOp.ZEXT:
        return _zext(xs[0], _width(op, st), op)
    if op is CvuOp.SEXT:
        w = _width(op, st)
        return _fits_i32(_signed_bits(_low_bits(xs[0], w), w), op)
    a, b = xs
    if op in (CvuOp.SHL, CvuOp.SHR):
        return _shift(op, a, b, st)
    if op is CvuOp.REM:
        a, b = np.broadcast_arrays(a, b)
        if np.any(b == 0):
            raise SimError("cvu rem: integer remainder by zero")
        return _fits_i32(np.fmod(a, b), op)
    f = {CvuOp.AND: np.bitwise_and, CvuOp.OR: np.bitwise_or, CvuOp.XOR: np.bitwise_xor}[op]
    return _fits_i32(f(a, b), op)


def _int_stage(op: CvuOp, args: list, st) -> np.ndarray | None:
    """The integer-lane result of a stage, or None if it computes in the float lane."""
    if op in numerics.CVU_INT_ONLY:
        return _int_only_stage(op, args, st)
    if int(op) < 32:
        if op not in _INT_UNARY or not _is_int(args[0]):
            return None
        x = np.asarray(args[0]).astype(np.int64)
        r = {CvuOp.NEG: lambda: -x, CvuOp.ABS: lambda: np.abs(x),
             CvuOp.RELU: lambda: np.maximum(x, 0), CvuOp.SQUARE: lambda: x * x,
             CvuOp.SIGN: lambda: np.sign(x)}.get(op, lambda: x)()
        return _fits_i32(r, op)
    if op in _CMP:
        integer = _int_lane(args)
        a, b = _lane(args, integer)
        return _CMP[op](a, b).astype(np.int64)
    if op in _INT_BINARY and _int_lane(args):
        a, b = _lane(args, True)
        if op is CvuOp.DIV:
            return _fits_i32(_int_div(a, b), op)
        return _fits_i32(_BINARY[op](a, b), op)
    if op is CvuOp.SELECT and _int_lane(args[1:]):
        c = args[0]
        a, b = _lane(args[1:], True)
        return np.where((np.float64(c) if isinstance(c, _Imm) else np.asarray(c)) != 0, a, b)
    if op in numerics.CVU_INT_REDUCE and _is_int(args[0]):
        x = np.asarray(args[0]).astype(np.int64)
        return _fits_i32(_REDUCE[op](x, axis=st.axis, keepdims=True), op)
    return None


def cvu_stage(st, args: list) -> np.ndarray:
    """One stage; ``args`` are integer arrays (integer lane), float32 arrays or :class:`_Imm`."""
    op = st.op
    with quiet():
        r = _int_stage(op, args, st)
        if r is not None:
            return r
        if op is CvuOp.FTOI:
            return _ftoi(args[0])
        args = [args[0]] + _lane(args[1:], False) if op is CvuOp.SELECT else _lane(args, False)
        if int(op) < 32:
            return cvu_unary(CvuOp.COPY if op is CvuOp.ITOF else op, args[0])
        if op in _BINARY:
            return _BINARY[op](args[0], args[1]).astype(np.float32)
        if op is CvuOp.SELECT:
            c = args[0]
            c = np.float64(c) if isinstance(c, _Imm) else np.asarray(c)
            return np.where(c != 0, args[1], args[2]).astype(np.float32)
        x = args[0]
        ax = st.axis
        if op in _REDUCE:
            return _REDUCE[op](x, axis=ax, keepdims=True).astype(np.float32)
        if op is CvuOp.SOFTMAX:
            if st.iparams:  # the 16-bit body: x - max, exp and the sum rounded (docs/isa.md)
                r = lambda v: numerics.convert(v, DType(st.iparams[0])).astype(np.float32)  # noqa: E731
                e = r(np.exp(r(x - x.max(axis=ax, keepdims=True))))
                return (e / r(e.sum(axis=ax, keepdims=True))).astype(np.float32)
            e = np.exp(x - x.max(axis=ax, keepdims=True))
            return (e / e.sum(axis=ax, keepdims=True)).astype(np.float32)
        if op is CvuOp.LAYERNORM:
            mu = x.mean(axis=ax, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=ax, keepdims=True)
            y = (x - mu) / np.sqrt(var + np.float32(st.fparam))
            if len(args) > 1:
                y = y * args[1]
            if len(args) > 2:
                y = y + args[2]
            return y.astype(np.float32)
        if op is CvuOp.RMSNORM:
            ms = (x * x).mean(axis=ax, keepdims=True)
            y = x / np.sqrt(ms + np.float32(st.fparam))
            if len(args) > 1:
                y = y * args[1]
            return y.astype(np.float32)
        if op in (CvuOp.MAXPOOL, CvuOp.AVGPOOL):
            if x.ndim != 4 or len(st.iparams) < 8:
                raise SimError(f"cvu {op.name.lower()}: needs an [N,H,W,C] input and 8 iparams")
            return _pool(x, st.iparams, op is CvuOp.MAXPOOL)
    raise SimError(f"cvu: unknown op {op!r}")


def cvu_eval(stages, inputs: list[np.ndarray]) -> np.ndarray:
    """Evaluate a CVU pipeline; integer inputs (any numpy integer/bool type) feed the integer
    lane, float inputs the float lane. Returns the last stage's result (int64 or float32)."""
    results: list[np.ndarray] = []
    for st in stages:
        args = []
        for r in st.args:
            if r.kind is RefKind.INPUT:
                args.append(inputs[r.index])
            elif r.kind is RefKind.STAGE:
                args.append(results[r.index])
            else:
                args.append(_Imm(r.imm))
        res = np.asarray(cvu_stage(st, args))
        results.append(res if res.dtype == np.int64 else res.astype(np.float32, copy=False))
    return results[-1]


class CvuExec(Exec):
    inst: CvuPipeline

    def _sliced(self, k: int) -> bool:
        i = self.inst
        s = i.in_shapes[k]
        return self.blocks > 1 and len(s) == len(i.out_shape) and s[0] == i.out_shape[0]

    def _in(self, k: int, b: int) -> Access:
        i = self.inst
        w = i.inputs[k]
        if self._sliced(k):
            return _block(w, i.tpb, self.blocks, b)
        return Access(w, i.tpb)

    def _out(self, b):
        i = self.inst
        return _block(i.output, i.tpb, self.blocks, b)

    def reads(self, b):
        return [self._in(k, b) for k in range(len(self.inst.inputs))]

    def writes(self, b):
        return [self._out(b)]

    def run(self, b):
        i = self.inst
        rows = i.out_shape[0] // self.blocks
        ins = []
        for k, s in enumerate(i.in_shapes):
            shape = ((rows,) + tuple(s[1:])) if self._sliced(k) else tuple(s)
            v = self.read(self._in(k, b), False)  # views of the memory: see below
            v = v.astype(np.int64 if v.dtype.kind in "iub" else np.float32, copy=False)
            ins.append(v.reshape(shape))
        res = cvu_eval(i.stages, ins)
        if any(np.may_share_memory(res, v) for v in ins):  # the pending write must own its data
            res = np.array(res)
        odt = i.output.dtype
        if res.dtype == np.int64 and odt.is_int and res.size:
            lo, hi = numerics.int_range(odt)
            if int(res.min()) < lo or int(res.max()) > hi:  # the integer lane never saturates
                raise SimError(f"{i.MNEMONIC} on TPB {i.tpb}: integer result outside the "
                               f"{odt.short} output range [{lo}, {hi}] (integer overflow)")
        oshape = (rows,) + tuple(i.out_shape[1:])
        try:
            res = np.broadcast_to(res, oshape)
        except ValueError:
            raise SimError(f"{i.MNEMONIC} on TPB {i.tpb}: the last stage produces shape "
                           f"{list(np.shape(res))}, not out_shape {list(i.out_shape)}") from None
        return [PendingWrite(self._out(b), res)]


# ----------------------------------------------------------------------------------------------
# DTDU, DMA
# ----------------------------------------------------------------------------------------------
def _chunk(w: Walk, tpb: int, blocks: int, b: int) -> Access:
    return _block(w, tpb, blocks, b)


class CopyExec(Exec):
    inst: Copy

    def reads(self, b):
        return [_chunk(self.inst.src, self.inst.tpb, self.blocks, b)]

    def writes(self, b):
        d = self.inst.dst
        return [_chunk(d, d.tpb, self.blocks, b)]

    def run(self, b):
        v = self.read(self.reads(b)[0])
        return [PendingWrite(a, v) for a in self.writes(b)]


class FillExec(Exec):
    inst: Fill

    def reads(self, b):
        return []

    def writes(self, b):
        return [_chunk(self.inst.dst, self.inst.tpb, self.blocks, b)]

    def run(self, b):
        a = self.writes(b)[0]
        n = a.size
        return [PendingWrite(a, np.full(n, self.inst.value, dtype=np.float64))]


class BroadcastExec(CopyExec):
    inst: Broadcast

    def writes(self, b):
        d = self.inst.dst
        return [_chunk(d, t, self.blocks, b) for t in tpbs_of(self.inst.tpb_mask)]


class DmaExec(CopyExec):
    inst: Dma

    def reads(self, b):
        s = self.inst.src
        return [_chunk(s, _tpb_of(s), self.blocks, b)]

    def writes(self, b):
        i = self.inst
        d = i.dst
        if i.tpb_mask:
            return [_chunk(d, t, self.blocks, b) for t in tpbs_of(i.tpb_mask)]
        return [_chunk(d, _tpb_of(d), self.blocks, b)]


# ----------------------------------------------------------------------------------------------
# CSU routines
# ----------------------------------------------------------------------------------------------
class CsuExec(Exec):
    inst: CsuCall

    def _acc(self, k: int, offsets=None) -> Access:
        w = self.inst.operands[k]
        return Access(w, _tpb_of(w), offsets)

    def _indices(self, k: int, limit: int) -> np.ndarray:
        idx = self.read(self._acc(k)).astype(np.int64)
        bad = (idx < 0) | (idx >= limit)
        if bad.any():
            j = int(np.argmax(bad))
            raise SimError(f"csu.call {self.inst.routine.name.lower()} on TPB {self.inst.tpb}: "
                           f"index {int(idx[j])} at position {j} is outside [0, {limit})")
        return idx

    def _rows_of(self, k: int, idx: np.ndarray, d: int) -> Access:
        off = walk_offsets(self.inst.operands[k]).reshape(-1, d)[idx].reshape(-1)
        return Access(self.inst.operands[k], _tpb_of(self.inst.operands[k]), off)

    def _io(self) -> tuple[list[Access], list[Access]]:
        i, p = self.inst, self.inst.params
        r = i.routine
        if r is Routine.GATHER:
            v, d, n = p
            idx = self._indices(1, v) if self.mem is not None else np.zeros(n, np.int64)
            return [self._rows_of(0, idx, d), self._acc(1)], [self._acc(2)]
        if r is Routine.SCATTER:
            v, d, n = p
            idx = self._indices(1, v) if self.mem is not None else np.zeros(n, np.int64)
            return [self._acc(0), self._acc(1)], [self._rows_of(2, np.unique(idx), d)]
        if r is Routine.TOPK:
            return [self._acc(0)], [self._acc(1), self._acc(2)]
        return [self._acc(0)], [self._acc(1)]

    def reads(self, b):
        return self._io()[0]

    def writes(self, b):
        return self._io()[1]

    def run(self, b):
        i, p = self.inst, self.inst.params
        r = i.routine
        if r is Routine.GATHER:
            v, d, n = p
            idx = self._indices(1, v)
            table = self.read(self._acc(0)).reshape(v, d)
            return [PendingWrite(self._acc(2), table[idx])]
        if r is Routine.SCATTER:
            v, d, n = p
            idx = self._indices(1, v)
            upd = self.read(self._acc(0)).reshape(n, d)
            # duplicates: the last update of a row wins
            rev_u, rev_first = np.unique(idx[::-1], return_index=True)
            last = n - 1 - rev_first
            return [PendingWrite(self._rows_of(2, rev_u, d), upd[last])]
        if r is Routine.TOPK:
            rr, ln, k = p[:3]
            largest = p[3] if len(p) > 3 else 1
            x = self.read(self._acc(0)).astype(np.float64).reshape(rr, ln)
            key = -x if largest else x
            order = np.argsort(key, axis=1, kind="stable")[:, :k]
            vals = np.take_along_axis(x, order, axis=1)
            return [PendingWrite(self._acc(1), vals), PendingWrite(self._acc(2), order)]
        if r is Routine.ARGMAX:
            rr, ln = p[:2]
            largest = p[2] if len(p) > 2 else 1
            last = len(p) > 3 and p[3] != 0
            x = self.read(self._acc(0)).astype(np.float64).reshape(rr, ln)
            key = x if largest else -x
            if last:  # the last extreme: the first one of the reversed row
                return [PendingWrite(self._acc(1), ln - 1 - np.argmax(key[:, ::-1], axis=1))]
            return [PendingWrite(self._acc(1), np.argmax(key, axis=1))]
        src = self.read(self._acc(0))  # MEMCPY (GSDU): converts like dtdu.copy
        return [PendingWrite(self._acc(1), src)]

    def byte_count(self) -> int:
        return sum(numerics.byte_size(w.dtype, w.num_elements) for w in self.inst.operands)


EXECS = {MatMul: MatMulExec, Conv2D: Conv2DExec, CvuPipeline: CvuExec, Copy: CopyExec,
         Fill: FillExec, Broadcast: BroadcastExec, CsuCall: CsuExec, Dma: DmaExec}


def make_exec(inst: Instruction, mem: Memory | None) -> Exec:
    return EXECS[type(inst)](inst, mem)


__all__ = ["Access", "PendingWrite", "Exec", "make_exec", "SimError", "requantize", "cvu_eval",
           "cvu_stage", "cvu_unary"]
