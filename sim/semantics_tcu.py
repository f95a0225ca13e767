"""TCU semantics: MatMul and Conv2D blocks (integer: exact products, int32 wrap, requantize;
float: float32 matmul, one rounding), see :mod:`.semantics` for the arithmetic."""

from __future__ import annotations

import functools
import math

import numpy as np

from m100.targets.m100 import numerics
from m100.targets.m100.isa import Act, Conv2D, CvuOp, MatMul, Walk

from . import conv_plan, twu
from .semantics_base import Access, Exec, PendingWrite, SimError, _block, quiet, walk_offsets
from .semantics_cvu import cvu_eval, cvu_unary


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


def requantize(acc: np.ndarray, mult, shift, zp: int, qmin: int, qmax: int,
               mode: str = "f32-rne") -> np.ndarray:
    """int32 accumulator -> int8 by the ISA's Requant definition in the machine's requant
    ``mode`` (``Machine.tcu_requant``; docs/isa.md section 5), vectorized:

    * ``"f32-rne"``: ``m = f32(mult * 2**-shift)``; ``round_half_even(f32(f32(acc) * m)) + zp``,
      saturated to ``[qmin, qmax]``;
    * ``"fixed-half-up"``: ``((acc * mult + 2**(shift-1)) >> shift) + zp`` in int64, saturated."""
    if mode == "f32-rne":
        m = (np.asarray(mult, dtype=np.float64) * np.exp2(-np.asarray(shift, dtype=np.float64))) \
            .astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            p = acc.astype(np.float32) * m  # f32 x f32 -> f32, round to nearest even
        q = np.rint(p.astype(np.float64)) + zp
        return np.clip(q, qmin, qmax).astype(np.int8)
    if mode != "fixed-half-up":
        raise SimError(f"unknown TCU requant mode {mode!r}")
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
            if ep.dequant is not None:  # f32(acc) (RNE) * scale[f] in f32; rounded on store
                sc = self.read(Access(ep.dequant, ep.dequant.tpb), False).astype(np.float32)
                with quiet():
                    return acc.astype(np.float32) * sc.reshape(1, nchan)
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
            return requantize(acc, mult, shift, rq.zero_point, rq.qmin, rq.qmax,
                              self.mem.machine.tcu_requant)
        with quiet():  # (in place: prod is the block's own array, no other holds it)
            acc = prod.astype(np.float32, copy=False)
            if old is not None:
                np.add(acc, old.astype(np.float32, copy=False), out=acc)
            if ep.bias is not None:
                np.add(acc, self.mem.read_walk(ep.bias, ep.bias.tpb, None, False).astype(
                    np.float32, copy=False), out=acc)  # (Exec.read of Access(ep.bias, tpb))
            act = ep.act
            if act is Act.NONE:
                return acc
            if act is Act.RELU:  # (_act's operations, into acc: the same values)
                return np.maximum(acc, 0, out=acc)
            if act is Act.CLAMP:
                return np.clip(acc, np.float32(ep.clamp_lo), np.float32(ep.clamp_hi), out=acc)
            return _act(acc, act, ep.clamp_lo, ep.clamp_hi, False).astype(np.float32, copy=False)

    def _epi_reads(self) -> list[Access]:
        ep = self.inst.epilogue
        out = []
        if ep.bias is not None:
            out.append(Access(ep.bias, ep.bias.tpb))
        if ep.requant is not None and ep.requant.per_channel is not None:
            out.append(Access(ep.requant.per_channel, ep.requant.per_channel.tpb))
        if ep.dequant is not None:
            out.append(Access(ep.dequant, ep.dequant.tpb))
        return out


#: Conv box plans shared by geometry (``Conv2DExec._shared_box_plan``): plan key -> plan.
_PLANS: dict = {}
#: ``Conv2DExec._box_access``'s part per geometry: key -> (x's levels tuple, None or (box,
#: whole, sub-walk levels)).
_XBOX: dict = {}


def _operand_dtype(integer: bool, k: int, b_bits: int) -> np.dtype:
    """The type :func:`_operand` gives ``k``-long products of ``b_bits``-bit integers (or
    floats)."""
    if not integer or k * 128 * (1 << (b_bits - 1)) <= 1 << 24:
        return _F32
    return _F64


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


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
        if i.post_in is not None:
            r.append(_block(i.post_in, i.tpb, self.blocks, b))
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
        if i.post:
            out = self._post(out, rows, b)
        return [PendingWrite(self._c(b), out)]

    def _post(self, val: np.ndarray, rows: int, b: int) -> np.ndarray:
        """The ``post`` stages after the dequantization (docs/isa.md): the CVU's stage semantics
        on input 0 = the f32 value, input 1 = ``post_in``'s block (f32); an integer C takes the
        integer result of the last ``FTOI``, which must fit C's type."""
        i = self.inst
        ins = [np.asarray(val, dtype=np.float32).reshape(rows, i.n)]
        if i.post_in is not None:
            ins.append(self.read(_block(i.post_in, i.tpb, self.blocks, b), False)
                       .astype(np.float32).reshape(rows, i.n))
        res = np.broadcast_to(cvu_eval(i.post, ins), (rows, i.n))
        odt = i.c.dtype
        if odt.is_int:
            lo, hi = numerics.int_range(odt)
            if res.size and (int(res.min()) < lo or int(res.max()) > hi):
                raise SimError(f"{i.MNEMONIC} on TPB {i.tpb}: post-stage result outside the "
                               f"{odt.short} output range [{lo}, {hi}]")
        return np.array(res)


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
            # the box access is a function of the (immutable) instruction and b: kept on the
            # instruction, so a program run again derives none of them
            boxes = i.__dict__.get("_sim_xbox")
            if boxes is None:
                boxes = {}
                object.__setattr__(i, "_sim_xbox", boxes)
            got = boxes.get(b)
            if got is None:
                got = boxes[b] = self._box_access(b)
            if got[0] is not None:
                self._last_x = (b, got[0], got[1])
                return got[0], got[1]
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

    def _box_access(self, b: int) -> tuple:
        """``(Access, box)`` of the x elements block ``b`` reads when they are a box
        (:meth:`_box_sel`; the access of x itself when the box is all of x, else of
        :func:`twu.sub_box`'s walk), ``(None,)`` when they are not. What does not depend on x's
        base -- the box, whether it is all of x, the sub-walk's levels -- is derived once per
        geometry (:data:`_XBOX`: x's levels tuple by identity, the shape fields ``_box_sel``
        reads, ``b``); per instruction only the access is made (a first run derives each
        instruction's once, for the race pre-pass's ``reads``)."""
        i = self.inst
        x = i.x
        key = (id(x.levels), i.n, i.h, i.width, i.c, i.kh, i.kw, i.stride, i.pad, i.dilation,
               self.rows, b)
        g = _XBOX.get(key)
        if g is None:
            shape = (i.n, i.h, i.width, i.c)
            sel = self._box_sel(b)
            sub = None if sel is None else twu.sub_box(x, shape, sel)
            # (the entry holds x's levels tuple: no other tuple has its id while it is there)
            g = (x.levels, None if sub is None else (
                sel, all(f == 0 and c == n for (f, _, c), n in zip(sel, shape)), sub.levels))
            if len(_XBOX) >= 1 << 14:  # (a process running many programs)
                _XBOX.clear()
            _XBOX[key] = g
        if g[1] is None:
            return (None,)
        sel, whole, levels = g[1]
        return (Access(x if whole else Walk(x.space, x.tpb, x.base, x.dtype, levels), i.tpb),
                sel)

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
        win = np.ndarray((i.n, self.oh, self.ow, i.kh, i.kw, i.c), xp.dtype, xp, 0,
                         (s[0], sh * s[1], sw * s[2], dh * s[1], dw * s[2], s[3]))
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

    def _consts(self) -> tuple:
        """(integer, operand type, M, groups, c/groups, f/groups, kh*kw*c/groups): run's
        per-instruction constants, kept on the (immutable) instruction."""
        i = self.inst
        k = i.__dict__.get("_sim_conv")
        if k is None:
            integer = i.x.dtype.is_int
            g, cg, fg = i.groups, i.c // i.groups, i.f // i.groups
            kk = i.kh * i.kw * cg
            bits = i.w.dtype.bits
            dtype = _operand_dtype(integer, kk, bits)
            k = (integer, dtype, self.rows * self.ow, g, cg, fg, kk, {})
            object.__setattr__(i, "_sim_conv", k)
        return k

    def _shared_box_plan(self, b: int, box: tuple, dtype) -> tuple:
        """:meth:`_box_plan`, shared by every conv instruction with the same geometry (a
        function of the fields it reads, ``b``, the box and the type: not of the operands'
        walks; ``test/unit/sim/test_first_run_plans.py`` compares it with ``_box_plan``)."""
        key = self._plan_key(b, box, dtype)
        p = _PLANS.get(key)
        if p is None:
            if len(_PLANS) >= 1 << 14:  # (a process running many programs)
                _PLANS.clear()
            p = _PLANS[key] = self._box_plan(b, box, dtype)
        return p

    def _plan_key(self, b: int, box: tuple, dtype) -> tuple:
        """Every value :meth:`_box_plan` reads (its error message aside)."""
        i = self.inst
        return (i.n, i.h, i.width, i.c, i.kh, i.kw, i.stride, i.pad, i.dilation, self.oh,
                self.ow, self.rows, b, box, dtype)

    def _box_plan(self, b: int, box: tuple, dtype) -> tuple:
        """Block ``b``'s box path as constants (a function of the instruction, ``b`` and its
        box ``box`` of x's logical [n,h,w,c], :meth:`_x`): ``(True, shape)`` for a 1x1 conv
        whose every window is inside x -- the box read in its order IS the [M, c] im2col matrix
        (one element per window, in window order: no padded scratch, no im2col copy); else
        ``(False, counts, slices of the box in the padded buffer, scratch key, padded shape,
        window view shape, (sh, sw, dh, dw), window selection, [M, kh, kw, c])`` -- the same
        values :meth:`_padded` and :meth:`_windows` derive per block."""
        i = self.inst
        (sh, sw), (dh, dw) = i.stride, i.dilation
        pt, pl = i.pad[0], i.pad[1]
        M = self.rows * self.ow
        counts = tuple(c for _, _, c in box)
        shape = (M, i.kh, i.kw, i.c)
        if i.kh == i.kw == 1 and counts[0] * counts[1] * counts[2] == M:
            return (True, shape)
        hp = max(pt + i.h, (self.oh - 1) * sh + (i.kh - 1) * dh + 1)
        wp = max(pl + i.width, (self.ow - 1) * sw + (i.kw - 1) * dw + 1)
        key = ("conv-pad", i.n, hp, wp, i.c, pt, pl, i.h, i.width, np.dtype(dtype).char)
        sl = tuple(slice(o + f, o + f + s * (c - 1) + 1, s)
                   for (f, s, c), o in zip(box, (0, pt, pl, 0)))
        r0, r1 = b * self.rows, (b + 1) * self.rows
        if r0 % self.oh == 0 and r1 % self.oh == 0:  # whole images
            sel = (slice(r0 // self.oh, r1 // self.oh),)
        elif r0 // self.oh == (r1 - 1) // self.oh:  # rows of one image
            n0 = r0 // self.oh
            sel = (n0, slice(r0 - n0 * self.oh, r1 - n0 * self.oh))
        else:  # _box_sel gives no box for rows of several images that are not whole images
            raise SimError(f"{i.MNEMONIC} on TPB {i.tpb}: block {b}'s box spans parts of images")
        return (False, counts, sl, key, (i.n, hp, wp, i.c),
                (i.n, self.oh, self.ow, i.kh, i.kw, i.c), (sh, sw, dh, dw), sel, shape)

    def run(self, b):
        y, out = self._out(b)
        return [PendingWrite(y, out)]

    def run_free(self, b):
        """``run(b)`` and its ``apply`` at once, for a schedule no other block's access meets
        between the two (``Exec.run_free``): the output block is stored here, after every read
        of the block (as ``run`` then ``apply``: the same ``write_walk`` of the same values), and
        ``apply`` gets nothing to write. A float conv takes :func:`.conv_plan.run_free` (the same
        views, product, epilogue and bytes, by one plan per geometry) where it applies."""
        if conv_plan.run_free(self, b):
            return ()
        y, out = self._out(b)
        self.mem.write_walk(y.walk, out, y.tpb, y.offsets)
        return ()

    def _out(self, b: int) -> tuple[Access, np.ndarray]:
        """Block ``b``'s output access and values (what ``run`` writes)."""
        i = self.inst
        integer, dtype, M, g, cg, fg, kk, plans = self._consts()
        bb = i.w.dtype.bits
        idx = self._index(b) if not twu.STRIDED or min(i.pad) < 0 else None
        xa, uniq = self._x(b, idx)
        if idx is None and isinstance(uniq, tuple):  # a box of x's logical [n,h,w,c]
            p = plans.get(b)
            if p is None:
                p = plans[b] = self._shared_box_plan(b, uniq, dtype)
            if p[0]:  # 1x1, every window inside x: the box is the im2col matrix
                cols = np.array(self.read(xa, False), dtype=dtype, order="C").reshape(p[1])
            else:  # the box into the zero-padded scratch x (see _padded), windows copied once
                _, counts, sl, key, pshape, wshape, (sh, sw, dh, dw), sel, shape = p
                scratch = self.mem.scratch
                xp = scratch.get(key)
                if xp is None:
                    xp = scratch[key] = np.zeros(pshape, dtype=dtype)
                xp[sl] = self.read(xa, False).reshape(counts)
                s = xp.strides
                # (shape, dtype, buffer, offset, strides positionally: cheaper)
                win = np.ndarray(wshape, dtype, xp, 0, (
                    s[0], sh * s[1], sw * s[2], dh * s[1], dw * s[2], s[3]))
                cols = win[sel].reshape(shape)
        elif idx is None:  # x's touched elements into a zero-padded x, windows as a strided view
            xp, x4 = self._padded(dtype)
            if xa.offsets is None:  # every element (uniq is 0 .. n-1)
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
        # (Exec.read of Access(i.w, i.tpb) without the access object: ~0.65 us a call)
        W = _operand(self.mem.read_walk(i.w, i.tpb, None, False), integer, kk, bb)
        if g == 1:  # (the same arrays as the general reshapes below: a size-1 group axis)
            cols = cols.reshape(1, M, kk)
            W = W.reshape(1, kk, fg)
        else:
            cols = cols.reshape(M, i.kh, i.kw, g, cg).transpose(3, 0, 1, 2, 4).reshape(g, M, kk)
            W = W.reshape(i.kh, i.kw, cg, g, fg).transpose(3, 0, 1, 2, 4).reshape(g, kk, fg)
        with quiet():
            prod = np.matmul(cols, W)
        prod = prod.reshape(M, fg) if g == 1 else prod.transpose(1, 0, 2).reshape(M, i.f)
        y = self._y(b)
        old = self.read(y, False).reshape(M, i.f) if i.accumulate else None
        return y, self._epilogue(prod, old, i.y, i.f, integer)
