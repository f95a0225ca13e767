"""The builder the ONNX graph rewrites share: the shapes, element types and constants of a graph,
fresh names, and the nodes and initializers one rewrite adds; plus the ONNX reference
implementation of one operator (to build constants exactly as the definition computes them).
"""

from __future__ import annotations

import numpy as np


def frontend_error(msg: str):
    from m100.frontend.onnx_import import FrontendError
    return FrontendError(msg)


def node_attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def as_str(v):
    return v.decode() if isinstance(v, bytes) else v


class Constants:
    """Value name -> its constant as a numpy array, converted from its ``TensorProto`` when first
    asked for (``numpy_helper.to_array``). The rewrites read a few small constants (pads,
    scales, axes, a weight to reshape) of graphs whose initializers are mostly weights: each
    ``RewriteCtx`` converted every initializer (ResNet-50: 100 MB, four contexts, ~0.15 CPU-s).
    Only ``in``, ``[]`` and ``get`` (what the rewrites use; anything else is an AttributeError,
    not a silent dict of protos)."""

    def __init__(self):
        self.tensors: dict = {}  # name -> TensorProto
        self._arrays: dict[str, np.ndarray] = {}

    def __contains__(self, name) -> bool:
        return name in self.tensors

    def __getitem__(self, name) -> np.ndarray:
        got = self._arrays.get(name)
        if got is None:
            from onnx import numpy_helper
            got = self._arrays[name] = numpy_helper.to_array(self.tensors[name])
        return got

    def get(self, name, default=None):
        return self[name] if name in self.tensors else default


class RewriteCtx:
    """Shapes, constants, fresh names and the nodes/initializers of one rewrite."""

    def __init__(self, graph, names):
        from onnx import helper, numpy_helper
        self.h, self.nh = helper, numpy_helper
        self.names = names
        self.shapes: dict[str, list[int]] = {}
        self.types: dict[str, int] = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type"):
                self.types[vi.name] = tt.elem_type
                if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                    self.shapes[vi.name] = [d.dim_value for d in tt.shape.dim]
        self.consts = Constants()
        for init in graph.initializer:
            self.consts.tensors[init.name] = init
            self.shapes[init.name] = list(init.dims)
            self.types[init.name] = init.data_type
        for n in graph.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                a = node_attrs(n)
                if "value" in a:
                    self.consts.tensors[n.output[0]] = a["value"]
        self.nodes: list = []
        self.inits: list = []

    def const(self, arr: np.ndarray, hint: str) -> str:
        name = self.names(hint)
        self.inits.append(self.nh.from_array(np.ascontiguousarray(arr), name))
        return name

    def i64(self, vals, hint: str = "c") -> str:
        return self.const(np.asarray(vals, dtype=np.int64), hint)

    def node(self, op: str, ins: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.names(op.lower())
        self.nodes.append(self.h.make_node(op, ins, [out], name=self.names(f"m100_{op}"), **attrs))
        return out

    def np_type(self, name: str):
        from onnx import helper
        return helper.tensor_dtype_to_np_dtype(self.types.get(name, 1))


def reference_run(op: str, x: np.ndarray, extra_inputs=(), **attrs) -> np.ndarray:
    """One ONNX operator run by the ONNX reference implementation (the definition)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    inits = [numpy_helper.from_array(v, f"i{k}") if v is not None else None
             for k, v in enumerate(extra_inputs)]
    ins = ["x"] + [i.name if i is not None else "" for i in inits]
    g = helper.make_graph([helper.make_node(op, ins, ["y"], **attrs)], "ref",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [i for i in inits if i is not None])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    return np.asarray(ReferenceEvaluator(m).run(None, {"x": x.astype(np.float32)})[0])
