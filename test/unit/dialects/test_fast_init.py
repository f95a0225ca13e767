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
