"""The specialized op builder (``dialects/fast_init.py``) against xDSL's ``irdl_op_init``.

Oracle: ``IRDLOperation.__init__`` (xDSL's generic builder). Every op of the hand-written
``placed_all_ops`` / ``resolved_all_ops`` programs whose class the builder specializes is built
again from its parts both ways and must give the same operands, result types, properties (in
order), attributes and printed text; arguments the generic builder converts (an ``Operation``
as an operand) or refuses (wrong group counts, a list for a single operand, ``None`` groups) give
its result or its error. Whole compiles with the builder on and off give the same program bytes
and sync certificate.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys

import pytest
from xdsl.irdl import IRDLOperation

from m100.dialects import fast_init
from m100.dialects.fast_init import _plan, irdl_init
from m100.dialects.hbsm import AllocOp
from m100.dialects.sync import TOKEN, JoinOp, TokenType
from m100.dialects.tpb_base import InstrOp

sys.path.insert(0, os.path.dirname(__file__))

from tpb_all_ops import MODULES  # noqa: E402

OPS = [o for m in MODULES.values() for o in m.walk()
       if isinstance(o, IRDLOperation) and _plan(type(o)) is not None]
SEG = "operandSegmentSizes"


def _args(op) -> dict:
    """``op`` as the keyword arguments of its builder: operand groups per definition."""
    op_def = type(op).get_irdl_definition()
    ops = list(op.operands)
    if SEG in op.properties:
        sizes = list(op.properties[SEG].get_values())
    elif len(op_def.operands) == 1:
        sizes = [len(ops)]
    else:
        sizes = [1] * len(ops)
    groups, i = [], 0
    for n in sizes:
        groups.append(ops[i:i + n])
        i += n
    props = {k: v for k, v in op.properties.items() if k != SEG}
    return {"operands": groups, "result_types": [r.type for r in op.results],
            "properties": props, "attributes": dict(op.attributes)}


def _build(cls, fast: bool, **kw):
    op = cls.__new__(cls)
    if fast:
        irdl_init(op, **kw)
    else:
        IRDLOperation.__init__(op, **kw)
    return op


def _parts(op) -> tuple:
    return (list(op.operands), [r.type for r in op.results], list(op.properties.items()),
            list(op.attributes.items()), list(op.successors), len(op.regions))


def test_the_classes_the_emitter_builds_are_specialized():
    kinds = {type(o) for o in OPS}
    assert AllocOp in kinds and JoinOp in kinds
    assert sum(issubclass(k, InstrOp) for k in kinds) >= 8


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_fast_build_is_the_generic_build(op):
    kw = _args(op)
    a, b = _build(type(op), False, **kw), _build(type(op), True, **kw)
    assert _parts(a) == _parts(b)
    assert str(a) == str(b)
    assert [type(v) for _, v in a.properties.items()] == [type(v) for _, v in b.properties.items()]
    # a lone value for a group (irdl_op_init: size 1), and the op's own results as operands
    if kw["operands"] and all(len(g) == 1 for g in kw["operands"]):
        kw1 = dict(kw, operands=[g[0] for g in kw["operands"]])
        assert _parts(_build(type(op), False, **kw1)) == _parts(_build(type(op), True, **kw1))


def test_an_operation_as_operand_is_converted_as_the_generic_builder_does():
    j = JoinOp([])
    kw = {"operands": [[j]], "result_types": [TokenType()]}
    a, b = _build(JoinOp, False, **kw), _build(JoinOp, True, **kw)
    assert _parts(a) == _parts(b) and list(b.operands) == [j.results[0]]


@pytest.mark.parametrize("kw", [
    {"operands": [], "result_types": [TOKEN]},  # a missing group
    {"operands": [[], []], "result_types": [TOKEN]},  # one too many
    {"operands": [None], "result_types": [TOKEN]},  # no tokens at all: size 0
    {"operands": [[]], "result_types": []},  # a missing result
    {"operands": [[]], "result_types": [[TOKEN]]},  # a result given as a list
    {"operands": [[]], "result_types": [None]},
])
def test_odd_arguments_give_the_generic_result_or_error(kw):
    def run(fast):
        try:
            return ("ok", _parts(_build(JoinOp, fast, **kw)))
        except Exception as e:  # noqa: BLE001 -- the same error, whatever it is
            return (type(e), str(e))
    assert run(False) == run(True)


def test_single_operand_definitions_keep_their_checks():
    from m100.dialects.hbsm import ViewOp
    plan = _plan(ViewOp)
    assert plan is not None and plan[0] == (0,)
    alloc = [o for o in OPS if isinstance(o, AllocOp)][0]
    v = alloc.results[0]

    def run(fast, operands):
        try:
            return ("ok", _parts(_build(ViewOp, fast, operands=operands,
                                        result_types=[v.type], properties={})))
        except Exception as e:  # noqa: BLE001
            return (type(e), str(e))
    for operands in ([[v, v]], [[]], [v], [[v]]):
        assert run(False, operands) == run(True, operands)


def _compile_hashes(model, machine, tpbs):
    from m100.tools import driver
    cr = driver.compile(model, machine=machine, tpbs=tpbs)
    return (hashlib.sha256(cr.program.to_bytes()).hexdigest(),
            hashlib.sha256(json.dumps(cr.certificate, sort_keys=True).encode()).hexdigest())


@pytest.mark.parametrize("case", ["convnet", "llama_layer"])
def test_compiles_are_the_same_with_the_generic_builder(case, monkeypatch):
    import onnx

    from m100.frontend import models
    data = pathlib.Path(__file__).parents[2] / "data"
    model, machine, tpbs = {
        "convnet": (models.conv_relu_maxpool, "tiny", 0),
        "llama_layer": (lambda: onnx.load(str(data / "llama_layer_small.onnx")), "m100", 8)}[case]
    fast = _compile_hashes(model(), machine, tpbs)
    monkeypatch.setattr(fast_init, "ENABLED", False)
    assert _compile_hashes(model(), machine, tpbs) == fast


def test_shared_stage_attributes_are_fresh_builds():
    """``StageAttr.from_isa`` shares one attribute per stage: equal to a fresh build, and stages
    that differ only in a float's sign or NaN payload keep their own."""
    import math
    import struct

    from m100.dialects.tpb_ops import StageAttr
    from m100.targets.m100.isa import CvuOp, Ref, RefKind, Stage
    nan2 = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    stages = [Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.STAGE, 1))),
              Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.IMM, 0, 0.0))),
              Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.IMM, 0, -0.0))),
              Stage(CvuOp.MUL, (Ref(RefKind.INPUT, 0), Ref(RefKind.IMM, 0, math.nan))),
              Stage(CvuOp.MUL, (Ref(RefKind.INPUT, 0), Ref(RefKind.IMM, 0, nan2))),
              Stage(CvuOp.LAYERNORM, (Ref(RefKind.INPUT, 0), Ref(RefKind.INPUT, 1),
                                      Ref(RefKind.INPUT, 2)), 1, 1e-5),
              Stage(CvuOp.LAYERNORM, (Ref(RefKind.INPUT, 0), Ref(RefKind.INPUT, 1),
                                      Ref(RefKind.INPUT, 2)), 1, -0.0)]
    for _ in range(2):
        for s in stages:
            a, fresh = StageAttr.from_isa(s), StageAttr._from_isa(s)
            assert str(a) == str(fresh) and a.to_isa().op == s.op
            for x, y in zip([*a.args.data, a.fparam], [*fresh.args.data, fresh.fparam]):
                if hasattr(x, "value"):
                    assert struct.pack("<d", x.value.data) == struct.pack("<d", y.value.data)
    assert StageAttr.from_isa(stages[1]) is not StageAttr.from_isa(stages[2])
    assert StageAttr.from_isa(stages[3]) is not StageAttr.from_isa(stages[4])


def _state(op) -> dict:
    """Everything ``Operation.__init__`` sets on ``op``, identities kept (the operand values, the
    uses with their links, the results, the dicts in order, the shared location)."""
    uses = []
    num: dict[int, int] = {}  # operand values numbered by first occurrence
    for v in op._operands:
        num.setdefault(id(v), len(num))
    for i, (v, u) in enumerate(zip(op._operands, op._operand_uses)):
        assert u.operation is op and u.index == i
        nxt = u._next_use  # a use by this op (its index), by another op, or none
        uses.append((num[id(v)], u._prev_use is None or u._prev_use.operation is op,
                     None if nxt is None else nxt.index if nxt.operation is op else "other"))
    return {
        "fields": list(vars(op)),
        "operands": [num[id(v)] for v in op._operands], "operands_type": type(op._operands),
        "uses": uses, "uses_type": type(op._operand_uses),
        "results": [(type(r), r.type, r.index, r.op is op, r.first_use, r.name_hint)
                    for r in op.results], "results_type": type(op.results),
        "properties": list(op.properties.items()), "attributes": list(op.attributes.items()),
        "location": id(op.location), "successors": (op._successors, op._successor_uses),
        "regions": op.regions, "parent": op.parent,
    }


def _first_uses(values, op) -> list:
    """Per value, its uses by ``op`` (the newest op's head each list) as operand indices."""
    out = []
    for v in values:
        n = sum(w is v for w in op._operands)
        u, got = v.first_use, []
        while u is not None and len(got) < n:
            got.append(u.index)
            u = u._next_use
        out.append(got)
    return out


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_operation_fields_are_operation_init(op):
    """The builder sets what ``Operation.__init__`` sets (the oracle: xDSL's generic
    ``IRDLOperation.__init__``, which calls it): every op of the hand-written programs, the whole
    op state with identities (fields in order, uses and their links, results, dicts, the shared
    location)."""
    kw = _args(op)

    def build(fast):
        b = _build(type(op), fast, **kw)
        return _state(b), _first_uses(list(dict.fromkeys(b._operands)), b)
    assert build(True) == build(False)


def test_operation_fields_with_repeated_operands_and_defaults():
    """Uses of a value given several times, and a class whose definition has default
    properties and attributes (``IRDLOperation.__post_init__`` fills them in): the builder and
    xDSL's generic build."""
    from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
    from xdsl.irdl import irdl_op_definition, opt_prop_def, prop_def, attr_def, result_def, \
        var_operand_def

    @irdl_op_definition
    class _Dflt(IRDLOperation):
        name = "test.dflt"
        ins = var_operand_def(TokenType)
        p = prop_def(IntegerAttr, default_value=IntegerAttr(3, i64))
        q = opt_prop_def(IntegerAttr, default_value=IntegerAttr(4, i64))
        a = attr_def(StringAttr, default_value=StringAttr("x"))
        out = result_def(TokenType)

    cases = [(JoinOp, lambda t0, t1: {"operands": [[t0, t1, t0, t0]], "result_types": [TOKEN]}),
             (_Dflt, lambda t0, t1: {"operands": [[t1, t0, t1]], "result_types": [TOKEN]}),
             (_Dflt, lambda t0, t1: {"operands": [[t0]], "result_types": [TOKEN],
                                     "properties": {"p": IntegerAttr(9, i64)},
                                     "attributes": {"a": StringAttr("y")}})]
    for cls, kwf in cases:
        got = {}
        for fast in (False, True):
            t0, t1 = JoinOp([]).results[0], JoinOp([]).results[0]  # fresh values per side
            b = _build(cls, fast, **kwf(t0, t1))
            got[fast] = (_state(b), _first_uses([t0, t1], b), str(b))
            for v in (t0, t1):  # the list stays doubly linked
                u = v.first_use
                assert u is None or u._prev_use is None
                while u is not None and u._next_use is not None:
                    assert u._next_use._prev_use is u
                    u = u._next_use
        assert got[True] == got[False]
    assert _DFLT_SEEN(_Dflt)


def _DFLT_SEEN(cls) -> bool:  # noqa: N802 -- the defaults plan found for the test class
    return fast_init._DEFAULTS.get(cls) is not None and fast_init._DEFAULTS[cls][0]


def test_i64_attr_is_the_generic_build():
    """``twu.i64_attr`` against ``IntegerAttr(v, i64)``: equal, same hash, same
    text and fields, at the ends of the range too; outside it (normalized or refused), and for
    a bool, the generic build's result or error."""
    import random as _random

    from xdsl.dialects.builtin import IntAttr, IntegerAttr, i64

    from m100.dialects import twu
    rng = _random.Random(0)
    vals = [0, 1, -1, 2**63 - 1, -2**63] + [rng.randrange(-2**63, 2**63) for _ in range(300)] + \
        [rng.randrange(-10**6, 10**6) for _ in range(300)]
    for v in vals:
        a, g = twu.i64_attr(v), IntegerAttr(v, i64)
        assert a == g and hash(a) == hash(g) and str(a) == str(g)
        assert type(a) is IntegerAttr and type(a.value) is IntAttr and a.value.data == v
        assert a.type is g.type and vars(a) == vars(g)
        g.verify()
        type(g).get_irdl_definition().verify(a)
    for v in (2**63, 2**64 - 1, 2**64, -2**63 - 1, True):
        def run(f):
            try:
                r = f(v, i64)
                return ("ok", r, type(r.value.data))
            except Exception as e:  # noqa: BLE001 -- the same error, whatever it is
                return (type(e), str(e))
        assert run(lambda x, t: twu.i64_attr(x)) == run(IntegerAttr)


def test_programs_is_the_walk():
    """``tpb_program.programs`` finds what ``[p for p in op.walk() if isinstance(p,
    ProgramOp)]`` finds, in the same order: programs at the top, nested in other ops' regions
    (several blocks), inside a program's stream, none."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Block, Region

    from m100.dialects.tpb_program import ProgramOp, StreamOp, programs

    def prog(*ops):
        return ProgramOp("tiny", "placed", list(ops))

    inner = ModuleOp([prog(), prog()])
    two_blocks = ModuleOp(Region([Block([prog(JoinOp([]))]), Block([prog(), JoinOp([])])]))
    nested = prog(StreamOp(0, [JoinOp([])]))
    cases = [ModuleOp([]), ModuleOp([JoinOp([])]), ModuleOp([prog(), inner, prog()]),
             two_blocks, ModuleOp([ModuleOp([two_blocks.clone(), nested])]), inner]
    for m in cases:
        want = [p for p in m.walk() if isinstance(p, ProgramOp)]  # the oracle: xDSL's walk
        got = programs(m)
        assert [id(p) for p in got] == [id(p) for p in want]
    assert len(programs(cases[4])) == 3 and len(programs(cases[2])) == 4


def test_block_verify_is_xdsls():
    """``fast_verify._block_verify`` (installed as ``Block.verify``) answers as xDSL's own
    method (``_XDSL_BLOCK_VERIFY``): the same exception class and message, or none, on a
    verifying program, a block with an op whose parent pointer names another block (first,
    middle, last), an op that does not verify, an empty block of an op that needs a terminator
    and of one that does not."""
    import os
    import sys

    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Block, Region

    from m100.dialects import fast_verify
    from m100.dialects.tpb_program import ProgramOp, StreamOp
    sys.path.insert(0, os.path.dirname(__file__))
    from tpb_all_ops import module

    assert Block.verify is fast_verify._block_verify

    def outcome(f, block):
        try:
            f(block)
        except Exception as e:  # noqa: BLE001 - compared as (class, message)
            return type(e), str(e)
        return None

    cases = []
    m = module("resolved_all_ops.mlir")
    cases.append(m.body.block)
    prog = next(o for o in m.walk() if isinstance(o, ProgramOp))
    cases.append(prog.body.block)
    for where in (0, 3, -1):  # a parent pointer naming another block
        mm = module("resolved_all_ops.mlir")
        blk = next(o for o in mm.walk() if isinstance(o, ProgramOp)).body.block
        ops = list(blk.ops)
        ops[where].parent = Block()
        cases.append(blk)
    mm = module("resolved_all_ops.mlir")  # an op that does not verify
    blk = next(o for o in mm.walk() if isinstance(o, ProgramOp)).body.block
    from xdsl.dialects.builtin import UnitAttr
    list(blk.ops)[2].properties["zzz"] = UnitAttr()
    cases.append(blk)
    cases.append(StreamOp(0, []).body.block)  # empty, NoTerminator
    cases.append(ModuleOp([]).body.block)
    from xdsl.dialects.func import FuncOp  # empty single block of an op that needs a terminator
    f = FuncOp("f", ((), ()))
    cases.append(f.body.block)
    got = [outcome(fast_verify._block_verify, b) for b in cases]
    want = [outcome(fast_verify._XDSL_BLOCK_VERIFY, b) for b in cases]
    assert got == want
    kinds = {w[0].__name__ if w else None for w in want}
    assert kinds == {None, "ValueError", "VerifyException"}, want
