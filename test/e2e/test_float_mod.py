"""Float ``Mod`` through the whole stack (compile for ``tiny`` + interpreter), exact against numpy
from the definitions: ``fmod=1`` is C's ``fmod`` (``np.fmod``), ``fmod=0`` Python's ``%``
(``np.mod``).

What this would have caught:
- ``fmod=1`` was silently wrong: torch-mlir lowers it as ``a - b * trunc(a / b)``, whose rounded
  division is off once the quotient exceeds 2**24 (fmod(3.36e10, -0.43) gave 2048, not 0.048).
  ``frontend/onnx_rewrite_fmod`` computes it as ``sign(a) * (|a| % |b|)`` through ``arith.remf``.
- ``fmod=0`` (``arith.remf``) was refused: xDSL has no ``arith.remf`` (``dialects/arith_ext``) and
  the CVU's ``rem`` stage was integer-only (now IEEE fmod in the float lane, docs/isa.md).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.tools.onnx_backend import M100Backend


def _model(dt: np.dtype, shape, fmod: int):
    t = h.np_dtype_to_tensor_dtype(dt)
    g = h.make_graph([h.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], "g",
                     [h.make_tensor_value_info("a", t, shape),
                      h.make_tensor_value_info("b", t, shape)],
                     [h.make_tensor_value_info("y", t, shape)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _operands(dt: np.dtype):
    """Quotients from below 1 to far beyond 2**24 (2**50 for f32), both signs, and the edges:
    exact multiples, zeros, infinities, NaN, a zero divisor."""
    rng = np.random.default_rng(5)
    n = 8 * 64
    span = 45.0 if dt == np.float32 else 9.0
    a = rng.standard_normal(n) * np.exp2(rng.uniform(-4, span, n))
    b = rng.choice([-1, 1], n) * np.exp2(rng.uniform(-6, 6, n))
    edge_a = [6.0, -6.0, 7.5, -7.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 5.0, -5.0, 1.0, 3.0, -3.0,
              0.5, -0.5]
    edge_b = [3.0, 3.0, -2.0, 2.0, 1.5, -1.5, 2.0, 2.0, 1.0, np.inf, np.inf, -np.inf, 0.0, 0.0,
              -0.25, 0.75]
    a[:16], b[:16] = edge_a, edge_b
    return a.astype(dt).reshape(8, 64), b.astype(dt).reshape(8, 64)


@pytest.mark.onnx_op("Mod", kind="oracle")
@pytest.mark.parametrize("fmod", [1, 0])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_mod_exact(dtype, fmod):
    dt = np.dtype(dtype)
    a, b = _operands(dt)
    with np.errstate(all="ignore"):
        want = np.fmod(a, b) if fmod else np.mod(a, b)
    (got,) = M100Backend.prepare(_model(dt, a.shape, fmod), machine="tiny").run([a, b])
    assert got.dtype == dt
    np.testing.assert_array_equal(got, want)  # NaN where numpy has NaN; -0 == +0
