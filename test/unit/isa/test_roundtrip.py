"""Binary and assembly round trips over random valid instructions and programs (hypothesis)."""

import m100_isa_strategies as S
import pytest
from hypothesis import HealthCheck, given, settings

from m100.targets.m100 import encoding as E
from m100.targets.m100 import encoding_write as W
from m100.targets.m100.asm import format_instruction, format_program, parse_instruction, parse_program
from m100.targets.m100.isa import INSTRUCTION_KINDS
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import Program

TINY = get_machine("tiny")
M100 = get_machine("m100")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)


def _roundtrip_one(inst, machine):
    inst.check(machine)  # the strategies produce valid instructions only
    data = E.encode_instruction(inst, machine)
    bits = E.instruction_bits(inst, machine)
    # the size is exact: the byte string is the bits plus < 8 zero padding bits
    assert 0 <= 8 * len(data) - bits < 8
    word = int.from_bytes(data, "big")
    assert word & ((1 << (8 * len(data) - bits)) - 1) == 0
    # the header: opcode then the 24-bit total length
    assert data[0] == type(inst).OPCODE
    assert int.from_bytes(data[1:4], "big") == bits
    assert E.decode_instructions(data, machine) == [inst]
    # the decoder hands its header's size to instruction_bits; the same as encoding afresh
    dec = E.decode_instructions(data, machine)[0]
    assert dec.__dict__["_bits_on"] == (machine, bits)
    assert E.instruction_bits(dec, machine) == W._encode_bits(dec, machine, True)[1] == bits
    text = format_instruction(inst)
    assert "\n" not in text
    back = parse_instruction(text)
    assert back == inst
    assert E.encode_instruction(back, machine) == data  # text -> bin is exact too
    return data


@settings(max_examples=500, **SETTINGS)
@given(S.instructions(TINY))
def test_roundtrip_tiny(inst):
    _roundtrip_one(inst, TINY)


@settings(max_examples=120, **SETTINGS)
@given(S.instructions(M100))
def test_roundtrip_m100(inst):
    _roundtrip_one(inst, M100)


@pytest.mark.parametrize("kind", INSTRUCTION_KINDS, ids=lambda k: k.MNEMONIC)
def test_roundtrip_each_kind(kind):
    @settings(max_examples=20, **SETTINGS)
    @given(S.instructions(M100, [kind]))
    def run(inst):
        assert type(inst) is kind
        _roundtrip_one(inst, M100)
    run()


@settings(max_examples=30, **SETTINGS)
@given(S.st.lists(S.instructions(TINY), max_size=5))
def test_stream_roundtrip(insts):
    data = E.encode_instructions(insts, TINY)
    assert data == b"".join(E.encode_instruction(i, TINY) for i in insts)
    assert E.decode_instructions(data, TINY) == insts


@settings(max_examples=40, **SETTINGS)
@given(prog=S.programs(TINY))
def test_program_roundtrip(prog, tmp_path_factory):
    prog.validate(TINY)
    data = prog.to_bytes()
    assert data[:8] == b"M100PRG\0"
    assert Program.from_bytes(data) == prog
    assert Program.from_bytes(data, TINY) == prog
    text = format_program(prog)
    assert parse_program(text) == prog
    # bin -> asm -> bin is byte-exact
    assert parse_program(format_program(Program.from_bytes(data))).to_bytes() == data
    path = tmp_path_factory.mktemp("prog") / "p.m100"
    prog.save(path)
    assert path.read_bytes() == data  # written section by section: the same bytes
    assert Program.load(path) == prog


def test_float_immediates_exact():
    from m100.targets.m100.isa import Fill, Space, DType, Walk
    for v in (0.1, -0.0, 1e-308, 5e-324, 1.7976931348623157e308, -3.25, 2.0 ** 60 + 1):
        f = Fill(0, Walk.strided(Space.HBSM, 0, 0, DType.F32, (4,)), v)
        back = E.decode_instructions(E.encode_instruction(f, TINY), TINY)[0]
        assert back.value.hex() == float(v).hex()
        assert parse_instruction(format_instruction(f)).value.hex() == float(v).hex()
