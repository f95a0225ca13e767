"""Assembly syntax: a hand-written program, wrapping/comments, and file:line:col errors."""

import dataclasses
import re

import pytest

from m100.targets.m100.asm import (AsmError, format_instruction, format_program, parse_instruction,
                                   parse_program)
from m100.targets.m100.isa import (Act, CvuOp, CvuPipeline, DType, Dma, Epilogue, Level, MatMul,
                                   Monitor, Ref, RefKind, Space, Stage, Sync, Trigger, Update, Walk)
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import CCB_STREAM, Segment, Symbol

TINY = get_machine("tiny")

HAND = """\
; a hand-written program
.machine tiny
.meta "source" "hand"
.symbol input "x" f32[4,8] ddr@0x2000
.symbol output "y" f32[4,8] ddr@0x3000
.segment ddr@0x1000 "consts"
.data 00010203
.data 04
.ccb
ccb.dma engine=0 src=ddr@0x2000:f32[(0,1,31)] dst=hbsm0@0x0:f32[(0,1,31)] \\
        sync{signal(c1->0x1,+1,end)}
.cluster 0   // the TPB streams
cvu.pipeline tpb=0 inputs=[hbsm0@0x0:f32[(0,8,24),(0,1,7)]] in_shapes=[[4,8]] \\
  output=hbsm0@0x80:f32[(0,1,31)] out_shape=[4,8] \\
  stages=[exp(in0), rsum(s0){axis=1},   ; a comment inside the brackets
          div(s0, s1), add(s2,#0.5)] \\
  sync{wait(c1@t0>=1,+0) signal(c2->0x1,+1,end)}
"""


def test_hand_written_program():
    p = parse_program(HAND, "hand.asm")
    assert p.fingerprint == TINY.fingerprint()
    p.validate(TINY)
    assert p.metadata == {"source": "hand"}
    assert [s.name for s in p.symbols] == ["x", "y"]
    assert p.segments[0].data == bytes([0, 1, 2, 3, 4]) and p.segments[0].address == 0x1000
    dma = p.streams[CCB_STREAM][0]
    assert dma == Dma(0, Walk(Space.DDR, 0, 0x2000, DType.F32, (Level(0, 1, 31),)),
                      Walk(Space.HBSM, 0, 0, DType.F32, (Level(0, 1, 31),)),
                      sync=Sync(1, (), (Update(1, 1, 1, Trigger.END),)))
    cvu = p.streams[0][0]
    assert isinstance(cvu, CvuPipeline)
    assert cvu.stages == (Stage(CvuOp.EXP, (Ref(RefKind.INPUT, 0),)),
                          Stage(CvuOp.RSUM, (Ref(RefKind.STAGE, 0),), axis=1),
                          Stage(CvuOp.DIV, (Ref(RefKind.STAGE, 0), Ref(RefKind.STAGE, 1))),
                          Stage(CvuOp.ADD, (Ref(RefKind.STAGE, 2), Ref(RefKind.IMM, imm=0.5))))
    assert cvu.sync.monitors == (Monitor(0, 1, 1, 0),)
    assert parse_program(format_program(p)) == p


def test_lenient_directives():
    p = parse_program(".machine tiny\n.symbol input x f32[1,8,32] ddr 0x2000\n"
                      ".segment sram 0x40 \"c\"\n.data ff\n", "l.asm")
    assert p.symbols[0] == Symbol("x", "input", (1, 8, 32), DType.F32, Space.DDR, 0x2000)
    assert p.segments[0] == Segment(Space.SRAM, 0x40, b"\xff", "c")
    p.validate(TINY)


def test_negative_sync_amounts_print_and_parse_back():
    """A mangled text can parse to a negative increment (``,-1``); it used to print as ``+-1``,
    which the lexer rejects (found by hypothesis in test_mangled_assembly)."""
    a = Walk.strided(Space.HBSM, 0, 0, DType.I8, (32, 32))
    b = Walk.strided(Space.HBSM, 0, 0x400, DType.I8, (32, 64))
    c = Walk.strided(Space.HBSM, 0, 0xc00, DType.I32, (32, 64))
    mm = MatMul(0, a, b, c, 32, 64, 32,
                sync=Sync(2, (Monitor(0, 1, 1, -2),), (Update(2, 3, -1, Trigger.BLOCK),)))
    text = format_instruction(mm)
    assert "wait(c1@t0>=1,-2)" in text and "signal(c2->0x3,-1,block)" in text
    assert parse_instruction(text) == mm


def test_instruction_text_is_readable():
    a = Walk.strided(Space.HBSM, 0, 0, DType.I8, (32, 32))
    b = Walk.strided(Space.HBSM, 0, 0x400, DType.I8, (32, 64))
    c = Walk.strided(Space.HBSM, 0, 0xc00, DType.I32, (32, 64))
    mm = MatMul(0, a, b, c, 32, 64, 32, epilogue=Epilogue(act=Act.RELU),
                sync=Sync(2, (Monitor(0, 1, 1, 1),), (Update(2, 3, 1, Trigger.BLOCK),)))
    text = format_instruction(mm)
    assert text == ("tcu.matmul tpb=0 a=hbsm0@0x0:i8[(0,32,992),(0,1,31)] "
                    "b=hbsm0@0x400:i8[(0,64,1984),(0,1,63)] c=hbsm0@0xc00:i32[(0,64,1984),(0,1,63)] "
                    "m=32 n=64 k=32 epilogue={act=relu} "
                    "sync{blocks=2 wait(c1@t0>=1,+1) signal(c2->0x3,+1,block)}")
    assert parse_instruction(text) == mm
    # hex and decimal are interchangeable on input, fields at defaults may be omitted
    assert parse_instruction(text.replace("0x400", "1024").replace(" epilogue={act=relu}", "")) == \
        MatMul(0, a, b, c, 32, 64, 32, sync=mm.sync)


_LOC = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<what>.+)$")


@pytest.mark.parametrize("text, line, col, what", [
    ("tcu.matmull tpb=0", 1, 1, "unknown instruction 'tcu.matmull'"),
    ("dtdu.fill tpb=0 dst=hbsm0@0x0:f32[(0,1,3)]", 1, 43, "missing field(s) value"),
    ("dtdu.fill tpb=0 dest=hbsm0@0x0:f32[(0,1,3)] value=1.0", 1, 17, "has no field 'dest'"),
    ("dtdu.fill tpb=0 dst=hbsmx@0x0:f32[(0,1,3)] value=1.0", 1, 21, "expected a memory space"),
    ("dtdu.fill tpb=0 dst=hbsm@0x0:f32[(0,1,3)] value=1.0", 1, 21, "needs its TPB"),
    ("dtdu.fill tpb=0 dst=hbsm0@0x0:f33[(0,1,3)] value=1.0", 1, 31, "unknown element type 'f33'"),
    ("dtdu.fill tpb=0 dst=hbsm0@0x0:f32[(0,1)] value=1.0", 1, 39, "expected ','"),
    ("dtdu.fill tpb=0 dst=hbsm0@0x0:f32[(0,1,3)] value=one", 1, 50, "expected a number for 'value'"),
    ("dtdu.fill tpb=0 tpb=1 dst=hbsm0@0x0:f32[(0,1,3)] value=1.0", 1, 17, "given twice"),
    ("\n\n  dtdu.fill tpb=0 dst=hbsm0@0x0:f32[(0,1,3)] value=1.0 $", 3, 56, "unexpected character '$'"),
    ("dtdu.fill tpb=0 dst=hbsm0@0x0:f32[(0,1,3)] value=1.0 sync{wait(c1@t0>=1)}", 1, 72, "expected ','"),
    ("dtdu.fill tpb=0 dst=hbsm0@0x0:f32[(0,1,3)] value=1.0 sync{signal(c1->1,+1,later)}", 1, 75,
     "unknown trigger 'later'"),
    ("tcu.conv2d tpb=0 stride=[1,2,3]", 1, 25, "'stride' takes exactly 2 values"),
])
def test_instruction_errors(text, line, col, what):
    with pytest.raises(AsmError) as ei:
        parse_instruction(text, "k.asm")
    m = _LOC.match(str(ei.value))
    assert m, str(ei.value)
    assert m["file"] == "k.asm"
    assert what in m["what"], str(ei.value)
    assert (int(m["line"]), int(m["col"])) == (line, col), str(ei.value)


@pytest.mark.parametrize("text, line, what", [
    ("", 1, "empty program"),
    (".cluster 0\n", 1, "must start with '.machine"),
    (".machine tiny 0x1\ndtdu.fill tpb=0\n", 2, "must follow '.ccb' or '.cluster"),
    (".machine tiny 0x1\n.data 00\n", 2, "'.data' must follow a '.segment'"),
    (".machine tiny 0x1\n.segment ddr@0x0 \"a\"\n.data 0\n", 3, "even number of hex digits"),
    (".machine tiny 0x1\n.cluster 0\n.cluster 0\n", 3, "given twice"),
    (".machine tiny 0x1\n.symbol inout \"x\" f32[1] ddr@0x0\n", 2, "'input', 'output' or 'weight'"),
    (".machine tiny 0x1\n.frobnicate\n", 2, "unknown directive '.frobnicate'"),
    (".machine tiny 0x1\n.meta key \"v\"\n", 2, "quoted string"),
    (".machine custom\n", 1, "not a preset"),
])
def test_program_errors(text, line, what):
    with pytest.raises(AsmError) as ei:
        parse_program(text, "p.asm")
    m = _LOC.match(str(ei.value))
    assert m and m["file"] == "p.asm" and int(m["line"]) == line, str(ei.value)
    assert what in m["what"], str(ei.value)


def test_negative_zero_survives_in_nested_defaults():
    from m100.targets.m100.isa import Fill
    base = _mm_for_zero()
    for ep in (Epilogue(clamp_hi=-0.0), Epilogue(clamp_lo=-0.0, act=Act.CLAMP)):
        inst = dataclasses.replace(base, epilogue=ep)
        back = parse_instruction(format_instruction(inst))
        assert str(back.epilogue.clamp_hi) == str(ep.clamp_hi)
        assert str(back.epilogue.clamp_lo) == str(ep.clamp_lo)
    f = Fill(0, Walk.strided(Space.HBSM, 0, 0, DType.F32, (4,)), -0.0)
    assert str(parse_instruction(format_instruction(f)).value) == "-0.0"
    st = Stage(CvuOp.EXP, (Ref(RefKind.IMM, 0, -0.0),), fparam=-0.0)
    assert "#-0.0" in format_instruction(CvuPipeline(0, (), (), f.dst, (4,), (st,)))


def _mm_for_zero():
    a = Walk.strided(Space.HBSM, 0, 0, DType.F32, (2, 2))
    return MatMul(0, a, a, a, 2, 2, 2)
