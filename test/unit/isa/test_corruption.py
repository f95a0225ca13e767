"""Corrupted, truncated and random bytes: only DecodeError / ProgramError may escape, with an offset."""

import random
import re

import m100_isa_strategies as S
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.targets.m100 import encoding as E
from m100.targets.m100.isa import DType, Fill, IsaError, Space, Walk
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import Program, ProgramError

TINY = get_machine("tiny")
M100 = get_machine("m100")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))
_BIT_OFF = re.compile(r"^bit offset (\d+) \(byte (\d+)\): \S")


def _decode_or_error(data: bytes, machine):
    """Decode; on success the decoding must be canonical (re-encodes to the same bytes)."""
    try:
        insts = E.decode_instructions(data, machine)
    except E.DecodeError as e:
        m = _BIT_OFF.match(str(e))
        assert m, str(e)
        assert int(m.group(1)) == e.offset and int(m.group(2)) == e.offset // 8
        assert 0 <= e.offset <= 8 * len(data)
        assert "\n" not in str(e)
        return None
    assert E.encode_instructions(insts, machine) == data
    return insts


def _mutations(rng: random.Random, data: bytes, n: int):
    for _ in range(n):
        b = bytearray(data)
        how = rng.randrange(5)
        if how == 0:  # flip one bit
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif how == 1:  # overwrite a byte
            i = rng.randrange(len(b))
            b[i] = (b[i] + rng.randrange(1, 256)) % 256
        elif how == 2:  # truncate
            b = b[:rng.randrange(len(b))]
        elif how == 3:  # insert random bytes
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.randbytes(rng.randrange(1, 4))
        else:  # delete a slice
            i = rng.randrange(len(b))
            del b[i:i + rng.randrange(1, 4)]
        yield bytes(b)


@settings(max_examples=60, **SETTINGS)
@given(S.st.lists(S.instructions(TINY), min_size=1, max_size=3), st.randoms(use_true_random=False))
def test_corrupted_streams(insts, rng):
    data = E.encode_instructions(insts, TINY)
    for bad in _mutations(rng, data, 40):
        _decode_or_error(bad, TINY)
    # the same valid bytes read with the wrong machine fail cleanly or decode canonically
    _decode_or_error(data, M100)


@settings(max_examples=200, **SETTINGS)
@given(st.binary(max_size=300))
def test_random_garbage(data):
    _decode_or_error(data, TINY)
    _decode_or_error(data, M100)


@settings(max_examples=30, **SETTINGS)
@given(S.programs(TINY), st.randoms(use_true_random=False))
def test_corrupted_programs(prog, rng):
    data = prog.to_bytes()
    for i in range(40):
        b = bytearray(data)
        if i % 2:
            pos = rng.randrange(len(b))
            b[pos] ^= rng.randrange(1, 256)  # any single-byte change: a CRC must catch it
        else:
            b = b[:rng.randrange(len(b))]
        with pytest.raises(ProgramError) as ei:
            Program.from_bytes(bytes(b))
        msg = str(ei.value)
        assert re.match(r"^byte offset \d+: \S", msg), msg
        assert "\n" not in msg


def test_specific_decode_errors():
    w = Walk.strided(Space.HBSM, 0, 0x100, DType.F32, (4, 8))
    good = E.encode_instruction(Fill(1, w.__class__(Space.HBSM, 1, w.base, w.dtype, w.levels), 2.5), TINY)
    with pytest.raises(E.DecodeError, match=r"bit offset 0 .*unknown opcode 0x00"):
        E.decode_instructions(b"\0" * 8, TINY)
    with pytest.raises(E.DecodeError, match=r"bit offset 0 .*truncated instruction header"):
        E.decode_instructions(good[:2], TINY)
    with pytest.raises(E.DecodeError, match=r"bit offset 8 .*truncated: length says"):
        E.decode_instructions(good[:-1], TINY)
    # a second instruction cut short is reported at its own offset
    with pytest.raises(E.DecodeError) as ei:
        E.decode_instructions(good + good[:5], TINY)
    assert ei.value.offset == 8 * len(good) + 8
    # length field one bit too long: the fields end before it says
    n = int.from_bytes(good[1:4], "big")
    if n % 8:
        longer = good[:1] + (n + 1).to_bytes(3, "big") + good[4:]
        with pytest.raises(E.DecodeError, match="length field says|padding"):
            E.decode_instructions(longer, TINY)
    # non-zero padding bits
    pad = 8 * len(good) - n
    if pad:
        with pytest.raises(E.DecodeError, match="non-zero padding"):
            E.decode_instructions(good[:-1] + bytes([good[-1] | 1]), TINY)
    # an instruction for TPB 1 on a machine where the TPB field decodes differently is invalid
    assert E.decode_instructions(good, TINY)[0].tpb == 1


def test_encode_refuses_invalid():
    bad = Fill(0, Walk.strided(Space.HBSM, 0, TINY.hbsm_bytes - 4, DType.F32, (4,)), 1.0)
    with pytest.raises(IsaError, match="outside HBSM"):
        E.encode_instruction(bad, TINY)


@settings(max_examples=25, **SETTINGS)
@given(S.programs(TINY), st.randoms(use_true_random=False))
def test_mangled_assembly(prog, rng):
    """Mangled assembly text raises AsmError (file:line:col) or parses to something that prints
    and parses back identically; nothing else escapes."""
    from m100.targets.m100.asm import AsmError, format_program, parse_program
    text = format_program(prog)
    alphabet = "()[]{}=,@:#;\\\n \"-+.0123456789abcdefxinsc_"
    for _ in range(25):
        t = list(text)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(t) + 1)
            how = rng.randrange(3)
            if how == 0 and i < len(t):
                del t[i]
            elif how == 1:
                t.insert(i, rng.choice(alphabet))
            elif i < len(t):
                t[i] = rng.choice(alphabet)
        bad = "".join(t)
        try:
            p = parse_program(bad, "m.asm")
        except AsmError as e:
            assert re.match(r"^m\.asm:\d+:\d+: \S", str(e)), str(e)
            continue
        assert parse_program(format_program(p)) == p
