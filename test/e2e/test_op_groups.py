"""Families of ONNX ops through the whole stack (compile for ``tiny`` + interpreter), each compared
with numpy written here from the ONNX operator definitions (float64, then the output type).

One model per family (:mod:`m100.tools.op_groups`: one independent node per op), compiled once; one
test per op. The ``onnx_op`` marker of each test function lists the family's ops for the per-op
audit (:mod:`m100.tools.op_audit`); ``test_markers_match_the_groups`` keeps the lists equal.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from m100.tools import op_groups
from m100.tools.onnx_backend import M100Backend

_erf = np.vectorize(math.erf)
SELU_A, SELU_G = 1.67326319217681884765625, 1.05070102214813232421875


def _softplus(x):
    return np.logaddexp(0.0, x)


UNARY = {
    "Abs": np.abs, "Ceil": np.ceil, "Cos": np.cos, "Cosh": np.cosh, "Erf": _erf, "Exp": np.exp,
    "Floor": np.floor, "Gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "HardSigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1),
    "HardSwish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "Mish": lambda x: x * np.tanh(_softplus(x)), "Neg": np.negative,
    "Relu": lambda x: np.maximum(x, 0), "Round": np.round,  # halves to even
    "Selu": lambda x: SELU_G * np.where(x > 0, x, SELU_A * (np.exp(x) - 1)),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Sign": np.sign, "Sin": np.sin, "Sinh": np.sinh,
    "Softplus": _softplus, "Tan": np.tan, "Tanh": np.tanh, "Atan": np.arctan,
    "Asinh": np.arcsinh, "Identity": lambda x: x, "IsInf": np.isinf, "IsNaN": np.isnan,
    "Acos": np.arccos, "Asin": np.arcsin, "Atanh": np.arctanh, "Acosh": np.arccosh,
    "Log": np.log, "Sqrt": np.sqrt, "Reciprocal": lambda x: 1 / x,
    "Celu": lambda x: np.maximum(0, x) + np.minimum(0, 1.5 * (np.exp(x / 1.5) - 1)),
    "Elu": lambda x: np.where(x > 0, x, 0.7 * (np.exp(x) - 1)),
    "LeakyRelu": lambda x: np.where(x >= 0, x, 0.2 * x),
    "Shrink": lambda x: np.where(x < -0.6, x + 0.3, np.where(x > 0.6, x - 0.3, 0.0)),
    "ThresholdedRelu": lambda x: np.where(x > 0.4, x, 0.0),
}
BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Mean": lambda a, b: (a + b) / 2,
    "Sum": np.add, "Max": np.maximum, "Min": np.minimum, "Equal": np.equal,
    "Greater": np.greater, "Less": np.less, "GreaterOrEqual": np.greater_equal,
    "LessOrEqual": np.less_equal, "Div": np.divide, "Pow": np.power,
    "PRelu": lambda x, s: np.where(x >= 0, x, s * x), "Mod": np.fmod,
    "Where": lambda c, a, b: np.where(c, a, b), "Clip": lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
}
INTEGER = {
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not,
    "BitwiseNot": np.invert, "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
    "BitShift": lambda x, s: ((x.astype(np.int64) << s.astype(np.int64)) & 0xFF).astype(np.uint8),
    "Mod": np.mod,  # integer Mod (fmod 0): the sign of the divisor, as Python's %
}


def _reduce(f, keep):
    return lambda x, axes: f(x, axis=tuple(int(a) for a in axes), keepdims=bool(keep))


REDUCE = {
    "ReduceSum": _reduce(np.sum, 0), "ReduceMean": _reduce(np.mean, 1),
    "ReduceMax": _reduce(np.max, 0), "ReduceMin": _reduce(np.min, 1),
    "ReduceProd": _reduce(np.prod, 0),
    "ReduceL1": _reduce(lambda x, **k: np.sum(np.abs(x), **k), 1),
    "ReduceL2": _reduce(lambda x, **k: np.sqrt(np.sum(x * x, **k)), 0),
    "ReduceLogSum": _reduce(lambda x, **k: np.log(np.sum(x, **k)), 1),
    "ReduceSumSquare": _reduce(lambda x, **k: np.sum(x * x, **k), 0),
    "ArgMax": lambda x: np.argmax(x, axis=2),  # the first maximum
    "ArgMin": lambda x: np.argmin(x, axis=1)[:, None, :],
}


def _d2s_crd(x, b=2):
    n, c, h, w = x.shape
    return x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(
        n, c // (b * b), h * b, w * b)


def _s2d(x, b=2):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(
        n, c * b * b, h // b, w // b)


MOVEMENT = {
    "Reshape": lambda x, s: x.reshape(s), "Transpose": lambda x: x.transpose(2, 0, 1),
    "Concat": lambda a, b: np.concatenate([a, b], axis=1),
    "Slice": lambda x, st, en, ax, sp: x[1:5:2, -2:1:-2],
    "Squeeze": lambda x, a: x[:, 0, :], "Unsqueeze": lambda x, a: x[None],
    "Flatten": lambda x: x.reshape(6, 4), "Expand": lambda x, s: np.broadcast_to(x, s),
    "Tile": lambda x, r: np.tile(x, r), "Gather": lambda x, i: np.take(x, i, axis=0),
    "GatherElements": lambda x, i: np.take_along_axis(x, i % x.shape[1], axis=1),
    "GatherND": lambda x, i: np.stack([x[tuple(t)] for t in i]),
    "DepthToSpace": lambda x: _d2s_crd(x), "SpaceToDepth": lambda x: _s2d(x),
    "Trilu": lambda x, k: np.tril(x, int(k)),
    "Pad": lambda x, p, v: np.pad(x, ((1, 2), (0, 3)), constant_values=float(v)),
    "Cast": lambda x: np.trunc(x).astype(np.int32),  # float -> int32: toward zero
    "Split": lambda x, s: (x[:2], x[2:]),
}
ORACLES = {"unary": UNARY, "binary": BINARY, "integer": INTEGER, "reduce": REDUCE,
           "movement": MOVEMENT}


@functools.cache
def _run(group: str):
    """{op: (outputs, inputs)} of the group's model compiled for tiny and run on the interpreter."""
    model, feeds = op_groups.build(group)
    inits = {i.name: i for i in model.graph.initializer}
    from onnx import numpy_helper
    outs = M100Backend.prepare(model, machine="tiny").run(list(feeds.values()))
    got = dict(zip([o.name for o in model.graph.output], outs))
    res = {}
    for node in model.graph.node:
        ins = [feeds[n] if n in feeds else numpy_helper.to_array(inits[n]) for n in node.input]
        res[node.name] = ([got[o] for o in node.output], ins)
    return res


def _check(group: str, tag: str, rtol=1e-5, atol=1e-6):
    op = tag
    outs, ins = _run(group)[tag]
    with np.errstate(all="ignore"):
        want = ORACLES[group][op](*[a.astype(np.float64) if a.dtype.kind == "f" else a
                                    for a in ins])
    want = want if isinstance(want, tuple) else (want,)
    assert len(outs) == len(want)
    for g, w in zip(outs, want):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{tag}: shape {g.shape} != {w.shape}"
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=tag)
        else:
            np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=tag)


def _tags(group: str) -> list[str]:
    ops = [e.op for e in op_groups.GROUPS[group]]
    assert len(set(ops)) == len(ops), f"{group}: an op twice (the node name is the op)"
    return ops


# Elementary functions on the CVU are f32 compositions (docs/isa.md): within 2e-5 relative of the
# float64 value; everything else within f32 rounding.
_LOOSE = {"Acos", "Asin", "Atanh", "Acosh", "Asinh", "Tan", "Cosh", "Sinh", "Erf", "Gelu", "Mish",
          "Atan", "Pow", "Selu", "Celu", "Elu", "Softplus"}


@pytest.mark.onnx_op("Abs", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
                     "HardSwish", "Mish", "Neg", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin",
                     "Sinh", "Softplus", "Tan", "Tanh", "Atan", "Asinh", "Identity", "IsInf",
                     "IsNaN", "Acos", "Asin", "Atanh", "Acosh", "Log", "Sqrt", "Reciprocal",
                     "Celu", "Elu", "LeakyRelu", "Shrink", "ThresholdedRelu", kind="oracle")
@pytest.mark.parametrize("tag", _tags("unary"))
def test_unary(tag):
    _check("unary", tag, rtol=2e-5 if tag in _LOOSE else 1e-6, atol=1e-6)


@pytest.mark.onnx_op("Add", "Sub", "Mul", "Mean", "Sum", "Max", "Min", "Equal", "Greater", "Less",
                     "GreaterOrEqual", "LessOrEqual", "Div", "Pow", "PRelu", "Mod", "Where", "Clip",
                     kind="oracle")
@pytest.mark.parametrize("tag", _tags("binary"))
def test_binary(tag):
    _check("binary", tag, rtol=2e-5 if tag in _LOOSE else 1e-6)


@pytest.mark.onnx_op("And", "Or", "Xor", "Not", "BitwiseNot", "BitShift", "Mod", "BitwiseAnd",
                     "BitwiseOr", "BitwiseXor", kind="oracle")
@pytest.mark.parametrize("tag", _tags("integer"))
def test_integer(tag):
    _check("integer", tag)


@pytest.mark.onnx_op("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                     "ReduceL2", "ReduceLogSum", "ReduceSumSquare", "ArgMax", "ArgMin",
                     kind="oracle")
@pytest.mark.parametrize("tag", _tags("reduce"))
def test_reduce(tag):
    _check("reduce", tag)


@pytest.mark.onnx_op("Reshape", "Transpose", "Concat", "Slice", "Squeeze", "Unsqueeze", "Flatten",
                     "Expand", "Tile", "Gather", "GatherElements", "GatherND", "DepthToSpace",
                     "SpaceToDepth", "Trilu", "Pad", "Cast", "Split", kind="oracle")
@pytest.mark.parametrize("tag", _tags("movement"))
def test_movement(tag):
    _check("movement", tag, rtol=0, atol=0)


def test_markers_match_the_groups():
    """Each test's onnx_op marker lists exactly its group's ops (what the audit reads)."""
    for group, fn in (("unary", test_unary), ("binary", test_binary), ("integer", test_integer),
                      ("reduce", test_reduce), ("movement", test_movement)):
        marked = {op for m in fn.pytestmark if m.name == "onnx_op" for op in m.args}
        assert marked == {e.op for e in op_groups.GROUPS[group]}, group
        assert set(ORACLES[group]) == marked, group
