"""Mixed-type contractions (issue 11): ``linalg.matmul`` i8 x i8 -> i32, i8 x i4 -> i32, f16 x f16
-> f32, f16 x i4 -> f32, ``conv_2d_nchw_fchw`` i8 -> i32 and ``quantized_matmul`` parse, build and run
in the reference executor like numpy computes them from the op definitions."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, TensorType, f16, f32, i8, i32
from xdsl.dialects.linalg import ops as lops
from xdsl.ir import Block

from m100.dialects import linalg_ext  # noqa: F401  (installs the body fixes)
from m100.frontend import reference
from m100.frontend.mlir_load import load_mlir

SRC = pathlib.Path(__file__).parents[2] / "lit" / "frontend" / "linalg-mixed-types.mlir"


@pytest.fixture(scope="module")
def module():
    return load_mlir(SRC.read_text())


def _i(rng, lo, hi, shape, dt=np.int8):
    return rng.integers(lo, hi, shape).astype(dt)


def test_int8_matmul_accumulates_in_i32(module):
    rng = np.random.default_rng(1)
    a, b = _i(rng, -128, 128, (4, 8)), _i(rng, -128, 128, (8, 4))
    c = _i(rng, -(1 << 31), (1 << 31) - 1, (4, 4), np.int32)
    want = (c.astype(np.int64) + a.astype(np.int64) @ b.astype(np.int64))
    want = ((want + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)  # i32 two's complement wrap
    for f in ("mm_i8", "generic_i8"):
        (r,) = reference.run(module, [a, b, c], func_name=f)
        assert r.dtype == np.int32 and np.array_equal(r, want), f


def test_int8_int4_matmul(module):
    rng = np.random.default_rng(2)
    a, b = _i(rng, -128, 128, (4, 8)), _i(rng, -8, 8, (8, 4))
    c = np.zeros((4, 4), np.int32)
    (r,) = reference.run(module, [a, b, c], func_name="mm_i8_i4")
    assert np.array_equal(r, a.astype(np.int32) @ b.astype(np.int32))


def test_f16_matmul_accumulates_in_f32(module):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 8)).astype(np.float16)
    b = rng.standard_normal((8, 4)).astype(np.float16)
    c = np.zeros((4, 4), np.float32)
    (r,) = reference.run(module, [a, b, c], func_name="mm_f16")
    want = a.astype(np.float64) @ b.astype(np.float64)  # f16 products are exact in f32
    assert r.dtype == np.float32 and np.allclose(r, want, rtol=1e-6, atol=1e-6)


def test_int8_conv_and_quantized_matmul(module):
    rng = np.random.default_rng(4)
    x, w = _i(rng, -128, 128, (1, 3, 6, 6)), _i(rng, -128, 128, (4, 3, 3, 3))
    (r,) = reference.run(module, [x, w, np.zeros((1, 4, 4, 4), np.int32)], func_name="conv_i8")
    want = np.zeros((1, 4, 4, 4), np.int64)
    for f in range(4):
        for i in range(4):
            for j in range(4):
                want[0, f, i, j] = (x[0, :, i:i + 3, j:j + 3].astype(np.int64) * w[f]).sum()
    assert np.array_equal(r, want)
    a, b = _i(rng, -128, 128, (4, 8)), _i(rng, -128, 128, (8, 4))
    (r,) = reference.run(module, [a, b, np.int32(3), np.int32(-5), np.zeros((4, 4), np.int32)],
                         func_name="qmm")
    assert np.array_equal(r, (a.astype(np.int32) - 3) @ (b.astype(np.int32) + 5))


@pytest.mark.parametrize("ta, tb, tc, casts", [
    (i8, i8, i32, ["arith.extsi", "arith.extsi"]),
    (f16, f16, f32, ["arith.extf", "arith.extf"]),
    (f16, IntegerType(4), f32, ["arith.extf", "arith.sitofp"]),
    (f32, f32, f32, []),
    (i32, i32, IntegerType(16), ["arith.trunci", "arith.trunci"]),
])
def test_built_matmul_body_casts(ta, tb, tc, casts):
    """Building xDSL's own MatmulOp (as passes do) gets upstream's cast_signed body."""
    blk = Block(arg_types=[TensorType(ta, [2, 3]), TensorType(tb, [3, 2]), TensorType(tc, [2, 2])])
    op = lops.MatmulOp([blk.args[0], blk.args[1]], [blk.args[2]])
    op.verify()
    names = [o.name for o in op.body.block.ops]
    assert names[:len(casts)] == casts
    assert names[len(casts):] == (["arith.mulf", "arith.addf"] if isinstance(tc, type(f32))
                                  else ["arith.muli", "arith.addi"]) + ["linalg.yield"]
    assert isinstance(op.body.block.ops.first, (arith.ExtSIOp, arith.ExtFOp, arith.TruncIOp,
                                                arith.MulfOp, arith.MuliOp))
