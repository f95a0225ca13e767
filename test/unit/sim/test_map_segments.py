"""A program's DDR segments mapped from its file (session 36): the program file's padding
(``Program._binary``: a segment of at least two ``SEGMENT_ALIGN`` bytes starts congruent to its
address), ``sim/segments.py`` (whole pages mapped, private, from the file; the rest
written), the pool making mapped ranges anonymous again (``mempool.take``) and the check that
the file did not change (``ProgramFile``, ``Simulator._check_files``).

Oracles: the file layout before the padding written out here (``_old_to_bytes``, session 35's
``Program._binary``); the memory's bytes against a byte array built here by writing each
segment's bytes in order; the kernel's own record of which ranges are file mappings
(``/proc/self/maps``); runs with ``mempool.MAP_FILES`` off (the copy path, as before)."""

import gc
import json
import os
import struct

import numpy as np
import pytest

from m100.sim import mempool, segments
from m100.sim.memory import Memory
from m100.sim.simulator import Simulator
from m100.targets.m100 import program as program_mod
from m100.targets.m100.isa import Dma, DType, Level, Space, Walk
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import (SEGMENT_ALIGN, Program, ProgramError, Segment, Symbol,
                                       crc32)

pytestmark = pytest.mark.skipif(mempool._MMAP is None or mempool._MINCORE is None,
                                reason="no mmap / mincore through the C library here")

PAGE = mempool.PAGE
M = get_machine("tiny")


def _old_to_bytes(prog: Program) -> bytes:
    """The program file as session 35 wrote it (``Program._binary`` before the padding, written
    out): the payloads one after the other, no gaps."""
    m = prog.machine_obj()
    secs = [(program_mod.SEC_STREAM, k, program_mod.encode_instructions(prog.streams[k], m))
            for k in sorted(prog.streams)]
    for i, s in enumerate(prog.segments):
        name = s.name.encode()
        secs.append((program_mod.SEC_SEGMENT, i,
                     struct.pack("<BQH", int(s.space), s.address, len(name)) + name + bytes(s.data)))
    secs.append((program_mod.SEC_SYMBOLS, 0, program_mod._pack_symbols(prog.symbols)))
    secs.append((program_mod.SEC_METADATA, 0, json.dumps(prog.metadata, sort_keys=True).encode()))
    name = prog.machine.encode()
    head = program_mod._FIXED.pack(program_mod.MAGIC, program_mod.PROGRAM_VERSION,
                                   program_mod.ENCODING_VERSION, prog.fingerprint, len(name))
    head += name + struct.pack("<I", len(secs))
    off = len(head) + program_mod._ENTRY.size * len(secs) + 4
    for kind, ident, payload in secs:
        head += program_mod._ENTRY.pack(kind, 0, ident, off, len(payload), crc32(payload), 0)
        off += len(payload)
    head += struct.pack("<I", crc32(head))
    return head + b"".join(p for _, _, p in secs)


def _segments(seed: int) -> list[Segment]:
    """DDR segments of every kind of placement: below two pages, exactly two, page-aligned,
    unaligned, adjacent ones sharing a page, one page apart; and an SRAM one."""
    rng = np.random.default_rng(seed)
    out, at = [], int(rng.integers(0, 3 * PAGE))
    for k in range(14):
        n = int(rng.choice([1, 100, PAGE - 1, 2 * PAGE, 2 * PAGE + 1, 5 * PAGE + 17,
                            int(rng.integers(1, 9 * PAGE))]))
        if k % 4 == 0:
            at = -(-at // PAGE) * PAGE  # page-aligned
        out.append(Segment(Space.DDR, at, rng.integers(0, 256, n, dtype=np.uint8).tobytes(),
                           f"s{k}"))
        at += n + int(rng.choice([0, 0, 1, 7, PAGE, 3 * PAGE + 5]))
    # not padded (below two pages) yet holding a whole page
    at = -(-at // PAGE) * PAGE + 1
    out.append(Segment(Space.DDR, at, rng.integers(0, 256, 2 * PAGE - 1, np.uint8).tobytes(), "p"))
    out.append(Segment(Space.SRAM, 64, rng.integers(0, 256, 3 * PAGE, np.uint8).tobytes(), "sr"))
    return out


def _program(segs, streams=None, symbols=()) -> Program:
    prog = Program.empty(M)
    prog.segments = list(segs)
    prog.streams = dict(streams or {})
    prog.symbols = list(symbols)
    prog.metadata = {"k": "v"}
    return prog


def _expected(segs, space, size) -> np.ndarray:
    ref = np.zeros(size, dtype=np.uint8)
    for s in segs:
        if s.space is space:
            ref[s.address:s.address + len(s.data)] = np.frombuffer(s.data, np.uint8)
    return ref


def _file_maps(path) -> list[tuple[int, int]]:
    """The address ranges of this process mapped from ``path`` (``/proc/self/maps``)."""
    ino = os.stat(path).st_ino
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and int(parts[4]) == ino and parts[5] == str(path):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


@pytest.fixture(autouse=True)
def _fresh_pool(monkeypatch):
    monkeypatch.setattr(mempool, "_free", {})
    monkeypatch.setattr(mempool, "_files", {})


@pytest.mark.parametrize("seed", range(6))
def test_the_file_pads_segments_congruent_and_reads_back(seed, tmp_path):
    """Each segment of at least two SEGMENT_ALIGN bytes starts at a file offset congruent to its
    address; ``to_bytes(align=1)`` is session 35's layout byte for byte; both read back to the
    same program; a file read from a path keeps where each segment's bytes are."""
    prog = _program(_segments(seed))
    new, old = prog.to_bytes(), prog.to_bytes(align=1)
    assert old == _old_to_bytes(prog)
    assert Program.from_bytes(new) == prog == Program.from_bytes(old)
    assert len(new) - len(old) < SEGMENT_ALIGN * len(prog.segments)
    path = tmp_path / "p.m100"
    prog.save(path)
    assert path.read_bytes() == new
    got = Program.load(path)
    assert got == prog
    big = 0
    for s in got.segments:
        src = s.file_source()
        assert src is not None and new[src.offset:src.offset + len(s.data)] == s.data
        if len(s.data) >= 2 * SEGMENT_ALIGN:
            big += 1
            assert (src.offset - s.address) % SEGMENT_ALIGN == 0
    assert big >= 3
    assert all(s.file_source() is None for s in Program.from_bytes(new).segments)


def _gaps(data: bytes) -> list[tuple[int, int]]:
    """[start, end) of each gap between sections, from the file's section table."""
    nlen = program_mod._FIXED.unpack_from(data, 0)[4]
    at = program_mod._FIXED.size + nlen
    (nsec,) = struct.unpack_from("<I", data, at)
    ents = [program_mod._ENTRY.unpack_from(data, at + 4 + i * program_mod._ENTRY.size)
            for i in range(nsec)]
    prev = at + 4 + nsec * program_mod._ENTRY.size + 4
    out = []
    for e in ents:
        if e[3] > prev:
            out.append((prev, e[3]))
        prev = e[3] + e[4]
    return out


def test_padding_must_be_zero():
    """The gaps between sections are zero; a byte of padding that is not zero is a corrupted
    file, named by its offset (the old layout has no gaps)."""
    prog = _program(_segments(1))
    data = bytearray(prog.to_bytes())
    gaps = _gaps(bytes(data))
    assert gaps and not _gaps(prog.to_bytes(align=1))
    assert all(not any(data[a:b]) for a, b in gaps)
    a, b = gaps[len(gaps) // 2]
    data[b - 1] = 1
    with pytest.raises(ProgramError, match=f"byte offset {a}: the padding before section .* is "
                                           "not zero"):
        Program.from_bytes(bytes(data))


@pytest.mark.parametrize("seed", range(4))
def test_load_segments_maps_whole_pages_and_keeps_every_byte(seed, tmp_path, monkeypatch):
    """The DDR and SRAM bytes after the set-up equal every segment written in order (with the
    mapping, and with MAP_FILES off); the mapped ranges are whole pages inside one segment each
    and the kernel lists them as mappings of the program file; a write over a mapped page changes
    the memory, not the file. A file of the old layout (no padding) is copied, as before."""
    segs = _segments(seed)
    path, old = tmp_path / "p.m100", tmp_path / "old.m100"
    _program(segs).save(path)
    old.write_bytes(_old_to_bytes(_program(segs)))
    sim = Simulator(Program.load(old), M, mode="functional")
    ddr = sim.memory.space(Space.DDR, 0)
    assert np.array_equal(ddr.buf[:len(ddr.buf) // 2 ** 10],
                          _expected(segs, Space.DDR, len(ddr.buf) // 2 ** 10))
    congruent = [s for s in Program.load(old).segments
                 if (s.file_source().offset - s.address) % PAGE == 0]
    assert len(mempool.file_ranges(ddr.buf)) <= len(congruent) < 3
    del ddr, sim
    prog = Program.load(path)
    end = max(s.address + len(s.data) for s in segs if s.space is Space.DDR) + 2 * PAGE
    ref = _expected(segs, Space.DDR, end)
    sref = _expected(segs, Space.SRAM, 4 * PAGE)
    for on in (True, False):
        monkeypatch.setattr(mempool, "MAP_FILES", on)
        sim = Simulator(prog, M, mode="functional")
        ddr = sim.memory.space(Space.DDR, 0)
        assert np.array_equal(ddr.buf[:end], ref)
        assert not ddr.buf[end:end + 64 * PAGE].any()
        assert np.array_equal(sim.memory.space(Space.SRAM, 0).buf[:4 * PAGE], sref)
        assert sim.memory.writes == len(segs) == sim._pristine
        ranges = mempool.file_ranges(ddr.buf)
        base = ddr.buf.ctypes.data
        if not on:
            assert not ranges and not _file_maps(path)
            continue
        whole = {(-(-s.address // PAGE) * PAGE, (s.address + len(s.data)) // PAGE * PAGE)
                 for s in segs if s.space is Space.DDR and len(s.data) >= 2 * SEGMENT_ALIGN}
        assert set(ranges) == {r for r in whole if r[1] > r[0]} and ranges
        kernel = _file_maps(path)
        assert sum(hi - lo for lo, hi in kernel) == sum(hi - lo for lo, hi in ranges)
        assert all(any(base + lo <= a and b <= base + hi for lo, hi in ranges) for a, b in kernel)
        lo, hi = ranges[0]
        before = path.read_bytes()
        sim.memory.write_bytes(Space.DDR, 0, lo + 5, b"\xff" * (PAGE + 3))
        assert (ddr.buf[lo + 5:lo + PAGE + 8] == 255).all()
        assert path.read_bytes() == before
        assert segments.changed_file(sim.memory.files) is None
        del sim, ddr


def test_the_pool_hands_mapped_ranges_out_anonymous_and_zero(tmp_path):
    """A memory that mapped a program file gives its DDR back to the pool; the next memory takes
    it: the file's ranges are anonymous again (the kernel lists no mapping of the file), and the
    space reads zero everywhere -- also where the file's pages were."""
    segs = _segments(2)
    path = tmp_path / "p.m100"
    _program(segs).save(path)
    prog = Program.load(path)
    sim = Simulator(prog, M, mode="functional")
    buf = sim.memory.space(Space.DDR, 0).buf
    addr, size = buf.ctypes.data, buf.size
    ranges = mempool.file_ranges(buf)
    assert ranges and _file_maps(path)
    del buf  # (first: a view held while the space goes keeps the mapping out of the pool)
    del sim
    gc.collect()
    assert size in mempool._free and mempool._files.get(addr)
    mem = Memory(M)
    ddr = mem.space(Space.DDR, 0)
    assert ddr.buf.ctypes.data == addr  # (the pooled mapping)
    assert not _file_maps(path) and not mempool.file_ranges(ddr.buf)
    end = max(hi for _, hi in ranges) + PAGE
    assert not ddr.buf[:end].any()


def test_a_changed_file_is_copied_not_mapped_and_a_run_meanwhile_is_an_error(tmp_path):
    """A file written after its program was read is never mapped: the memory holds the bytes
    read. A file written while a memory maps it makes the run an error (SimError), not a
    result."""
    from m100.sim.semantics import SimError

    segs = [Segment(Space.DDR, 3 * PAGE + 40, bytes(range(256)) * 64, "w")]
    n = 1024
    dma = Dma(engine=0, src=Walk(Space.DDR, 0, 3 * PAGE + 40, DType.F32, (Level(0, 1, n - 1),)),
              dst=Walk(Space.DDR, 0, 40 * PAGE, DType.F32, (Level(0, 1, n - 1),)))
    sym = Symbol("y", "output", (n,), DType.F32, Space.DDR, 40 * PAGE)
    path = tmp_path / "p.m100"
    _program(segs, {-1: [dma]}, [sym]).save(path)
    want = np.frombuffer(segs[0].data[:4 * n], np.float32)

    def rewrite():
        data = bytearray(path.read_bytes())
        at = data.find(segs[0].data)
        data[at + 2 * PAGE] ^= 0xFF  # (a byte of a whole page the run maps)
        st = os.stat(path)
        with open(path, "r+b") as f:  # in place: the same inode
            f.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))

    prog = Program.load(path)
    res = Simulator(prog, M, mode="functional").run({})
    assert res.ok and res.outputs["y"].tobytes() == want.tobytes()
    sim = Simulator(prog, M, mode="functional")
    assert mempool.file_ranges(sim.memory.space(Space.DDR, 0).buf)
    rewrite()
    with pytest.raises(SimError, match="was written while a run"):
        sim.run({})
    sim = Simulator(prog, M, mode="functional")  # written before: the bytes read are copied
    assert not mempool.file_ranges(sim.memory.space(Space.DDR, 0).buf)
    assert bytes(sim.memory.space(Space.DDR, 0).buf[3 * PAGE + 40:3 * PAGE + 40 + 16384]) \
        == segs[0].data
    res = sim.run({})
    assert res.ok and res.outputs["y"].tobytes() == want.tobytes()


def test_a_replaced_segment_is_copied(tmp_path):
    """A segment made anew from a loaded one (other bytes, same place) keeps the loaded one's
    ``source`` but is not mapped from it: its own bytes are written."""
    import dataclasses

    segs = [Segment(Space.DDR, 2 * PAGE, bytes(5 * PAGE), "z")]
    path = tmp_path / "p.m100"
    _program(segs).save(path)
    prog = Program.load(path)
    other = b"\x07" * (5 * PAGE)
    prog.segments[0] = dataclasses.replace(prog.segments[0], data=other)
    assert prog.segments[0].source is not None and prog.segments[0].file_source() is None
    sim = Simulator(prog, M, mode="functional")
    ddr = sim.memory.space(Space.DDR, 0)
    assert not mempool.file_ranges(ddr.buf)
    assert bytes(ddr.buf[2 * PAGE:7 * PAGE]) == other


@pytest.mark.parametrize("mode", ["functional", "full"])
def test_runs_reading_and_writing_mapped_weights_equal_the_copy_path(mode, tmp_path,
                                                                     monkeypatch):
    """A program whose DMAs read a mapped weight segment into an HBSM and back to DDR, and write
    over part of the weight itself (copy-on-write): outputs, stats and records equal those with
    MAP_FILES off, runs after the first too (the pooled DDR made anonymous again)."""
    n = 4096
    w = np.random.default_rng(0).standard_normal(3 * n).astype(np.float32)
    base = 5 * PAGE + 12
    segs = [Segment(Space.DDR, base, w.tobytes(), "w")]
    f32 = DType.F32
    lv = (Level(0, 1, n - 1),)
    a = Dma(engine=0, src=Walk(Space.DDR, 0, base, f32, lv), dst=Walk(Space.HBSM, 1, 0, f32, lv))
    b = Dma(engine=0, src=Walk(Space.HBSM, 1, 0, f32, lv),
            dst=Walk(Space.DDR, 0, base + 4 * n, f32, lv))  # (over the weight's second third)
    c = Dma(engine=0, src=Walk(Space.DDR, 0, base + 4 * n, f32, (Level(0, 1, 2 * n - 1),)),
            dst=Walk(Space.DDR, 0, 64 * PAGE, f32, (Level(0, 1, 2 * n - 1),)))
    syms = [Symbol("y", "output", (2 * n,), f32, Space.DDR, 64 * PAGE)]
    path = tmp_path / "p.m100"
    _program(segs, {-1: [a, b, c]}, syms).save(path)
    got = {}
    for on in (True, False):
        monkeypatch.setattr(mempool, "MAP_FILES", on)
        prog = Program.load(path)
        runs = [Simulator(prog, M, mode=mode).run({}) for _ in range(2)]
        got[on] = [(r.ok, {k: v.tobytes() for k, v in r.outputs.items()},
                    json.dumps(r.stats, sort_keys=True, default=str),
                    [(q.index, q.start, q.end) for q in r.records]) for r in runs]
    assert got[True] == got[False]
    assert got[True][0][0]
    y = np.frombuffer(got[True][0][1]["y"], np.float32)
    assert np.array_equal(y[:n], w[:n]) and np.array_equal(y[n:], w[2 * n:])
