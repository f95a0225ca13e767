"""``fold_batchnorm.scaled`` (the folded weights) against the expression it replaces, written out
here: the float64 product of each weight and its channel's scale, rounded once to the weights'
type by ``astype`` -- the same bytes on float32 / float16 / float64 / int8 weights, random and
edge values (subnormals, overflow to inf, NaN, -0.0, halfway cases), scales of every size."""

from __future__ import annotations

import numpy as np
import pytest

from m100.passes.graph.fold_batchnorm import scaled


def _definition(w, scale):
    return np.multiply(w, scale, dtype=np.float64).astype(w.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8])
@pytest.mark.parametrize("shape,axis", [((64, 32, 3, 3), 0), ((3, 3, 16, 40), 3), ((70, 20000), 0),
                                        ((5,), 0)])
def test_scaled_is_the_float64_product(dtype, shape, axis):
    rng = np.random.default_rng(sum(shape) + axis)
    if np.issubdtype(dtype, np.integer):
        w = rng.integers(-128, 128, shape).astype(dtype)
    else:
        w = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e3], shape)).astype(dtype)
        flat = w.reshape(-1)
        info = np.finfo(dtype)
        edge = np.array([info.tiny / 4, info.max, -info.max, np.nan, -0.0, info.eps, 1 + info.eps,
                         np.inf], dtype)
        flat[:len(edge)] = edge[:len(flat)]
    s = [1] * len(shape)
    s[axis] = shape[axis]
    for scale in (rng.standard_normal(shape[axis]) * 3, np.full(shape[axis], 1 / 3),
                  np.full(shape[axis], 1e300), rng.choice([0.5, 2.0, -1.0, 1e-40], shape[axis])):
        with np.errstate(all="ignore"):
            want = _definition(w, scale.reshape(s))
            got = scaled(w, scale.reshape(s))
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
