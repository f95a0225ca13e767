"""``Instruction.walks()`` listed once per (frozen) instruction: the same answer as listing the
fields again (``_list_walks``), a new list each call, per instruction (not per class)."""

import m100_isa_strategies as S
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.targets.m100.isa import Copy, DType, Space, Walk
from m100.targets.m100.isa_base import Instruction
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _answers_as_listed(insts) -> bool:
    """Every instruction's walks(), asked twice (the list of the first call changed in between),
    equals its fields listed again."""
    for inst in insts:
        first = inst.walks()
        want = inst._list_walks()
        first.append(("junk", None, False))
        if inst.walks() != want or inst.walks() is inst.walks():
            return False
    return True


@settings(deadline=None, suppress_health_check=list(HealthCheck), max_examples=60)
@given(st.lists(S.instructions(M100), min_size=2, max_size=6))
def test_walks_are_the_fields_listed(insts):
    assert _answers_as_listed(insts)


def test_a_memo_per_class_would_be_caught(monkeypatch):
    w = [Walk(Space.HBSM, 0, 64 * k, DType.F32, ()) for k in range(4)]
    a, b = Copy(0, w[0], w[1]), Copy(0, w[2], w[3])
    assert _answers_as_listed([a, b])
    memo = {}

    def per_class(self):  # mutant: one answer per class
        if type(self) not in memo:
            memo[type(self)] = tuple(self._list_walks())
        return list(memo[type(self)])
    monkeypatch.setattr(Instruction, "walks", per_class)
    assert not _answers_as_listed([Copy(0, w[0], w[1]), Copy(0, w[2], w[3])])
