"""``InstrOp.verify_`` (``dialects/tpb_base.py``): each of its slot and walk checks, one mutant
each, refused with its own message (session 29 reads the slots in place and asks a walk's class
by identity: the same checks, order and messages as before). Oracle: the messages the verifier
has always given (the lit tests' ``invalid.mlir`` holds some of them)."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from m100.context import make_context
from m100.dialects.twu import AccessAttr, WalkAttr
from m100.targets.m100.isa import DType, Space, Walk

TEXT = """
tpb.program "tiny" placed {
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 16xf32>
  %b = hbsm.alloc offset 64 : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.copy tpb 0 src(%a, #twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) dst(%b, #twu.walk<hbsm[0], 64, f32, [(0, 1, 15)]>)
  %u = tpb.copy tpb 0 src(#twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) dst(%b, #twu.walk<hbsm[0], 64, f32, [(0, 1, 15)]>)
}
"""


def _walk(space=Space.HBSM, tpb=0, base=0, dtype=DType.F32, n=16):
    from m100.targets.m100.isa import Level
    return WalkAttr.from_isa(Walk(space, tpb, base, dtype, (Level(0, 1, n - 1),)))


def _op(second=False):
    """The module and its first copy (buffers on both slots), or its second (``src`` a walk
    alone, no buffer)."""
    m = Parser(make_context(), TEXT).parse_module()
    m.verify()
    return m, [o for o in m.walk() if o.name == "tpb.copy"][int(second)]


def _walks(op, **kw):
    d = dict(op.walks.data)
    d.update(kw)
    op.properties["walks"] = DictionaryAttr({k: v for k, v in d.items() if v is not None})


MUTANTS = {
    "each buffer operand needs exactly one distinct slot name":
        lambda op: op.properties.__setitem__("buf_slots", ArrayAttr([StringAttr("src")] * 2)),
    "each buffer operand needs exactly one distinct slot name ":
        lambda op: op.properties.__setitem__("buf_slots", ArrayAttr([StringAttr("src")])),
    "unknown operand slot 'zz' (expected: src, dst)":
        lambda op: _walks(op, zz=_walk()),
    "operand 'src' has neither a buffer nor a walk":  # (the second copy)
        lambda op: _walks(op, src=None),
    "operand 'src' must be a #twu.walk or #twu.access":
        lambda op: _walks(op, src=IntegerAttr(1, i64)),
    "operand 'src' has an access but no buffer":  # (the second copy)
        lambda op: _walks(op, src=AccessAttr.identity([16])),
    "operand 'src': the walk (hbsm, f16) does not match its buffer":
        lambda op: _walks(op, src=_walk(dtype=DType.F16)),
    "operand 'src': the walk is in TPB 1's HBSM but its buffer is in TPB 0's":
        lambda op: _walks(op, src=_walk(tpb=1)),
    "operand 'dst': the walk touches bytes [68, 132) outside its buffer's [64, 128)":
        lambda op: _walks(op, dst=_walk(base=68)),
}


@pytest.mark.parametrize("message", list(MUTANTS))
def test_each_slot_check_refuses_its_mutant(message):
    m, op = _op(second="operand 'src' has" in message)
    MUTANTS[message](op)
    with pytest.raises(VerifyException) as e:
        m.verify()
    assert f"'tpb.copy' (tpb 0): {message.strip()}" in str(e.value)


TWO_TPBS = """
tpb.program "tiny" placed {
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 16xf32>
  %b = hbsm.alloc offset 64 : !hbsm.buffer<hbsm[0], 16xf32>
  %c = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[1], 16xf16>
  %d = hbsm.alloc offset 64 : !hbsm.buffer<hbsm[1], 16xf16>
  %t = tpb.copy tpb 0 src(%a, #twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) dst(%b, #twu.walk<hbsm[0], 64, f32, [(0, 1, 15)]>)
  %u = tpb.copy tpb 1 src(%c, #twu.walk<hbsm[1], 0, f16, [(0, 1, 15)]>) dst(%d, #twu.walk<hbsm[1], 64, f16, [(0, 1, 15)]>)
}
"""


@pytest.mark.parametrize("second", [False, True])
def test_walk_checks_read_each_buffer_types_own_facts(second):
    """``_check_walk_in_buffer`` keeps a buffer type's space, element type and TPB on the
    (immutable) type: buffers of two TPBs and element types verify in one module, each against
    its own, in either order and again after both were read; then a walk moved to the other
    buffer's TPB or element type is refused with the messages above (a cache per class or per
    module instead of per type accepts the first mutant or refuses the module)."""
    m = Parser(make_context(), TWO_TPBS).parse_module()
    ops = [o for o in m.walk() if o.name == "tpb.copy"]
    for _ in range(2):
        for op in (ops[::-1] if second else ops):
            op.verify()
        m.verify()
    _walks(ops[0], src=_walk(tpb=1))
    with pytest.raises(VerifyException, match="the walk is in TPB 1's HBSM but its buffer is in "
                                               "TPB 0's"):
        m.verify()
    m = Parser(make_context(), TWO_TPBS).parse_module()
    m.verify()
    ops = [o for o in m.walk() if o.name == "tpb.copy"]
    _walks(ops[1], dst=_walk(tpb=1, base=64, dtype=DType.F32))
    with pytest.raises(VerifyException, match=r"operand 'dst': the walk \(hbsm, f32\) does not "
                                              r"match its buffer"):
        m.verify()
