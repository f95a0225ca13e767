"""``passes.graph.common.const_view``: the values of ``const_array`` (the decoding copy), as a
read-only view where the stored bytes are the machine's elements; layout-nhwc packs weights from it."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import (BFloat16Type, BytesAttr, DenseIntOrFPElementsAttr, Float16Type,
                                   Float32Type, Float64Type, IntegerType, Signedness, TensorType)

from m100.dialects.dense import numpy_to_dense
from m100.passes.graph.common import const_array, const_view

SHAPE = [3, 4, 2, 5]
CASES = [
    (Float32Type(), np.float32), (Float16Type(), np.float16), (Float64Type(), np.float64),
    (IntegerType(8), np.int8), (IntegerType(8, Signedness.UNSIGNED), np.uint8),
    (IntegerType(32), np.int32), (IntegerType(64), np.int64), (BFloat16Type(), np.float32),
    (IntegerType(1), np.bool_),
]


def _const(et, values) -> arith.ConstantOp:
    return arith.ConstantOp(numpy_to_dense(values, TensorType(et, SHAPE)))


@pytest.mark.parametrize("et,np_t", CASES, ids=lambda c: str(c))
def test_const_view_is_const_array(et, np_t):
    rng = np.random.default_rng(7)
    vals = (rng.standard_normal(SHAPE) * 50).astype(np_t)
    op = _const(et, vals)
    want = const_array(op.result)
    got = const_view(op.result)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    # the packing's read: a transposed copy gives the same constant either way
    t = TensorType(et, [SHAPE[p] for p in (2, 3, 1, 0)])
    assert numpy_to_dense(np.transpose(got, (2, 3, 1, 0)), t) == \
        numpy_to_dense(np.transpose(want, (2, 3, 1, 0)), t)
    plain = not isinstance(et, BFloat16Type) and not (isinstance(et, IntegerType)
                                                       and et.width.data == 1)
    assert got.flags.writeable is not plain  # a view of the stored bytes only where they are
    if plain:
        with pytest.raises(ValueError):
            got[(0,) * len(SHAPE)] = 0  # the constant's bytes can not be written through it


def test_const_view_of_a_splat_and_a_non_constant():
    ty = TensorType(Float32Type(), SHAPE)
    splat = arith.ConstantOp(DenseIntOrFPElementsAttr(ty, BytesAttr(np.float32(2.5).tobytes())))
    got, want = const_view(splat.result), const_array(splat.result)
    assert got.shape == tuple(SHAPE) and np.array_equal(got, want) and (got == 2.5).all()
    other = arith.ConstantOp(numpy_to_dense(np.ones(SHAPE, np.float32), ty))
    add = arith.AddfOp(other.result, other.result)
    assert const_view(add.result) is None and const_array(add.result) is None
