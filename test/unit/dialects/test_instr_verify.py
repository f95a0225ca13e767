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


# --- the walk-in-buffer check against its definition (session 34 keeps its facts on the walk
# and the buffer type, and reads an alloc's offset and type without xDSL's accessors) ---------

BUFFERS = """
tpb.program "m100" placed {
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 16xf32>
  %b = hbsm.alloc offset 64 : !hbsm.buffer<hbsm[0], 8x4xf16, slots = 2>
  %c = hbsm.alloc offset 128 : !hbsm.buffer<hbsm[1], 16xi8>
  %d = hbsm.alloc : !hbsm.buffer<hbsm[1], 16xf32>
  %e = hbsm.alloc offset 256 : !hbsm.buffer<ddr, 32xf32>
  %f = hbsm.alloc offset 96 : !hbsm.buffer<sram, 16xf16>
  %g = hbsm.fifo producer 0 consumers [1] offset 32 : !hbsm.buffer<hbsm[1], 4x4xf32, slots = 2>
  %h = hbsm.view %b[2, 1] slot 1 : !hbsm.buffer<hbsm[0], 8x4xf16, slots = 2> -> !hbsm.buffer<hbsm[0], 4x2xf16>
  %i = hbsm.view %b[0, 0] : !hbsm.buffer<hbsm[0], 8x4xf16, slots = 2> -> !hbsm.buffer<hbsm[0], 4x4xf16, slots = 2>
  %j = hbsm.view %g[1, 0] slot 0 : !hbsm.buffer<hbsm[1], 4x4xf32, slots = 2> -> !hbsm.buffer<hbsm[1], 2x4xf32>
  %k = hbsm.view %d[4] : !hbsm.buffer<hbsm[1], 16xf32> -> !hbsm.buffer<hbsm[1], 8xf32>
}
"""


def _reference_range(value):
    """``hbsm.buffer_range`` as it was (session 33), written out."""
    import math

    from m100.dialects.hbsm import AllocOp, FifoOp, ViewOp
    from m100.dialects.twu import array_values
    owner = value.owner
    if isinstance(owner, (AllocOp, FifoOp)):
        off = owner.offset
        if off is None:
            return None
        start = off.value.data
        return start, start + owner.results[0].type.total_bytes
    if isinstance(owner, ViewOp):
        parent = _reference_range(owner.source)
        if parent is None:
            return None
        a, b = owner.source.type, owner.result.type
        strides = [math.prod(a.dims[i + 1:]) for i in range(len(a.dims))]
        offs = array_values(owner.offsets)
        first = sum(o * s for o, s in zip(offs, strides))
        last = sum((o + n - 1) * s for o, n, s in zip(offs, b.dims, strides))
        bits = a.dtype.bits
        start = parent[0] + (first * bits) // 8
        end = parent[0] + ((last + 1) * bits + 7) // 8
        if owner.slot is not None:
            shift = owner.slot.value.data * a.slot_bytes
            return start + shift, end + shift
        return start, end + (a.num_slots - 1) * a.slot_bytes
    return None


def _reference_check(op, name, walk, buf):
    """``InstrOp._check_walk_in_buffer`` as it was (session 33), written out: None or the
    message it raises."""
    from m100.dialects.twu import SPACE_NAMES
    t = buf.type
    w = walk.to_isa()
    if w.space is not t.space_enum or w.dtype is not t.dtype:
        return (f"{op.describe()}: operand '{name}': the walk ({SPACE_NAMES[w.space]}, "
                f"{w.dtype.short}) does not match its buffer {t}")
    if w.space is Space.HBSM and w.tpb != t.tpb_index and not op._multicast(name):
        return (f"{op.describe()}: operand '{name}': the walk is in TPB {w.tpb}'s HBSM but its "
                f"buffer is in TPB {t.tpb_index}'s")
    rng = _reference_range(buf)
    if rng is not None:
        lo, hi = w.byte_range()
        if lo < rng[0] or hi > rng[1]:
            return (f"{op.describe()}: operand '{name}': the walk touches bytes [{lo}, {hi}) "
                    f"outside its buffer's [{rng[0]}, {rng[1]})")
    return None


def test_walk_in_buffer_is_the_definition():
    """Random walks against the buffers above (allocated or not, HBSM of two TPBs, DDR, SRAM, a
    FIFO, views with and without a slot, of an allocated and an unallocated root), asked of
    every instruction kind of ``resolved_all_ops.mlir`` (multicast destinations included):
    accepted or refused with the same message as the written-out definition, and again when
    the walk and the type have kept their facts. Every outcome occurs."""
    import os
    import random
    import sys

    from m100.targets.m100.isa import Level
    sys.path.insert(0, os.path.dirname(__file__))
    from tpb_all_ops import MODULES

    m = Parser(make_context(), BUFFERS).parse_module()
    bufs = [o.results[0] for o in m.walk() if o.name.startswith("hbsm.")]
    ops = [o for o in MODULES["resolved_all_ops.mlir"].walk() if hasattr(o, "_multicast")]
    assert any(o._multicast("dst") for o in ops)
    rng = random.Random(34)
    seen = set()
    for _ in range(3000):
        b = rng.choice(bufs)
        t = b.type
        space = t.space_enum if rng.random() < 0.8 else rng.choice(list(Space))
        dtype = t.dtype if rng.random() < 0.8 else rng.choice([DType.F32, DType.F16, DType.I8])
        tpb = (t.tpb_index if rng.random() < 0.7 else rng.randrange(3)) if space is Space.HBSM \
            else 0
        base = max(0, rng.randrange(-16, 300))
        levels = []
        for _ in range(rng.randrange(1, 3)):
            first, step = rng.randrange(0, 3), rng.randrange(1, 5)
            levels.append(Level(first, step, first + step * rng.randrange(0, 5)))
        levels = tuple(levels)
        walk = WalkAttr.from_isa(Walk(space, tpb, base, dtype, levels))
        op = rng.choice(ops)
        name = rng.choice(["src", "dst"])
        want = _reference_check(op, name, walk, b)
        for _ in range(2):  # (the second time from the facts kept)
            try:
                op._check_walk_in_buffer(name, walk, b)
                got = None
            except VerifyException as e:
                got = str(e)
            assert got == want, (op.name, name, walk, t)
        seen.add(next((k for k in KINDS if k in want), want) if want else "ok")
    assert seen == {"ok", *KINDS}, seen


KINDS = ("does not match its buffer", "HBSM but its buffer is in TPB", "outside its buffer's")
