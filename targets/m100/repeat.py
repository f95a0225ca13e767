"""Layer repetition: one compiled program run ``count`` times with per-instance DDR bases.

An LLM is the same decoder layer N times over different weights and KV caches. Compiling and
storing it N times would cost N x compile time and N x program size; instead a program carries a
:class:`Repeat` (section kind 5 of the container, ``program.py``): the streams are run ``count``
times in sequence, and in instance ``i`` every DDR walk whose base lies in a :class:`Region`
``[lo, hi)`` of instance 0 is moved by ``region.offsets[i]`` bytes. Nothing else changes between
instances, so the program grows by 8 bytes per region and instance (what must differ), not by a
copy of the streams.

Region kinds:

* ``instance`` -- each instance has its own copy (a layer's weights, its KV cache, the cache rows
  it appends). Its symbols are supplied / read per instance as ``name@i``.
* ``chain`` -- the activation that flows from one instance to the next: the output ``y`` of instance
  i is the input ``x`` of instance i+1. :func:`repeat_program` makes ``x`` and ``y`` a ping-pong pair
  (even instances read x and write y, odd ones the other way round), so no copy is needed. A chain
  input is supplied once (instance 0), a chain output read after the last instance.

Each instance starts on an idle machine with fresh sync counters (an instance boundary is a
barrier: every unit of instance i is done before instance i+1 is dispatched).

Why timing-only simulation runs one instance and multiplies (``m100-sim`` does this): two
instances differ only in the base addresses of DDR walks (:func:`relocate` replaces nothing else,
and :func:`check_relocatable` refuses a program where a walk would straddle a region), and the
cycle model charges a DDR endpoint to the shared ``ddr`` and ``axi`` links by byte count only
(``sim/timing.py``, ``_endpoint``: no DDR address enters a cost) -- the one place a DDR address
enters the timing is whether a DMA reads bytes a transfer in flight on its engine writes
(``sim/dma_ahead.py``, session 11), and relocation keeps that answer: each walk lies in one region,
a region moves as a whole (the chain's ping-pong swaps two disjoint ones), and the regions stay
disjoint in every instance; the instances start from the same
state (idle units, fresh counters), and a timing-only run has no data that could steer it. So each
instance takes exactly the cycles of instance 0. ``Simulator(..., unroll_repeat=True)`` simulates
every instance instead; the tests compare both.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

from m100.errors import M100Error

from .isa import Instruction, Space, Walk

REGION_KINDS = ("instance", "chain")
#: per-instance copies are placed at multiples of this (DDR bytes)
ALIGN = 4096


class RepeatError(M100Error, ValueError):
    """A repetition that is malformed or does not fit the program / machine."""


@dataclass(frozen=True)
class Region:
    lo: int
    hi: int
    kind: str
    offsets: tuple[int, ...]

    def contains(self, addr: int) -> bool:
        return self.lo <= addr < self.hi


@dataclass(frozen=True)
class Repeat:
    count: int
    regions: tuple[Region, ...]

    def region_of(self, addr: int) -> Region | None:
        for r in self.regions:
            if r.contains(addr):
                return r
        return None

    def validate(self, ddr_bytes: int) -> None:
        if self.count < 1:
            raise RepeatError(f"repeat count {self.count} must be >= 1")
        spans = sorted((r.lo, r.hi) for r in self.regions)
        for r in self.regions:
            if r.kind not in REGION_KINDS:
                raise RepeatError(f"repeat region [{r.lo:#x}, {r.hi:#x}): kind {r.kind!r} is not "
                                  f"one of {', '.join(REGION_KINDS)}")
            if not 0 <= r.lo < r.hi:
                raise RepeatError(f"repeat region [{r.lo:#x}, {r.hi:#x}) is empty or negative")
            if len(r.offsets) != self.count:
                raise RepeatError(f"repeat region [{r.lo:#x}, {r.hi:#x}) has {len(r.offsets)} "
                                  f"offsets for {self.count} instances")
            for i, o in enumerate(r.offsets):
                if r.lo + o < 0 or r.hi + o > ddr_bytes:
                    raise RepeatError(f"repeat region [{r.lo:#x}, {r.hi:#x}) of instance {i} "
                                      f"falls outside DDR (size {ddr_bytes:#x})")
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            if b0 < a1:
                raise RepeatError(f"repeat regions [{a0:#x}, {a1:#x}) and [{b0:#x}, {b1:#x}) "
                                  "overlap")

    # --- binary form (container section kind 5) -------------------------------------------------
    def to_bytes(self) -> bytes:
        out = [struct.pack("<II", self.count, len(self.regions))]
        for r in self.regions:
            out.append(struct.pack("<BQQ", REGION_KINDS.index(r.kind), r.lo, r.hi))
            out.append(struct.pack(f"<{self.count}q", *r.offsets))
        return b"".join(out)

    @staticmethod
    def from_bytes(data: bytes) -> Repeat:
        try:
            count, n = struct.unpack_from("<II", data, 0)
            pos = 8
            regions = []
            for _ in range(n):
                kind, lo, hi = struct.unpack_from("<BQQ", data, pos)
                pos += 17
                offs = struct.unpack_from(f"<{count}q", data, pos)
                pos += 8 * count
                if kind >= len(REGION_KINDS):
                    raise RepeatError(f"repeat region kind {kind} is unknown")
                regions.append(Region(lo, hi, REGION_KINDS[kind], tuple(offs)))
        except struct.error:
            raise RepeatError("truncated repeat section") from None
        if pos != len(data):
            raise RepeatError(f"{len(data) - pos} trailing bytes in the repeat section")
        return Repeat(count, tuple(regions))


# --- relocation -------------------------------------------------------------------------------------
def _walk_fields(inst: Instruction):
    for f in dataclasses.fields(inst):
        v = getattr(inst, f.name)
        if isinstance(v, Walk):
            yield f.name, v, False
        elif isinstance(v, tuple) and v and all(isinstance(w, Walk) for w in v):
            yield f.name, v, True


def _extent(w: Walk) -> tuple[int, int]:
    """Lowest and highest byte address a walk touches (from its levels, without expanding it)."""
    lo = hi = 0
    for lv in w.levels:
        vals = (lv.initial, lv.initial + (lv.count - 1) * lv.step) if lv.count else (0, 0)
        lo += min(vals)
        hi += max(vals)
    bits = w.dtype.bits
    return w.base + lo * bits // 8, w.base + ((hi + 1) * bits + 7) // 8 - 1


def check_relocatable(streams: dict[int, list[Instruction]], rep: Repeat) -> None:
    """Every DDR walk lies wholly inside one region or wholly outside all of them."""
    for key, insts in streams.items():
        for pos, inst in enumerate(insts):
            for name, v, many in _walk_fields(inst):
                for w in (v if many else (v,)):
                    if w.space is not Space.DDR:
                        continue
                    a, b = _extent(w)
                    ra, rb = rep.region_of(a), rep.region_of(b)
                    touching = [r for r in rep.regions if r.lo <= b and a < r.hi]
                    if ra is not rb or (ra is None and touching):
                        raise RepeatError(f"stream {key}, instruction {pos} "
                                          f"({inst.MNEMONIC}) {name}: DDR walk "
                                          f"[{a:#x}, {b:#x}] straddles a repeat region")


def _reloc_walk(w: Walk, rep: Repeat, i: int) -> Walk:
    if w.space is not Space.DDR:
        return w
    r = rep.region_of(w.base)
    if r is None or r.offsets[i] == 0:
        return w
    return dataclasses.replace(w, base=w.base + r.offsets[i])


def relocate(streams: dict[int, list[Instruction]], rep: Repeat, i: int
             ) -> dict[int, list[Instruction]]:
    """The streams of instance ``i``: DDR walk bases in a region moved by its offset; nothing else."""
    out: dict[int, list[Instruction]] = {}
    for key, insts in streams.items():
        lst = []
        for inst in insts:
            changes = {}
            for name, v, many in _walk_fields(inst):
                nv = tuple(_reloc_walk(w, rep, i) for w in v) if many else _reloc_walk(v, rep, i)
                if nv != v:
                    changes[name] = nv
            lst.append(dataclasses.replace(inst, **changes) if changes else inst)
        out[key] = lst
    return out


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def repeat_program(program, count: int, *, chain: list[tuple[str, str]] = (),
                   per_instance: list[str] | None = None):
    """``program`` (one layer) made to run ``count`` times: a new Program with a :class:`Repeat`.

    ``chain``: (input, output) symbol pairs of the activation carried from one instance to the next
    (same size; made a ping-pong pair). ``per_instance``: symbols each instance has its own copy of
    (default: every ``weight`` symbol); copies of instance i >= 1 are placed above everything the
    program uses in DDR. Other symbols and all segments are shared by the instances."""
    from .program import Program

    if count < 1:
        raise RepeatError(f"repeat count {count} must be >= 1")
    syms = {s.name: s for s in program.symbols}
    for n in [a for pair in chain for a in pair] + list(per_instance or []):
        if n not in syms:
            raise RepeatError(f"no symbol '{n}' to repeat (symbols: {', '.join(syms)})")
        if syms[n].space is not Space.DDR:
            raise RepeatError(f"symbol '{n}' is not in DDR")
    per = list(per_instance) if per_instance is not None else \
        [s.name for s in program.symbols if s.role == "weight"]
    top = 0
    for key, insts in program.streams.items():
        for inst in insts:
            for _, v, many in _walk_fields(inst):
                for w in (v if many else (v,)):
                    if w.space is Space.DDR:
                        top = max(top, _extent(w)[1] + 1)
    for s in program.symbols:
        if s.space is Space.DDR:
            top = max(top, s.address + s.nbytes)
    for seg in program.segments:
        if seg.space is Space.DDR:
            top = max(top, seg.address + len(seg.data))
    regions = []
    nxt = _align(top)
    for n in per:
        s = syms[n]
        size = _align(s.nbytes)
        offs = [0]
        for _ in range(1, count):
            offs.append(nxt - s.address)
            nxt += size
        regions.append(Region(s.address, s.address + s.nbytes, "instance", tuple(offs)))
    for a, b in chain:
        sa, sb = syms[a], syms[b]
        if sa.nbytes != sb.nbytes or sa.role != "input" or sb.role != "output":
            raise RepeatError(f"chain '{a}' -> '{b}': needs an input and an output of one size")
        d = sb.address - sa.address
        regions.append(Region(sa.address, sa.address + sa.nbytes, "chain",
                              tuple(0 if i % 2 == 0 else d for i in range(count))))
        regions.append(Region(sb.address, sb.address + sb.nbytes, "chain",
                              tuple(0 if i % 2 == 0 else -d for i in range(count))))
    rep = Repeat(count, tuple(sorted(regions, key=lambda r: r.lo)))
    check_relocatable(program.streams, rep)
    out = Program(program.machine, program.fingerprint, dict(program.streams),
                  list(program.segments), list(program.symbols), dict(program.metadata))
    out.repeat = rep
    rep.validate(program.machine_obj().ddr_bytes)
    return out


def instance_address(rep: Repeat, addr: int, i: int) -> int:
    r = rep.region_of(addr)
    return addr if r is None else addr + r.offsets[i]


__all__ = ["ALIGN", "REGION_KINDS", "Region", "Repeat", "RepeatError", "check_relocatable",
           "instance_address", "relocate", "repeat_program"]
