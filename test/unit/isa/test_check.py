"""Negative cases of ``Instruction.check`` and ``Program.validate``: clear IsaError / ProgramError."""

import dataclasses

import pytest

from m100.targets.m100.isa import (CvuOp, CvuPipeline, DType, Dma, Fill, IsaError, Level, MatMul,
                                   Monitor, Ref, RefKind, Space, Stage, Sync, Update, Walk)
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import CCB_STREAM, Program, ProgramError, Segment, Symbol

TINY = get_machine("tiny")
M100 = get_machine("m100")
H = Space.HBSM


def _matmul(tpb=0, m=4, n=8, k=16, **kw):
    a = Walk.strided(H, tpb, 0, DType.I8, (m, k))
    b = Walk.strided(H, tpb, 0x400, DType.I8, (k, n))
    c = Walk.strided(H, tpb, 0x800, DType.I32, (m, n))
    return MatMul(tpb, a, b, c, m, n, k, **kw)


def test_valid_baseline():
    _matmul().check(TINY)
    _matmul(sync=Sync(2, (Monitor(0, 15, 3, 1),), (Update(1, 0b11),))).check(TINY)


@pytest.mark.parametrize("inst, msg", [
    (_matmul(sync=Sync(1, (Monitor(0, 16, 1),))), r"counter 16 out of range .*16 counters"),
    (_matmul(sync=Sync(1, (), (Update(99, 1),))), r"counter 99 out of range"),
    (_matmul(sync=Sync(1, (Monitor(1, 0, 1),))), r"monitors its own SU only \(TPB 0\), not TPB 1"),
    (_matmul(sync=Sync(1, (), (Update(0, 0b100),))), r"TPB mask 0x4"),
    (_matmul(sync=Sync(3)), r"blocks \(3\) must divide m"),
    (_matmul(sync=Sync(1, (Monitor(0, 0, 0, 2 ** 32),))), r"outside the counter range"),
    (_matmul(sync=Sync(2, (Monitor(0, 0, 2 ** 32 - 1, 1),))), r"expects more than a counter"),
    (dataclasses.replace(_matmul(), m=5), r"operand 'a' walks 64 elements but the logical shape \[5, 16\]"),
    (dataclasses.replace(_matmul(), c=Walk.strided(H, 0, 0x800, DType.I8, (4, 8))),
     r"integer result without requant must be i32"),
    (dataclasses.replace(_matmul(), a=Walk(H, 0, 0, DType.I8, tuple(Level(0, 1, 1) for _ in range(6))
                                          + (Level(0, 1, 0),))),
     r"7 TWU levels exceed the machine's budget of 6"),
    (dataclasses.replace(_matmul(), c=Walk.strided(H, 0, TINY.hbsm_bytes - 64, DType.I32, (4, 8))),
     r"operand 'c': bytes \[65472, 65600\) fall outside HBSM \(size 65536\)"),
    (dataclasses.replace(_matmul(), a=Walk(H, 0, 0x10000, DType.I8, (Level(-64, 1, -1),))),
     r"base address 0x10000 outside HBSM"),
    (dataclasses.replace(_matmul(), a=Walk(H, 0, 0, DType.I8, (Level(0, 1, 2 ** 31),))),
     r"does not fit the TWU's 32-bit registers"),
    (dataclasses.replace(_matmul(), a=Walk(H, 0, 0, DType.I8, (Level(0, 3, 4),))),
     r"non-negative multiple of step"),
    (dataclasses.replace(_matmul(), b=Walk.strided(H, 1, 0x400, DType.I8, (16, 8))),
     r"operand 'b' must be in the HBSM of TPB 0"),
    (Fill(0, Walk.strided(Space.DDR, 0, 0, DType.F32, (4,)), 1.0), r"dst must be in the HBSM"),
    (Fill(0, Walk.strided(H, 0, 0, DType.F32, (4,)), float("inf")), r"fill value must be finite"),
    (Dma(2, Walk.strided(Space.DDR, 0, 0, DType.I8, (4,)), Walk.strided(H, 0, 0, DType.I8, (4,))),
     r"DMA engine 2 does not exist"),
    (Dma(0, Walk.strided(Space.DDR, 0, 0, DType.I8, (4,)), Walk.strided(H, 0, 0, DType.F16, (4,))),
     r"DMA does not convert types"),
    (CvuPipeline(0, (Walk.strided(H, 0, 0, DType.F32, (4,)),), ((-1, -4),),
                 Walk.strided(H, 0, 64, DType.F32, (4,)), (4,), (Stage(CvuOp.EXP, (Ref(RefKind.INPUT),)),)),
     r"shape \[-1, -4\] has a dimension < 1"),
    (CvuPipeline(0, (), (), Walk.strided(H, 0, 64, DType.F32, (4,)), (4,),
                 (Stage(CvuOp.EXP, (Ref(RefKind.STAGE, 0),)),)),
     r"stage 0 reads stage 0, which is not an earlier stage"),
])
def test_check_rejects(inst, msg):
    with pytest.raises(IsaError, match=msg):
        inst.check(TINY)


def test_float_activations_with_i4_weights_are_accepted():
    a = Walk.strided(H, 0, 0, DType.F16, (4, 16))
    b = Walk.strided(H, 0, 0x400, DType.I4, (16, 8))
    c = Walk.strided(H, 0, 0x800, DType.F16, (4, 8))
    MatMul(0, a, b, c, 4, 8, 16).check(TINY)


def test_tpb_out_of_range():
    with pytest.raises(Exception, match=r"TPB 2 does not exist on machine 'tiny'"):
        _matmul(tpb=2).check(TINY)


# --- program validation ---------------------------------------------------------------------
def _prog(machine=TINY, **kw):
    return Program(machine.name, machine.fingerprint(), **kw)


def test_program_validate_ok():
    dma = Dma(0, Walk.strided(Space.DDR, 0, 0x1000, DType.I8, (64,)), Walk.strided(H, 1, 0, DType.I8, (64,)))
    p = _prog(streams={0: [_matmul(tpb=1)], CCB_STREAM: [dma]},
              segments=[Segment(Space.DDR, 0x1000, bytes(64), "w"), Segment(Space.DDR, 0x1040, b"x")],
              symbols=[Symbol("x", "input", (2, 3), DType.F32, Space.DDR, 0x2000)])
    p.validate(TINY)
    assert p.machine_obj() is TINY
    assert [k for k, _ in p.instructions()] == [CCB_STREAM, 0]


@pytest.mark.parametrize("prog, msg", [
    (_prog(streams={0: [Dma(0, Walk.strided(Space.DDR, 0, 0, DType.I8, (4,)),
                            Walk.strided(H, 0, 0, DType.I8, (4,)))]}), "a DMA belongs to the CCB stream"),
    (_prog(streams={CCB_STREAM: [_matmul()]}), "only DMAs belong to the CCB stream"),
    (_prog(M100, streams={0: [_matmul(tpb=5)]}), "TPB 5 is in cluster 1"),
    (_prog(streams={3: []}), "neither a cluster"),
    (_prog(streams={0: [_matmul(sync=Sync(1, (Monitor(0, 16, 1),)))]}),
     r"cluster 0 stream, instruction 0 \(tcu.matmul\): sync: counter 16"),
    (_prog(segments=[Segment(Space.DDR, 0x10, bytes(32)), Segment(Space.DDR, 0x20, b"a", "b")]),
     r"segment 1 'b' overlaps segment 0 in DDR at 0x20"),
    (_prog(segments=[Segment(Space.SRAM, TINY.ccb_sram_bytes - 2, bytes(4))]), "fall outside SRAM"),
    (_prog(segments=[Segment(Space.HBSM, 0, bytes(4))]), "segments live in DDR or SRAM"),
    (_prog(symbols=[Symbol("x", "input", (1,), DType.I8, Space.DDR, 0)] * 2), "must be unique"),
    (_prog(symbols=[Symbol("x", "weird", (1,), DType.I8, Space.DDR, 0)]), "role must be"),
    (_prog(symbols=[Symbol("x", "input", (4,), DType.I8, Space.HBSM, 0, tpb=3)]), "TPB 3 does not exist"),
    (_prog(symbols=[Symbol("x", "input", (0,), DType.I8, Space.DDR, 0)]), "dimension < 1"),
    (Program("tiny", 1234), "fingerprint"),
])
def test_program_validate_rejects(prog, msg):
    with pytest.raises(ProgramError, match=msg):
        prog.validate(TINY if prog.machine == "tiny" else M100)


def test_machine_obj_errors():
    with pytest.raises(ProgramError, match="'nosuch' which is not a preset"):
        Program("nosuch", 1).machine_obj()
    with pytest.raises(ProgramError, match="fingerprint"):
        Program("tiny", 1).machine_obj()
    # a preset is found by fingerprint even under another name
    assert Program("renamed", TINY.fingerprint()).machine_obj() is TINY


def test_program_file_errors(tmp_path):
    with pytest.raises(ProgramError, match="cannot read program"):
        Program.load(tmp_path / "missing.m100")
    (tmp_path / "x.m100").write_bytes(b"hello world, this is not a program at all")
    with pytest.raises(ProgramError, match=r"x.m100: byte offset 0: not an m100 program file"):
        Program.load(tmp_path / "x.m100")
    good = _prog().to_bytes()
    (tmp_path / "t.m100").write_bytes(good + b"\0")
    with pytest.raises(ProgramError, match="trailing bytes"):
        Program.load(tmp_path / "t.m100")


@pytest.mark.parametrize("inst, msg", [
    (i, m) for i, m in [
        (_matmul(sync=Sync(1, (Monitor(0, 16, 1),))), r"counter 16 out of range .*16 counters"),
        (_matmul(sync=Sync(1, (), (Update(0, 0b100),))), r"TPB mask 0x4"),
        (_matmul(sync=Sync(3)), r"blocks \(3\) must divide m"),
        (dataclasses.replace(_matmul(), m=5), r"operand 'a' walks 64 elements")]])
def test_check_as_resynced_refuses_what_check_refuses(inst, msg):
    """``check_as_resynced`` (sync-insert's output: a checked instruction with a new sync) runs
    the sync's own check when only the sync changed and the blocks did not, else the full check:
    each way, what ``check`` refuses is refused, and a valid one is remembered as checked."""
    src = _matmul(sync=Sync(1))
    src.check(TINY)
    if inst.sync.blocks == 1 and inst.m == src.m:  # only the sync differs: the short way
        inst = dataclasses.replace(src, sync=inst.sync)
    with pytest.raises(IsaError, match=msg):
        inst.check_as_resynced(src, TINY)
    assert inst.__dict__.get("_ok_on") is None
    ok = dataclasses.replace(src, sync=Sync(1, (Monitor(0, 15, 3),), (Update(1, 0b11),)))
    ok.check_as_resynced(src, TINY)
    assert ok.__dict__.get("_ok_on") is TINY
    unchecked = dataclasses.replace(_matmul(), m=5)  # not checked: the full check runs
    with pytest.raises(IsaError, match="operand 'a' walks"):
        dataclasses.replace(unchecked, sync=Sync(1)).check_as_resynced(unchecked, TINY)
