"""The program container: what ``m100-translate --to-bin`` writes and ``m100-sim`` runs.

A :class:`Program` holds, for one machine (name + fingerprint):

* ``streams``: the loosely sorted instruction stream of every cluster (key = cluster id), plus the
  CCB's DMA stream under :data:`CCB_STREAM` (-1);
* ``segments``: initial memory contents (weights, constants) at DDR or CCB SRAM addresses;
* ``symbols``: the program's inputs, outputs and shape-only weights (name, role, shape, dtype,
  space, address);
* ``metadata``: free-form string pairs (source model, compiler version, pass pipeline, ...).

File layout (version :data:`PROGRAM_VERSION`; all integers little-endian; ``docs/isa.md`` has the
table)::

    header   magic "M100PRG\\0" | u16 version | u16 encoding version | u64 machine fingerprint
             | u16 name length | machine name (utf-8) | u32 section count
             | section table: per section u16 kind, u16 flags (0), i32 id, u64 offset, u64 length,
               u32 crc32 of the payload, u32 reserved (0)
             | u32 crc32 of every header byte before it
    payloads at their offsets (after the header, in table order, non-overlapping; zero padding
    before a segment whose bytes start at an offset congruent to its address modulo
    :data:`SEGMENT_ALIGN`)

Section kinds: 1 = instruction stream (id = cluster, -1 = CCB; payload = ``encode_instructions``),
2 = segment (id = index; u8 space, u64 address, u16 name length, name, data), 3 = symbol table,
4 = metadata (UTF-8 JSON object of strings), 5 = repeat (optional: run the streams N times with
per-instance DDR bases, :mod:`m100.targets.m100.repeat`). Every section is CRC-checked before it is decoded, so
corruption is reported as a :class:`ProgramError` naming the byte offset, never mis-decoded.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from m100.errors import M100Error

from .encoding import ENCODING_VERSION, DecodeError, decode_instructions, encode_instructions
from .isa import DType, Dma, Instruction, IsaError, Space, space_size
from .machine import Machine, MachineError, get_machine, machine_by_fingerprint, machine_from_spec
from .repeat import Repeat, RepeatError

try:
    # ISA-L's CRC-32 (python-isal, a dependency): zlib's polynomial, value and ``(data, value)``
    # signature, ~5x faster (ResNet-50's 104 MB of segments: zlib 0.045-0.09 CPU-s, ISA-L
    # ~0.01, on save and again on load); without it, zlib's -- the same value
    # (``test_crc32_is_zlibs``).
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - an environment installed before the dependency
    from zlib import crc32

CCB_STREAM = -1
MAGIC = b"M100PRG\x00"
PROGRAM_VERSION = 1

SEC_STREAM = 1
SEC_SEGMENT = 2
SEC_SYMBOLS = 3
SEC_METADATA = 4
SEC_REPEAT = 5
_SEC_NAMES = {SEC_STREAM: "stream", SEC_SEGMENT: "segment", SEC_SYMBOLS: "symbols",
              SEC_METADATA: "metadata", SEC_REPEAT: "repeat"}

_FIXED = struct.Struct("<8sHHQH")  # magic, version, enc version, fingerprint, name length
_ENTRY = struct.Struct("<HHiQQII")  # kind, flags, id, offset, length, crc32, reserved
# 'weight': a weight compiled by shape (no segment holds its bytes; supplied at run time like an
# input, optional in a timing-only run; ``frontend/shape_only.py``)
_ROLES = ("input", "output", "weight")


#: A segment of at least two of these bytes is written with its bytes at a file offset congruent to
#: its address modulo this (zero padding before its section; :meth:`Program._binary`), so that an
#: interpreter of a program read from the file maps the segment's whole pages from the file
#: (private: copy-on-write) instead of zeroing pages and copying the bytes into them
#: (``sim/segments.py``, docs/isa.md section 8). 4096 is the page of x86-64 and most Linux
#: hosts; on a host with larger pages the interpreter copies, as for a file without the padding.
SEGMENT_ALIGN = 4096


# metadata key of the machine description (``Machine.spec()`` JSON) of a non-preset machine
MACHINE_SPEC_KEY = "m100.machine"


class ProgramError(M100Error, ValueError):
    """A program that is malformed, corrupted or not valid for its machine (one-line message)."""


@dataclass(frozen=True)
class ProgramFile:
    """The file a program was read from, as it was read: its path (absolute) and identity
    (device, inode, size, modification and change times in ns). A run that maps segment bytes
    from the file (``sim/segments.py``) opens it only while the identity is unchanged, and
    checks it again after the run (``Simulator.run``); a file written since its program was read
    is never mapped: the bytes read are copied instead."""
    path: str
    ident: tuple

    @staticmethod
    def ident_of(st: os.stat_result) -> tuple:
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def open(self) -> int | None:
        """A read-only descriptor of the file if it is still the file read, else None."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            if self.ident_of(os.fstat(fd)) == self.ident:
                return fd
        except OSError:  # pragma: no cover - fstat of an open descriptor
            pass
        os.close(fd)
        return None

    def unchanged(self) -> bool:
        """Is the file at the path still the file read (not written, replaced or removed)?"""
        try:
            return self.ident_of(os.stat(self.path)) == self.ident
        except OSError:
            return False


@dataclass(frozen=True)
class SegmentFile:
    """Where a segment's bytes lie in the file its program was read from: ``data`` (the very
    object read, ``Segment.data`` while the segment is unchanged) at byte ``offset`` of
    ``file``."""
    file: ProgramFile
    offset: int
    data: bytes


@dataclass(frozen=True)
class Segment:
    """Initial memory contents: ``data`` at byte ``address`` of ``space`` (DDR or CCB SRAM).
    ``source``: where ``data`` lies in the program file it was read from (None: not read from a
    file; not part of the segment's value -- a segment made with other data keeps a ``source``
    whose ``data`` is not its own, which makes it ignored)."""
    space: Space
    address: int
    data: bytes
    name: str = ""
    source: SegmentFile | None = field(default=None, compare=False, repr=False)

    def file_source(self) -> SegmentFile | None:
        """``source`` if it holds this segment's bytes (the same object), else None."""
        src = self.source
        return src if src is not None and src.data is self.data else None


def read_file(path: str | Path) -> tuple[bytes, ProgramFile | None]:
    """The bytes of the file at ``path`` and its :class:`ProgramFile` (None when it is not a
    regular file or changed while it was read). Raises OSError as ``open`` does."""
    with open(path, "rb") as f:
        st0 = os.fstat(f.fileno())
        data = f.read()
        st1 = os.fstat(f.fileno())
    ident = ProgramFile.ident_of(st0)
    same = stat.S_ISREG(st0.st_mode) and ident == ProgramFile.ident_of(st1) \
        and len(data) == st0.st_size
    return data, (ProgramFile(os.path.abspath(path), ident) if same else None)


@dataclass(frozen=True)
class Symbol:
    """A program input or output tensor, row-major at ``address`` of ``space``
    (``tpb`` names the HBSM for ``Space.HBSM``)."""
    name: str
    role: str  # 'input' | 'output'
    shape: tuple[int, ...]
    dtype: DType
    space: Space
    address: int
    tpb: int = 0

    @property
    def nbytes(self) -> int:
        return (math.prod(self.shape) * self.dtype.bits + 7) // 8


@dataclass
class Program:
    machine: str
    fingerprint: int
    streams: dict[int, list[Instruction]] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)
    symbols: list[Symbol] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    # layer repetition: the streams run ``repeat.count`` times, DDR regions moved per instance
    repeat: Repeat | None = None

    @staticmethod
    def empty(machine: Machine) -> Program:
        return Program(machine.name, machine.fingerprint())

    def __getstate__(self) -> dict:
        """A copy or pickle of a program is the program without the interpreter's caches kept
        on it (``_sim_*``: the schedule ``m100.sim.replay`` keeps, which holds a lock and
        executors bound to the recorded run): a copy is there to be changed, and a changed
        program must run the engine."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_sim_")}

    # --- queries ---------------------------------------------------------------------------------
    def instructions(self) -> Iterator[tuple[int, Instruction]]:
        """Every instruction as (stream key, instruction), streams in key order."""
        for key in sorted(self.streams):
            for inst in self.streams[key]:
                yield key, inst

    def symbol(self, name: str) -> Symbol:
        for s in self.symbols:
            if s.name == name:
                return s
        raise ProgramError(f"program has no symbol '{name}' "
                           f"(symbols: {', '.join(s.name for s in self.symbols) or 'none'})")

    def machine_obj(self) -> Machine:
        """The machine this program was compiled for: the machine described by the metadata entry
        ``m100.machine`` (any non-preset machine), else the preset (or machine file) named
        ``self.machine``, verified against the fingerprint, else a preset with that fingerprint."""
        spec = self.metadata.get(MACHINE_SPEC_KEY)
        if spec is not None:
            try:
                m = machine_from_spec(spec)
            except MachineError as e:
                raise ProgramError(f"metadata '{MACHINE_SPEC_KEY}': {e}") from None
            if m.fingerprint() != self.fingerprint or m.name != self.machine:
                raise ProgramError(f"metadata '{MACHINE_SPEC_KEY}' describes machine '{m.name}' "
                                   f"({m.fingerprint():#018x}), the header names '{self.machine}' "
                                   f"({self.fingerprint:#018x})")
            return m
        try:
            m = get_machine(self.machine)
        except MachineError:
            m = None
        if m is not None and m.fingerprint() == self.fingerprint:
            return m
        alt = machine_by_fingerprint(self.fingerprint)
        if alt is not None:
            return alt
        if m is None:
            raise ProgramError(f"program was compiled for machine '{self.machine}' which is not a "
                               "preset; pass that machine (e.g. its .json/.toml file) explicitly")
        raise ProgramError(f"program was compiled for a machine named '{self.machine}' with "
                           f"fingerprint {self.fingerprint:#018x}, but the preset '{self.machine}' "
                           f"has {m.fingerprint():#018x}; recompile or pass the right machine file")

    # --- validation ----------------------------------------------------------------------------
    def validate(self, machine: Machine | None = None) -> None:
        """Raise :class:`ProgramError` unless the program is valid for ``machine``."""
        m = machine if machine is not None else self.machine_obj()
        if m.fingerprint() != self.fingerprint:
            raise ProgramError(f"program fingerprint {self.fingerprint:#018x} (machine "
                               f"'{self.machine}') does not match machine '{m.name}' "
                               f"({m.fingerprint():#018x})")
        for key, insts in self.streams.items():
            if key != CCB_STREAM and not (isinstance(key, int) and 0 <= key < m.clusters):
                raise ProgramError(f"stream key {key!r} is neither a cluster of '{m.name}' "
                                   f"(0..{m.clusters - 1}) nor CCB_STREAM ({CCB_STREAM})")
            where = "CCB stream" if key == CCB_STREAM else f"cluster {key} stream"
            for i, inst in enumerate(insts):
                pre = f"{where}, instruction {i} ({getattr(inst, 'MNEMONIC', type(inst).__name__)})"
                if not isinstance(inst, Instruction):
                    raise ProgramError(f"{pre}: not an instruction")
                try:
                    inst.check(m)
                except M100Error as e:
                    raise ProgramError(f"{pre}: {e}") from None
                if isinstance(inst, Dma):
                    if key != CCB_STREAM:
                        raise ProgramError(f"{pre}: a DMA belongs to the CCB stream")
                elif key == CCB_STREAM:
                    raise ProgramError(f"{pre}: only DMAs belong to the CCB stream")
                elif m.cluster_of(inst.tpb) != key:  # type: ignore[attr-defined]
                    raise ProgramError(f"{pre}: TPB {inst.tpb} is in cluster "  # type: ignore
                                       f"{m.cluster_of(inst.tpb)}")  # type: ignore[attr-defined]
        spans: dict[Space, list[tuple[int, int, str]]] = {}
        for i, s in enumerate(self.segments):
            nm = f"segment {i}" + (f" '{s.name}'" if s.name else "")
            if s.space not in (Space.DDR, Space.SRAM):
                raise ProgramError(f"{nm}: segments live in DDR or SRAM, not {Space(s.space).name}")
            size = space_size(m, s.space)
            if s.address < 0 or s.address + len(s.data) > size:
                raise ProgramError(f"{nm}: bytes [{s.address:#x}, {s.address + len(s.data):#x}) "
                                   f"fall outside {s.space.name} (size {size:#x})")
            spans.setdefault(s.space, []).append((s.address, s.address + len(s.data), nm))
        for space, lst in spans.items():
            lst.sort()
            for (a0, a1, n0), (b0, b1, n1) in zip(lst, lst[1:]):
                if b0 < a1:
                    raise ProgramError(f"{n1} overlaps {n0} in {space.name} at {b0:#x}")
        seen: set[str] = set()
        for s in self.symbols:
            nm = f"symbol '{s.name}'"
            if not s.name or s.name in seen:
                raise ProgramError(f"{nm}: symbol names must be unique and non-empty")
            seen.add(s.name)
            if s.role not in _ROLES:
                raise ProgramError(f"{nm}: role must be 'input', 'output' or 'weight', not {s.role!r}")
            if not all(isinstance(d, int) and d >= 1 for d in s.shape):
                raise ProgramError(f"{nm}: shape {list(s.shape)} has a dimension < 1")
            size = space_size(m, s.space)
            if s.address < 0 or s.address + s.nbytes > size:
                raise ProgramError(f"{nm}: bytes [{s.address:#x}, {s.address + s.nbytes:#x}) fall "
                                   f"outside {s.space.name} (size {size:#x})")
            if s.space is Space.HBSM:
                try:
                    m.check_tpb(s.tpb)
                except MachineError as e:
                    raise ProgramError(f"{nm}: {e}") from None
            elif s.tpb != 0:
                raise ProgramError(f"{nm}: a {s.space.name} symbol must have tpb 0")
        for k, v in self.metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise ProgramError(f"metadata entry {k!r}: keys and values must be strings")
        if self.repeat is not None:
            from .repeat import check_relocatable
            try:
                self.repeat.validate(m.ddr_bytes)
                check_relocatable(self.streams, self.repeat)
            except RepeatError as e:
                raise ProgramError(str(e)) from None

    # --- binary form -----------------------------------------------------------------------------
    def to_bytes(self, machine: Machine | None = None, align: int = SEGMENT_ALIGN) -> bytes:
        """The program file's bytes. ``align``: segments of at least two ``align`` bytes start at
        a file offset congruent to their address modulo it (:data:`SEGMENT_ALIGN`; 1: no
        padding, the layout before it -- ``bench/compile_same.py`` hashes that one)."""
        head, payloads = self._binary(machine, align)
        return head + b"".join(payloads)

    def _binary(self, machine: Machine | None, align: int = SEGMENT_ALIGN) \
            -> tuple[bytes, list[bytes]]:
        """The file's header (with its section table) and its sections' payloads (and the
        padding before them), in file order: :meth:`to_bytes` joins them, :meth:`save` writes them
        one after the other (ResNet-50's 100 MB of segments are not copied twice into one
        ``bytes`` first)."""
        m = machine if machine is not None else self.machine_obj()
        # (kind, id, a payload's parts, the address its data is aligned to or None)
        sections: list[tuple[int, int, tuple[bytes, ...], int | None]] = []
        try:
            for key in sorted(self.streams):
                sections.append((SEC_STREAM, key, (encode_instructions(self.streams[key], m),),
                                 None))
        except IsaError as e:
            raise ProgramError(f"cannot encode stream {key}: {e}") from None
        for i, s in enumerate(self.segments):
            name = s.name.encode()
            try:
                head = struct.pack("<BQH", int(s.space), s.address, len(name))
            except struct.error as e:
                raise ProgramError(f"cannot pack segment {i} '{s.name}': {e}") from None
            data = s.data if type(s.data) is bytes else bytes(s.data)
            # (the address is kept: the padding makes the data's file offset congruent to it)
            sections.append((SEC_SEGMENT, i, (head + name, data), s.address
                             if align > 1 and len(data) >= 2 * align else None))
        try:
            sections.append((SEC_SYMBOLS, 0, (_pack_symbols(self.symbols),), None))
        except struct.error as e:
            raise ProgramError(f"cannot pack the symbol table: {e}") from None
        sections.append((SEC_METADATA, 0, (json.dumps(self.metadata, sort_keys=True).encode(),),
                         None))
        if self.repeat is not None:
            sections.append((SEC_REPEAT, 0, (self.repeat.to_bytes(),), None))
        name = self.machine.encode()
        if len(name) >= 1 << 16 or not 0 <= self.fingerprint < 1 << 64:
            raise ProgramError("cannot pack the header: machine name too long or fingerprint not "
                               "a 64-bit unsigned integer")
        head = _FIXED.pack(MAGIC, PROGRAM_VERSION, ENCODING_VERSION, self.fingerprint, len(name))
        head += name + struct.pack("<I", len(sections))
        offset = len(head) + _ENTRY.size * len(sections) + 4
        table = b""
        body: list[bytes] = []
        for kind, ident, parts, address in sections:
            if address is not None:  # zero bytes so that the data starts congruent to address
                pad = (address - offset - len(parts[0])) % align
                if pad:
                    body.append(bytes(pad))
                    offset += pad
            body += parts
            size = crc = 0
            for part in parts:  # the CRC of the concatenation, part by part
                size += len(part)
                crc = crc32(part, crc)
            try:
                table += _ENTRY.pack(kind, 0, ident, offset, size, crc, 0)
            except struct.error:
                raise ProgramError(f"cannot pack {_SEC_NAMES[kind]} section {ident!r}: the id must "
                                   "be a 32-bit integer") from None
            offset += size
        head += table
        head += struct.pack("<I", crc32(head))
        return head, body

    @staticmethod
    def from_bytes(data: bytes, machine: Machine | None = None,
                   source: ProgramFile | None = None) -> Program:
        """Parse a program file. ``machine`` defaults to :meth:`machine_obj` of the header.
        ``source``: the file ``data`` was read from (:func:`read_file`), kept on the segments
        (``Segment.source``: a run may map their bytes from it)."""
        data = bytes(data)
        r = _Bytes(data)
        magic, version, enc, fp, nlen = r.struct(_FIXED, "header")
        if magic != MAGIC:
            raise ProgramError("byte offset 0: not an m100 program file (bad magic)")
        if version != PROGRAM_VERSION:
            raise ProgramError(f"byte offset 8: program format version {version}, this tool reads "
                               f"{PROGRAM_VERSION}")
        if enc != ENCODING_VERSION:
            raise ProgramError(f"byte offset 10: instruction encoding version {enc}, this tool "
                               f"reads {ENCODING_VERSION}")
        name = r.text(nlen, "machine name")
        (nsec,) = r.struct(struct.Struct("<I"), "section count")
        if nsec * _ENTRY.size > len(data) - r.pos:
            raise ProgramError(f"byte offset {r.pos - 4}: section count {nsec} does not fit the file")
        entries = [r.struct(_ENTRY, f"section table entry {i}") for i in range(nsec)]
        hdr_end = r.pos
        (crc,) = r.struct(struct.Struct("<I"), "header crc")
        if crc32(data[:hdr_end]) != crc:
            raise ProgramError(f"byte offset {hdr_end}: header checksum mismatch (corrupted file)")
        if machine is not None and fp != machine.fingerprint():
            # before decoding: the streams' field widths depend on the machine, so decoding with
            # the wrong one would report a misleading error (a bad dtype code, ...)
            raise ProgramError(f"program was compiled for machine '{name}' (fingerprint "
                               f"{fp:#018x}), not for '{machine.name}' ({machine.fingerprint():#018x})")
        prog = Program(name, fp)
        view = memoryview(data)
        streams: list[tuple[int, str, int, bytes]] = []  # decoded once the metadata is known
        body_start = r.pos
        prev_end = body_start
        got_syms = got_meta = False
        for i, (kind, flags, ident, off, length, scrc, _res) in enumerate(entries):
            where = f"section {i} ({_SEC_NAMES.get(kind, kind)} {ident})"
            if off < prev_end or off + length > len(data):
                raise ProgramError(f"byte offset {off}: {where} lies outside the file or overlaps "
                                   "another section (truncated file?)")
            if off > prev_end and data.count(0, prev_end, off) != off - prev_end:
                raise ProgramError(f"byte offset {prev_end}: the padding before {where} is not "
                                   "zero (corrupted file)")
            prev_end = off + length
            payload = view[off:off + length]  # (no copy: a segment's bytes are copied once)
            if crc32(payload) != scrc:
                raise ProgramError(f"byte offset {off}: {where}: checksum mismatch (corrupted file)")
            if kind == SEC_STREAM:
                if ident in prog.streams:
                    raise ProgramError(f"byte offset {off}: {where}: duplicate stream")
                prog.streams[ident] = []
                streams.append((ident, where, off, bytes(payload)))
            elif kind == SEC_SEGMENT:
                p = _Bytes(payload, off)
                sp, addr, ln = p.struct(struct.Struct("<BQH"), f"{where} header")
                if sp not in (Space.DDR, Space.SRAM):
                    raise ProgramError(f"byte offset {off}: {where}: bad space {sp}")
                seg_name = p.text(ln, f"{where} name")
                seg_data = data[off + p.pos:off + length]
                prog.segments.append(Segment(
                    Space(sp), addr, seg_data, seg_name,
                    SegmentFile(source, off + p.pos, seg_data) if source is not None else None))
            elif kind == SEC_SYMBOLS and not got_syms:
                got_syms = True
                prog.symbols = _unpack_symbols(bytes(payload), off)
            elif kind == SEC_METADATA and not got_meta:
                got_meta = True
                try:
                    meta = json.loads(bytes(payload).decode())
                except (UnicodeDecodeError, ValueError):
                    meta = None
                if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                         for k, v in meta.items()):
                    raise ProgramError(f"byte offset {off}: {where}: not a JSON object of strings")
                prog.metadata = meta
            elif kind == SEC_REPEAT and prog.repeat is None:
                try:
                    prog.repeat = Repeat.from_bytes(bytes(payload))
                except RepeatError as e:
                    raise ProgramError(f"byte offset {off}: {where}: {e}") from None
            else:
                raise ProgramError(f"byte offset {body_start + i * _ENTRY.size}: {where}: unknown "
                                   "or duplicate section kind")
        if prev_end != len(data):
            raise ProgramError(f"byte offset {prev_end}: {len(data) - prev_end} trailing bytes after "
                               "the last section")
        if machine is None:
            machine = prog.machine_obj()  # may come from the metadata (m100.machine)
        walks: dict = {}  # equal walk fields share one object across the streams
        for ident, where, off, payload in streams:
            try:
                prog.streams[ident] = decode_instructions(payload, machine, walks)
            except DecodeError as e:
                raise ProgramError(f"byte offset {off + e.offset // 8}: {where}: {e.what}") from None
        return prog

    def save(self, path: str | Path, machine: Machine | None = None) -> None:
        """Write :meth:`to_bytes` to ``path``: the header, then each section's payload."""
        head, payloads = self._binary(machine)
        try:
            with open(path, "wb") as f:
                f.write(head)
                for p in payloads:
                    f.write(p)
        except OSError as e:
            raise ProgramError(f"{path}: cannot write program: {e.strerror}") from None

    @staticmethod
    def load(path: str | Path, machine: Machine | None = None) -> Program:
        try:
            data, source = read_file(path)
        except OSError as e:
            raise ProgramError(f"{path}: cannot read program: {e.strerror}") from None
        try:
            return Program.from_bytes(data, machine, source)
        except ProgramError as e:
            raise ProgramError(f"{path}: {e}") from None


class _Bytes:
    """A bounds-checked little-endian reader; errors name the absolute byte offset."""

    def __init__(self, data: bytes, base: int = 0):
        self.data = data
        self.pos = 0
        self.base = base

    def struct(self, st: struct.Struct, what: str) -> tuple:
        if self.pos + st.size > len(self.data):
            raise ProgramError(f"byte offset {self.base + self.pos}: truncated {what} "
                               f"({st.size} bytes needed, {len(self.data) - self.pos} left)")
        v = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return v

    def text(self, n: int, what: str) -> str:
        if self.pos + n > len(self.data):
            raise ProgramError(f"byte offset {self.base + self.pos}: truncated {what}")
        raw = self.data[self.pos:self.pos + n]
        try:
            s = bytes(raw).decode()
        except UnicodeDecodeError:
            raise ProgramError(f"byte offset {self.base + self.pos}: {what} is not UTF-8") from None
        self.pos += n
        return s


_SYM = struct.Struct("<BBBHQB")  # role, dtype, space, tpb, address, rank


def _pack_symbols(symbols: list[Symbol]) -> bytes:
    out = [struct.pack("<I", len(symbols))]
    for s in symbols:
        name = s.name.encode()
        if s.role not in _ROLES:
            raise ProgramError(f"symbol '{s.name}': role must be 'input', 'output' or 'weight'")
        out.append(struct.pack("<H", len(name)) + name)
        out.append(_SYM.pack(_ROLES.index(s.role), int(s.dtype), int(s.space), s.tpb, s.address,
                             len(s.shape)))
        out.append(struct.pack(f"<{len(s.shape)}Q", *s.shape))
    return b"".join(out)


def _unpack_symbols(payload: bytes, off: int) -> list[Symbol]:
    p = _Bytes(payload, off)
    (n,) = p.struct(struct.Struct("<I"), "symbol count")
    out = []
    for i in range(n):
        (ln,) = p.struct(struct.Struct("<H"), f"symbol {i} name length")
        name = p.text(ln, f"symbol {i} name")
        role, dt, sp, tpb, addr, rank = p.struct(_SYM, f"symbol {i}")
        at = off + p.pos
        if role >= len(_ROLES) or dt not in DType._value2member_map_ or \
                sp not in Space._value2member_map_:
            raise ProgramError(f"byte offset {at}: symbol {i} '{name}': bad role/dtype/space")
        shape = p.struct(struct.Struct(f"<{rank}Q"), f"symbol {i} shape")
        out.append(Symbol(name, _ROLES[role], tuple(shape), DType(dt), Space(sp), addr, tpb))
    if p.pos != len(payload):
        raise ProgramError(f"byte offset {off + p.pos}: trailing bytes in the symbol table")
    return out


__all__ = ["CCB_STREAM", "MACHINE_SPEC_KEY", "MAGIC", "PROGRAM_VERSION", "Program", "ProgramError", "Segment", "Symbol"]
