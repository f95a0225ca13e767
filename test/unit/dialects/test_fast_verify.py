"""The compiled structural verifier (``dialects/fast_verify.py``) against xDSL's ``OpDef.verify``.

Oracle: xDSL's generic verification of the op's definition. Every op of the hand-written
``placed_all_ops`` / ``resolved_all_ops`` programs (every ``tpb`` instruction kind, ``hbsm``,
``sync`` and program ops) is mutated (a property dropped, unknown or of another kind; the
operand segment sizes changed; operands of the wrong type, missing or extra; results; regions;
extra attributes) and the compiled predicate must accept exactly the mutants the generic check
accepts. A program with a bad op is still refused by ``verify`` with the generic message.
"""

from __future__ import annotations

import os
import sys

import pytest
from xdsl.dialects.builtin import (ArrayAttr, DenseArrayBase, FloatAttr, IntegerAttr, StringAttr,
                                   UnitAttr, f64, i32, i64)
from xdsl.ir import Block, Region
from xdsl.utils.exceptions import VerifyException

from m100.dialects import fast_verify
from m100.dialects.fast_verify import compile_def, segment_sizes
from m100.dialects.sync import TokenType
from m100.dialects.tpb_base import InstrOp

sys.path.insert(0, os.path.dirname(__file__))

from tpb_all_ops import MODULES  # noqa: E402
from tpb_all_ops import module as _module  # noqa: E402

OPS = [o for m in MODULES.values() for o in m.walk()
       if compile_def(type(o).get_irdl_definition()) is not None]


def _xdsl_accepts(constr, a) -> bool:
    """The reference: xDSL's own ``verify`` of the constraint on ``a``."""
    from xdsl.irdl.constraints import ConstraintContext
    try:
        constr.verify(a, ConstraintContext())
    except VerifyException:
        return False
    return True


def _generic_accepts(op) -> bool:
    try:
        type(op).get_irdl_definition().verify(op)
    except VerifyException:
        return False
    return True


def _parts(op) -> dict:
    return {"operands": list(op.operands), "result_types": [r.type for r in op.results],
            "properties": dict(op.properties), "attributes": dict(op.attributes)}


WRONG = [StringAttr("x"), IntegerAttr(1, i32), IntegerAttr(1, i64), UnitAttr(),
         FloatAttr(1.0, f64), ArrayAttr([IntegerAttr(1, i64)]), ArrayAttr([StringAttr("a")]),
         DenseArrayBase.from_list(i32, [1, 2]), DenseArrayBase.from_list(i64, [1, 2])]


def _mutants(op):
    p = _parts(op)
    yield "as is", p
    for k in p["properties"]:
        yield f"without {k}", {**p, "properties": {q: v for q, v in p["properties"].items()
                                                     if q != k}}
        for w in WRONG:
            yield f"{k} = {w}", {**p, "properties": {**p["properties"], k: w}}
    yield "unknown property", {**p, "properties": {**p["properties"], "zzz": UnitAttr()}}
    yield "extra attribute", {**p, "attributes": {**p["attributes"], "zzz": UnitAttr()}}
    ops, tok = p["operands"], TokenType()
    others = [o for m in MODULES.values() for o in m.walk() if o is not op and o.results]
    any_buf = next((r for o in others for r in o.results if r.type != tok), None)
    any_tok = next((r for o in others for r in o.results if r.type == tok), None)
    for extra in (any_buf, any_tok):
        if extra is not None:
            yield f"extra operand {extra.type}", {**p, "operands": ops + [extra]}
            yield f"first operand {extra.type}", {**p, "operands": [extra] + ops[1:]}
    if ops:
        yield "one operand fewer", {**p, "operands": ops[:-1]}
        yield "reversed operands", {**p, "operands": ops[::-1]}
    seg = p["properties"].get("operandSegmentSizes")
    if seg is not None:
        n = list(seg.get_values())
        for v in ([n[1], n[0]], [n[0] + 1, n[1]], [n[0]], [*n, 0], [-1, n[0] + n[1] + 1],
                  [n[0] + n[1], 0], [0, n[0] + n[1]]):
            yield f"segments {v}", {**p, "properties": {**p["properties"], "operandSegmentSizes":
                                                         DenseArrayBase.from_list(i32, v)}}
        yield "segments i64", {**p, "properties": {**p["properties"], "operandSegmentSizes":
                                                    DenseArrayBase.from_list(i64, n)}}
    yield "no result", {**p, "result_types": []}
    yield "two results", {**p, "result_types": p["result_types"] + [tok]}
    if p["result_types"]:
        yield "result i64", {**p, "result_types": [i64] + p["result_types"][1:]}
    yield "a region", {**p, "regions": [Region(Block())]}


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_compiled_predicate_is_the_generic_check(op):
    ok = compile_def(type(op).get_irdl_definition())
    seen = 0
    for what, parts in _mutants(op):
        mut = type(op).create(**parts)
        assert ok(mut) == _generic_accepts(mut), f"{op.name}: {what}"
        seen += 1
    assert seen > 10


def test_every_instruction_kind_and_backend_op_is_covered():
    names = {o.name for o in OPS}
    kinds = {c.name for c in _subclasses(InstrOp) if c.get_irdl_definition() is not None}
    assert kinds <= names, kinds - names
    assert {"hbsm.alloc", "hbsm.view", "sync.join", "tpb.segment", "tpb.symbol"} <= names


def _subclasses(c):
    for s in c.__subclasses__():
        yield s
        yield from _subclasses(s)


def test_segment_sizes_memo_follows_the_property():
    op = next(o for o in OPS if isinstance(o, InstrOp) and o.bufs)
    n = list(segment_sizes(op))
    assert n == list(op.properties["operandSegmentSizes"].get_values())
    assert list(op.bufs) == list(op.operands[:n[0]]) and list(op.deps) == list(op.operands[n[0]:])
    op.properties["operandSegmentSizes"] = DenseArrayBase.from_list(i32, [0, sum(n)])
    assert segment_sizes(op) == (0, sum(n)) and not op.bufs
    op.properties["operandSegmentSizes"] = DenseArrayBase.from_list(i32, n)


def test_a_bad_op_is_refused_with_the_generic_message():
    """A predicate that fails hands the op to xDSL's ``OpDef.verify``, whose message is
    raised (the compiled predicates are compared with it above)."""
    m = _module("resolved_all_ops.mlir")
    m.verify()
    op = next(o for o in m.walk() if o.name == "tpb.fill")
    op.properties["value"] = StringAttr("one")
    with pytest.raises(VerifyException, match="should be of base attribute"):
        m.verify()
    op.properties["value"] = FloatAttr(1.0, f64)
    m.verify()
    op.properties["bogus"] = UnitAttr()
    with pytest.raises(VerifyException, match="property 'bogus' is not defined"):
        m.verify()


def test_two_parameter_constraint_read_by_field_is_the_generic_check():
    """``IntegerAttr[I64]`` (a property of most instructions) read by field name on an attribute
    of exactly its class: the same answers as the constraint's own ``verify`` (xDSL's) and as
    the definition through xDSL's ``parameters`` written out here, on right and wrong
    attributes and on a subclass."""
    from dataclasses import dataclass

    from xdsl.dialects.builtin import IndexType

    from m100.dialects import fast_verify as fv
    from m100.dialects.tpb import Conv2dOp

    constr = Conv2dOp.get_irdl_definition().properties["n"].constr
    attrs = WRONG + [IntegerAttr(-3, i64), IntegerAttr(7, IndexType()), FloatAttr(1.0, f64)]
    fast = fv._attr_pred(constr)
    preds = [fv._attr_pred(c) for c in constr.param_constrs]

    def slow(a):  # (the definition: the class, then each parameter through ``parameters``)
        if not isinstance(a, constr.base_attr):
            return False
        ps = a.parameters
        return len(ps) == len(preds) and all(p(x) for p, x in zip(preds, ps))
    assert fast.__name__ == "param2"
    for a in attrs:
        want = _xdsl_accepts(constr, a)
        assert fast(a) is want and slow(a) is want, a


# --- IsolatedFromAbove (the module's check of every operand) ------------------------------------
def _isolated_answer(op, xdsls: bool = False) -> str:
    """What ``IsolatedFromAbove`` says of ``op``: "ok" or its message (``xdsls``: xDSL's own
    method, which ``fast_verify`` replaced at import and kept as ``_XDSL_ISOLATED``)."""
    from xdsl.traits import IsolatedFromAbove
    try:
        if xdsls:
            fast_verify._XDSL_ISOLATED(IsolatedFromAbove(), op)
        else:
            IsolatedFromAbove().verify(op)
    except VerifyException as e:
        return str(e)
    return "ok"


def _isolated_cases():
    """Modules (and the op to check) whose operands come from inside, from a later region, from
    a nested isolated op, from outside, or from the op itself; built with xDSL's test dialect."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.dialects.test import TestOp
    from xdsl.ir import Block

    def mk(n_operands=(), regions=(), results=1):
        return TestOp(operands=list(n_operands), result_types=[i64] * results,
                      regions=list(regions))

    cases = []
    # inside: a value defined earlier in the same block, a block argument, an enclosing block's
    a = mk()
    blk = Block(arg_types=[i64])
    inner = mk([a.results[0], blk.args[0]])
    blk.add_op(inner)
    outer = mk([a.results[0]], regions=[Region(blk)])
    cases.append(("inside", ModuleOp([a, outer]), None))
    # a use before its definition in a later sibling region (graph-like), still inside
    later = mk()
    user = mk([later.results[0]])
    cases.append(("later region", ModuleOp([mk(regions=[Region(Block([user]))]),
                                             mk(regions=[Region(Block([later]))])]), None))
    # a value of a nested isolated op used outside it (xDSL accepts it: it is under the module)
    deep = mk()
    nested = ModuleOp([deep])
    cases.append(("nested isolated", ModuleOp([nested, mk([deep.results[0]])]), None))
    # outside: a value of another module, an argument of another block, the checked op's own
    stranger = mk()
    ModuleOp([stranger])
    cases.append(("outside op", ModuleOp([mk([stranger.results[0]])]), None))
    other = Block(arg_types=[i64])
    cases.append(("outside arg", ModuleOp([mk([other.args[0]])]), None))
    bad = mk()
    holder = mk(regions=[Region(Block([bad]))])
    bad.operands = [holder.results[0]]  # the checked op's own result, used inside it
    cases.append(("own result", ModuleOp([holder]), holder))
    # detached value owner (an op in no block)
    cases.append(("detached", ModuleOp([mk([mk().results[0]])]), None))
    return cases


@pytest.mark.parametrize("case", _isolated_cases(), ids=lambda c: c[0])
def test_isolated_from_above_is_xdsls(case):
    """The walk that answers from the blocks entered: the same answer (and message) as xDSL's
    own ``IsolatedFromAbove.verify`` on inside, later-region, nested-isolated, outside,
    own-result and detached operands."""
    name, mod, op = case
    op = op or mod
    fast = _isolated_answer(op)
    slow = _isolated_answer(op, xdsls=True)
    assert fast == slow, name
    want_ok = name in ("inside", "later region", "nested isolated")
    assert (fast == "ok") is want_ok, (name, fast)


def test_isolated_from_above_on_a_compiled_program():
    """Every isolated op of the placed program (every instruction kind) checked both ways; an instruction fed a value from
    outside the module is refused by both with the same message."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.traits import IsolatedFromAbove

    m = _module("placed_all_ops.mlir")
    isolated = [o for o in m.walk() if o.has_trait(IsolatedFromAbove)]
    assert m in isolated
    for o in isolated:
        assert _isolated_answer(o) == "ok"
    op = next(o for o in m.walk() if isinstance(o, InstrOp) and o.bufs)
    i = list(m.walk()).index(op)
    foreign = list(_module("placed_all_ops.mlir").walk())[i].operands[0]  # its twin's buffer
    assert foreign.type == op.operands[0].type and foreign is not op.operands[0]
    op.operands = [foreign, *op.operands[1:]]
    fast = _isolated_answer(m)
    assert fast == _isolated_answer(m, xdsls=True) != "ok"
    assert isinstance(m, ModuleOp)


# --- machine_of kept on the program; isa_guard ------------------------------------------------------
def test_machine_of_follows_the_programs_properties():
    """The machine kept on a ``tpb.program`` is answered only while its ``machine`` /
    ``machine_spec`` properties are the same objects: a replaced name gives the new machine
    (oracle: ``get_machine``), a name of no machine is refused at every ask, a program without
    a name has none, and a verify after the replacement checks against the new machine."""
    from m100.dialects.sync import machine_of
    from m100.targets.m100.machine import get_machine

    m = _module("placed_all_ops.mlir")
    prog = next(o for o in m.walk() if o.name == "tpb.program")
    op = next(o for o in m.walk() if isinstance(o, InstrOp))
    assert machine_of(op) is get_machine("tiny") and machine_of(prog) is get_machine("tiny")
    prog.properties["machine"] = StringAttr("m100")
    assert machine_of(op) is get_machine("m100")
    prog.properties["machine"] = StringAttr("no-such-machine")
    for _ in range(2):
        with pytest.raises(VerifyException, match="unknown machine 'no-such-machine'"):
            machine_of(op)
    del prog.properties["machine"]
    assert machine_of(op) is None
    prog.properties["machine"] = StringAttr("tiny")
    m.verify()
    prog.properties["machine"] = StringAttr("no-such-machine")
    with pytest.raises(VerifyException, match="unknown machine"):
        m.verify()


def test_isa_guard_rewords_only_m100_errors():
    from m100.dialects.twu import isa_guard
    from m100.errors import M100Error

    def boom(exc):
        raise exc

    assert isa_guard(lambda a, b: a + b, 1, 2) == 3
    with pytest.raises(VerifyException, match="^pre: bad$"):
        isa_guard(boom, M100Error("bad"), prefix="pre: ")
    err = KeyError("k")
    with pytest.raises(KeyError) as got:
        isa_guard(boom, err, prefix="pre: ")
    assert got.value is err


# --- Operation.verify of the installed classes (_leaf_verify) -----------------------------------
def _answer(fn, op) -> str:
    """"ok", or the class and message of what ``fn(op)`` raised."""
    try:
        fn(op)
    except Exception as e:  # noqa: BLE001 - any error: compared as it is
        return f"{type(e).__name__}: {e}"
    return "ok"


def _placements(op):
    """``op`` alone; between two ops of a block; the last op of a block in a region of an op that
    wants a terminator (xDSL's terminator rules); the only op of such a block."""
    from xdsl.dialects.test import TestOp

    yield "alone", op
    for where in ("middle", "last", "only"):
        mut = op.clone()
        ops = {"middle": [TestOp(), mut, TestOp()], "last": [TestOp(), mut],
               "only": [mut]}[where]
        TestOp(regions=[Region(Block(ops))])
        yield where, mut


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_leaf_verify_is_xdsls(op):
    """The installed ``Operation.verify`` of every class: the same answer (error class and
    message, or none) as xDSL's ``Operation.verify`` on the structural mutants, on a bad
    ``verify_``, with an erased operand, placed alone / mid-block / last in a block / alone in a
    block of an op that needs a terminator."""
    from xdsl.ir import ErasedSSAValue

    assert type(op).verify is fast_verify._leaf_verify
    seen = set()
    muts = [(what, type(op).create(**parts)) for what, parts in _mutants(op)]
    if op.operands:
        p = _parts(op)
        erased = ErasedSSAValue(op.operands[0].type, op.operands[0])
        muts.append(("erased operand", type(op).create(**{**p, "operands": [erased]
                                                          + p["operands"][1:]})))
    bad = _parts(op)
    bad["properties"] = {**bad["properties"], "bogus": UnitAttr()}
    muts.append(("bogus property", type(op).create(**bad)))
    for what, mut in muts:
        for where, placed in _placements(mut):
            got = _answer(lambda o: o.verify(), placed)
            want = _answer(fast_verify._XDSL_OP_VERIFY, placed)
            assert got == want, f"{op.name}: {what}, {where}"
            seen.add(want == "ok")
    assert seen == {True, False}


def test_leaf_verify_in_place_is_xdsls():
    """Every op of the test modules, in its own block: the installed method and xDSL's agree
    (the modules verify with xDSL's ``Operation.verify`` in place of the installed one too)."""
    for m in MODULES.values():
        for op in m.walk():
            if type(op).verify is fast_verify._leaf_verify:
                assert _answer(lambda o: o.verify(), op) == _answer(
                    fast_verify._XDSL_OP_VERIFY, op) == "ok", op.name
        fast_verify._XDSL_OP_VERIFY(m)


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_single_result_accessor_is_the_definitions(op):
    """A named result of an installed class (``op.done``, ``op.result``) is the op's result at
    the definition's index, as xDSL's accessor answers (``op.results[i]``), on every op of the
    hand-written programs and on a fresh op of its class; writing it is refused as xDSL does."""
    from m100.dialects.fast_verify import _SingleResult

    defs = type(op).get_irdl_definition().results
    fresh = type(op).create(**_parts(op))
    for i, (name, _) in enumerate(defs):
        assert isinstance(type(op).__dict__[name], _SingleResult), name
        for o in (op, fresh):
            assert getattr(o, name) is o.results[i] is tuple(o.results)[i]
        with pytest.raises(NotImplementedError, match="Cannot write to named"):
            setattr(op, name, op.results[i])


def test_single_result_accessors_of_a_two_result_class():
    """Each named result at its own index (no class of the dialects has two results)."""
    from xdsl.irdl import IRDLOperation, result_def

    from m100.dialects.fast_verify import _SingleResult, fast_op_definition

    @fast_op_definition
    class TwoResults(IRDLOperation):
        name = "test.m100_two_results"
        first = result_def(i64)
        second = result_def(TokenType)

    assert isinstance(TwoResults.__dict__["second"], _SingleResult)
    op = TwoResults.create(result_types=[i64, TokenType()])
    assert op.first is op.results[0] and op.second is op.results[1]
    op.verify_()


def test_equality_constraint_with_a_builtin_instance_is_the_constraints_verify(monkeypatch):
    """``IntegerAttr[I64]``'s ``EqAttrConstraint(IntegerType(64))`` holds its own instance; the
    compiled predicate also takes builtin's shared ``i64`` by identity. Same answers as the
    constraint's own ``verify`` (xDSL's) on the shared instance, fresh equal ones, the
    constraint's own and unequal types; a predicate given an unequal "same" instance fails."""
    from xdsl.dialects.builtin import (IndexType, IntegerType, Signedness, f32, i1, i8)
    from xdsl.irdl.constraints import EqAttrConstraint

    from m100.dialects.tpb import Conv2dOp

    constr = Conv2dOp.get_irdl_definition().properties["n"].constr.param_constrs[1]
    assert isinstance(constr, EqAttrConstraint) and constr.attr is not i64
    assert fast_verify._canonical_equal(constr.attr) is i64
    assert fast_verify._canonical_equal(i64) is None  # (itself: nothing to add)
    signed = IntegerType(64, Signedness.SIGNED)
    cases = [i64, constr.attr, IntegerType(64), i32, i8, i1, f32, f64, IndexType(), signed,
             IntegerType(64, Signedness.UNSIGNED), StringAttr("i64")]

    def agrees(pred) -> bool:
        return all(pred(a) is _xdsl_accepts(constr, a) for a in cases)
    assert agrees(fast_verify._attr_pred(constr))
    for other in (i32, signed):  # mutant: an unequal instance taken
        monkeypatch.setattr(fast_verify, "_canonical_equal", lambda w, o=other: o)
        assert not agrees(fast_verify._attr_pred(constr))


def test_operand_types_read_as_the_generic_check_reads_them():
    """The compiled predicate reads the operand types of xDSL's own value classes from their
    ``_type`` field (``SSAValue.type`` returns it) and asks any other class ``.type``: an operand
    of a value class whose ``type`` answers other than its field is judged by ``.type``, as the
    generic check judges it (a predicate reading the field for every class accepts the buffer
    whose ``type`` is a token, and refuses the other way round)."""
    from xdsl.ir import BlockArgument

    class _Odd(BlockArgument):
        @property
        def type(self):
            return self.__dict__["_shown"]

    assert fast_verify._PLAIN_VALUES and _Odd not in fast_verify._PLAIN_VALUES
    ops = [o for o in OPS if isinstance(o, InstrOp) and o.bufs and o.deps]
    assert ops
    for op in ops[:6]:
        ok = compile_def(type(op).get_irdl_definition())
        p = _parts(op)
        buf, tok = op.bufs[0], op.deps[0]
        for field, shown in ((buf.type, tok.type), (tok.type, buf.type), (buf.type, buf.type)):
            odd = _Odd(field, Block(), 0)
            odd.__dict__["_shown"] = shown
            ops_ = list(p["operands"])
            ops_[ops_.index(buf)] = odd
            mut = type(op).create(**{**p, "operands": ops_})
            assert ok(mut) == _generic_accepts(mut) == (shown == buf.type), (op.name, shown)
