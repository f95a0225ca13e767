"""ONNX ``Attention`` (opset 23/24) -> primitive ONNX ops, before torch-mlir (which cannot lower it).

Follows the ONNX definition (``onnx.reference.ops.op_attention``) for float32 Q/K/V with static
shapes:

* 3-D inputs ``[B, S, heads * d]`` are split into heads (Reshape + Transpose) and merged back;
* ``past_key`` / ``past_value`` are concatenated in front of K / V (axis 2) and returned as
  ``present_key`` / ``present_value``;
* grouped-query attention (``q_num_heads`` a multiple of ``kv_num_heads``): each K/V head is
  repeated for its group (Unsqueeze + Expand + Reshape, ``np.repeat`` on the head axis);
* ``QK = (Q @ K^T) * scale`` (default ``1/sqrt(d)``), then ``softcap * tanh(QK / softcap)``;
* the bias: a float ``attn_mask`` (a boolean one through ``Where(mask, 0, -inf)``; padded with
  ``-inf`` up to the total key length), plus the causal / sliding-window masks, which are
  compile-time constants (``0`` / ``-inf``, aligned bottom-right by the past length);
* the softmax of ``QK + bias``; rows whose bias is ``-inf`` everywhere give 0 (as the definition
  says), with a guard that stays exact: the bias is clamped to ``-FLT_MAX`` and the result multiplied
  by ``sign(relu(rowmax(bias) + FLT_MAX))`` (0 exactly for the fully masked rows; a row whose
  bias is ``-FLT_MAX`` everywhere, finite, would also give 0 instead of a uniform row);
* ``qk_matmul_output_mode`` 0/1 (QK after softcap), 2 (+ bias), 3 (after softmax);
* ``Y = P @ V``.

Refused with one line (:class:`~m100.frontend.onnx_import.FrontendError`): non-float32 inputs,
``nonpad_kv_seqlen`` (a per-batch runtime length), dynamic shapes.
"""

from __future__ import annotations

import math

import numpy as np

FLT_MAX = float(np.finfo(np.float32).max)


def _static_shape(graph, name: str):
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.name == name and vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return [d.dim_value for d in dims]
            return None
    for init in graph.initializer:
        if init.name == name:
            return list(init.dims)
    return None


def rewrite_attention(node, graph, types, names, helper, numpy_helper):
    """(nodes, initializers) computing ``node`` (an Attention), or raise FrontendError."""
    from onnx import TensorProto

    from m100.frontend.onnx_import import FrontendError

    where = f"Attention '{node.name or node.output[0]}'"
    ins = list(node.input) + [""] * (7 - len(node.input))
    q, k, v, mask, past_k, past_v, nonpad = ins[:7]
    if nonpad:
        raise FrontendError(f"{where}: nonpad_kv_seqlen (a per-batch runtime length) is not "
                            "supported")
    for t in (q, k, v, past_k, past_v):
        if t and types.get(t) != TensorProto.FLOAT:
            raise FrontendError(f"{where}: only float32 inputs are supported")
    if mask and types.get(mask) not in (TensorProto.FLOAT, TensorProto.BOOL):
        raise FrontendError(f"{where}: attn_mask must be float32 or bool")
    shapes = {t: _static_shape(graph, t) for t in (q, k, v, mask, past_k, past_v) if t}
    if any(s is None for s in shapes.values()):
        raise FrontendError(f"{where}: dynamic shapes are not supported")
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    outs = list(node.output) + [""] * (4 - len(node.output))
    nodes, inits = [], []
    base = node.name or node.output[0]

    def const(hint, value, dtype=np.float32):
        n = names(f"attn_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def op(kind, inputs, out=None, **attrs):
        o = out or names(f"attn_{kind.lower()}")
        nodes.append(helper.make_node(kind, inputs, [o], name=f"{base}/m100_{kind}_{len(nodes)}",
                                      **attrs))
        return o

    sq, sk, sv = shapes[q], shapes[k], shapes[v]
    rank = len(sq)
    if rank == 3:
        qh, kvh = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
        if not qh or not kvh:
            raise FrontendError(f"{where}: 3-D inputs need q_num_heads and kv_num_heads")
        B = sq[0]

        def heads(t, s, h):
            r = op("Reshape", [t, const("shape", [B, s[1], h, s[2] // h], np.int64)])
            return op("Transpose", [r], perm=[0, 2, 1, 3])

        q4, k4, v4 = heads(q, sq, qh), heads(k, sk, kvh), heads(v, sv, kvh)
        dq, dv, S = sq[2] // qh, sv[2] // kvh, sq[1]
    elif rank == 4:
        q4, k4, v4 = q, k, v
        B, qh, S, dq = sq
        kvh, dv = sk[1], sv[3]
    else:
        raise FrontendError(f"{where}: Q must be 3-D or 4-D")
    past_len = 0
    if past_k:
        past_len = shapes[past_k][2]
        k4 = op("Concat", [past_k, k4], axis=2)
        v4 = op("Concat", [past_v, v4], axis=2)
    if outs[1]:
        op("Identity", [k4], outs[1])
    if outs[2]:
        op("Identity", [v4], outs[2])
    L = past_len + sk[-2 if rank == 4 else 1]
    if qh != kvh:
        if qh % kvh:
            raise FrontendError(f"{where}: q_num_heads {qh} is not a multiple of kv_num_heads {kvh}")
        g = qh // kvh

        def repeat(t, d):
            u = op("Unsqueeze", [t, const("axes", [2], np.int64)])
            e = op("Expand", [u, const("shape", [B, kvh, g, L, d], np.int64)])
            return op("Reshape", [e, const("shape", [B, qh, L, d], np.int64)])

        k4, v4 = repeat(k4, dq), repeat(v4, dv)
    scale = float(a.get("scale", 1.0 / math.sqrt(dq)))
    qk = op("MatMul", [q4, op("Transpose", [k4], perm=[0, 1, 3, 2])])
    qk = op("Mul", [qk, const("scale", scale)])
    softcap = float(a.get("softcap", 0.0))
    if softcap > 0:
        qk = op("Mul", [op("Tanh", [op("Div", [qk, const("softcap", softcap)])]),
                        const("softcap", softcap)])
    # the static part of the bias: causal and sliding-window masks (0 / -inf), [S, L]
    i_idx = np.arange(S).reshape(S, 1) + past_len
    j_idx = np.arange(L).reshape(1, L)
    allowed = np.ones((S, L), bool)
    if int(a.get("is_causal", 0)):
        allowed &= j_idx <= i_idx
    lw, rw = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    if lw >= 0:
        allowed &= (i_idx - j_idx) <= lw
    if rw >= 0:
        allowed &= (j_idx - i_idx) <= rw
    static = np.where(allowed, np.float32(0), np.float32(-np.inf)).astype(np.float32)
    bias, bias_shape = None, None
    if mask:
        ms = shapes[mask]
        m = mask
        if types.get(mask) == TensorProto.BOOL:
            m = op("Where", [mask, const("zero", 0.0), const("neginf", -np.inf)])
        if ms[-1] < L:
            m = op("Concat", [m, const("pad", np.full(ms[:-1] + [L - ms[-1]], -np.inf))], axis=-1)
        bias, bias_shape = m, ms[:-1] + [L]
    if not allowed.all():
        if bias is None:
            bias, bias_shape = static, [S, L]
        else:
            bias = op("Add", [bias, const("static_mask", static)])
            bias_shape = list(np.broadcast_shapes(tuple(bias_shape), (S, L)))
    scores = qk
    keep = None
    if bias is not None:
        if isinstance(bias, np.ndarray):  # constant: fully masked rows are known now
            dead = np.isneginf(bias).all(axis=-1, keepdims=True)
            safe = np.maximum(bias, np.float32(-FLT_MAX))
            scores = op("Add", [qk, const("bias", safe)])
            if dead.any():
                keep = const("keep", (~dead).astype(np.float32))
            bias = const("bias_raw", bias)
        else:
            rowmax = op("ReduceMax", [bias, const("axes", [-1], np.int64)], keepdims=1)
            keep = op("Sign", [op("Relu", [op("Add", [rowmax, const("fltmax", FLT_MAX)])])])
            safe = op("Max", [bias, const("negmax", -FLT_MAX)])
            scores = op("Add", [qk, safe])
    mode = int(a.get("qk_matmul_output_mode", 0))
    if outs[3] and mode == 2:
        op("Identity", [op("Add", [qk, bias]) if bias is not None else qk], outs[3])
    elif outs[3] and mode in (0, 1):
        op("Identity", [qk], outs[3])
    p = op("Softmax", [scores], axis=-1)
    if keep is not None:
        p = op("Mul", [p, keep])
    if outs[3] and mode == 3:
        op("Identity", [p], outs[3])
    y = op("MatMul", [p, v4])
    if rank == 3:
        t = op("Transpose", [y], perm=[0, 2, 1, 3])
        op("Reshape", [t, const("shape", [B, S, qh * dv], np.int64)], outs[0])
    else:
        op("Identity", [y], outs[0])
    return nodes, inits
