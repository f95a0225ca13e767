"""CVU semantics: the vector pipeline (float lane in float32, exact integer lane), its unary,
binary, reduction and pooling stages, and :class:`CvuExec` blocks (see :mod:`.semantics`)."""

from __future__ import annotations

import math

import numpy as np

from m100.targets.m100 import numerics
from m100.targets.m100.isa import CvuOp, CvuPipeline, DType, RefKind

from . import twu
from .memory import _view_plan_rel
from .semantics_base import Access, Exec, PendingWrite, SimError, _block, quiet

_F32 = np.dtype(np.float32)
_ZERO = np.float32(0)  # (relu's bound)


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
           CvuOp.DIV: np.divide, CvuOp.MAX: np.maximum, CvuOp.MIN: np.minimum, CvuOp.POW: np.power,
           # IEEE fmod: exact (the remainder is representable); NaN for b == 0 or an infinite a
           CvuOp.REM: np.fmod}
#: float-lane binary ops whose ``iparams`` ``(dtype,)`` (F16 2 / BF16 3) round the f32 result to
#: that type (docs/isa.md: an intermediate of a 16-bit graph rounded where the graph rounds it)
_ROUNDED_BINARY = frozenset({CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.DIV})
_ROUND_TYPES = frozenset({DType.F16.value, DType.BF16.value})
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
_INT_BINARY = numerics.CVU_INT_BINARY


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
        if st.iparams:
            raise SimError(f"cvu {op.name.lower()}: a rounding type (iparams {list(st.iparams)}) "
                           "on an integer-lane stage")
        a, b = _lane(args, True)
        if op is CvuOp.DIV:
            return _fits_i32(_int_div(a, b), op)
        if op is CvuOp.REM:  # C %: the sign of the dividend
            a, b = np.broadcast_arrays(a, b)
            if np.any(b == 0):
                raise SimError("cvu rem: integer remainder by zero")
            return _fits_i32(np.fmod(a, b), op)
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
        if op is CvuOp.SIGMOID and st.iparams:  # the 16-bit body: exp(-x), 1 + e, 1 / . rounded
            r = lambda v: numerics.convert(v, DType(st.iparams[0])).astype(np.float32)  # noqa: E731
            one = np.float32(1)
            return r(one / r(one + r(np.exp(-np.asarray(args[0], np.float32)))))
        if int(op) < 32:
            return cvu_unary(CvuOp.COPY if op is CvuOp.ITOF else op, args[0])
        if op in _BINARY:
            r2 = _BINARY[op](args[0], args[1]).astype(np.float32)
            if not st.iparams:
                return r2
            if op not in _ROUNDED_BINARY or len(st.iparams) != 1 or \
                    st.iparams[0] not in _ROUND_TYPES:
                raise SimError(f"cvu {op.name.lower()}: iparams {list(st.iparams)} (only add, sub, "
                               "mul, div take one, the rounding type F16 2 / BF16 3)")
            return numerics.convert(r2, DType(st.iparams[0])).astype(np.float32)
        if op is CvuOp.SELECT:
            c = args[0]
            c = np.float64(c) if isinstance(c, _Imm) else np.asarray(c)
            return np.where(c != 0, args[1], args[2]).astype(np.float32)
        if op is CvuOp.FMA:  # one rounding (numerics.fma_f32)
            return numerics.fma_f32(*args)
        x = args[0]
        ax = st.axis
        if op in _REDUCE:
            return _REDUCE[op](x, axis=ax, keepdims=True).astype(np.float32)
        if op is CvuOp.SOFTMAX:
            if st.iparams:  # the 16-bit body: x - max, exp and the sum rounded (docs/isa.md);
                # the argument rounded to the type first (a no-op for an input of that type; an
                # ADD stage before it is then the 16-bit add: the attention's mask)
                r = lambda v: numerics.convert(v, DType(st.iparams[0])).astype(np.float32)  # noqa: E731
                x = r(x)
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
        if res.shape == oshape:  # (broadcast_to would return a view of the same values)
            return [PendingWrite(self._out(b), res)]
        try:
            res = np.broadcast_to(res, oshape)
        except ValueError:
            raise SimError(f"{i.MNEMONIC} on TPB {i.tpb}: the last stage produces shape "
                           f"{list(np.shape(res))}, not out_shape {list(i.out_shape)}") from None
        return [PendingWrite(self._out(b), res)]

    def run_free(self, b):
        """``run(b)`` and its ``apply`` at once, for a schedule no other block's access meets
        between the two (``Exec.run_free``). A pipeline of float32 inputs and output, one block,
        whose stages are float add / sub / mul / max / min without ``iparams`` (an immediate as
        ``np.float32``, at least one array argument) or relu, is evaluated here by the same
        ufuncs on the same operands as :func:`cvu_eval` (whose integer-lane tests, lane casts and
        same-type copies change no value), its result stored by the same ``write_walk``;
        anything else: ``run`` (``test/unit/sim/test_cvu_run_free.py``)."""
        i = self.inst
        ok = i.__dict__.get("_sim_cvufree")
        if ok is None:
            ok = _float_only(i)
            object.__setattr__(i, "_sim_cvufree", ok)
        if not ok or self.blocks != 1:
            return self.run(b)
        tpb = i.tpb
        mem = self.mem
        ins = []
        spans = []  # (space, first byte, end byte) of an input read as a view of its bytes
        for w, shape in zip(i.inputs, i.in_shapes):
            sp = _span(mem, w, tpb)
            if sp is not None and sp[2] - sp[1] == 4 * math.prod(shape):
                # (the array read_walk gives a contiguous walk, reshaped: the same strides)
                ins.append(np.ndarray(shape, _F32, sp[0].buf, sp[1]))
            else:
                sp = None
                ins.append(self.read(Access(w, tpb), False).reshape(shape))
            spans.append(sp)
        results: list = []
        stages = i.stages
        last = len(stages) - 1
        with quiet():
            for k, st in enumerate(stages):
                a = [ins[r.index] if r.kind is RefKind.INPUT else
                     results[r.index] if r.kind is RefKind.STAGE else np.float32(r.imm)
                     for r in st.args]
                if k == last:
                    y = self._into(a, ins, spans)
                    if y is not None:  # the last stage straight into the output's bytes
                        if st.op is CvuOp.RELU:
                            np.maximum(a[0], _ZERO, out=y)
                        else:
                            _BINARY[st.op](a[0], a[1], out=y)
                        self.mem.writes += 1
                        return ()
                if st.op is CvuOp.RELU:
                    results.append(np.maximum(a[0], _ZERO))
                else:
                    results.append(_BINARY[st.op](a[0], a[1]))
        res = results[-1]
        if res.shape != tuple(i.out_shape):
            return self.run(b)
        out = self._out(b)
        self.mem.write_walk(out.walk, res, out.tpb, out.offsets)
        return ()

    def _into(self, args: list, ins: list, spans: list) -> np.ndarray | None:
        """The output's bytes as a writable float32 array of ``out_shape`` (C order) for the
        last stage of :meth:`run_free` to write into -- the values ``write_walk`` would store
        there, stored by the ufunc itself (the same loop: C-ordered operands of the same strides
        as before, an output that meets none of them) -- when the output walk is contiguous in a
        space mapped whole, in range, every array argument of the stage has the output's shape
        (so does its result) and no input's bytes meet the output's (``spans``: the inputs'
        byte ranges where known, else numpy's bounds test); else None."""
        i = self.inst
        oshape = tuple(i.out_shape)
        for v in args:
            if type(v) is np.ndarray and v.shape != oshape:
                return None
        o = _span(self.mem, i.output, i.tpb)
        if o is None:
            return None
        ys, ylo, yhi = o
        if yhi - ylo != 4 * math.prod(oshape):
            return None
        y = np.ndarray(oshape, _F32, ys.buf, ylo)
        for v, sp in zip(ins, spans):
            if sp is None:
                if np.may_share_memory(y, v):  # (bounds only: may be a false alarm)
                    return None
            elif sp[0] is ys and sp[1] < yhi and ylo < sp[2]:
                return None
        return y


def _span(mem, w, tpb: int) -> tuple | None:
    """(space, first byte, end byte) of float32 walk ``w``'s beats in TPB ``tpb`` when they are
    contiguous in a space mapped whole and in range (``Memory.read_walk``'s view of them is
    those bytes), else None. (Spaces of different TPBs or kinds share no bytes.)"""
    rel = twu.per_levels("view-plan", w.levels, _view_plan_rel, 4, twu.STRIDED)
    if rel is None or not rel[0]:
        return None
    s = mem.space(w.space, tpb)
    lo = w.base + rel[1]
    hi = lo + rel[2]
    if not s.whole or lo < 0 or hi > s.size:
        return None
    return s, lo, hi


#: The float stages :meth:`CvuExec.run_free` evaluates itself.
_FREE_BINARY = frozenset({CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.MAX, CvuOp.MIN})


def _float_only(i) -> bool:
    """Every input and the output float32, every stage a float binary op of
    :data:`_FREE_BINARY` (two arguments, one an array) or relu of an array, no ``iparams``."""
    if i.output.dtype is not DType.F32 or any(w.dtype is not DType.F32 for w in i.inputs):
        return False
    for st in i.stages:
        if st.iparams:
            return False
        arrays = [r for r in st.args if r.kind is not RefKind.IMM]
        if st.op is CvuOp.RELU:
            if len(st.args) != 1 or not arrays:
                return False
        elif st.op not in _FREE_BINARY or len(st.args) != 2 or not arrays:
            return False
    return True
