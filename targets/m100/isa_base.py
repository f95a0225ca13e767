"""TPB ISA foundations: element types, unit/op enums, Tensor-Walker walks, sync actions, and the
:class:`Instruction` base class with its checking helpers.

Split out of ``isa.py`` (which defines the instruction kinds and re-exports everything here) to keep
modules small; import from ``m100.targets.m100.isa``. The semantics are documented in ``isa.py``'s
module docstring and ``docs/isa.md``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import ClassVar

import numpy as np

from m100.errors import M100Error

from .machine import Machine


class IsaError(M100Error, ValueError):
    """An instruction that is not valid for the ISA or the machine (message names the field)."""


# ----------------------------------------------------------------------------------------------
# enums
# ----------------------------------------------------------------------------------------------
class Space(IntEnum):
    DDR = 0
    SRAM = 1  # CCB SRAM
    HBSM = 2  # HBSM of TPB ``walk.tpb``


class DType(IntEnum):
    I8 = 0
    I32 = 1
    F16 = 2
    BF16 = 3
    F32 = 4
    I4 = 5  # packed, two per byte, low nibble first (weights)
    I16 = 6  # 16-bit two's complement (CVU/DTDU/CSU operands; the TCU has no i16)

    @property
    def bits(self) -> int:
        return _DTYPE_BITS[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F16, DType.BF16, DType.F32)

    @property
    def is_int(self) -> bool:
        return not self.is_float

    @property
    def short(self) -> str:
        return self.name.lower()

    @classmethod
    def from_short(cls, s: str) -> DType:
        try:
            return cls[s.upper()]
        except KeyError:
            raise IsaError(f"unknown element type '{s}' "
                           f"(known: {', '.join(d.short for d in cls)})") from None


_DTYPE_BITS = {DType.I8: 8, DType.I32: 32, DType.F16: 16, DType.BF16: 16, DType.F32: 32, DType.I4: 4,
               DType.I16: 16}


class Unit(IntEnum):
    TCU = 0
    CVU = 1
    DTDU = 2
    CSU = 3
    DMA = 4  # a CCB DMA engine


class Trigger(IntEnum):
    END = 0  # once, when the whole instruction's writes are visible
    BLOCK = 1  # after each block's writes are visible


class Act(IntEnum):
    """TCU epilogue activation (also CVU unary ops of the same name)."""
    NONE = 0
    RELU = 1
    GELU = 2  # erf form
    SILU = 3
    SIGMOID = 4
    TANH = 5
    CLAMP = 6  # clamp(x, clamp_lo, clamp_hi)


class CvuOp(IntEnum):
    # unary (1 arg)
    COPY = 0
    NEG = 1
    ABS = 2
    EXP = 3
    LOG = 4
    SQRT = 5
    RSQRT = 6
    RECIP = 7
    RELU = 8
    GELU = 9
    SILU = 10
    SIGMOID = 11
    TANH = 12
    SQUARE = 13
    ERF = 14
    FLOOR = 15
    CEIL = 16
    SIN = 17
    COS = 18
    ATAN = 19
    SIGN = 20  # -1.0, 0.0 or 1.0 (NaN stays NaN)
    ROUND = 21  # to nearest, ties to even (ONNX Round)
    FTOI = 22  # float -> integer lane, rounding toward zero, saturating to i32 (NaN -> 0)
    ITOF = 23  # integer -> float lane (f32, round to nearest even)
    # integer lane only (docs/isa.md "CVU lanes"); iparams[0] = w, the MLIR integer width
    ZEXT = 24  # the low w bits as an unsigned number (a result outside i32 faults)
    SEXT = 25  # the low w bits as a signed two's complement number (wrap-around truncation)
    # binary (2 args, numpy broadcasting)
    ADD = 32
    SUB = 33
    MUL = 34
    DIV = 35
    MAX = 36
    MIN = 37
    POW = 38
    CMP_GT = 39  # 1.0 where a > b else 0.0
    CMP_GE = 40
    CMP_EQ = 41
    # integer lane only: bitwise logic on two's complement values, shifts, truncated remainder
    AND = 42
    OR = 43
    XOR = 44
    SHL = 45  # iparams (w,): (a << b) wrapped to w bits; 0 unless 0 <= b mod 2**w < w
    SHR = 46  # iparams (w, logical): a's w bits shifted right (arithmetic, or logical if
    # logical != 0, the result wrapped to w bits); b mod 2**w >= w: the sign fill (0 if logical)
    REM = 47  # a - trunc(a / b) * b (the sign of a; C %); b == 0 faults
    # ternary
    SELECT = 48  # args (cond, a, b): a where cond != 0 else b
    FMA = 49  # args (a, b, c): a * b + c in f32 with one rounding (fused multiply-add)
    # reductions along ``axis`` (keepdims)
    RSUM = 64
    RMAX = 65
    RMIN = 66
    RMEAN = 67
    RPROD = 68
    # fused idioms
    SOFTMAX = 96  # along axis
    LAYERNORM = 97  # args (x[, gamma[, beta]]), along axis, eps = fparam
    RMSNORM = 98  # args (x[, gamma]), along axis, eps = fparam
    MAXPOOL = 99  # x [N,H,W,C]; iparams (kh, kw, sh, sw, pad_t, pad_l, pad_b, pad_r)
    AVGPOOL = 100  # same iparams; count_include_pad = iparams[8] if present (default 0)

    @property
    def arity(self) -> tuple[int, int]:
        """(min, max) number of arguments."""
        v = int(self)
        if v < 32:
            return (1, 1)
        if v < 48:
            return (2, 2)
        if v < 64:
            return (3, 3)
        if v < 96:
            return (1, 1)
        if self is CvuOp.LAYERNORM:
            return (1, 3)
        if self is CvuOp.RMSNORM:
            return (1, 2)
        return (1, 1)


class RefKind(IntEnum):
    INPUT = 0  # the unit's input walk number ``index``
    STAGE = 1  # the result of an earlier stage ``index`` (an intermediate buffer)
    IMM = 2  # a scalar immediate ``imm``


class Routine(IntEnum):
    """CSU routine table (the cluster CPU's service routines); see docs/isa.md.

    Edge cases (as the interpreter implements them): an index outside ``[0, V)`` is a run-time
    fault; SCATTER with repeated indices keeps the *last* update of a row; TOPK sorts by value
    (descending if ``largest`` != 0, the default 1), ties by the lower index; ARGMAX returns the
    first maximum (the minimum if ``largest`` == 0; the last one if ``last`` != 0); MEMCPY converts the element type like ``dtdu.copy``.
    """
    GATHER = 0  # operands (table[V,D], indices[N], out[N,D]); params (V, D, N)
    SCATTER = 1  # operands (updates[N,D], indices[N], table[V,D]); params (V, D, N)
    TOPK = 2  # operands (x[R,L], values[R,K], indices[R,K] i32); params (R, L, K, largest)
    ARGMAX = 3  # operands (x[R,L], out[R] i32); params (R, L[, largest=1[, last=0]])
    MEMCPY = 4  # operands (src, dst) in any spaces (the GSDU); params ()


ROUTINE_ARITY = {Routine.GATHER: (3, 3), Routine.SCATTER: (3, 3), Routine.TOPK: (3, 4),
                 Routine.ARGMAX: (2, 4), Routine.MEMCPY: (0, 0)}
ROUTINE_OPERANDS = {Routine.GATHER: 3, Routine.SCATTER: 3, Routine.TOPK: 3, Routine.ARGMAX: 2,
                    Routine.MEMCPY: 2}


def csu_operand_bytes(routine: Routine, operand_bytes: list[float], params) -> list[float]:
    """The bytes a CSU routine moves per operand, given each operand's whole size: what the
    interpreter's timing charges (``sim/timing.py``) and the scheduler plans (``kinds/csu.py``).
    A GATHER reads only the ``N`` rows it selects of its ``[V, D]`` table (an embedding lookup of
    one token reads one 8 KB row of a 262 MB table, not the table); every other operand (and
    every other routine) moves all its bytes."""
    out = list(operand_bytes)
    if routine is Routine.GATHER and len(params) >= 3 and params[0] > 0:
        v, _, n = params[:3]
        out[0] = operand_bytes[0] * min(n, v) / v
    return out


# ----------------------------------------------------------------------------------------------
# walks
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Level:
    """One Tensor-Walker loop level: (Initial, Step, Final) in elements."""
    initial: int
    step: int
    final: int

    @property
    def count(self) -> int:
        if self.step == 0:
            return self.final
        return (self.final - self.initial) // self.step + 1

    @property
    def last(self) -> int:
        return self.initial if self.step == 0 else self.final

    def values(self) -> np.ndarray:
        return self.initial + self.step * np.arange(self.count, dtype=np.int64)

    def check(self) -> None:
        if self.step == 0:
            if self.final < 1:
                raise IsaError(f"repeat level {self}: final (the repeat count) must be >= 1")
            return
        span = self.final - self.initial
        if span % self.step or span // self.step < 0:
            raise IsaError(f"level {self}: final - initial must be a non-negative multiple of step")

    @staticmethod
    def span(count: int, stride: int, start: int = 0) -> Level:
        """The level that visits ``count`` values ``start, start + stride, ...``."""
        if count < 1:
            raise IsaError(f"a level must visit at least one value, not {count}")
        if stride == 0 or count == 1:
            return Level(start, 0, count) if count > 1 else Level(start, 1, start)
        return Level(start, stride, start + stride * (count - 1))


@dataclass(frozen=True)
class Walk:
    """An operand: memory space, base byte address, element type, TWU levels (outermost first)."""
    space: Space
    tpb: int
    base: int
    dtype: DType
    levels: tuple[Level, ...]

    @staticmethod
    def strided(space: Space, tpb: int, base: int, dtype: DType, shape: tuple[int, ...],
                strides: tuple[int, ...] | None = None, offset: int = 0) -> Walk:
        """A walk over ``shape`` with element ``strides`` (row-major contiguous by default)."""
        if strides is None:
            strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
        levels = [Level.span(n, s) for n, s in zip(shape, strides)]
        if levels and offset:
            levels[0] = Level(levels[0].initial + offset, levels[0].step,
                              levels[0].final + (offset if levels[0].step else 0))
        return Walk(Space(space), tpb, base, DType(dtype), tuple(levels))

    @functools.cached_property
    def shape(self) -> tuple[int, ...]:  # cached: a walk is immutable
        return tuple(lv.count for lv in self.levels)

    @functools.cached_property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @functools.cached_property
    def injective(self) -> bool:
        """No two beats of the walk share an element (a sufficient, structural test: the levels,
        sorted by stride, form a mixed-radix number system with gaps allowed). The interpreter
        writes an injective walk through a strided view; sync-insert folds its byte ranges."""
        lv = sorted((abs(x.step), x.count) for x in self.levels if x.count > 1)
        reach = 0  # largest offset difference the finer levels can produce
        for st, cnt in lv:
            if st == 0 or st <= reach:
                return False
            reach += st * (cnt - 1)
        return True

    def offsets(self) -> np.ndarray:
        """Element offsets of every beat in walk order (flat int64), by broadcasting the levels."""
        if not self.levels:
            return np.zeros(1, dtype=np.int64)
        n = len(self.levels)
        total = np.zeros((1,) * n, dtype=np.int64)
        for i, lv in enumerate(self.levels):
            shape = [1] * n
            shape[i] = lv.count
            total = total + lv.values().reshape(shape)
        return total.reshape(-1)

    def byte_addresses(self) -> np.ndarray:
        """Byte address of every beat (for i4 the byte holding the nibble)."""
        return self.base + (self.offsets() * self.dtype.bits) // 8

    def moved(self, tpb: int, base: int) -> Walk:
        """This walk at another TPB and base (the same space, element type and levels tuple).
        What depends on the levels alone -- the offset range, and that the levels passed a
        machine's checks -- is kept in one holder shared by this walk and every walk moved from
        it (or from one of those): twu-materialize makes a program's walks this way, one per
        loop nest (ResNet-50: ~26 000 walks of ~1 500 shapes), and each would otherwise redo
        the level loops of :meth:`byte_range` and :meth:`check` (``test_moved_walk_checks``)."""
        g = self.__dict__.get("_geom")
        if g is None:
            g = self.__dict__["_geom"] = _LevelFacts(self.offset_range())
        w = Walk(self.space, tpb, base, self.dtype, self.levels)
        w.__dict__["_geom"] = g
        return w

    def offset_range(self) -> tuple[int, int]:
        """(lowest, highest) element offset touched, computed from the levels (no enumeration)."""
        g = self.__dict__.get("_geom")
        if g is not None:
            return g.offsets
        lo = hi = 0
        for lv in self.levels:
            a, b = lv.initial, lv.last
            lo += min(a, b)
            hi += max(a, b)
        return lo, hi

    def byte_range(self) -> tuple[int, int]:
        """[start, end) byte range touched (a bounding interval); kept on the (frozen) walk."""
        got = self.__dict__.get("_byte_range")
        if got is None:
            lo, hi = self.offset_range()
            bits = self.dtype.bits
            got = self.base + (lo * bits) // 8, self.base + ((hi + 1) * bits + 7) // 8
            object.__setattr__(self, "_byte_range", got)
        return got

    def check(self, machine: Machine, what: str = "walk") -> None:
        if self.__dict__.get("_ok_on") is machine:  # frozen: a walk valid once stays valid
            return
        self._check_on(machine, what)
        object.__setattr__(self, "_ok_on", machine)

    def _check_on(self, machine: Machine, what: str) -> None:
        g = self.__dict__.get("_geom")
        if g is None or g.levels_ok_on is not machine:  # (the levels' checks: a function of
            # the levels and the machine alone, passed once for walks moved from one another)
            self._check_levels(machine, what)
            if g is not None:
                g.levels_ok_on = machine
        size = space_size(machine, self.space)
        if not 0 <= self.base < size:
            raise IsaError(f"{what}: base address {self.base:#x} outside {self.space.name} "
                           f"(size {size:#x})")
        start, end = self.byte_range()
        if start < 0 or end > size:
            raise IsaError(f"{what}: bytes [{start}, {end}) fall outside {self.space.name} "
                           f"(size {size})")
        if self.space is Space.HBSM:
            machine.check_tpb(self.tpb)
        elif self.tpb != 0:
            raise IsaError(f"{what}: a {self.space.name} walk must have tpb 0, not {self.tpb}")

    def _check_levels(self, machine: Machine, what: str) -> None:
        if len(self.levels) > machine.twu_max_levels:
            raise IsaError(f"{what}: {len(self.levels)} TWU levels exceed the machine's budget of "
                           f"{machine.twu_max_levels}")
        lim = 1 << (machine.twu_field_bits - 1)
        for lv in self.levels:
            lv.check()
            for v in (lv.initial, lv.step, lv.final):
                if not -lim <= v < lim:
                    raise IsaError(f"{what}: level field {v} does not fit the TWU's "
                                   f"{machine.twu_field_bits}-bit registers")


class _LevelFacts:
    """What a walk's levels alone decide, shared by walks moved from one another
    (:meth:`Walk.moved`): the offset range, the machine whose level checks they passed, and
    the levels' bits in the program encoding (``encoding_write._walk_bits``)."""

    __slots__ = ("offsets", "levels_ok_on", "bits")

    def __init__(self, offsets: tuple[int, int]):
        self.offsets = offsets
        self.levels_ok_on: Machine | None = None
        self.bits: tuple | None = None  # (layout, the levels' encoded bits): the writer's


def space_size(machine: Machine, space: Space) -> int:
    return {Space.DDR: machine.ddr_bytes, Space.SRAM: machine.ccb_sram_bytes,
            Space.HBSM: machine.hbsm_bytes}[space]


# ----------------------------------------------------------------------------------------------
# sync
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Monitor:
    """Wait until SU counter ``counter`` of TPB ``tpb`` is >= ``expected + block * per_block``."""
    tpb: int
    counter: int
    expected: int
    per_block: int = 0


@dataclass(frozen=True)
class Update:
    """Add ``amount`` to SU counter ``counter`` on every TPB of ``tpb_mask``."""
    counter: int
    tpb_mask: int
    amount: int = 1
    trigger: Trigger = Trigger.END


@dataclass(frozen=True)
class Sync:
    blocks: int = 1
    monitors: tuple[Monitor, ...] = ()
    updates: tuple[Update, ...] = ()

    def check(self, machine: Machine, own_tpb: int | None) -> None:
        if self.blocks < 1:
            raise IsaError(f"sync: blocks must be >= 1, not {self.blocks}")
        for m in self.monitors:
            machine.check_tpb(m.tpb)
            if own_tpb is not None and m.tpb != own_tpb:
                raise IsaError(f"sync: a TPB unit monitors its own SU only (TPB {own_tpb}), "
                               f"not TPB {m.tpb}")
            _check_counter(machine, m.counter)
            if (not 0 <= m.expected <= machine.su_counter_max
                    or not 0 <= m.per_block <= machine.su_counter_max):
                raise IsaError(f"sync: monitor {m} has an expected value outside the counter range")
            if m.expected + (self.blocks - 1) * m.per_block > machine.su_counter_max:
                raise IsaError(f"sync: monitor {m} expects more than a counter can hold")
        for u in self.updates:
            _check_counter(machine, u.counter)
            if u.tpb_mask <= 0 or u.tpb_mask & ~machine.all_tpbs_mask:
                raise IsaError(f"sync: update of counter {u.counter} has TPB mask {u.tpb_mask:#x} "
                               f"naming no TPB or a TPB the machine does not have")
            if u.amount < 1 or u.amount > machine.su_counter_max:
                raise IsaError(f"sync: update amount {u.amount} out of range")


def _check_counter(machine: Machine, c: int) -> None:
    if not 0 <= c < machine.su_counters:
        raise IsaError(f"sync: counter {c} out of range (the SU has {machine.su_counters} counters)")


def mask_of(*tpbs: int) -> int:
    m = 0
    for t in tpbs:
        m |= 1 << t
    return m


def tpbs_of(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


# ----------------------------------------------------------------------------------------------
# instructions
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Requant:
    """int32 -> int8 requantization by ``x * multiplier * 2**-shift``, rounded, ``+ zero_point``,
    saturated to ``[qmin, qmax]``; the rounding is the machine's ``tcu_requant`` mode
    (docs/isa.md section 5):

    * ``f32-rne`` (the M100): ``round_half_even(f32(f32(x) * m)) + zero_point`` with the f32
      multiplier ``m = f32(multiplier * 2**-shift)``;
    * ``fixed-half-up``: ``x * multiplier`` exact (int64), arithmetic shift with round-half-up
      (``(p + (1 << (shift - 1))) >> shift``; no rounding term when shift == 0), ``+ zero_point``.

    ``per_channel``, if given, is an i32 walk of ``[F, 2]`` (multiplier, shift) pairs that
    replaces the per-tensor values per output channel.
    """
    multiplier: int = 1
    shift: int = 0
    zero_point: int = 0
    qmin: int = -128
    qmax: int = 127
    per_channel: Walk | None = None


@dataclass(frozen=True)
class Epilogue:
    """TCU non-linear pipeline: accumulator (+ bias) -> activation -> (requantize | dequantize).

    ``dequant`` (integer contractions only), if given, is an f32 walk of ``[F]`` per-channel
    scales: the int32 accumulator (after bias and activation) becomes ``f32(acc)`` (round to
    nearest even), times ``dequant[f]`` in f32 (one rounding), stored in the result's float type
    (f16/bf16/f32, rounded to nearest even on store). It is ONNX's ``Cast(Cast(acc, f32) *
    scale, f16)`` (W8A8 projections) done by the TCU instead of a CVU pass over the i32 result.
    """
    bias: Walk | None = None  # [F] in the accumulator type (i32 or f32)
    act: Act = Act.NONE
    clamp_lo: float = 0.0
    clamp_hi: float = 0.0
    requant: Requant | None = None
    dequant: Walk | None = None  # [F] f32 per-channel scales of an i32 -> float result


@dataclass(frozen=True)
class Ref:
    """A CVU stage argument: an input walk, an earlier stage's result, or an immediate."""
    kind: RefKind
    index: int = 0
    imm: float = 0.0


@dataclass(frozen=True)
class Stage:
    op: CvuOp
    args: tuple[Ref, ...]
    axis: int = -1
    fparam: float = 0.0
    iparams: tuple[int, ...] = ()


#: The field names of each instruction class (``Instruction.walks``).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


class Instruction:
    """Base of every instruction kind. ``UNIT`` and ``OPCODE`` identify the kind."""
    UNIT: ClassVar[Unit]
    OPCODE: ClassVar[int]
    MNEMONIC: ClassVar[str]
    sync: Sync

    @property
    def executor(self) -> tuple[Unit, int]:
        """(unit, TPB index) -- or (DMA, engine) for CCB DMA."""
        return (self.UNIT, getattr(self, "tpb"))

    def walks(self) -> list[tuple[str, Walk, bool]]:
        """Every operand walk as (field name, walk, is_written): a new list each call, listed
        once per (frozen) instruction -- a compile asks 3-4 times an instruction (sync-insert's
        checks and accesses, the dataflow certificate; ResNet-50: ~46 000 calls)."""
        got = self.__dict__.get("_walks")
        if got is None:
            got = tuple(self._list_walks())
            object.__setattr__(self, "_walks", got)
        return list(got)

    def _list_walks(self) -> list[tuple[str, Walk, bool]]:
        """:meth:`walks` listed from the fields."""
        out: list[tuple[str, Walk, bool]] = []
        names = _FIELD_NAMES.get(type(self))
        if names is None:  # a class's fields never change: listed once
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))
        for name in names:
            v = getattr(self, name)
            if isinstance(v, Walk):
                out.append((name, v, name in self.WRITES))
            elif isinstance(v, tuple) and v and isinstance(v[0], Walk):
                for i, w in enumerate(v):
                    out.append((f"{name}[{i}]", w, name in self.WRITES and
                                self._tuple_written(name, i)))
            elif isinstance(v, Epilogue):
                if v.bias is not None:
                    out.append(("bias", v.bias, False))
                if v.requant is not None and v.requant.per_channel is not None:
                    out.append(("requant.per_channel", v.requant.per_channel, False))
                if v.dequant is not None:
                    out.append(("dequant", v.dequant, False))
        return out

    WRITES: ClassVar[frozenset[str]] = frozenset()

    def _tuple_written(self, name: str, i: int) -> bool:
        return True

    def check(self, machine: Machine) -> None:
        """Raise :class:`IsaError` if the instruction is not valid on ``machine``."""
        if self.__dict__.get("_ok_on") is machine:  # frozen: valid once, valid again
            return
        self._check_all(machine)
        object.__setattr__(self, "_ok_on", machine)

    def check_as_resynced(self, src: Instruction, machine: Machine) -> None:
        """:meth:`check` of an instruction that is ``src`` with a new ``sync`` (sync-insert's
        output): when ``src`` is valid on ``machine`` (checked), every other field is the same
        object and ``sync.blocks`` is the same, the whole check differs from ``src``'s only in
        the sync's own check (the kinds' ``_check`` read ``sync.blocks`` alone), so only that
        runs and the instruction is remembered as valid (the final verification of the IR
        then does not check it again). Otherwise the full :meth:`check`."""
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))
        if (type(src) is type(self) and src.__dict__.get("_ok_on") is machine
                and self.sync.blocks == src.sync.blocks
                and all(getattr(self, f) is getattr(src, f) for f in names if f != "sync")):
            unit, idx = self.executor
            self.sync.check(machine, None if unit is Unit.DMA else idx)
            object.__setattr__(self, "_ok_on", machine)
        else:
            self.check(machine)

    def _check_all(self, machine: Machine) -> None:
        unit, idx = self.executor
        if unit is Unit.DMA:
            if not 0 <= idx < machine.ccb_dma_engines:
                raise IsaError(f"{self.MNEMONIC}: DMA engine {idx} does not exist "
                               f"(the CCB has {machine.ccb_dma_engines})")
            self.sync.check(machine, None)
        else:
            machine.check_tpb(idx)
            self.sync.check(machine, idx)
        for name, w, _ in self.walks():
            if w.__dict__.get("_ok_on") is not machine:  # (``Walk.check``'s memo: no label)
                w.check(machine, f"{self.MNEMONIC} operand '{name}'")
        self._check(machine)

    def _check(self, machine: Machine) -> None:
        pass


def _need_elems(name: str, w: Walk, shape: tuple[int, ...], mnem: str) -> None:
    n = math.prod(shape)
    if w.num_elements != n:  # (the message formatted only for a failure)
        raise IsaError(f"{mnem}: operand '{name}' walks {w.num_elements} elements but the "
                       f"logical shape {list(shape)} has {n}")


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "annotations", "math", "np", "dataclass", "field", "fields", "IntEnum", "ClassVar",
    "M100Error", "Machine")]
