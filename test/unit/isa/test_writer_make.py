"""The writer's bodies make nothing (``_Writer.make`` answers None, session 34): the bits are the
same as when each body made its instruction (``_Coder.make``, the old behaviour, written out
below as a writer that makes), and what that writer makes is the instruction encoded -- every
field of every kind goes through the body, in the body's order."""

import m100_isa_strategies as S
import pytest
from hypothesis import HealthCheck, given, settings

from m100.targets.m100 import encoding_fields as F
from m100.targets.m100 import encoding_write as W
from m100.targets.m100.isa import INSTRUCTION_KINDS
from m100.targets.m100.machine import get_machine

TINY = get_machine("tiny")
M100 = get_machine("m100")


class _MakingWriter(W._Writer):
    """The writer as it was: each body's objects made (``_Coder.make``)."""
    make = F._Coder.make


def _both(inst, machine):
    L = F.layout(machine)
    w, old = W._Writer(L), _MakingWriter(L)
    got = F._BODY[type(inst)](w, inst)
    made = F._BODY[type(inst)](old, inst)
    assert got is None
    assert (w.v, w.n) == (old.v, old.n)
    assert made == inst  # the body coded every field of the instruction
    return w.n


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(inst=S.instructions(TINY))
def test_writer_bits_are_the_making_writers_tiny(inst):
    inst.check(TINY)
    _both(inst, TINY)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(inst=S.instructions(M100))
def test_writer_bits_are_the_making_writers_m100(inst):
    inst.check(M100)
    _both(inst, M100)


@pytest.mark.parametrize("kind", INSTRUCTION_KINDS, ids=lambda k: k.__name__)
def test_every_kind_is_made_through_the_body(kind):
    seen = []

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(inst=S.instructions(M100, kinds=(kind,)))
    def run(inst):
        inst.check(M100)
        assert type(inst) is kind and _both(inst, M100) > 0
        seen.append(inst)
    run()
    assert seen
