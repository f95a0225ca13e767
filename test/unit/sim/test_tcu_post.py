"""The TCU epilogue's post stages (``MatMul.post`` / ``post_in``, docs/isa.md) vs numpy written
from the ONNX definitions of LLaMA's W8A8 MLP: gate's ``silu`` of its f16 dequantized result,
up's ``QuantizeLinear(silu(gate) * up)``; each f16 intermediate rounded where the ONNX graph
rounds it (numpy float16 arithmetic: every op rounds its result to f16)."""

import numpy as np
import pytest

from m100.sim.testing import hb, run
from m100.targets.m100.encoding import decode_instructions, encode_instruction
from m100.targets.m100.isa import (CvuOp, DType, Epilogue, IsaError, MatMul, Ref, RefKind, Stage,
                                   Sync)
from m100.targets.m100.machine import get_machine

F16 = (DType.F16.value,)
IN = lambda i: Ref(RefKind.INPUT, i)  # noqa: E731
ST = lambda i: Ref(RefKind.STAGE, i)  # noqa: E731
ONE = Ref(RefKind.IMM, imm=1.0)

#: gate: g = f16(value); silu(g) = g * sigmoid(g) with the 16-bit sigmoid body
SILU_POST = (Stage(CvuOp.MUL, (IN(0), ONE), iparams=F16),
             Stage(CvuOp.SIGMOID, (ST(0),), iparams=F16),
             Stage(CvuOp.MUL, (ST(0), ST(1))))
#: up: u = f16(value); m = f16(s * u); q = saturate(round(m / (1/32))) as int8
QUANT_POST = (Stage(CvuOp.MUL, (IN(0), ONE), iparams=F16),
              Stage(CvuOp.MUL, (IN(1), ST(0)), iparams=F16),
              Stage(CvuOp.DIV, (ST(1), Ref(RefKind.IMM, imm=1 / 32))),
              Stage(CvuOp.ROUND, (ST(2),)),
              Stage(CvuOp.MAX, (ST(3), Ref(RefKind.IMM, imm=-128.0))),
              Stage(CvuOp.MIN, (ST(4), Ref(RefKind.IMM, imm=127.0))),
              Stage(CvuOp.FTOI, (ST(5),)))


def _dequant_f16(acc, scale):
    """ONNX ``Cast(Cast(acc, f32) * scale, f16)``."""
    return (acc.astype(np.float32) * scale.astype(np.float32)[None, :]).astype(np.float16)


def _silu_f16(g):
    """``g * Sigmoid(g)`` in f16, Sigmoid as ``1 / (1 + exp(-g))``, each op rounded to f16."""
    one = np.float16(1)
    with np.errstate(over="ignore"):  # exp(-g) of a large negative g is inf: sigmoid 0
        return g * (one / (one + np.exp(-g)))


def _quantize(m, scale=np.float32(1 / 32)):
    """ONNX ``QuantizeLinear(m, scale, 0)`` to int8: round half to even, saturate."""
    return np.clip(np.rint(m.astype(np.float32) / scale), -128, 127).astype(np.int8)


def _operands(rng, m, k, n):
    a = rng.integers(-128, 128, (m, k))
    b = rng.integers(-128, 128, (k, n))
    scale = (rng.random(n) * 4e-4 + 1e-4).astype(np.float32)
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 4096, DType.I8, (k, n))
    S = hb(0, 12288, DType.F32, (n,))
    return a, b, scale, A, B, S


@pytest.mark.parametrize("blocks", [1, 4])
def test_gate_silu_and_up_product_quantize_in_the_epilogue(rng, blocks):
    m, k, n = 32, 96, 48
    a, b, sg, A, B, S = _operands(rng, m, k, n)
    bu = rng.integers(-128, 128, (k, n))
    su = (rng.random(n) * 4e-4 + 1e-4).astype(np.float32)
    BU, SU = hb(0, 16384, DType.I8, (k, n)), hb(0, 22528, DType.F32, (n,))
    G, Q = hb(0, 24576, DType.F16, (m, n)), hb(0, 32768, DType.I8, (m, n))
    sync = Sync(blocks=blocks)
    gate = MatMul(0, A, B, G, m, n, k, epilogue=Epilogue(dequant=S), sync=sync, post=SILU_POST)
    up = MatMul(0, A, BU, Q, m, n, k, epilogue=Epilogue(dequant=SU), sync=sync, post=QUANT_POST,
                post_in=G)
    res, (g, q) = run([gate, up], [(A, a), (B, b), (S, sg), (BU, bu), (SU, su)], [G, Q])
    assert res.ok, res.reports
    want_g = _silu_f16(_dequant_f16(a @ b, sg))
    want_q = _quantize(want_g * _dequant_f16(a @ bu, su))
    assert np.array_equal(g.reshape(m, n).astype(np.float16), want_g)
    assert np.array_equal(q.reshape(m, n).astype(np.int8), want_q)
    # the roundings matter: without the f16 rounding of the dequantized value the silu differs
    no_round = MatMul(0, A, B, G, m, n, k, epilogue=Epilogue(dequant=S),
                      post=(Stage(CvuOp.SIGMOID, (IN(0),), iparams=F16),
                            Stage(CvuOp.MUL, (IN(0), ST(0)))))
    _, (g2,) = run([no_round], [(A, a), (B, b), (S, sg)], [G])
    assert not np.array_equal(g2.reshape(m, n).astype(np.float16), want_g)


def test_post_stages_round_trip_encoding_and_asm(rng):
    from m100.targets.m100 import asm
    m, k, n = 8, 32, 16
    _, _, _, A, B, S = _operands(rng, m, k, n)
    G, Q = hb(0, 24576, DType.F16, (m, n)), hb(0, 32768, DType.I8, (m, n))
    up = MatMul(0, A, B, Q, m, n, k, epilogue=Epilogue(dequant=S), post=QUANT_POST, post_in=G)
    mach = get_machine("tiny")
    up.check(mach)
    assert decode_instructions(encode_instruction(up, mach), mach) == [up]
    assert asm.parse_instruction(asm.format_instruction(up)) == up


@pytest.mark.parametrize("what", ["no-dequant", "float-c-with-ftoi", "int-c-without-ftoi",
                                  "post-in-without-post", "reduction", "bad-input",
                                  "post-in-shape", "too-many"])
def test_post_stage_refusals(what):
    m, k, n = 4, 8, 4
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 256, DType.I8, (k, n))
    S = hb(0, 1024, DType.F32, (n,))
    G = hb(0, 2048, DType.F16, (m, n) if what != "post-in-shape" else (m, n + 1))
    C = hb(0, 4096, DType.I8 if what == "int-c-without-ftoi" else DType.F16, (m, n))
    post, post_in, ep = SILU_POST, G, Epilogue(dequant=S)
    if what == "no-dequant":
        ep, C = Epilogue(), hb(0, 4096, DType.I32, (m, n))
    elif what == "float-c-with-ftoi":
        post = QUANT_POST
    elif what == "post-in-without-post":
        post = ()
    elif what == "reduction":
        post = (Stage(CvuOp.RSUM, (IN(0),), axis=1),)
    elif what == "bad-input":
        post, post_in = (Stage(CvuOp.MUL, (IN(0), IN(1))),), None
    elif what == "too-many":
        post = SILU_POST * 3
    inst = MatMul(0, A, B, C, m, n, k, epilogue=ep, post=post, post_in=post_in)
    with pytest.raises(IsaError):
        inst.check(get_machine("tiny"))


def test_box_deps_cover_or_fall_back():
    """A post_in box waits for the stores whose boxes overlap it, only when they cover it
    (``list_schedule._overlapping``; else the caller waits for the whole tensor)."""
    from m100.passes.schedule.list_schedule import _overlapping
    bs = [((0, 4, 0, 8), "a"), ((4, 8, 0, 8), "b"), ((0, 8, 8, 16), "c")]
    assert _overlapping(bs, (2, 6, 0, 8)) == ["a", "b"]
    assert _overlapping(bs, (0, 4, 4, 12)) == ["a", "c"]
    assert _overlapping(bs, (0, 8, 12, 20)) is None  # columns 16.. were not stored
    assert _overlapping(bs[:1], (2, 6, 0, 8)) is None


def test_post_stages_round_trip_the_tpb_dialect(rng):
    """``tpb.matmul`` carries ``post`` (``#tpb.stage`` list) and the ``post_in`` slot: ISA ->
    op -> generic text -> op -> ISA is the identity."""
    from xdsl.parser import Parser
    from xdsl.printer import Printer
    import io
    from m100.context import make_context
    from m100.dialects.tpb import MatmulOp
    m, k, n = 8, 32, 16
    _, _, _, A, B, S = _operands(rng, m, k, n)
    G, Q = hb(0, 24576, DType.F16, (m, n)), hb(0, 32768, DType.I8, (m, n))
    up = MatMul(0, A, B, Q, m, n, k, epilogue=Epilogue(dequant=S), post=QUANT_POST, post_in=G)
    op = MatmulOp.from_instruction(up)
    assert op.to_instruction() == up
    buf = io.StringIO()
    Printer(stream=buf).print_op(op)
    back = Parser(make_context(), buf.getvalue()).parse_op()
    assert back.to_instruction() == up


@pytest.mark.parametrize("stages", [0, 2, 6])
def test_post_stages_are_the_machines(stages):
    """How many post stages a TCU runs is ``Machine.tcu_post_stages`` (0: none): a matmul with
    more is refused by name; one that fits is taken."""
    m, k, n = 4, 8, 4
    A, B = hb(0, 0, DType.I8, (m, k)), hb(0, 256, DType.I8, (k, n))
    S, G = hb(0, 1024, DType.F32, (n,)), hb(0, 2048, DType.F16, (m, n))
    mach = get_machine("tiny").replace(tcu_post_stages=stages)
    gate = MatMul(0, A, B, hb(0, 4096, DType.F16, (m, n)), m, n, k,
                  epilogue=Epilogue(dequant=S), post=SILU_POST)  # 3 stages
    up = MatMul(0, A, B, hb(0, 4096, DType.I8, (m, n)), m, n, k,
                epilogue=Epilogue(dequant=S), post=QUANT_POST, post_in=G)  # 7 stages
    for inst in (gate, up):
        if len(inst.post) <= stages:
            inst.check(mach)
        else:
            with pytest.raises(IsaError, match="no TCU post stages" if stages == 0 else
                               "tcu_post_stages"):
                inst.check(mach)


def test_tcu_post_stages_field_and_fingerprint():
    """The field's range and relation (at most ``cvu_max_stages``, encoded like a CVU op's
    stages) are checked; machines that keep the value machines had before the field existed
    keep their fingerprint (:data:`FINGERPRINT_SINCE`), others get another one."""
    import dataclasses
    import hashlib
    import json
    from m100.targets.m100.machine import PRESETS, MachineError
    for m in PRESETS.values():
        old = {k: v for k, v in dataclasses.asdict(m).items() if k != "tcu_post_stages"}
        blob = json.dumps(old, sort_keys=True, separators=(",", ":")).encode()
        assert m.fingerprint() == int.from_bytes(hashlib.sha256(blob).digest()[:8], "little")
        assert m.replace(tcu_post_stages=0).fingerprint() != m.fingerprint()
    with pytest.raises(MachineError, match="cvu_max_stages"):
        get_machine("tiny").replace(tcu_post_stages=9)
    with pytest.raises(MachineError, match="out of range"):
        get_machine("tiny").replace(tcu_post_stages=-1)
