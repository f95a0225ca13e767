"""Composed math (``ir_facts.ELEMENTARY``: tan, asin, acos, sinh, cosh, asinh, acosh, atanh, log1p,
expm1 as CVU stage sequences) against numpy in float64, evaluated stage by stage with the
interpreter's own CVU semantics (``sim.semantics.cvu_stage``, f32 per stage); and the splitting of
stage DAGs longer than one pipeline (``split_stages``) keeps every value."""

from __future__ import annotations

import numpy as np
import pytest

from m100.passes.schedule import split_stages
from m100.passes.schedule.ir_facts import ELEMENTARY
from m100.sim.semantics import cvu_stage
from m100.targets.m100.isa import CvuOp, Ref, RefKind, Stage


def _eval(stages, inputs):
    vals = []
    for st in stages:
        args = [inputs[a.index] if a.kind is RefKind.INPUT else vals[a.index]
                if a.kind is RefKind.STAGE else np.float32(a.imm) for a in st.args]
        vals.append(cvu_stage(st, args))
    return vals[-1]


def _stages(name):
    stages = []

    def emit(op, args):
        stages.append(Stage(op, args))
        return Ref(RefKind.STAGE, len(stages) - 1)

    ELEMENTARY[name](emit, Ref(RefKind.INPUT, 0))
    return tuple(stages)


def _points(name, rng):
    signs = rng.choice([-1.0, 1.0], 3000)
    if name in ("asin", "acos", "atanh"):
        x = np.concatenate([rng.uniform(-1, 1, 5000), np.logspace(-30, 0, 3000) * signs,
                            [-1.0, 1.0, 0.0, 0.9999999, -0.9999999]])
    elif name == "acosh":
        x = np.concatenate([1 + np.logspace(-7, 30, 3000), [1.0, 1e38]])
    elif name in ("sinh", "cosh", "expm1"):
        x = np.concatenate([rng.uniform(-80, 80, 5000), np.logspace(-30, 1.9, 3000) * signs, [0.0]])
    elif name == "tan":
        x = rng.uniform(-10, 10, 5000)
    else:
        x = np.concatenate([rng.uniform(-100, 100, 5000), np.logspace(-30, 37, 3000) * signs, [0.0]])
    if name == "log1p":
        x = np.concatenate([x[x > -1], [-1.0, -0.9999999]])
    return x.astype(np.float32)


REF = {"tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh,
       "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "log1p": np.log1p,
       "expm1": np.expm1}


@pytest.mark.parametrize("name", sorted(REF))
def test_composed_math_accuracy(name):
    """Within 5 f32 ulps (relative 6e-7) of the float64 value wherever that is finite, and the
    same infinities/NaNs elsewhere (poles, domain edges)."""
    assert set(REF) == set(ELEMENTARY)
    x = _points(name, np.random.default_rng(0))
    y = _eval(_stages(name), [x]).astype(np.float64)
    with np.errstate(all="ignore"):
        r = REF[name](x.astype(np.float64))
    fin = np.isfinite(r) & (np.abs(r) < 3.4e38)
    rel = np.abs(y[fin] - r[fin]) / np.maximum(np.abs(r[fin]), 1e-37)
    assert rel.max() < 6e-7, f"{name}: max rel error {rel.max():.3g} at x={x[fin][rel.argmax()]!r}"
    np.testing.assert_array_equal(y[~fin], r[~fin])


def test_split_long_dag_keeps_values():
    """A 30-stage DAG with shared values cut into pipelines of at most 4 stages computes the same
    numbers (bit for bit) as the unsplit DAG."""
    rng = np.random.default_rng(1)
    ops = [CvuOp.ADD, CvuOp.MUL, CvuOp.SUB, CvuOp.MAX]
    stages = [Stage(CvuOp.ABS, (Ref(RefKind.INPUT, 0),))]
    for i in range(1, 30):
        a = Ref(RefKind.STAGE, int(rng.integers(0, i)))
        b = Ref(RefKind.STAGE, int(rng.integers(0, i))) if rng.random() < 0.7 else \
            Ref(RefKind.INPUT, int(rng.integers(0, 2)))
        stages.append(Stage(ops[i % 4], (a, b)))
    stages = tuple(stages)
    xs = [rng.standard_normal(64).astype(np.float32) * 0.5 for _ in range(2)]
    want = _eval(stages, xs)
    parts = split_stages.split(stages, 4)
    assert len(parts) > 1 and all(len(p) <= 4 for _, p in parts)
    got: dict[int, np.ndarray] = {}
    for root, part in parts:
        st, keys = split_stages.remap(stages, part)
        got[root] = _eval(st, [xs[k] if kind == "in" else got[k] for kind, k in keys])
    np.testing.assert_array_equal(got[len(stages) - 1], want)
