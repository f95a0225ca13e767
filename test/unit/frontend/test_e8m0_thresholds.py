"""The float8e8m0 encoding's threshold form (``onnx_rewrite_narrow_int.e8m0_thresholds``: the
code of |x| is the number of thresholds below it) against onnx's reference conversion
(``onnx.numpy_helper.to_float8e8m0``, bit manipulation on the f32 value): every float16 value and
every f32 exponent field with ~400 fraction patterns (all of the top 6 fraction bits plus the
lowest bits the modes distinguish), both signs, each round_mode, saturate on and off. The compiled
lowering is checked through the stack in test/e2e/test_quant_narrow_types.py."""

from __future__ import annotations

import numpy as np
import onnx.numpy_helper as nh
import pytest

from m100.frontend.onnx_rewrite_narrow_int import e8m0_thresholds


def _codes(x: np.ndarray, round_mode: bytes, saturate: bool) -> np.ndarray:
    t, strict = e8m0_thresholds(round_mode)
    if saturate:
        t, strict = t[:254], strict[:254]
    a = np.abs(x.astype(np.float32))
    out = np.empty(a.shape, np.int64)
    for i in range(0, a.size, 1 << 14):  # bounded memory
        c = a[i:i + (1 << 14), None].astype(np.float64)
        out[i:i + (1 << 14)] = ((c > t) | ((c == t) & ~strict)).sum(1)
    return np.where(a <= np.finfo(np.float32).max, out, 255)


def _f32_patterns() -> np.ndarray:
    top = np.arange(64, dtype=np.uint32) << 17  # every top-6 fraction
    low = np.array([0, 1, 2, 0x10000, 0x1FFFF, 0xFFFF], np.uint32)  # the bits below them
    fr = (top[:, None] | low[None, :]).ravel()
    fr = np.unique(np.concatenate([fr, [0x3FFFFF, 0x400000, 0x400001, 0x7FFFFF, 0x200000]]))
    bits = (np.arange(256, dtype=np.uint32)[:, None] << 23 | fr.astype(np.uint32)[None, :]).ravel()
    return np.concatenate([bits, bits | 0x80000000]).view(np.float32)


@pytest.mark.parametrize("round_mode", [b"up", b"down", b"nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_thresholds_equal_onnx_reference(round_mode, saturate):
    for x in (np.arange(1 << 16, dtype=np.uint16).view(np.float16), _f32_patterns()):
        with np.errstate(invalid="ignore"):
            want = nh.to_float8e8m0(x.astype(np.float32), saturate, round_mode.decode())
        want = want.view(np.uint8).astype(np.int64)
        got = _codes(x, round_mode, saturate)
        assert len(np.unique(want)) >= 40
        np.testing.assert_array_equal(got, want)
