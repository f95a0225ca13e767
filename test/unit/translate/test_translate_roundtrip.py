"""IR <-> ISA round trips of the resolved tpb level (issue 2, items 5-6).

Oracles: the ISA objects themselves (frozen dataclasses compared with ==) from helper A's
hypothesis strategies, and the printed IR text (print -> parse -> print must be a fixpoint).
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.parser import Parser

from m100.context import make_context
from m100.targets.m100.machine import get_machine
from m100.dialects.translate import (TranslateError, instruction_to_op, module_to_program,
                                         op_to_instruction, program_to_module)

_p = pathlib.Path(__file__).parents[1] / "isa" / "strategies.py"
_spec = importlib.util.spec_from_file_location("m100_isa_strategies_translate", _p)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)  # type: ignore[union-attr]

MACHINES = [get_machine("tiny"), get_machine("m100")]
CTX = make_context()


def _reparse(text: str):
    return Parser(CTX, text).parse_module()


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
@settings(max_examples=260, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_instruction_op_instruction(machine, data):
    inst = data.draw(S.instructions(machine))
    op = instruction_to_op(inst)
    assert op_to_instruction(op) == inst
    # through text: the op verifies (resolved level, inside a program for the machine) and parses
    # back to the same instruction
    from m100.targets.m100.program import CCB_STREAM, Program
    from m100.targets.m100.isa import Dma
    key = CCB_STREAM if isinstance(inst, Dma) else machine.cluster_of(inst.tpb)
    prog = Program(machine.name, machine.fingerprint(), {key: [inst]})
    module = program_to_module(prog)
    module.verify()
    text = str(module)
    again = _reparse(text)
    again.verify()
    assert str(again) == text
    assert module_to_program(again).streams == {key: [inst]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_program_module_program(data):
    machine = MACHINES[0]
    prog = data.draw(S.programs(machine))
    module = program_to_module(prog)
    module.verify()
    text = str(module)
    back = module_to_program(_reparse(text))
    assert back == prog
    # module -> program -> module is the identity on the canonical form
    assert str(program_to_module(back)) == text


def test_placed_program_does_not_translate():
    m = _reparse('tpb.program "tiny" placed {\n}')
    with pytest.raises(TranslateError, match="level 'placed'"):
        module_to_program(m)


def test_unresolved_op_names_the_missing_field():
    m = _reparse('''tpb.program "tiny" placed {
  %b = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.fill tpb 0 dst(%b) {value = 1.0}
}''')
    op = list(m.walk())[-1]
    with pytest.raises(TranslateError, match="operand 'dst' has no walk"):
        op_to_instruction(op)


def test_nested_instruction_is_not_dropped():
    m = _reparse('''tpb.program "tiny" resolved {
  func.func @f() {
    %t = tpb.fill tpb 0 dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 1> {value = 1.0}
    func.return
  }
}''')
    with pytest.raises(TranslateError, match="'tpb.fill' \\(tpb 0\\) sits inside 'func.func'"):
        module_to_program(m)


def test_instruction_count_is_the_walks():
    """``translate._count_instrs`` (module_to_program's check that no instruction is dropped)
    counts the instruction ops ``op.walk()`` finds: in the program body, in streams, nested in
    other ops' regions (several blocks, an instruction inside a stream inside a function), and
    none in an empty program."""
    from m100.dialects.tpb import InstrOp
    from m100.dialects.translate import _count_instrs

    fill = ('%t{k} = tpb.fill tpb 0 dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 3)]>) '
            'sync #sync.actions<blocks = 1> {{value = 1.0}}')
    texts = ['tpb.program "tiny" resolved {\n}',
             'tpb.program "tiny" resolved {\n  ' + fill.format(k=0) + '\n  tpb.stream cluster 0 {\n    '
             + fill.format(k=1) + '\n    ' + fill.format(k=2) + '\n  }\n}',
             'tpb.program "tiny" resolved {\n  func.func @f() {\n    ' + fill.format(k=0)
             + '\n    cf.br ^bb1\n  ^bb1:\n    ' + fill.format(k=1) + '\n    func.return\n  }\n  '
             + fill.format(k=2) + '\n}']
    for text in texts:
        m = _reparse(text)
        prog = next(o for o in m.walk() if o.name == "tpb.program")
        want = len([o for o in prog.walk() if isinstance(o, InstrOp)])
        assert _count_instrs(prog) == want
        assert _count_instrs(m) == want
    assert want == 3


def test_ops_in_program_body_go_to_their_streams():
    m = _reparse('''tpb.program "tiny" resolved {
  %d = tpb.dma engine 1 src(#twu.walk<ddr, 0, f32, [(0, 1, 3)]>) dst(#twu.walk<hbsm[1], 0, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 1>
  %t = tpb.fill tpb 1 dst(#twu.walk<hbsm[1], 0, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 1> {value = 1.0}
}''')
    m.verify()
    p = module_to_program(m)
    assert sorted(p.streams) == [-1, 0]
    assert [i.MNEMONIC for i in p.streams[-1]] == ["ccb.dma"]
    assert [i.MNEMONIC for i in p.streams[0]] == ["dtdu.fill"]
