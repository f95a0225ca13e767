"""The encoding's writer: :class:`_Writer` (the coder's primitives that append bits, with
one-step paths for plain values) and the instruction-level encoders. The layout it writes is
:mod:`.encoding_fields`' description; the format: :mod:`.encoding`'s docstring."""

from __future__ import annotations

from collections.abc import Iterable

from .encoding_fields import (_BODY, _VARLEN_LIMIT, _ZERO_F64, DTYPE_BITS, F64_BITS, HEADER_BITS,
                              LENGTH_BITS, OPCODE_BITS, SPACE_BITS, TRIGGER_BITS, VARLEN_BITS,
                              EncodeError, Layout, _Coder, _f64_bits, _name, layout)
from .isa import DType, Instruction, Space, Sync, Trigger, Walk
from .machine import Machine


class _Writer(_Coder):
    reading = False

    def __init__(self, L: Layout):
        self.L = L
        self.v = 0
        self.n = 0

    def u(self, w: int, x: int | None, what: str) -> int:
        assert x is not None
        if not 0 <= x < (1 << w):
            self.fail(f"{_name(what)} = {x} does not fit {w} bits")
        self.v = (self.v << w) | x
        self.n += w
        return x

    def remaining(self) -> int:
        return 1 << 62

    def make(self, cls: type, *args: Any) -> None:
        return None  # (what a body makes is not read: :meth:`_Coder.make`)

    def fail(self, what: str) -> Any:
        raise EncodeError(f"cannot encode: {_name(what)}")

    # The primitives below write the bits :class:`_Coder`'s give for the values that fit (a
    # plain ``int`` / ``float`` / ``bool``), in one step; anything else goes through the
    # generic method, which converts it or names the field that does not fit
    # (``test_writer_primitives_equal_the_generic_coder``).
    def uv(self, x: int | None, what: str) -> int:
        if type(x) is int and x >= 0:
            n = x.bit_length()
            if n < _VARLEN_LIMIT:  # (``_Coder.uv``: the length, then the value in n bits)
                self.v = (((self.v << VARLEN_BITS) | n) << n) | x
                self.n += VARLEN_BITS + n
                return x
        return _Coder.uv(self, x, what)

    def pair(self, x: tuple | None, n: int, what: str) -> tuple[int, ...]:
        if type(x) is tuple and len(x) == n and all(
                type(e) is int and e >= 0 and e.bit_length() < _VARLEN_LIMIT for e in x):
            v, k = self.v, self.n
            for e in x:  # each a varint (``uv``), as ``_Coder.pair`` writes them
                b = e.bit_length()
                v = (((v << VARLEN_BITS) | b) << b) | e
                k += VARLEN_BITS + b
            self.v, self.n = v, k
            return x
        return _Coder.pair(self, x, n, what)

    def flag(self, x: bool | None, what: str) -> bool:
        if x is True or x is False:
            self.v = (self.v << 1) | x
            self.n += 1
            return x
        return _Coder.flag(self, x, what)

    def opt_f64(self, x: float | None, what: str) -> float:
        if type(x) is float:
            b = _f64_bits(x)
            if b == _ZERO_F64:  # +0.0: the presence bit alone, clear
                self.v <<= 1
                self.n += 1
                return 0.0
            self.v = (((self.v << 1) | 1) << F64_BITS) | b  # the presence bit, the f64
            self.n += 1 + F64_BITS
            return x
        return _Coder.opt_f64(self, x, what)

    def walk(self, w: Walk | None, what: str) -> Walk:
        """The same bits as :meth:`_Coder.walk`, from :func:`_walk_bits` (remembered on the
        immutable walk per layout: a program's walks are often shared); a walk with a field that
        does not fit goes through the generic coder, which names it."""
        if type(w) is not Walk:
            return _Coder.walk(self, w, what)
        got = w.__dict__.get("_m100_bits")
        if got is None or got[0] is not self.L:
            got = (self.L, _walk_bits(self.L, w))
            if got[1] is None:
                return _Coder.walk(self, w, what)
            w.__dict__["_m100_bits"] = got  # frozen dataclass: its __dict__ holds caches
        v, n = got[1]
        self.v = (self.v << n) | v
        self.n += n
        return w

    def sync(self, y: Sync | None, what: str = "sync") -> Sync:
        """The same bits as :meth:`_Coder.sync` (see :func:`_sync_bits`); a field that does not
        fit goes through the generic coder, which names it."""
        got = _sync_bits(self.L, y) if type(y) is Sync else None
        if got is None:
            return _Coder.sync(self, y, what)
        self.v = (self.v << got[1]) | got[0]
        self.n += got[1]
        return y


def _uv_bits(x: int) -> tuple[int, int] | None:
    """A varint's (value, bit count): ``VARLEN_BITS`` of length, then the minimal bits."""
    if x < 0 or x.bit_length() >= 1 << VARLEN_BITS:
        return None
    n = x.bit_length()
    return (n << n) | x, VARLEN_BITS + n


def _sync_bits(L: Layout, y: Sync) -> tuple[int, int] | None:
    """(value, bit count) of a Sync in :meth:`_Coder.sync`'s order and widths, or None when a
    field does not fit (``test_sync_bits_equal_the_generic_coder``)."""
    v = n = 0
    for x in (y.blocks, len(y.monitors)):
        got = _uv_bits(x) if type(x) is int else None
        if got is None:
            return None
        v, n = (v << got[1]) | got[0], n + got[1]
    tw, cw, vw = L.tpb, L.counter, L.value
    for m in y.monitors:
        t, c, e, p = m.tpb, m.counter, m.expected, m.per_block
        if not (type(t) is type(c) is type(e) is type(p) is int and 0 <= t < 1 << tw and 0 <= c < 1 << cw and 0 <= e < 1 << vw and 0 <= p < 1 << vw):
            return None
        v = (((((((v << tw) | t) << cw) | c) << vw) | e) << vw) | p
        n += tw + cw + 2 * vw
    got = _uv_bits(len(y.updates))
    if got is None:
        return None
    v, n = (v << got[1]) | got[0], n + got[1]
    mw = L.mask
    for u in y.updates:
        c, k, a, g = u.counter, u.tpb_mask, u.amount, u.trigger
        if type(g) is not Trigger:
            return None
        g = int(g)
        if not (type(c) is type(k) is type(a) is int and 0 <= c < 1 << cw and 0 <= k < 1 << mw and 0 <= a < 1 << vw
                and 0 <= g < 1 << TRIGGER_BITS):
            return None
        v = (((((((v << cw) | c) << mw) | k) << vw) | a) << TRIGGER_BITS) | g
        n += cw + mw + vw + TRIGGER_BITS
    return v, n


def _walk_bits(L: Layout, w: Walk) -> tuple[int, int] | None:
    """(value, bit count) of a walk's fields in :meth:`_Coder.walk`'s order and widths, or None
    when one does not fit (``test_walk_bits_equal_the_generic_coder``)."""
    space = w.space
    v = int(space)
    if not 0 <= v < 1 << SPACE_BITS:
        return None
    n = SPACE_BITS
    if space is Space.HBSM:
        if not 0 <= w.tpb < 1 << L.tpb:
            return None
        v = (v << L.tpb) | w.tpb
        n += L.tpb
    elif w.tpb != 0:
        return None
    if not (type(space) is Space and type(w.dtype) is DType and type(w.tpb) is type(w.base) is int):
        return None  # (hand-built walks with other number types: the generic coder)
    aw = L.addr[space]
    dt = int(w.dtype)
    lv = w.levels
    if not (0 <= w.base < 1 << aw and 0 <= dt < 1 << DTYPE_BITS and 0 <= len(lv) < 1 << L.nlevels):
        return None
    v = (((((v << aw) | w.base) << DTYPE_BITS) | dt) << L.nlevels) | len(lv)
    n += aw + DTYPE_BITS + L.nlevels
    g = w.__dict__.get("_geom")  # (walks moved from one another: their levels' bits once)
    if g is not None:
        got = g.bits
        if got is None or got[0] is not L:
            got = g.bits = (L, _levels_bits(L, lv))
        if got[1] is None:
            return None
        return (v << got[1][1]) | got[1][0], n + got[1][1]
    got = _levels_bits(L, lv)
    if got is None:
        return None
    return (v << got[1]) | got[0], n + got[1]


def _levels_bits(L: Layout, lv: tuple) -> tuple[int, int] | None:
    """(value, bit count) of a walk's levels (the end of :func:`_walk_bits`), or None when a
    field does not fit."""
    v = n = 0
    f = L.field
    lim, mask = 1 << (f - 1), (1 << f) - 1
    for x in lv:
        a, b, c = x.initial, x.step, x.final
        if not (type(a) is type(b) is type(c) is int and -lim <= a < lim and -lim <= b < lim and -lim <= c < lim):
            return None
        v = (((((v << f) | (a & mask)) << f) | (b & mask)) << f) | (c & mask)
        n += 3 * f
    return v, n



# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------
def _encode_bits(inst: Instruction, machine: Machine, check: bool,
                 L: Layout | None = None) -> tuple[int, int]:
    """(value, bit count) of ``inst``; ``L``: ``layout(machine)``, when the caller has it (a
    stream's instructions share it: ``layout``'s cache hashes the machine, field by field)."""
    kind = type(inst)
    if kind not in _BODY:
        raise EncodeError(f"cannot encode {kind.__name__}: not an instruction kind")
    if check:
        inst.check(machine)
    w = _Writer(layout(machine) if L is None else L)
    w.u(OPCODE_BITS, kind.OPCODE, "opcode")
    w.u(LENGTH_BITS, 0, "length")  # patched below
    _BODY[kind](w, inst)
    if w.n >= 1 << LENGTH_BITS:
        raise EncodeError(f"{kind.MNEMONIC}: {w.n} bits exceed the {LENGTH_BITS}-bit length field")
    v = w.v | (w.n << (w.n - HEADER_BITS))
    return v, w.n


def instruction_bits(inst: Instruction, machine: Machine, check: bool = True) -> int:
    """The exact encoded size of ``inst`` in bits (header included, byte padding excluded).
    Remembered on the (immutable) instruction per machine; a decoded instruction arrives with the
    size its header gave (the decoder checked that its fields use exactly that many bits)."""
    got = inst.__dict__.get("_bits_on")
    if got is not None and got[0] is machine:
        if check:
            inst.check(machine)
        return got[1]
    n = _encode_bits(inst, machine, check)[1]
    object.__setattr__(inst, "_bits_on", (machine, n))
    return n


def encode_instruction(inst: Instruction, machine: Machine, check: bool = True,
                       L: Layout | None = None) -> bytes:
    """Encode one instruction (``inst.check(machine)`` first unless ``check=False``), zero-padded
    to whole bytes (``L``: as :func:`_encode_bits`)."""
    v, n = _encode_bits(inst, machine, check, L)
    pad = -n % 8
    return (v << pad).to_bytes((n + pad) // 8, "big")


def encode_instructions(insts: Iterable[Instruction], machine: Machine, check: bool = True) -> bytes:
    """Encode a stream: the byte-aligned instructions back to back."""
    L = layout(machine)
    return b"".join(encode_instruction(i, machine, check, L) for i in insts)
