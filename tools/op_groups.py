"""Grouped single-op ONNX models for the per-op tests (:mod:`m100.tools.op_audit`).

One model per group holds one independent node per op (its own graph inputs and outputs, named
``<Op>_x<i>`` / ``<Op>_y``), so one compilation covers a family of ops: the interpreter test
(``test/e2e/test_op_groups.py``: numpy from the ONNX definitions) and the lit test of the lowering
(``test/lit/frontend/onnx-op-groups.test``) both build them from here.

    python -m m100.tools.op_groups OUT unary binary ...   # writes OUT.<group>.onnx
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

OPSET = 21


@dataclass(frozen=True)
class Entry:
    op: str
    #: per input: (shape, numpy dtype name, domain): domain any | pos | unit | ge1 | int | bool |
    #: shift | nonzero | grid (halves in [-2, 2]) | special (with +-inf, NaN) | idx:<n> (indices
    #: in [-n, n)) | const:<python literal> (an initializer)
    inputs: tuple
    attrs: dict = field(default_factory=dict)


_F = "float32"
_X = ((3, 16), _F, "any")

GROUPS: dict[str, list[Entry]] = {
    "unary": [Entry(op, (_X,)) for op in (
        "Abs", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
        "Mish", "Neg", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus",
        "Tan", "Tanh", "Atan", "Asinh", "Identity")] + [
        Entry("IsInf", (((3, 16), _F, "special"),)), Entry("IsNaN", (((3, 16), _F, "special"),)),
        Entry("Acos", (((3, 16), _F, "unit"),)), Entry("Asin", (((3, 16), _F, "unit"),)),
        Entry("Atanh", (((3, 16), _F, "unit"),)), Entry("Acosh", (((3, 16), _F, "ge1"),)),
        Entry("Log", (((3, 16), _F, "pos"),)), Entry("Sqrt", (((3, 16), _F, "pos"),)),
        Entry("Reciprocal", (((3, 16), _F, "nonzero"),)),
        Entry("Celu", (_X,), {"alpha": 1.5}), Entry("Elu", (_X,), {"alpha": 0.7}),
        Entry("LeakyRelu", (_X,), {"alpha": 0.2}), Entry("Shrink", (_X,), {"lambd": 0.6, "bias": 0.3}),
        Entry("ThresholdedRelu", (_X,), {"alpha": 0.4}),
    ],
    "binary": [Entry(op, (_X, ((16,), _F, "any"))) for op in ("Add", "Sub", "Mul", "Mean", "Sum")] + [
        # on a grid of halves: equal elements occur
        Entry(op, (((3, 16), _F, "grid"), ((16,), _F, "grid"))) for op in (
            "Max", "Min", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual")] + [
        Entry("Div", (_X, ((16,), _F, "nonzero"))),
        Entry("Pow", (((3, 16), _F, "pos"), ((16,), _F, "any"))),
        Entry("PRelu", (_X, ((16,), _F, "any"))),
        Entry("Mod", (_X, ((16,), _F, "nonzero")), {"fmod": 1}),
        Entry("Where", (((3, 16), "bool", "bool"), _X, ((16,), _F, "any"))),
        Entry("Clip", (_X, ((), _F, "const:-0.5"), ((), _F, "const:0.8"))),
    ],
    "integer": [Entry(op, (((3, 16), "bool", "bool"), ((3, 16), "bool", "bool")))
                for op in ("And", "Or", "Xor")] + [
        Entry("Not", (((3, 16), "bool", "bool"),)),
        Entry("BitwiseNot", (((3, 16), "int32", "int"),)),
        Entry("BitShift", (((3, 16), "uint8", "int"), ((3, 16), "uint8", "shift")),
              {"direction": "LEFT"}),
        Entry("Mod", (((3, 16), "int32", "int"), ((16,), "int32", "nonzero"))),
    ] + [Entry(op, (((3, 16), "int32", "int"), ((3, 16), "int32", "int")))
         for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")],
    "reduce": [Entry(op, (((3, 5, 16), _F, "pos" if op == "ReduceLogSum" else "any"),
                          ((1,), "int64", "const:[1]")), {"keepdims": kd})
               for op, kd in (("ReduceSum", 0), ("ReduceMean", 1), ("ReduceMax", 0),
                              ("ReduceMin", 1), ("ReduceProd", 0), ("ReduceL1", 1),
                              ("ReduceL2", 0), ("ReduceLogSum", 1), ("ReduceSumSquare", 0))] + [
        Entry("ArgMax", (((3, 5, 16), _F, "any"),), {"axis": 2, "keepdims": 0}),
        Entry("ArgMin", (((3, 5, 16), _F, "any"),), {"axis": 1}),
    ],
    "movement": [
        Entry("Reshape", (((3, 16), _F, "any"), ((3,), "int64", "const:[4, 2, 6]"))),
        Entry("Transpose", (((2, 3, 8), _F, "any"),), {"perm": [2, 0, 1]}),
        Entry("Concat", (((2, 3), _F, "any"), ((2, 5), _F, "any")), {"axis": 1}),
        Entry("Slice", (((6, 8), _F, "any"), ((2,), "int64", "const:[1, -2]"),
                        ((2,), "int64", "const:[5, 1]"), ((2,), "int64", "const:[0, 1]"),
                        ((2,), "int64", "const:[2, -2]"))),
        Entry("Squeeze", (((3, 1, 8), _F, "any"), ((1,), "int64", "const:[1]"))),
        Entry("Unsqueeze", (((3, 8), _F, "any"), ((1,), "int64", "const:[0]"))),
        Entry("Flatten", (((2, 3, 4), _F, "any"),), {"axis": 2}),
        Entry("Expand", (((3, 1), _F, "any"), ((3,), "int64", "const:[2, 3, 5]"))),
        Entry("Tile", (((2, 3), _F, "any"), ((2,), "int64", "const:[2, 3]"))),
        Entry("Gather", (((5, 4), _F, "any"), ((3,), "int64", "idx:5")), {"axis": 0}),
        Entry("GatherElements", (((3, 4), _F, "any"), ((3, 2), "int64", "idx:4")), {"axis": 1}),
        Entry("GatherND", (((3, 4), _F, "any"), ((2, 2), "int64", "const:[[0, 1], [2, -1]]"))),
        Entry("DepthToSpace", (((1, 8, 2, 3), _F, "any"),), {"blocksize": 2, "mode": "CRD"}),
        Entry("SpaceToDepth", (((1, 2, 4, 6), _F, "any"),), {"blocksize": 2}),
        Entry("Trilu", (((4, 5), _F, "any"), ((), "int64", "const:1")), {"upper": 0}),
        Entry("Pad", (((3, 4), _F, "any"), ((4,), "int64", "const:[1, 0, 2, 3]"),
                      ((), _F, "const:1.5"))),
        Entry("Cast", (((3, 16), _F, "any"),), {"to": 6}),  # float -> int32 (toward zero)
        Entry("Split", (((6, 4), _F, "any"), ((2,), "int64", "const:[2, 4]")), {"axis": 0}),
    ],
    # lowered by an m100 rewrite (frontend/onnx_rewrite*.py) or to a contraction / pooling /
    # norm: the lit test of their lowering (their numbers: node tests, test_half_softmax.py)
    "composite": [
        Entry("Softmax", (((4, 8), "float16", "any"),)),
        Entry("LogSoftmax", (((4, 8), "float16", "any"),), {"axis": 0}),
        Entry("LayerNormalization", (((2, 8), _F, "any"), ((8,), _F, "const:[1.5] * 8"))),
        Entry("BatchNormalization", (((1, 3, 4, 4), _F, "any"), ((3,), _F, "const:[1, 2, 3]"),
                                     ((3,), _F, "const:[0, 1, 0]"), ((3,), _F, "const:[0, 1, 2]"),
                                     ((3,), _F, "const:[1, 4, 9]"))),
        Entry("InstanceNormalization", (((1, 3, 4, 4), _F, "any"), ((3,), _F, "const:[1, 2, 3]"),
                                        ((3,), _F, "const:[0, 1, 0]"))),
        Entry("GroupNormalization", (((1, 4, 3, 3), _F, "any"), ((4,), _F, "const:[1, 2, 3, 4]"),
                                     ((4,), _F, "const:[0, 1, 0, 1]")), {"num_groups": 2}),
        Entry("LpNormalization", (((3, 8), _F, "any"),), {"p": 2, "axis": -1}),
        Entry("Hardmax", (((3, 8), _F, "any"),)),
        Entry("CenterCropPad", (((4, 6), _F, "any"), ((2,), "int64", "const:[2, 8]"))),
        Entry("MatMul", (((3, 8), _F, "any"), ((8, 5), _F, "const:[[0.5] * 5] * 8"))),
        Entry("Gemm", (((3, 8), _F, "any"), ((5, 8), _F, "const:[[0.25] * 8] * 5"),
                       ((5,), _F, "const:[1, 2, 3, 4, 5]")), {"transB": 1, "alpha": 2.0}),
        Entry("Einsum", (((3, 8), _F, "any"), ((8, 5), _F, "any")), {"equation": "ij,jk->ik"}),
        Entry("AveragePool", (((1, 2, 4, 4), _F, "any"),), {"kernel_shape": [2, 2],
                                                            "strides": [2, 2]}),
        Entry("GlobalAveragePool", (((1, 2, 4, 4), _F, "any"),)),
        Entry("GlobalMaxPool", (((1, 2, 4, 4), _F, "any"),)),
        Entry("TopK", (((3, 8), _F, "any"), ((1,), "int64", "const:[3]"))),
        Entry("EyeLike", (((3, 4), _F, "any"),), {"k": 1}),
        Entry("HannWindow", (((), "int64", "const:8"),)),
    ],
}

#: ops whose node has several outputs: op -> their count
N_OUT = {"Split": 2, "TopK": 2}


def input_array(shape, dtype: str, domain: str, rng) -> np.ndarray:
    """Values for one input of the given ``domain`` (see :class:`Entry`)."""
    if domain.startswith("const:"):
        return np.array(eval(domain[6:]), dtype)  # noqa: S307 - literals of this module only
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if domain == "int":
        return rng.integers(-40 if dtype != "uint8" else 0, 40, shape).astype(dtype)
    if domain.startswith("idx:"):  # indices into an axis of that length, negative ones too
        n = int(domain[4:])
        return rng.integers(-n, n, shape).astype(dtype)
    if domain == "shift":
        return rng.integers(0, 8, shape).astype(dtype)
    if dtype.startswith("int") and domain == "nonzero":
        v = rng.integers(1, 9, shape) * rng.choice([-1, 1], shape)
        return v.astype(dtype)
    if domain == "grid":
        return (rng.integers(-4, 5, shape) / 2).astype(dtype)
    if domain == "special":  # with +-inf and NaN
        v = rng.standard_normal(shape)
        v.flat[::5], v.flat[1::7], v.flat[2::9] = np.inf, -np.inf, np.nan
        return v.astype(dtype)
    if domain == "any":
        return (rng.standard_normal(shape) * 1.5).astype(dtype)
    if domain == "pos":
        return rng.uniform(0.2, 3.0, shape).astype(dtype)
    if domain == "unit":
        return rng.uniform(-0.95, 0.95, shape).astype(dtype)
    if domain == "ge1":
        return rng.uniform(1.05, 4.0, shape).astype(dtype)
    if domain == "nonzero":
        return (rng.uniform(0.3, 2.0, shape) * rng.choice([-1, 1], shape)).astype(dtype)
    raise ValueError(f"unknown input domain {domain!r}")


def build(group: str, seed: int = 0):
    """(model, {graph input name: array}) of ``group``; constants are initializers."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, ins, inits, outs, feeds = [], [], [], [], {}
    seen: dict[str, int] = {}
    for e in GROUPS[group]:
        k = seen.get(e.op, 0)
        seen[e.op] = k + 1
        tag = e.op if not k else f"{e.op}{k}"
        names = []
        for i, (shape, dt, dom) in enumerate(e.inputs):
            nm = f"{tag}_x{i}"
            arr = input_array(shape, dt, dom, rng)
            if dom.startswith("const:"):
                inits.append(numpy_helper.from_array(arr, nm))
            else:
                feeds[nm] = arr
                ins.append(helper.make_tensor_value_info(
                    nm, helper.np_dtype_to_tensor_dtype(arr.dtype), list(shape)))
            names.append(nm)
        n_out = N_OUT.get(e.op, 1)
        y = [f"{tag}_y" if n_out == 1 else f"{tag}_y{j}" for j in range(n_out)]
        nodes.append(helper.make_node(e.op, names, y, name=tag, **e.attrs))
        outs += y
    g = helper.make_graph(nodes, group, ins, [helper.make_value_info(o, onnx.TypeProto())
                                               for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    vi = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)
          if v.type.HasField("tensor_type")}
    for node in nodes:  # an op without shape inference (GroupNormalization): its input's type
        for o in node.output:
            if o not in vi:
                src = next(v for v in ins if v.name == node.input[0])
                vi[o] = helper.make_value_info(o, src.type)
    m.graph.ClearField("output")
    m.graph.output.extend(vi[o] for o in outs)
    onnx.checker.check_model(m)
    return m, feeds


def main(argv: list[str] | None = None) -> int:
    import onnx

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or any(a not in GROUPS for a in argv[1:]):
        print(f"usage: python -m m100.tools.op_groups OUT GROUP... (groups: {', '.join(GROUPS)})",
              file=sys.stderr)
        return 2
    for grp in argv[1:]:
        onnx.save(build(grp)[0], f"{argv[0]}.{grp}.onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
