"""The strategies other test suites reuse produce what they promise."""

import m100_isa_strategies as S
import numpy as np
from hypothesis import HealthCheck, given, settings

from m100.targets.m100.isa import CvuPipeline, RefKind
from m100.targets.m100.machine import get_machine

TINY = get_machine("tiny")


def _stage_shapes(inst: CvuPipeline):
    """Shapes of every stage result by numpy's own broadcasting/reduction rules (zeros arrays)."""
    vals = []
    for st in inst.stages:
        args = [np.zeros(inst.in_shapes[r.index]) if r.kind is RefKind.INPUT else
                vals[r.index] if r.kind is RefKind.STAGE else np.float64(r.imm) for r in st.args]
        name = st.op.name.lower()
        if name in ("rsum", "rmax", "rmin", "rmean", "rprod"):
            out = np.sum(args[0], axis=st.axis, keepdims=True)
        elif len(args) == 1:
            out = np.asarray(args[0]) + 0  # elementwise / softmax / norms keep the shape
        else:
            out = sum(np.broadcast_arrays(*args))
        vals.append(np.asarray(out))
    return [v.shape for v in vals]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.instructions(TINY, executable=True))
def test_executable_instructions(inst):
    inst.check(TINY)
    for name, w, written in inst.walks():
        if written:  # no two beats of a written operand hit the same element
            offs = w.offsets()
            assert len(np.unique(offs)) == len(offs), name
    if isinstance(inst, CvuPipeline):
        shapes = _stage_shapes(inst)
        assert shapes[-1] == inst.out_shape
        for st in inst.stages:
            assert st.op.name.lower() not in ("log", "sqrt", "rsqrt", "recip", "div", "pow")
