"""ONNX training-time operators (losses, Dropout) -> primitive ONNX ops, before torch-mlir (issue 12).

Run by :func:`m100.frontend.onnx_rewrite.rewrite_for_torch_mlir` (top-level graph, after shape
inference, opset >= 17). Every rewritten node keeps its output names.

- ``NegativeLogLikelihoodLoss`` (float32 ``input [N, C, d...]``, integer ``target [N, d...]``,
  optional ``weight [C]``): torch-mlir cannot lower ``aten.nll_loss_forward`` beyond ``[N, C]``.
  Per the ONNX definition, without a gather:

  * ``onehot[n, c, d] = (target[n, d] == c)`` (Equal of the unsqueezed target with a constant
    ``arange(C)`` on axis 1; CVU integer lane),
  * ``picked = ReduceSum(Where(onehot, input, 0), axis 1)`` (one non-zero term: exact, and an
    ``-inf`` log-probability elsewhere does not leak as ``0 * -inf``),
  * ``w = ReduceSum(Where(onehot, weight[c], 0), axis 1)`` (the gathered weight, exact) or 1,
  * ``valid = target != ignore_index``; ``loss = Where(valid, -picked * w, 0)``,
  * reduction ``none``: ``loss``; ``sum``: its sum; ``mean``: ``sum(loss) / sum(Where(valid, w,
    0))`` (the ONNX definition: divided by the sum of the applied weights).

  A target outside ``[0, C)`` that is not ``ignore_index`` is undefined in ONNX; here it gives 0.
- ``SoftmaxCrossEntropyLoss`` (float32): ``LogSoftmax(scores, axis 1)`` followed by the NLL above;
  the optional second output is the log-probability (torch-mlir fails on its constants).

- ``Dropout`` with a ``training_mode`` input (torch-mlir cannot lower ``aten.dropout``):
  ``keep = Not(training_mode) Or (U >= ratio)``, ``y = Where(keep, x * scale, 0)`` with
  ``scale = Where(training_mode, 1 / (1 - ratio), 1)`` and the mask output ``keep``; ratio 0 or
  ``training_mode`` false give ``y = x`` exactly and an all-true mask. ``U`` is the uniform draw
  of the ``seed`` attribute by numpy's legacy MT19937 (``np.random.seed(seed); uniform(0, 1,
  shape)``, the generator of the ONNX reference implementation), made at compile time and stored
  rounded *down* to f32, so that ``U_f32 >= r`` equals ``U >= r`` for every f32 ratio ``r``: a
  seeded dropout is the same mask on every run of the compiled program. Without a ``seed``
  (a fresh mask per run needs a run-time generator the M100 does not have) it is refused in one
  line, unless ``training_mode`` is a constant false.

Other element types are left to torch-mlir (an f64 loss is refused later by the scheduler, never
computed in f32).

The sum/mean reductions add in another order than the ONNX reference's numpy sum (f32, within the
node tests' tolerance); every other step is exact.
"""

from __future__ import annotations

import numpy as np


class _Builder:
    def __init__(self, node, names, helper, numpy_helper):
        self.nodes, self.inits = [], []
        self.base = node.name or node.output[0]
        self.names, self.h, self.nh = names, helper, numpy_helper

    def const(self, hint, value, dtype):
        n = self.names(f"loss_{hint}")
        self.inits.append(self.nh.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def op(self, kind, inputs, out=None, **attrs):
        o = out or self.names(f"loss_{kind.lower()}")
        self.nodes.append(self.h.make_node(kind, inputs, [o],
                                           name=f"{self.base}/m100_{kind}_{len(self.nodes)}", **attrs))
        return o


def _nll(b, logp, target, weight, shape, tdtype, attrs, out):
    """Append the NLL of ``logp`` (f32 ``shape`` [N, C, d...]) into ``out``."""
    from onnx import TensorProto

    reduction = attrs.get("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    r, c = len(shape), shape[1]
    tnp = np.int32 if tdtype == TensorProto.INT32 else np.int64
    classes = b.const("classes", np.arange(c).reshape([1, c] + [1] * (r - 2)), tnp)
    tu = b.op("Unsqueeze", [target, b.const("axis1", [1], np.int64)])
    onehot = b.op("Equal", [tu, classes])
    zero = b.const("zero", 0.0, np.float32)
    axis1 = b.const("axis1", [1], np.int64)
    picked = b.op("ReduceSum", [b.op("Where", [onehot, logp, zero]), axis1], keepdims=0)
    neg = b.op("Neg", [picked])
    w = None
    if weight:
        wb = b.op("Reshape", [weight, b.const("wshape", [1, c] + [1] * (r - 2), np.int64)])
        w = b.op("ReduceSum", [b.op("Where", [onehot, wb, zero]), axis1], keepdims=0)
        neg = b.op("Mul", [w, neg])
    valid = None
    if "ignore_index" in attrs:
        ii = b.const("ignore_index", int(attrs["ignore_index"]), tnp)
        valid = b.op("Not", [b.op("Equal", [target, ii])])
    loss_out = out if reduction == "none" else None
    loss = b.op("Where", [valid, neg, zero], loss_out) if valid else (
        b.op("Identity", [neg], loss_out) if loss_out else neg)
    if reduction == "none":
        return
    total = b.op("ReduceSum", [loss], keepdims=0)  # all axes (no axes input)
    if reduction == "sum":
        b.op("Identity", [total], out)
        return
    if reduction != "mean":
        from m100.frontend.onnx_import import FrontendError
        raise FrontendError(f"{b.base}: reduction '{reduction}' is not an ONNX loss reduction")
    if w is None and valid is None:
        count = b.const("count", float(np.prod([shape[0]] + list(shape[2:]))), np.float32)
    else:
        applied = w if w is not None else b.op("Cast", [valid], to=TensorProto.FLOAT)
        if valid is not None and w is not None:
            applied = b.op("Where", [valid, w, zero])
        count = b.op("ReduceSum", [applied], keepdims=0)
    b.op("Div", [total, count], out)


def rewrite_loss(node, shapes, types, names, helper, numpy_helper):
    """(nodes, initializers) computing ``node`` (a NegativeLogLikelihoodLoss or
    SoftmaxCrossEntropyLoss), or None to leave it to torch-mlir (non-float32, unknown shapes)."""
    from onnx import TensorProto

    ins = list(node.input) + [""] * (3 - len(node.input))
    x, target, weight = ins[:3]
    shape = shapes.get(x)
    if types.get(x) != TensorProto.FLOAT or shape is None or len(shape) < 2 or \
            types.get(target) not in (TensorProto.INT32, TensorProto.INT64) or \
            (weight and types.get(weight) != TensorProto.FLOAT):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    b = _Builder(node, names, helper, numpy_helper)
    reduction = attrs.get("reduction", b"mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    want_logp = node.op_type == "SoftmaxCrossEntropyLoss" and len(node.output) > 1 and \
        node.output[1]
    out, logp = node.output[0], x
    if len(shape) > 3:  # [N, C, d1, d2, ...] -> [N, C, d1*d2*...] (the DMA walks stay 3-D)
        n, c, d = shape[0], shape[1], int(np.prod(shape[2:]))
        logp = b.op("Reshape", [x, b.const("shape3", [n, c, d], np.int64)])
        target = b.op("Reshape", [target, b.const("shape2", [n, d], np.int64)])
        if reduction == "none":
            out = b.names("loss_flat")
        full_shape, shape = shape, [n, c, d]
    if node.op_type == "SoftmaxCrossEntropyLoss":
        direct = want_logp and logp == x
        logp = b.op("LogSoftmax", [logp], node.output[1] if direct else None, axis=1)
        if want_logp and not direct:
            b.op("Reshape", [logp, b.const("shape_lp", full_shape, np.int64)], node.output[1])
    _nll(b, logp, target, weight, shape, types.get(target), attrs, out)
    if out != node.output[0]:
        b.op("Reshape", [out, b.const("shape_out", [full_shape[0]] + list(full_shape[2:]),
                                      np.int64)], node.output[0])
    return b.nodes, b.inits


def _uniform_floor_f32(seed: int, shape) -> np.ndarray:
    """numpy's legacy uniform draw for ``seed`` rounded down to f32 (``u32 <= u`` for every
    element), so that ``u32 >= r`` iff ``u >= r`` for any f32 ``r``."""
    u = np.random.RandomState(seed).uniform(0, 1.0, shape)
    u32 = u.astype(np.float32)
    up = u32.astype(np.float64) > u
    u32[up] = np.nextafter(u32[up], np.float32(-np.inf))
    return u32


def rewrite_dropout(node, graph, shapes, types, names, helper, numpy_helper):
    """(nodes, initializers) computing a Dropout that has a ``training_mode`` input, or None (no
    such input: inference, torch-mlir's identity); FrontendError when it needs a run-time RNG."""
    from onnx import TensorProto
    from onnx import numpy_helper as nh

    from m100.frontend.onnx_import import FrontendError

    ins = list(node.input) + [""] * (3 - len(node.input))
    x, ratio, mode = ins[:3]
    if not mode:
        return None
    where = f"Dropout '{node.name or node.output[0]}'"
    shape = shapes.get(x)
    if types.get(x) != TensorProto.FLOAT or shape is None:
        raise FrontendError(f"{where}: training_mode is supported for float32 inputs of static "
                            "shape only")
    b = _Builder(node, names, helper, numpy_helper)
    outs = list(node.output) + [""] * (2 - len(node.output))
    inits = {i.name: i for i in graph.initializer}
    if mode in inits and not nh.to_array(inits[mode]).any():  # constant false: the identity
        b.op("Identity", [x], outs[0])
        if outs[1]:
            b.op("Identity", [b.const("mask", np.ones(shape, bool), bool)], outs[1])
        return b.nodes, b.inits
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if "seed" not in attrs:
        raise FrontendError(f"{where}: training_mode without a seed attribute needs a random "
                            "generator at run time (not supported)")
    r = ratio or b.const("ratio", 0.5, np.float32)
    u = b.const("uniform", _uniform_floor_f32(int(attrs["seed"]), shape), np.float32)
    keep = b.op("Or", [b.op("Not", [mode]), b.op("GreaterOrEqual", [u, r])], outs[1] or None)
    one = b.const("one", 1.0, np.float32)
    scale = b.op("Where", [mode, b.op("Div", [one, b.op("Sub", [one, r])]), one])
    b.op("Where", [keep, b.op("Mul", [x, scale]), b.const("zero", 0.0, np.float32)], outs[0])
    return b.nodes, b.inits
