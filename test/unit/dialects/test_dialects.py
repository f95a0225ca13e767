"""Unit/property tests of the m100 dialects (twu, hbsm, sync, tpb).

Oracles: direct nested-loop enumeration with numpy (walks, views), and ``isa.Instruction.check``
(the resolved-level verifier must agree with it on every instruction).
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, f32, i64
from xdsl.ir.affine import AffineExpr, AffineMap
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from m100.context import make_context
from m100.dialects import M100_DIALECTS
from m100.dialects.hbsm import AllocOp, BufferType, ViewOp, buffer_range
from m100.dialects.sync import ActionsAttr
from m100.dialects.tpb import ProgramOp, StageAttr
from m100.dialects.twu import AccessAttr, WalkAttr
from m100.errors import M100Error
from m100.targets.m100.isa import DType, Space
from m100.targets.m100.machine import get_machine
from m100.dialects.translate import instruction_to_op

_p = pathlib.Path(__file__).parents[1] / "isa" / "strategies.py"
_spec = importlib.util.spec_from_file_location("m100_isa_strategies_dialects", _p)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)  # type: ignore[union-attr]

CTX = make_context()
TINY, M100 = get_machine("tiny"), get_machine("m100")
# tiny's topology with bigger resources: its valid instructions often break one of tiny's limits
# (counters, HBSM/SRAM size, TWU levels, DMA engines) and sometimes none
ROOMY = TINY.with_overrides(name="roomy", hbsm_bytes=2**21, su_counters=64, twu_max_levels=8,
                            ccb_dma_engines=4, ccb_sram_bytes=2**25)


def parse_attr(text: str):
    return Parser(CTX, text).parse_attribute()


def test_m100_dialects_exported():
    assert sorted(d.name for d in M100_DIALECTS) == ["hbsm", "quant", "sync", "tm_tensor", "tpb",
                                                     "twu"]


# --- #twu.access -> walk, against the loop nest ----------------------------------------------
@st.composite
def affine_accesses(draw):
    rank = draw(st.integers(1, 3))
    ndims = draw(st.integers(1, 4))
    bounds = [draw(st.integers(1, 4)) for _ in range(ndims)]
    coeffs = [[draw(st.integers(0, 2)) for _ in range(ndims)] for _ in range(rank)]
    consts = [draw(st.integers(0, 3)) for _ in range(rank)]
    results = []
    for r in range(rank):
        e = AffineExpr.constant(consts[r])
        for d in range(ndims):
            if coeffs[r][d]:
                e = e + AffineExpr.dimension(d) * coeffs[r][d]
        results.append(e)
    # the smallest buffer that holds every index
    shape = [consts[r] + sum(c * (b - 1) for c, b in zip(coeffs[r], bounds)) + 1
             + draw(st.integers(0, 2)) for r in range(rank)]
    return AccessAttr(AffineMap(ndims, 0, tuple(results)), bounds), coeffs, consts, shape


@settings(max_examples=200, deadline=None)
@given(affine_accesses(), st.integers(0, 256))
def test_access_to_walk_matches_loop_nest(acc, base):
    access, coeffs, consts, shape = acc
    access.check_buffer(shape)  # inside by construction
    walk = access.to_walk(Space.HBSM, 0, base, DType.F32, shape)
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    expect = []
    for point in itertools.product(*(range(b) for b in access.shape)):  # row-major visit order
        idx = [c0 + sum(c * p for c, p in zip(row, point)) for row, c0 in zip(coeffs, consts)]
        expect.append(sum(i * s for i, s in zip(idx, strides)))
    assert walk.offsets().tolist() == expect
    lo_hi = access.index_range()
    for r in range(len(shape)):
        vals = [c0 + sum(c * p for c, p in zip(coeffs[r], pt)) for c0, pt in
                ((consts[r], pt) for pt in itertools.product(*(range(b) for b in access.shape)))]
        assert lo_hi[r] == (min(vals), max(vals))


def test_access_outside_buffer_rejected():
    a = parse_attr("#twu.access<affine_map<(d0, d1) -> (d1, d0 * 2)>, [4, 3]>")
    a.check_buffer([3, 7])
    with pytest.raises(VerifyException, match="index 1 ranges over \\[0, 6\\]"):
        a.check_buffer([3, 6])


# --- attributes print/parse round trips over random ISA values -------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_walk_attr_roundtrip(data):
    n = data.draw(st.integers(1, 64))
    w = data.draw(S.walks(M100, n))
    attr = WalkAttr.from_isa(w)
    assert attr.to_isa() == w
    assert parse_attr(str(attr)) == attr


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_actions_and_stage_attr_roundtrip(data):
    s = data.draw(S.syncs(M100, data.draw(st.none() | st.integers(0, 3)), 12))
    a = ActionsAttr.from_isa(s)  # built without xDSL's generic parameter check
    assert a.to_isa() == s and parse_attr(str(a)) == a and hash(parse_attr(str(a))) == hash(a)
    for stage in data.draw(S.stages_for(2, 3)):
        sa = StageAttr.from_isa(stage)
        back = parse_attr(str(sa)).to_isa()
        # floats compare bit-exactly (-0.0, inf, subnormals)
        assert repr(back) == repr(stage)


def test_sync_attrs_from_isa_still_run_their_own_verify():
    """from_isa skips xDSL's generic parameter check (its parameters are built right), not the
    attributes' own verify: values the ISA objects accept but the attributes refuse still fail."""
    from m100.dialects.sync import MonitorAttr, UpdateAttr
    from m100.targets.m100.isa import Monitor, Sync, Update
    with pytest.raises(VerifyException, match="must be >= 0"):
        MonitorAttr.from_isa(Monitor(0, 0, -1, 0))
    with pytest.raises(VerifyException, match="names no TPB"):
        UpdateAttr.from_isa(Update(0, 0))
    with pytest.raises(VerifyException, match="blocks must be >= 1"):
        ActionsAttr.from_isa(Sync(blocks=0))


# --- the resolved-level verifier agrees with isa.Instruction.check ----------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_resolved_verifier_agrees_with_isa_check(data):
    """Instructions valid on ROOMY checked inside a 'tiny' program: the op verifies iff the ISA
    check on tiny passes (~3/4 fail: counters, HBSM size, ...), and the message is the ISA's."""
    inst = data.draw(S.instructions(ROOMY))
    op = instruction_to_op(inst)
    module = ModuleOp([ProgramOp("tiny", "resolved", [op])])
    try:
        inst.check(TINY)
        ok, msg = True, ""
    except M100Error as e:
        ok, msg = False, str(e)
    if ok:
        module.verify()
    else:
        with pytest.raises(VerifyException) as ei:
            module.verify()
        assert msg in str(ei.value)


# --- placed level ------------------------------------------------------------------------------
def _program(body: str, machine: str = "tiny", level: str = "placed"):
    return Parser(CTX, f'tpb.program "{machine}" {level} {{\n{body}\n}}').parse_module()


def test_placed_checks_shapes_from_accesses():
    ok = """%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x8xf32>
  %t = tpb.matmul tpb 0 a(%a, #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [4, 8]>) b(%a) c(%a, #twu.access<affine_map<(d0, d1) -> (d0, d1)>, [4, 8]>) {m = 4, n = 8, k = 8}"""
    _program(ok).verify()
    with pytest.raises(VerifyException, match="operand 'a' walks 32 elements but the logical "
                                              "shape \\[4, 4\\] has 16"):
        _program(ok.replace("k = 8", "k = 4")).verify()


def test_placed_op_outside_program_uses_default_machine():
    m = Parser(CTX, """%a = hbsm.alloc : !hbsm.buffer<hbsm[40], 4xf32>
%t = tpb.fill tpb 40 dst(%a) {value = 2.0}""").parse_module()
    m.verify()  # TPB 40 exists on the default m100 machine (56 TPBs)
    with pytest.raises(VerifyException, match="TPB 40 does not exist on machine 'tiny'"):
        _program("""%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4xf32>
  %t = tpb.fill tpb 40 dst(%a) {value = 2.0}""").verify()


# --- hbsm views: byte range against direct enumeration ------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_view_range_matches_enumeration(data):
    rank = data.draw(st.integers(1, 3))
    dims = [data.draw(st.integers(1, 5)) for _ in range(rank)]
    slots = data.draw(st.integers(1, 3))
    offs = [data.draw(st.integers(0, d - 1)) for d in dims]
    sizes = [data.draw(st.integers(1, d - o)) for d, o in zip(dims, offs)]
    slot = data.draw(st.none() | st.integers(0, slots - 1))
    offset = data.draw(st.integers(0, 100))
    t = BufferType("hbsm", 0, dims, f32, slots)
    alloc = AllocOp(t, offset)
    vt = BufferType("hbsm", 0, sizes, f32, 1 if slot is not None else slots)
    view = ViewOp(alloc.result, offs, vt, slot)
    view.verify()
    # oracle: byte address of every element of every slot, then the box
    addr = offset + 4 * np.arange(slots * math.prod(dims)).reshape([slots] + dims)
    box = addr[(slice(slot, slot + 1) if slot is not None else slice(None),)
               + tuple(slice(o, o + s) for o, s in zip(offs, sizes))]
    assert buffer_range(view.result) == (int(box.min()), int(box.max()) + 4)


def test_python_builders_take_plain_values():
    """The scheduler builds placed ops from Python values; they print as the documented syntax."""
    from xdsl.builder import ImplicitBuilder

    from m100.dialects.tpb import MatmulOp
    prog = ProgramOp("tiny", "placed", [])
    with ImplicitBuilder(prog.body.block):
        a = AllocOp(BufferType("hbsm", 0, [4, 8], f32)).result
        b = AllocOp(BufferType("hbsm", 0, [8, 4], f32)).result
        c = AllocOp(BufferType("hbsm", 0, [4, 4], f32, slots=2)).result
        acc = AccessAttr(AffineMap.from_callable(lambda i, j: (1, i, j)), [4, 4])
        mm = MatmulOp(0, {"a": a, "b": b, "c": (c, acc)}, [],
                      params={"m": 4, "n": 4, "k": 8, "act": "relu", "accumulate": None,
                              "clamp_lo": None})
        mm.attributes["pred_end"] = IntegerAttr(99, i64)
    ModuleOp([prog]).verify()
    assert str(mm).endswith("c(%3, #twu.access<affine_map<(d0, d1) -> (1, d0, d1)>, [4, 4]>) "
                            '{m = 4, n = 4, k = 8, act = "relu", pred_end = 99}')


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_placed_verifier_accepts_every_valid_instruction(data):
    """The placed level is not over-strict: any valid instruction, with every operand walk
    replaced by an unallocated buffer of the walk's shape, verifies at the placed level."""
    from m100.dialects.twu import SPACE_NAMES, dtype_to_type
    inst = data.draw(S.instructions(TINY))
    op = instruction_to_op(inst)
    allocs, slots = [], {}
    for name, acc in op.slot_accesses().items():
        w = acc.to_isa()
        t = BufferType(SPACE_NAMES[w.space], w.tpb if w.space is Space.HBSM else 0,
                       list(w.shape) or [1], dtype_to_type(w.dtype))
        allocs.append(AllocOp(t))
        slots[name] = allocs[-1].result
    params = {k: op.properties[k] for k in op.PARAMS if k in op.properties}
    placed = type(op)(op.unit_index, slots, (), None, params)
    ModuleOp([ProgramOp("tiny", "placed", [*allocs, placed])]).verify()
    # and the synthesized instruction has the same kind and element counts as the original
    synth = placed.to_instruction(synthesize=True)
    assert type(synth) is type(inst)
    assert [w.num_elements for _, w, _ in synth.walks()] == \
        [w.num_elements for _, w, _ in inst.walks()]


# --- attributes built without xDSL's generic parameter check ------------------------------------
def _generic_ok(attr) -> None:
    type(attr).get_irdl_definition().verify(attr)  # the check trusted_attr skips
    attr.verify()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_trusted_attributes_are_the_generic_ones(data):
    """``WalkAttr.from_isa`` and the ``#sync`` attributes' ``from_isa`` skip xDSL's generic check of
    each parameter against its declared constraint (``twu.trusted_attr``): on random walks and
    sync actions they equal the attributes the generic constructor builds, and pass that check."""
    from m100.dialects.sync import MonitorAttr, UpdateAttr
    from m100.dialects.twu import dtype_to_type
    from m100.targets.m100.isa import Trigger

    m = ROOMY
    space = data.draw(st.sampled_from([Space.HBSM, Space.DDR, Space.SRAM]))
    w = data.draw(S.walks(m, data.draw(st.integers(1, 64)), space=space))
    WalkAttr.from_isa.cache_clear()
    a = WalkAttr.from_isa(w)
    g = WalkAttr(a.space.data, w.tpb, w.base, dtype_to_type(w.dtype),
                 [(lv.initial, lv.step, lv.final) for lv in w.levels])
    assert a == g and a.to_isa() == w
    _generic_ok(a)
    s = data.draw(S.syncs(m, data.draw(st.integers(0, m.num_tpbs - 1)), 1))
    for cache in (MonitorAttr.from_isa, UpdateAttr.from_isa):
        cache.cache_clear()
    a = ActionsAttr.from_isa(s)
    g = ActionsAttr(s.blocks, [MonitorAttr(x.tpb, x.counter, x.expected, x.per_block)
                               for x in s.monitors],
                    [UpdateAttr(u.counter, u.tpb_mask, u.amount, Trigger(u.trigger).name.lower())
                     for u in s.updates])
    assert a == g and a.to_isa() == s
    for x in (a, *a.monitors.data, *a.updates.data):
        _generic_ok(x)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_walk_at_is_from_isa(data):
    """``WalkAttr.at`` (twu-materialize's walks at another TPB and base) builds the attribute
    ``from_isa`` builds for the moved walk -- written out here: ``from_isa`` of
    ``Walk(space, tpb, base, dtype, levels)`` -- equal, passing xDSL's generic check and the
    walk's own ``verify``, with the same decoded walk field by field and type by type; it shares
    the template's space, type and levels attributes. A negative TPB or base is the same error,
    and a TPB / base that is not a plain ``int`` goes through ``from_isa``."""
    from m100.targets.m100.isa import Walk

    m = ROOMY
    space = data.draw(st.sampled_from([Space.HBSM, Space.DDR, Space.SRAM]))
    w = data.draw(S.walks(m, data.draw(st.integers(1, 64)), space=space))
    WalkAttr.from_isa.cache_clear()
    tpl = WalkAttr.from_isa(w) if data.draw(st.booleans()) else \
        WalkAttr(WalkAttr.from_isa(w).space.data, w.tpb, w.base, WalkAttr.from_isa(w).dtype,
                 [(lv.initial, lv.step, lv.final) for lv in w.levels])  # decoded, not kept
    for _ in range(3):
        tpb = data.draw(st.integers(0, m.num_tpbs - 1)) if space is Space.HBSM else 0
        base = data.draw(st.integers(0, 1 << 20))
        WalkAttr.from_isa.cache_clear()
        want = WalkAttr.from_isa(Walk(w.space, tpb, base, w.dtype, w.levels))
        got = tpl.at(tpb, base)
        assert got == want and hash(got) == hash(want)
        assert _typed(got.to_isa()) == _typed(want.to_isa())
        assert got.space is tpl.space and got.dtype is tpl.dtype and got.levels is tpl.levels
        _generic_ok(got)
    for tpb, base in ((-1, 0), (0, -5)):
        with pytest.raises(VerifyException) as a:
            tpl.at(tpb, base)
        with pytest.raises(VerifyException) as b:
            WalkAttr.from_isa(Walk(w.space, tpb, base, w.dtype, w.levels))
        assert str(a.value) == str(b.value)
    odd = tpl.at(np.int64(3), 8)
    assert _typed(odd.to_isa()) == _typed(WalkAttr.from_isa(Walk(w.space, 3, 8, w.dtype,
                                                                 w.levels)).to_isa())


def _typed(x):
    """Every field of a walk / sync with its type, recursively (``==`` ignores int vs enum)."""
    if isinstance(x, (tuple, list)):
        return tuple(_typed(v) for v in x)
    if hasattr(x, "__dataclass_fields__"):
        return (type(x), tuple(_typed(getattr(x, f)) for f in x.__dataclass_fields__))
    return (type(x), x)


def test_from_isa_keeps_only_what_it_would_decode():
    """``WalkAttr.from_isa`` keeps its canonical ``Walk`` as the decoded form (no second decode);
    a walk equal to it with an int space, an int element type or numpy integers builds an
    attribute whose ``to_isa`` is the canonical decode, field types included (the encoder and
    the certificate read them), never the odd object it was given."""
    from m100.dialects.twu import canonical_walk
    from m100.targets.m100.isa import Level, Walk

    w = Walk(Space.HBSM, 1, 64, DType.F16, (Level(0, 8, 24), Level(0, 1, 7)))
    odd = [Walk(int(Space.HBSM), 1, 64, DType.F16, w.levels),
           Walk(Space.HBSM, 1, 64, int(DType.F16), w.levels),
           Walk(Space.HBSM, np.int64(1), 64, DType.F16, w.levels),
           Walk(Space.HBSM, 1, 64, DType.F16, (Level(np.int64(0), 8, 24), Level(0, 1, 7)))]
    assert canonical_walk(w) and not any(canonical_walk(x) for x in odd)
    for x in odd:
        WalkAttr.from_isa.cache_clear()
        got = WalkAttr.from_isa(x).to_isa()
        assert got is not x and _typed(got) == _typed(w)
    WalkAttr.from_isa.cache_clear()
    a = WalkAttr.from_isa(w)
    assert a.to_isa() is w
    fresh = WalkAttr(a.space.data, 1, 64, a.dtype, [(0, 8, 24), (0, 1, 7)])
    assert fresh == a and _typed(fresh.to_isa()) == _typed(w)


def test_actions_from_isa_keeps_only_what_it_would_decode():
    """``ActionsAttr.from_isa`` keeps a canonical ``Sync`` as the decoded form; a sync equal to
    it with an int trigger, numpy integers or a list of monitors builds an attribute whose
    ``to_isa`` is the canonical decode, field types included, never the odd object."""
    from m100.dialects.sync import canonical_sync
    from m100.targets.m100.isa import Monitor, Sync, Trigger, Update

    s = Sync(2, (Monitor(1, 3, 4, 1),), (Update(5, 0b110, 1, Trigger.BLOCK),))
    odd = [Sync(2, s.monitors, (Update(5, 0b110, 1, 1),)),
           Sync(np.int64(2), s.monitors, s.updates),
           Sync(2, (Monitor(1, np.int64(3), 4, 1),), s.updates),
           Sync(2, list(s.monitors), s.updates)]
    assert canonical_sync(s) and not any(canonical_sync(x) for x in odd)
    for x in odd:
        got = ActionsAttr.from_isa(x).to_isa()
        assert got is not x and _typed(got) == _typed(s)
    assert ActionsAttr.from_isa(s).to_isa() is s


def test_trusted_walk_still_runs_its_own_verify():
    """What the walk's own verify refuses is still refused on the trusted path."""
    from xdsl.dialects.builtin import StringAttr

    from m100.dialects.twu import dtype_to_type, i64_array, int_attr, trusted_attr
    with pytest.raises(VerifyException, match="unknown memory space"):
        trusted_attr(WalkAttr, StringAttr("nowhere"), int_attr(0), int_attr(0),
                     dtype_to_type(DType.F32), i64_array([0, 1, 4]))
    with pytest.raises(VerifyException, match="non-negative multiple of step"):
        trusted_attr(WalkAttr, StringAttr("hbsm"), int_attr(0), int_attr(0),
                     dtype_to_type(DType.F32), i64_array([0, 3, 4]))


def test_segment_bytes_ride_on_their_hex():
    """A ``tpb.segment`` built from bytes keeps them as bytes (``#tpb.bytes``: no hex text made,
    no decoding in the verifier or the emitter) and prints the same text as one holding their
    hex; one whose data is a hex ``StringAttr`` (parsed) is decoded and a bad hex or an
    out-of-memory range is still refused."""
    import io

    from xdsl.dialects.builtin import StringAttr
    from xdsl.parser import Parser
    from xdsl.printer import Printer

    from m100.context import make_context
    from m100.dialects.tpb import BytesAttr, SegmentOp
    data = bytes(range(256)) * 3
    seg = SegmentOp("w", "ddr", 64, data)
    mod = ModuleOp([ProgramOp("tiny", "resolved", [seg])])
    mod.verify()
    assert type(seg.data) is BytesAttr and seg.data.data == data
    assert seg.bytes == data and seg.nbytes == len(data) and seg.hex == data.hex()
    as_text = SegmentOp.create(properties={**seg.properties, "data": StringAttr(data.hex())})
    assert str(seg) == str(as_text) and f'data "{data.hex()}"' in str(seg)
    ctx = make_context()
    for generic in (False, True):  # custom form -> StringAttr; generic form -> #tpb.bytes
        out = io.StringIO()
        Printer(stream=out, print_generic_format=generic).print_op(mod)
        back = Parser(ctx, out.getvalue()).parse_module()
        back.verify()
        got = next(o for o in back.walk() if isinstance(o, SegmentOp))
        assert type(got.data) is (BytesAttr if generic else StringAttr)
        assert got.bytes == data and got.nbytes == len(data) and str(got) == str(seg)
    with pytest.raises(Exception, match="not a hex string"):
        Parser(ctx, '"tpb.segment"() <{seg_name = "w", space = "ddr", address = 0 : i64, '
               'data = #tpb.bytes<"0g">}> : () -> ()').parse_operation()
    seg.properties["data"] = StringAttr(data.hex())  # as parsed from text: decoded
    assert seg.bytes == data and seg.nbytes == len(data)
    seg.properties["data"] = StringAttr("zz")
    with pytest.raises(VerifyException, match="not a hex string"):
        seg.parent_op().verify()
    far = SegmentOp("w", "ddr", TINY.ddr_bytes - 4, data)
    with pytest.raises(VerifyException, match="fall outside DDR"):
        ModuleOp([ProgramOp("tiny", "resolved", [far])]).verify()


def test_dict_attr_is_the_generic_one():
    """``twu.dict_attr`` (twu-materialize's ``walks`` property) is the attribute
    ``DictionaryAttr`` builds: equal both ways, the same hash, fields, text and class, passes
    its verification; empty, one entry, walks and other attributes mixed."""
    from xdsl.dialects.builtin import DictionaryAttr, StringAttr

    from m100.dialects.twu import dict_attr
    from m100.targets.m100.isa import Walk

    w = WalkAttr.from_isa(Walk.strided(Space.HBSM, 1, 64, DType.F16, (4, 8)))
    v = WalkAttr.from_isa(Walk.strided(Space.DDR, 0, 0, DType.I8, (2, 3)))
    for d in ({}, {"a": w}, {"src": v, "dst": w, "x": StringAttr("s")}):
        a, g = dict_attr(d), DictionaryAttr(d)
        assert type(a) is type(g) is DictionaryAttr
        assert a == g and g == a and hash(a) == hash(g) and str(a) == str(g)
        assert a.__dict__ == g.__dict__ and type(a.data) is type(g.data)
        assert list(a.data.items()) == list(d.items())
        a._verify()  # (what the dataclass post-init of the generic build runs)
        d2 = dict(d)
        d2["late"] = w
        assert "late" not in a.data  # (its own immutable copy)
