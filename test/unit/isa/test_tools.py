"""The demo and the size table run and report what they claim."""

import re

from m100.targets.m100.encoding import instruction_bits
from m100.targets.m100.program import Program
from m100.tools import isa_demo as demo, isa_sizes


def test_demo_round_trip_is_exact(capsys, tmp_path):
    out = tmp_path / "demo.m100"
    assert demo.main(["-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "round trip bin -> program -> asm -> program -> bin: exact" in text
    assert re.search(r"== m100-sim: \d+ cycles, max \|y - numpy\| = \S+, 0 reports: ok", text)
    prog = Program.load(out)
    prog.validate()
    assert prog == demo.build_program()
    kinds = sorted({i.MNEMONIC for _, i in prog.instructions()})
    assert kinds == ["ccb.dma", "cvu.pipeline", "tcu.matmul"]


def test_size_table_matches_encoder(capsys):
    assert isa_sizes.main(["--markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    from m100.targets.m100.machine import get_machine
    m = get_machine("m100")
    insts = isa_sizes.typical_instructions(m)
    assert len(lines) == len(insts) == 8
    for line, (_, inst) in zip(lines, insts):
        inst.check(m)
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == f"`{inst.MNEMONIC}`"
        assert int(cells[2]) == instruction_bits(inst, m)
        assert 300 <= int(cells[2]) <= 4000  # hundreds to thousands of bits
    assert isa_sizes.main(["--machine", "nosuch"]) == 1
