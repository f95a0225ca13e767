"""``InstrOp.to_instruction``'s memo (``dialects/tpb_base.py``): a hit only when the op holds the
objects the kept instruction was built from, and what a hit returns equals a fresh build.

Oracle: ``InstrOp._to_instruction`` (a build that neither reads nor writes the memo), after each
change a pass can make to an op: a property or an attribute replaced (by an equal object of
another identity, or by another value), added or removed, and -- without ``synthesize``, where
the key leaves them out -- the buffer operands' types (the instruction of a resolved op is made
of its ``#twu.walk`` properties alone: changing a buffer's type under a kept memo must still give
the instruction a fresh build gives). Every instruction kind of the hand-written resolved program
and every op of a compiled one.
"""

from __future__ import annotations

import copy
import os
import sys

import pytest
from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.utils.exceptions import VerifyException

from m100.dialects.hbsm import BufferType
from m100.dialects.sync import ActionsAttr
from m100.dialects.tpb_base import InstrOp
from m100.dialects.twu import WalkAttr
from m100.frontend import models
from m100.targets.m100.isa import Walk
from m100.tools import driver

sys.path.insert(0, os.path.dirname(__file__))

from tpb_all_ops import module as _module  # noqa: E402


def _copy(a):
    """An attribute equal to ``a`` of another identity."""
    b = copy.copy(a)
    assert b is not a and b == a
    return b


def _fresh(op, synthesize=False):
    try:
        return op._to_instruction(synthesize)
    except VerifyException:
        return None


def _memo_agrees(op, synthesize=False) -> None:
    """``to_instruction`` equals a fresh build (or both raise)."""
    fresh = _fresh(op, synthesize)
    if fresh is None:
        with pytest.raises(VerifyException):
            op.to_instruction(synthesize)
    else:
        got = op.to_instruction(synthesize)
        assert got == fresh and repr(got) == repr(fresh)


def _other_walk(w: WalkAttr) -> WalkAttr:
    """The walk moved by one element (another base: another instruction)."""
    x = w.to_isa()
    return WalkAttr.from_isa(Walk(x.space, x.tpb, x.base + x.dtype.bits // 8 + 1, x.dtype,
                                  x.levels))


def _resolved_ops():
    return [o for o in _module("resolved_all_ops.mlir").walk() if isinstance(o, InstrOp)]


@pytest.mark.parametrize("synthesize", [False, True])
def test_a_kept_instruction_is_returned_until_a_property_or_attribute_changes(synthesize):
    ops = _resolved_ops()
    assert len({type(o) for o in ops}) >= 8
    for op in ops:
        first = op.to_instruction(synthesize)
        assert op.to_instruction(synthesize) is first  # a hit
        for k in list(op.properties):
            # an equal object of another identity: a miss (never a wrong hit), the same value
            v = op.properties[k]
            op.properties[k] = _copy(v)
            again = op.to_instruction(synthesize)
            assert again is not first and again == first
            first = again
        # another value of a property the instruction reads: the new instruction
        walks = op.walks.data
        name = next(iter(walks))
        op.properties["walks"] = type(op.walks)({**walks, name: _other_walk(walks[name])})
        moved = op.to_instruction(synthesize)
        assert moved != first
        _memo_agrees(op, synthesize)
        op.properties[op.UNIT_KEY] = IntegerAttr(op.unit_index ^ 1, i64)
        _memo_agrees(op, synthesize)
        if op.sync is not None:
            op.properties["sync"] = ActionsAttr.from_isa(op.sync.to_isa().__class__())
            _memo_agrees(op, synthesize)
            # a property removed (the sync actions): a miss; without synthesize the op no longer
            # forms an instruction (the error, not the kept one)
            del op.properties["sync"]
            _memo_agrees(op, synthesize)
        # an attribute added, then removed: misses
        kept = op.to_instruction(True)
        op.attributes["m100.note"] = StringAttr("x")
        assert op.to_instruction(True) is not kept
        del op.attributes["m100.note"]
        _memo_agrees(op, True)


def test_a_buffer_type_changed_under_the_memo_gives_a_fresh_build():
    """Every op of a compiled program (buffer operands, walks on every slot): the types of its
    buffers replaced by other buffer types, the kept instruction (no ``synthesize``: the key
    leaves the types out) must be what a fresh build of the changed op gives; with
    ``synthesize`` (stand-in walks made from the types) the key has them."""
    cr = driver.compile(models.conv_relu_maxpool(), machine="tiny")
    ops = [o for o in cr.module.walk() if isinstance(o, InstrOp)]
    assert ops and any(o.bufs for o in ops)
    for op in ops:
        synth = op.to_instruction(True)
        first = op.to_instruction()  # (the memo keeps the last build: this one)
        for b in op.bufs:
            t: BufferType = b.type
            tpb = t.tpb_index + 1 if t.space.data == "hbsm" else 0
            b._type = BufferType(t.space_enum, tpb, (*t.dims, 2), t.element_type, t.num_slots)
        assert op.to_instruction() is first and first == op._to_instruction(False)
        if op.bufs:
            assert op.to_instruction(True) is not synth
        else:
            assert op.to_instruction(True) == synth
        _memo_agrees(op, True)
