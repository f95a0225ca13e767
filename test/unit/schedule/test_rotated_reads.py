"""Rotate-half read from the HBSM box of its own input (``kinds/cvu.rotated_access``, session 18):
the access, composed with the box's row-major layout and synthesized into TWU levels, visits the
box's elements in the order of ``concat([x[..., h:], x[..., :h]])`` (numpy the oracle)."""

import numpy as np
import pytest

from m100.passes.backend.twu_synth import access_from_map, synthesize
from m100.passes.schedule.kinds.cvu import rotated_access
from m100.targets.m100.isa import DType, Space, Walk
from m100.targets.m100.machine import get_machine


@pytest.mark.parametrize("box", [(3, 4, 8), (1, 32, 128), (19, 32, 128), (5, 1, 2)])
def test_rotated_walk_reads_the_halves_swapped(box):
    rows, E, C = box
    acc = rotated_access(box, C // 2)
    assert tuple(acc.shape) == (rows, E, 2, C // 2)
    c0, coeffs = acc.coefficients()
    rows_map = [tuple(coeffs[d][r] for d in range(4)) for r in range(3)]
    flat = access_from_map(list(acc.shape), rows_map, list(c0), box)
    pieces = synthesize(list(acc.shape), [flat], get_machine("m100").twu_max_levels)
    assert len(pieces) == 1  # one CVU operand walk (a unit instruction can not be split)
    w = Walk(Space.HBSM, 0, 0, DType.F16, pieces[0].levels[0])
    x = np.arange(rows * E * C).reshape(box)
    want = np.concatenate([x[..., C // 2:], x[..., :C // 2]], axis=-1)
    np.testing.assert_array_equal(w.offsets().reshape(box), want)
    assert any(lv.step < 0 for lv in w.levels)  # the swap is a level stepping back
