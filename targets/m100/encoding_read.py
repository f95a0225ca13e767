"""The encoding's reader, the only decoder: :class:`_Reader` (the coder's primitives that
consume bits and validate them) and the instruction-level decoders. The layout it reads is
:mod:`.encoding_fields`' description; the format: :mod:`.encoding`'s docstring."""

from __future__ import annotations

from typing import Any

from m100.errors import M100Error

from .encoding_fields import (_BODY, DTYPE_BITS, HEADER_BITS, LENGTH_BITS, OPCODE_BITS,
                              SPACE_BITS, TRIGGER_BITS, DecodeError, Layout, _Coder, _name, layout)
from .isa import BY_OPCODE, Instruction, Monitor, Space, Sync, Trigger, Update, Walk
from .machine import Machine


_SPACES = {int(sp): sp for sp in Space}
_SPACE_MASK = (1 << SPACE_BITS) - 1


class _Reader(_Coder):
    reading = True

    def __init__(self, L: Layout, chunk: bytes, base: int, nbits: int,
                 walks: dict | None = None):
        self.L = L
        self.v = int.from_bytes(chunk, "big")
        self.total = len(chunk) * 8
        self.base = base  # bit offset of chunk in the whole data (for messages)
        self.pos = 0
        self.end = nbits
        # {(width, bits): Walk} decoded before, and {("levels", level count, their bits): levels
        # tuple} (see walk)
        self.walks = walks

    def walk(self, w: Walk | None, what: str) -> Walk:
        """A walk field; with a memo (:func:`decode_instructions`), the walk object decoded before
        from the same bits when there is one. A walk's width follows from its space and its level
        count (the fields between are fixed-width), so (width, bits) is the field's whole
        content; a walk is immutable and its checks and caches are functions of its fields, so
        every instruction can share it. Only a walk that decoded without error is remembered,
        and anything out of the ordinary (an unknown space, a field past the end) takes the
        ordinary path, which reports it."""
        memo = self.walks
        if memo is None:
            return super().walk(w, what)
        L, pos = self.L, self.pos
        head = SPACE_BITS
        if pos + head <= self.end:
            space = _SPACES.get((self.v >> (self.total - pos - head)) & _SPACE_MASK)
            if space is not None:
                head += (L.tpb if space is Space.HBSM else 0) + L.addr[space] + DTYPE_BITS
                if pos + head + L.nlevels <= self.end:
                    n = (self.v >> (self.total - pos - head - L.nlevels)) & ((1 << L.nlevels) - 1)
                    width = head + L.nlevels + 3 * n * L.field
                    if pos + width <= self.end:
                        key = (width, (self.v >> (self.total - pos - width)) & ((1 << width) - 1))
                        got = memo.get(key)
                        if got is not None:
                            self.pos = pos + width
                            return got
                        got = super().walk(w, what)
                        # equal levels (the last 3 * n fields) share one tuple too: the
                        # interpreter's derivations per levels tuple find it by identity
                        # (m100.sim.twu.per_levels) instead of hashing its Levels
                        lkey = ("levels", n, key[1] & ((1 << 3 * n * L.field) - 1))
                        lv = memo.get(lkey)
                        if lv is None:
                            memo[lkey] = got.levels
                        else:
                            object.__setattr__(got, "levels", lv)  # (an equal tuple)
                        memo[key] = got
                        return got
        return super().walk(w, what)

    def u(self, w: int, x: int | None, what: str) -> int:
        if self.pos + w > self.end:
            self.fail(f"{_name(what)}: field runs past the end of the instruction "
                      f"({self.end} bits)")
        v = (self.v >> (self.total - self.pos - w)) & ((1 << w) - 1)
        self.pos += w
        return v

    def remaining(self) -> int:
        return self.end - self.pos

    def fail(self, what: str) -> Any:
        raise DecodeError(self.base + self.pos, what)

    def sync(self, y: Sync | None, what: str = "sync") -> Sync:
        """:meth:`_Coder.sync`, with the monitors and updates (fixed-width records) read by
        shifts when all of them lie within the instruction and every trigger is valid; otherwise
        the field is read again from its start by the general path, which reports the error."""
        start = self.pos
        blocks = self.uv(None, (what, ".blocks"))
        L, v, total, end = self.L, self.v, self.total, self.end
        n = self.count(None, (what, ".monitors"))
        fields = (L.tpb, L.counter, L.value, L.value)
        if self.pos + n * sum(fields) <= end:
            recs, self.pos = _records(v, total, self.pos, n, fields)
            mons = [Monitor(*r) for r in recs]
            k = self.count(None, (what, ".updates"))
            fields = (L.counter, L.mask, L.value, TRIGGER_BITS)
            if self.pos + k * sum(fields) <= end:
                recs, pos = _records(v, total, self.pos, k, fields)
                triggers = Trigger._value2member_map_
                upds = []
                for c, mask, value, t in recs:
                    trig = triggers.get(t)
                    if trig is None:
                        break
                    upds.append(Update(c, mask, value, trig))
                else:
                    self.pos = pos
                    return Sync(blocks, tuple(mons), tuple(upds))
        self.pos = start
        return super().sync(y, what)


def _records(v: int, total: int, pos: int, n: int, widths: tuple[int, ...]):
    """``n`` fixed-width records of the bit string ``v`` (``total`` bits, MSB first) from bit
    ``pos``, each a list of its fields (``widths``); and the position after them."""
    recs = []
    for _ in range(n):
        got = []
        for w in widths:
            got.append((v >> (total - pos - w)) & ((1 << w) - 1))
            pos += w
        recs.append(got)
    return recs, pos


def decode_instruction_at(data: bytes, byte_pos: int, machine: Machine,
                          walks: dict | None = None) -> tuple[Instruction, int]:
    """Decode the instruction starting at ``byte_pos``; return it and the next byte position.
    ``walks``: a memo shared by the instructions of one decode (:meth:`_Reader.walk`)."""
    L = layout(machine)
    bit = byte_pos * 8
    left = len(data) - byte_pos
    if left * 8 < HEADER_BITS:
        raise DecodeError(bit, f"truncated instruction header ({left} bytes left, "
                               f"{HEADER_BITS // 8} needed)")
    opcode = data[byte_pos]
    kind = BY_OPCODE.get(opcode)
    if kind is None:
        raise DecodeError(bit, f"unknown opcode {opcode:#04x}")
    nbits = int.from_bytes(data[byte_pos + 1:byte_pos + 1 + LENGTH_BITS // 8], "big")
    if nbits < HEADER_BITS:
        raise DecodeError(bit + OPCODE_BITS, f"{kind.MNEMONIC}: length {nbits} bits is shorter "
                                             "than the header")
    nbytes = (nbits + 7) // 8
    if nbytes > left:
        raise DecodeError(bit + OPCODE_BITS, f"{kind.MNEMONIC}: truncated: length says {nbits} bits "
                                             f"but only {left * 8} are left")
    r = _Reader(L, data[byte_pos:byte_pos + nbytes], bit, nbits, walks)
    r.pos = HEADER_BITS
    try:
        inst = _BODY[kind](r, None)
    except DecodeError:
        raise
    except (ValueError, TypeError, OverflowError) as e:  # a dataclass refusing garbage
        raise DecodeError(r.base + r.pos, f"{kind.MNEMONIC}: malformed fields: {e}") from None
    if r.pos != nbits:
        raise DecodeError(bit + OPCODE_BITS, f"{kind.MNEMONIC}: length field says {nbits} bits but "
                                             f"the fields use {r.pos}")
    if r.v & ((1 << (nbytes * 8 - nbits)) - 1):
        raise DecodeError(bit + nbits, f"{kind.MNEMONIC}: non-zero padding bits")
    try:
        inst.check(machine)
    except M100Error as e:
        raise DecodeError(bit, f"{kind.MNEMONIC}: invalid instruction: {e}") from None
    except Exception as e:  # noqa: BLE001 -- garbage must never escape as a crash
        raise DecodeError(bit, f"{kind.MNEMONIC}: invalid instruction "
                               f"({type(e).__name__}: {e})") from None
    object.__setattr__(inst, "_bits_on", (machine, nbits))  # see instruction_bits
    return inst, byte_pos + nbytes


def decode_instructions(data: bytes, machine: Machine, walks: dict | None = None) -> list[Instruction]:
    """Decode a stream written by :func:`encode_instructions`. Raises :class:`DecodeError`
    (bit offset into ``data``) on any malformed, truncated or invalid instruction.

    Equal walk fields decode to one shared (immutable) :class:`Walk` object: ``walks`` is the
    memo (pass one dict to share walks across the streams of a program; None: one per call).
    ResNet-18 224: 18 310 walk fields, 10 504 distinct; the shared objects also keep the
    interpreter's per-walk derivations (views, race keys, bank histograms) once."""
    data = bytes(data)
    out: list[Instruction] = []
    pos = 0
    if walks is None:
        walks = {}
    while pos < len(data):
        inst, pos = decode_instruction_at(data, pos, machine, walks)
        out.append(inst)
    return out
