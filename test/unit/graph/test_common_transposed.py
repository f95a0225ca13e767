"""``passes.graph.common.transposed`` against numpy's ``np.transpose`` (the oracle): the same
values, dtype, shape and C-order bytes, for the blocked permutations and others, at sizes
around the threshold, for strided / Fortran-ordered / non-native inputs and several dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from m100.passes.graph import common


@pytest.mark.parametrize("shape,perm", [
    ((2048, 512, 1, 1), (2, 3, 1, 0)), ((70, 33, 3, 3), (2, 3, 1, 0)), ((256, 300), (1, 0)),
    ((300, 256), (1, 0)), ((65, 1025), (1, 0)), ((64, 3, 7, 7), (2, 3, 1, 0)),
    ((128, 64, 3, 3), (0, 2, 3, 1)), ((8, 16, 32, 4), (3, 2, 1, 0)), ((1, 70000), (1, 0)),
    ((70000, 1), (1, 0)), ((17, 19, 5, 7), (2, 3, 1, 0))])
@pytest.mark.parametrize("dtype", ["<f4", "<i1", "<f2", ">f4", "<i4", "?"])
def test_transposed_is_numpys(shape, perm, dtype, monkeypatch):
    rng = np.random.default_rng(len(shape) * 7 + sum(shape))
    base = (rng.standard_normal(shape) * 50).astype(dtype)
    for least in (0, common.TRANSPOSE_BLOCKED_MIN):
        monkeypatch.setattr(common, "TRANSPOSE_BLOCKED_MIN", least)
        for a in (base, np.asfortranarray(base), base[..., ::-1] if base.shape[-1] > 1 else base):
            want = np.transpose(a, perm)
            got = common.transposed(a, list(perm))
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want, equal_nan=True)
            assert got.tobytes() == want.tobytes()


def test_transposed_blocks_the_moves_of_the_first_axis_last():
    """Large (1, 0) / (2, 3, 1, 0) permutations come back C-contiguous (the blocked copy); small
    ones and other permutations are numpy's view of the input."""
    a = np.zeros((512, 256, 1, 1), np.float32)
    assert common.transposed(a, (2, 3, 1, 0)).flags.c_contiguous
    assert common.transposed(a[:, :, 0, 0], (1, 0)).flags.c_contiguous
    small = np.zeros((8, 4), np.float32)
    assert np.shares_memory(common.transposed(small, (1, 0)), small)
    assert np.shares_memory(common.transposed(a, (0, 2, 3, 1)), a)
