"""The program file's CRC-32 (``program.crc32``: ISA-L's through python-isal when installed) is
zlib's, the format's definition: on random data, part by part, and in every checksum of saved
programs (the file's header and section table parsed here, each checksum recomputed with zlib)."""

import importlib.util
import random
import struct
import zlib

import m100_isa_strategies as S
from hypothesis import HealthCheck, given, settings

from m100.targets.m100 import program as P
from m100.targets.m100.machine import get_machine

TINY = get_machine("tiny")


def test_crc32_is_isals_when_installed():
    # the fast path is the one taken (its fallback, zlib's, is only for an environment
    # installed before the dependency)
    if importlib.util.find_spec("isal") is not None:
        from isal.isal_zlib import crc32
        assert P.crc32 is crc32
    else:
        assert P.crc32 is zlib.crc32


def test_crc32_is_zlibs():
    rng = random.Random(15)
    sizes = [0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, 1000,
             4095, 4096, 4097, 65536 + 13, 1 << 20]
    sizes += [rng.randrange(1, 300_000) for _ in range(40)]
    for n in sizes:
        data = rng.randbytes(n)
        start = rng.getrandbits(32)
        assert P.crc32(data) == zlib.crc32(data), n
        assert P.crc32(data, start) == zlib.crc32(data, start), n
        # the buffer kinds a save hands it (bytes, a bytearray, a view at an odd offset)
        cut = rng.randrange(n + 1)
        view = memoryview(data)[cut:]
        assert P.crc32(view) == zlib.crc32(data[cut:])
        assert P.crc32(bytearray(data), start) == zlib.crc32(data, start)
        # part by part (the save's running value over a section's parts) = the whole
        parts = [data[:cut], data[cut:]]
        run = 0
        for part in parts:
            run = P.crc32(part, run)
        assert run == zlib.crc32(data)


_FIXED = struct.Struct("<8sHHQH")
_ENTRY = struct.Struct("<HHiQQII")


def _zlib_checksums_hold(data: bytes) -> None:
    """Every checksum of a program file recomputed with zlib (the format as documented in
    ``program.py``'s docstring, parsed here without the reader)."""
    _magic, _v, _e, _fp, nlen = _FIXED.unpack_from(data, 0)
    pos = _FIXED.size + nlen
    (nsec,) = struct.unpack_from("<I", data, pos)
    pos += 4
    entries = [_ENTRY.unpack_from(data, pos + i * _ENTRY.size) for i in range(nsec)]
    pos += nsec * _ENTRY.size
    (head_crc,) = struct.unpack_from("<I", data, pos)
    assert head_crc == zlib.crc32(data[:pos])
    for _kind, _flags, _ident, off, length, crc, _res in entries:
        assert crc == zlib.crc32(data[off:off + length])


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(prog=S.programs(TINY))
def test_saved_checksums_are_zlibs(prog, tmp_path_factory):
    data = prog.to_bytes()
    _zlib_checksums_hold(data)
    path = tmp_path_factory.mktemp("crc") / "p.m100"
    prog.save(path)
    assert path.read_bytes() == data
    assert P.Program.load(path) == prog  # the reader's checks pass on them


def test_a_corrupted_section_is_refused():
    # one flipped byte in a segment's payload: the reader's checksum (the same function) catches it
    prog = P.Program("tiny", TINY.fingerprint())
    prog.segments.append(P.Segment(P.Space.DDR, 0, bytes(range(200)), "w"))
    data = bytearray(prog.to_bytes())
    _zlib_checksums_hold(bytes(data))
    data[-30] ^= 0x10
    try:
        P.Program.from_bytes(bytes(data))
    except P.ProgramError as e:
        assert "checksum mismatch" in str(e)
    else:
        raise AssertionError("a corrupted segment was read")
