"""The encoding's layout, shared by the writer and the reader: the field widths
(:class:`Layout`), the errors, and one description of every instruction kind's fields
(:class:`_Coder` and the per-kind bodies of :data:`_BODY`), run as writer
(:mod:`.encoding_write`) or as reader (:mod:`.encoding_read`), so the two cannot disagree about
the layout. The format itself: :mod:`.encoding`'s docstring (``docs/isa.md``)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

from m100.errors import M100Error

from .isa import (BY_OPCODE, Act, Broadcast, Conv2D, Copy, CsuCall, CvuOp, CvuPipeline, DType, Dma,
                  Epilogue, Fill, Instruction, IsaError, Level, MatMul, Monitor, Ref, RefKind, Requant,
                  Routine, Space, Stage, Sync, Trigger, Update, Walk, space_size)
from .machine import Machine

ENCODING_VERSION = 2  # 2: Epilogue.dequant (a presence bit after requant)

OPCODE_BITS = 8
LENGTH_BITS = 24
HEADER_BITS = OPCODE_BITS + LENGTH_BITS
VARLEN_BITS = 7  # the length prefix of a varint
_VARLEN_LIMIT = 1 << VARLEN_BITS  # a varint's value has fewer bits than this
SPACE_BITS = 2
DTYPE_BITS = 4
ACT_BITS = 4
CVUOP_BITS = 8
REFKIND_BITS = 2
ROUTINE_BITS = 8
TRIGGER_BITS = 1
SHIFT_BITS = 6  # requant shift, 0..63
ARGS_BITS = 2  # CVU stage argument count, 0..3
F64_BITS = 64


class DecodeError(M100Error, ValueError):
    """Bytes that are not a valid instruction stream; ``offset`` is the bit offset of the fault."""

    def __init__(self, offset: int, what: str):
        self.offset = offset
        self.what = what
        super().__init__(f"bit offset {offset} (byte {offset // 8}): {_name(what)}")


class EncodeError(IsaError):
    """An instruction field that does not fit its encoding (the message names the field)."""


def _name(what: Any) -> str:
    """Field names are built lazily (tuples of parts) and joined only for an error message."""
    return what if isinstance(what, str) else "".join(_name(w) if isinstance(w, tuple) else str(w)
                                                       for w in what)


def _bits(x: int) -> int:
    return max(1, x.bit_length())


class Layout:
    """The machine-derived field widths (see the module docstring)."""

    def __init__(self, m: Machine):
        self.machine = m
        self.tpb = _bits(m.num_tpbs - 1)
        self.mask = m.num_tpbs
        self.counter = _bits(m.su_counters - 1)
        self.value = m.su_counter_bits
        self.nlevels = m.twu_max_levels.bit_length()
        self.field = m.twu_field_bits
        self.addr = {s: _bits(space_size(m, s) - 1) for s in Space}
        self.engine = _bits(m.ccb_dma_engines - 1)
        self.nstages = m.cvu_max_stages.bit_length()

    def as_dict(self) -> dict[str, int]:
        d = {k: v for k, v in vars(self).items() if isinstance(v, int)}
        d.update({f"addr_{s.name.lower()}": w for s, w in self.addr.items()})
        return d


@functools.lru_cache(maxsize=16)
def layout(machine: Machine) -> Layout:
    return Layout(machine)


class _NoSrc:
    """The decode direction's source: every attribute is None (kept per name after its first
    lookup, so later lookups are plain attribute hits)."""

    def __getattr__(self, name: str) -> Any:
        self.__dict__[name] = None
        return None


_NO_SRC = _NoSrc()


def _Src(obj: Any) -> Any:
    """Attribute access that yields None when there is no source object (decode direction);
    the object itself when there is one (encode direction: a wrapper whose ``__getattr__`` read
    ``getattr(obj, name)`` only added a Python call per field -- ResNet-50's save: ~220 000;
    ``test_writer_primitives_equal_the_generic_coder`` encodes through such a wrapper too)."""
    return _NO_SRC if obj is None else obj


_F64 = struct.Struct(">d")
_ZERO_F64 = 0


def _f64_bits(x: float) -> int:
    return int.from_bytes(_F64.pack(float(x)), "big")


# ----------------------------------------------------------------------------------------------
# the coder: one description of every field, run as writer or as reader
# ----------------------------------------------------------------------------------------------
class _Coder:
    """Base: ``field`` methods take the value to write (writer) or ``None`` (reader) and return
    the value written/read. The per-kind functions below are shared by both directions, so the
    encoder and decoder cannot disagree about the layout."""

    L: Layout
    reading: bool

    # primitives implemented by the subclasses
    def u(self, w: int, x: int | None, what: str) -> int:
        raise NotImplementedError

    def remaining(self) -> int:
        raise NotImplementedError

    def fail(self, what: str) -> Any:
        raise NotImplementedError

    # derived fields
    def s(self, w: int, x: int | None, what: str) -> int:
        if x is not None:
            lim = 1 << (w - 1)
            if not -lim <= x < lim:
                self.fail(f"{_name(what)} = {x} does not fit {w} signed bits")
            x &= (1 << w) - 1
        v = self.u(w, x, what)
        return v - (1 << w) if v >> (w - 1) else v

    def uv(self, x: int | None, what: str) -> int:
        if x is not None:
            x = int(x)
            if x < 0:
                self.fail(f"{_name(what)} = {x} must be >= 0")
            if x.bit_length() >= 1 << VARLEN_BITS:
                self.fail(f"{_name(what)} = {x} is too large for a varint")
        n = self.u(VARLEN_BITS, None if x is None else x.bit_length(), (what, " (length)"))
        v = self.u(n, x, what)
        if x is None and n and not v >> (n - 1):
            self.fail(f"{_name(what)}: non-minimal varint")
        return v

    def sv(self, x: int | None, what: str) -> int:
        z = None if x is None else (2 * int(x) if x >= 0 else -2 * int(x) - 1)
        v = self.uv(z, what)
        return v >> 1 if not v & 1 else -((v + 1) >> 1)

    def flag(self, x: bool | None, what: str) -> bool:
        return bool(self.u(1, None if x is None else int(bool(x)), what))

    def f64(self, x: float | None, what: str) -> float:
        v = self.u(F64_BITS, None if x is None else _f64_bits(x), what)
        return _F64.unpack(v.to_bytes(8, "big"))[0]

    def opt_f64(self, x: float | None, what: str) -> float:
        """A float that is usually 0.0: presence bit, then the f64 (exact, -0.0 is present)."""
        present = self.flag(None if x is None else _f64_bits(x) != _ZERO_F64, (what, " present"))
        if not present:
            return 0.0
        v = self.f64(x, what)
        if self.reading and _f64_bits(v) == _ZERO_F64:
            self.fail(f"{_name(what)}: non-canonical (present but +0.0)")
        return v

    def enum(self, cls: type, w: int, x: Any, what: str) -> Any:
        v = self.u(w, None if x is None else int(x), what)
        got = cls._value2member_map_.get(v)  # the member, without the Enum call
        if got is not None:
            return got
        try:
            return cls(v)
        except ValueError:
            return self.fail(f"{_name(what)}: {v} is not a valid {cls.__name__}")

    def count(self, x: int | None, what: str, min_bits_each: int = 1) -> int:
        n = self.uv(x, (what, " count"))
        if x is None and n * min_bits_each > self.remaining():
            self.fail(f"{_name(what)} count {n} exceeds the bits left")
        return n

    def seq(self, xs: tuple | None, what: str, fn: Callable[[Any, str], Any]) -> tuple:
        n = self.count(None if xs is None else len(xs), what)
        return tuple(fn(None if xs is None else xs[i], (what, "[", i, "]")) for i in range(n))

    def opt(self, x: Any, what: str, fn: Callable[[Any, str], Any], absent: Any = None) -> Any:
        present = self.flag(None if self.reading else x is not absent, (what, " present"))
        return fn(x, what) if present else absent

    def make(self, cls: type, *args: Any) -> Any:
        """``cls(*args)``: an instruction, or a part of one, made of the fields just coded. The
        bodies below (and :meth:`epilogue`, :meth:`requant`, :meth:`ref`, :meth:`stage`) make
        what they read through it; the writer's answer is None -- its bits are the arguments',
        coded in order before the call, and the object was thrown away (ResNet-50's 17 090
        instructions: ~0.03 of the encoding's ~0.24 CPU-s)."""
        return cls(*args)

    # structured fields
    def tpb(self, x: int | None, what: str) -> int:
        return self.u(self.L.tpb, x, what)

    def mask(self, x: int | None, what: str) -> int:
        return self.u(self.L.mask, x, what)

    def walk(self, w: Walk | None, what: str) -> Walk:
        s, L = _Src(w), self.L
        space = self.enum(Space, SPACE_BITS, s.space, (what, ".space"))
        if space is Space.HBSM:
            tpb = self.tpb(s.tpb, (what, ".tpb"))
        else:
            tpb = 0
            if w is not None and w.tpb != 0:
                self.fail(f"{_name(what)}: a {space.name} walk must have tpb 0")
        base = self.u(L.addr[space], s.base, (what, ".base"))
        dtype = self.enum(DType, DTYPE_BITS, s.dtype, (what, ".dtype"))
        lv = s.levels
        n = self.u(L.nlevels, None if lv is None else len(lv), (what, " level count"))
        levels = []
        for i in range(n):
            ls = _Src(None if lv is None else lv[i])
            levels.append(Level(self.s(L.field, ls.initial, (what, ".levels[", i, "].initial")),
                                self.s(L.field, ls.step, (what, ".levels[", i, "].step")),
                                self.s(L.field, ls.final, (what, ".levels[", i, "].final"))))
        return Walk(space, tpb, base, dtype, tuple(levels))

    def sync(self, y: Sync | None, what: str = "sync") -> Sync:
        s, L = _Src(y), self.L
        blocks = self.uv(s.blocks, (what, ".blocks"))

        def mon(m: Monitor | None, wh: str) -> Monitor:
            ms = _Src(m)
            return Monitor(self.tpb(ms.tpb, (wh, ".tpb")),
                           self.u(L.counter, ms.counter, (wh, ".counter")),
                           self.u(L.value, ms.expected, (wh, ".expected")),
                           self.u(L.value, ms.per_block, (wh, ".per_block")))

        def upd(u: Update | None, wh: str) -> Update:
            us = _Src(u)
            return Update(self.u(L.counter, us.counter, (wh, ".counter")),
                          self.mask(us.tpb_mask, (wh, ".tpb_mask")),
                          self.u(L.value, us.amount, (wh, ".amount")),
                          self.enum(Trigger, TRIGGER_BITS, us.trigger, (wh, ".trigger")))

        return Sync(blocks, self.seq(s.monitors, (what, ".monitors"), mon),
                    self.seq(s.updates, (what, ".updates"), upd))

    def shape(self, x: tuple | None, what: str) -> tuple[int, ...]:
        return self.seq(x, what, lambda v, wh: self.uv(v, wh))

    def requant(self, r: Requant | None, what: str) -> Requant:
        s = _Src(r)
        return self.make(Requant, self.sv(s.multiplier, (what, ".multiplier")),
                       self.u(SHIFT_BITS, s.shift, (what, ".shift")),
                       self.sv(s.zero_point, (what, ".zero_point")),
                       self.sv(s.qmin, (what, ".qmin")), self.sv(s.qmax, (what, ".qmax")),
                       self.opt(s.per_channel, (what, ".per_channel"), self.walk))

    def epilogue(self, e: Epilogue | None, what: str = "epilogue") -> Epilogue:
        s = _Src(e)
        return self.make(Epilogue, self.opt(s.bias, (what, ".bias"), self.walk),
                        self.enum(Act, ACT_BITS, s.act, (what, ".act")),
                        self.opt_f64(s.clamp_lo, (what, ".clamp_lo")),
                        self.opt_f64(s.clamp_hi, (what, ".clamp_hi")),
                        self.opt(s.requant, (what, ".requant"), self.requant),
                        self.opt(s.dequant, (what, ".dequant"), self.walk))

    def ref(self, r: Ref | None, what: str) -> Ref:
        s = _Src(r)
        kind = self.enum(RefKind, REFKIND_BITS, s.kind, (what, ".kind"))
        has_index = self.flag(None if r is None else r.index != 0, (what, ".index present"))
        index = self.sv(s.index, (what, ".index")) if has_index else 0
        if has_index and index == 0:
            self.fail(f"{_name(what)}.index: non-canonical (present but 0)")
        return self.make(Ref, kind, index, self.opt_f64(s.imm, (what, ".imm")))

    def stage(self, st: Stage | None, what: str) -> Stage:
        s = _Src(st)
        op = self.enum(CvuOp, CVUOP_BITS, s.op, (what, ".op"))
        a = s.args
        n = self.u(ARGS_BITS, None if a is None else len(a), (what, " arg count"))
        args = tuple(self.ref(None if a is None else a[i], (what, ".args[", i, "]")) for i in range(n))
        return self.make(Stage, op, args, self.sv(s.axis, (what, ".axis")), self.opt_f64(s.fparam, (what, ".fparam")),
                     self.seq(s.iparams, (what, ".iparams"), lambda v, wh: self.sv(v, wh)))

    def stages(self, x: tuple | None, what: str) -> tuple[Stage, ...]:
        n = self.u(self.L.nstages, None if x is None else len(x), (what, " count"))
        return tuple(self.stage(None if x is None else x[i], (what, "[", i, "]")) for i in range(n))

    def pair(self, x: tuple | None, n: int, what: str) -> tuple[int, ...]:
        if x is not None and len(x) != n:
            self.fail(f"{_name(what)} must have {n} entries")
        return tuple(self.uv(None if x is None else x[i], (what, "[", i, "]")) for i in range(n))



# ----------------------------------------------------------------------------------------------
# per-kind bodies (field order = the documented bit order)
# ----------------------------------------------------------------------------------------------
def _matmul(c: _Coder, x: MatMul | None) -> MatMul:
    s = _Src(x)
    return c.make(MatMul, c.tpb(s.tpb, "tpb"), c.walk(s.a, "a"), c.walk(s.b, "b"), c.walk(s.c, "c"),
                  c.uv(s.m, "m"), c.uv(s.n, "n"), c.uv(s.k, "k"), c.flag(s.accumulate, "accumulate"),
                  c.epilogue(s.epilogue), c.sync(s.sync), *_dequant(c, x), _acc_in(c, x),
                  *_post(c, x))


def _dequant(c: _Coder, x: MatMul | None) -> tuple[Walk | None, int]:
    """The optional on-the-fly i4 dequantization of a matmul: presence bit, scale walk, block."""
    s = _Src(x)
    scale = c.opt(s.scale, "scale", c.walk)
    if scale is None:
        return None, 0
    block = c.uv(s.block, "block")
    if c.reading and block == 0:
        c.fail("block: 0 with a scale")
    return scale, block


def _acc_in(c: _Coder, x: MatMul | None) -> Walk | None:
    """The optional f32 accumulator read instead of C (presence bit, walk)."""
    return c.opt(_Src(x).acc, "acc", c.walk)


def _post(c: _Coder, x: MatMul | None) -> tuple[tuple[Stage, ...], Walk | None]:
    """The optional post stages of a matmul's epilogue, the last field: present when the
    instruction's length leaves bits after ``acc`` (no presence bit, so a matmul without them
    encodes as in version 2, bit for bit): the stages (count, each stage), then ``post_in``
    (presence bit, walk)."""
    s = _Src(x)
    if (c.remaining() <= 0) if c.reading else not x.post:  # type: ignore[union-attr]
        return (), None
    stages = c.stages(s.post, "post")
    if c.reading and not stages:
        c.fail("post: present but no stages")
    return stages, c.opt(s.post_in, "post_in", c.walk)


def _conv2d(c: _Coder, x: Conv2D | None) -> Conv2D:
    s = _Src(x)
    return c.make(Conv2D, c.tpb(s.tpb, "tpb"), c.walk(s.x, "x"), c.walk(s.w, "w"), c.walk(s.y, "y"),
                  c.uv(s.n, "n"), c.uv(s.h, "h"), c.uv(s.width, "width"), c.uv(s.c, "c"),
                  c.uv(s.f, "f"), c.uv(s.kh, "kh"), c.uv(s.kw, "kw"),
                  c.pair(s.stride, 2, "stride"), c.pair(s.pad, 4, "pad"),
                  c.pair(s.dilation, 2, "dilation"), c.uv(s.groups, "groups"),
                  c.flag(s.accumulate, "accumulate"), c.epilogue(s.epilogue), c.sync(s.sync))


def _cvu(c: _Coder, x: CvuPipeline | None) -> CvuPipeline:
    s = _Src(x)
    tpb = c.tpb(s.tpb, "tpb")
    inputs = c.seq(s.inputs, "inputs", c.walk)
    n = len(inputs)
    if x is not None and len(x.in_shapes) != n:
        c.fail("in_shapes must have one shape per input")
    in_shapes = tuple(c.shape(None if x is None else x.in_shapes[i], f"in_shapes[{i}]")
                      for i in range(n))
    return c.make(CvuPipeline, tpb, inputs, in_shapes, c.walk(s.output, "output"),
                       c.shape(s.out_shape, "out_shape"), c.stages(s.stages, "stages"),
                       c.sync(s.sync))


def _copy(c: _Coder, x: Copy | None) -> Copy:
    s = _Src(x)
    return c.make(Copy, c.tpb(s.tpb, "tpb"), c.walk(s.src, "src"), c.walk(s.dst, "dst"), c.sync(s.sync))


def _fill(c: _Coder, x: Fill | None) -> Fill:
    s = _Src(x)
    return c.make(Fill, c.tpb(s.tpb, "tpb"), c.walk(s.dst, "dst"), c.f64(s.value, "value"), c.sync(s.sync))


def _broadcast(c: _Coder, x: Broadcast | None) -> Broadcast:
    s = _Src(x)
    return c.make(Broadcast, c.tpb(s.tpb, "tpb"), c.walk(s.src, "src"), c.walk(s.dst, "dst"),
                     c.mask(s.tpb_mask, "tpb_mask"), c.sync(s.sync))


def _csu(c: _Coder, x: CsuCall | None) -> CsuCall:
    s = _Src(x)
    return c.make(CsuCall, c.tpb(s.tpb, "tpb"), c.enum(Routine, ROUTINE_BITS, s.routine, "routine"),
                   c.seq(s.operands, "operands", c.walk),
                   c.seq(s.params, "params", lambda v, wh: c.sv(v, wh)), c.sync(s.sync))


def _dma(c: _Coder, x: Dma | None) -> Dma:
    s = _Src(x)
    return c.make(Dma, c.u(c.L.engine, s.engine, "engine"), c.walk(s.src, "src"), c.walk(s.dst, "dst"),
               c.mask(s.tpb_mask, "tpb_mask"), c.sync(s.sync))


_BODY: dict[type, Callable[[_Coder, Any], Instruction]] = {
    MatMul: _matmul, Conv2D: _conv2d, CvuPipeline: _cvu, Copy: _copy, Fill: _fill,
    Broadcast: _broadcast, CsuCall: _csu, Dma: _dma}
assert set(_BODY) == set(BY_OPCODE.values())
