"""Stateful sequence ops of opset 27 (issue 12) as ops m100 runs, before torch-mlir.

- ``CausalConvWithState(input [B, C, L], weight [C, 1, k], bias?, past_state? [B, C, k-1])``,
  per the ONNX definition: ``padded = Concat(past_state or zeros, input)`` along the length,
  a depthwise ``Conv`` (group C, no padding: the 1-D conv is lifted to 2-D and runs on the TCU
  as a grouped conv), ``x * Sigmoid(x)`` for ``activation`` silu / swish, and
  ``present_state = padded[:, :, L:]`` (the last k - 1 positions; a DMA slice). ``k == 1`` (an
  empty state) is left to torch-mlir (refused).
- ``LinearAttention`` (float32, static shapes, T <= :data:`MAX_STEPS`): the recurrence of the
  ONNX definition unrolled over the T tokens. Per token t, with the heads unpacked to
  ``[B, H, T, D]`` (Reshape + Transpose) and ``S`` the ``[B, H_kv, d_k, d_v]`` state
  (``past_state`` or zeros): gated rules ``S *= exp(g_t)`` (per head or per key row); delta rules
  ``v_t = beta_t * (v_t - k_t @ S)`` (a MatMul); ``S += k_t^T * v_t`` (an outer product as a
  broadcast Mul, exact); ``o_t = scale * q_t @ S`` with the query heads of one KV head as the
  rows of one MatMul (GQA / MQA: query head h reads KV head ``h // (H_q / H_kv)``). The outputs
  are concatenated over T and repacked to ``[B, T, H_q * d_v]``; ``present_state`` is the last S.
"""

from __future__ import annotations

import math

import numpy as np

MAX_STEPS = 64  # tokens unrolled for LinearAttention (prefill chunks beyond: left to torch-mlir)


def _causal_conv(node, shapes, types, names, helper, numpy_helper):
    ins = list(node.input) + [""] * (4 - len(node.input))
    x, w, b, past = ins[:4]
    xs, ws = shapes.get(x), shapes.get(w)
    if xs is None or ws is None or len(xs) != 3 or len(ws) != 3 or ws[1] != 1:
        return None
    bsz, ch, length = xs
    k = ws[2]
    if k < 2 or ws[0] != ch:
        return None
    a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    act = a.get("activation", b"none")
    act = act.decode() if isinstance(act, bytes) else str(act)
    if act not in ("none", "silu", "swish"):
        return None
    dt = helper.tensor_dtype_to_np_dtype(types.get(x, 1))
    base = node.name or node.output[0]
    nodes, inits = [], []

    def const(hint, v, t):
        nm = names(f"ccws_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(v, t), nm))
        return nm

    def mk(op, inputs, out=None, **kw):
        o = out or names(f"ccws_{op.lower()}")
        nodes.append(helper.make_node(op, inputs, [o], name=f"{base}/m100_{op}_{len(nodes)}", **kw))
        return o

    state = past or const("zeros", np.zeros((bsz, ch, k - 1)), dt)
    padded = mk("Concat", [state, x], axis=2)
    outs = list(node.output) + [""] * (2 - len(node.output))
    y, present = outs[0], outs[1]
    conv_in = [padded, w] + ([b] if b else [])
    if act == "none":
        mk("Conv", conv_in, y, group=ch, kernel_shape=[k])
    else:
        cv = mk("Conv", conv_in, group=ch, kernel_shape=[k])
        mk("Mul", [cv, mk("Sigmoid", [cv])], y)
    if present:
        mk("Slice", [padded, const("start", [length], np.int64),
                     const("end", [length + k - 1], np.int64), const("axis", [2], np.int64)],
           present)
    return nodes, inits


def _linear_attention(node, shapes, types, names, helper, numpy_helper):
    ins = list(node.input) + [""] * (6 - len(node.input))
    q, k, v, past, decay, beta = ins[:6]
    qs, ks, vs = shapes.get(q), shapes.get(k), shapes.get(v)
    if qs is None or ks is None or vs is None or any(types.get(x) != 1 for x in (q, k, v)):
        return None
    a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
    rule = a.get("update_rule", b"gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else str(rule)
    hq, hkv = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
    if rule not in ("linear", "gated", "delta", "gated_delta") or hq <= 0 or hkv <= 0 or \
            hq % hkv:
        return None
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != bool(decay) or delta != bool(beta):
        return None  # the definition requires / forbids them: left to torch-mlir (refused)
    bsz, t, _ = qs
    if t > MAX_STEPS or len(qs) != 3 or ks[:2] != qs[:2] or vs[:2] != qs[:2]:
        return None
    dk, dv, grp = qs[2] // hq, vs[2] // hkv, hq // hkv
    if ks[2] != hkv * dk:
        return None
    scale = float(a.get("scale", 0.0)) or 1.0 / math.sqrt(dk)
    base = node.name or node.output[0]
    nodes, inits = [], []

    def const(hint, val, dt=np.int64):
        nm = names(f"linatt_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(val, dt), nm))
        return nm

    def mk(op, inputs, out=None, **kw):
        o = out or names(f"linatt_{op.lower()}")
        nodes.append(helper.make_node(op, inputs, [o], name=f"{base}/m100_{op}_{len(nodes)}", **kw))
        return o

    def heads(x, h, d):  # [B, T, h*d] -> [B, h, T, d]
        return mk("Transpose", [mk("Reshape", [x, const("shape", [bsz, t, h, d])])],
                  perm=[0, 2, 1, 3])

    q4, k4, v4 = heads(q, hq, dk), heads(k, hkv, dk), heads(v, hkv, dv)
    if gating:
        ds = shapes.get(decay)
        if ds is None or ds[-1] not in (hkv, hkv * dk):
            return None
        g4 = mk("Exp", [heads(decay, hkv, ds[-1] // hkv)])  # [B, Hkv, T, 1 | dk]
    if delta:
        bs = shapes.get(beta)
        if bs is None or bs[-1] not in (hkv, 1):
            return None
        b4 = heads(beta, bs[-1], 1)  # [B, Hkv | 1, T, 1]
    state = past or const("zeros", np.zeros((bsz, hkv, dk, dv)), np.float32)
    outs = list(node.output) + [""] * (2 - len(node.output))
    axis2 = const("axis2", [2])

    def step(x, i):  # [.., T, ..] -> token i: [.., 1, ..]
        return mk("Slice", [x, const("s", [i]), const("e", [i + 1]), axis2])

    os_ = []
    for i in range(t):
        kt, vt = step(k4, i), step(v4, i)
        if gating:  # [B, Hkv, 1, 1|dk] -> rows of S: [B, Hkv, 1|dk, 1]
            state = mk("Mul", [state, mk("Transpose", [step(g4, i)], perm=[0, 1, 3, 2])])
        if delta:
            vt = mk("Mul", [step(b4, i), mk("Sub", [vt, mk("MatMul", [kt, state])])])
        upd = mk("Mul", [mk("Transpose", [kt], perm=[0, 1, 3, 2]), vt])
        state = mk("Add", [state, upd], outs[1] if i == t - 1 and outs[1] else None)
        qg = mk("Reshape", [step(q4, i), const("qg", [bsz, hkv, grp, dk])])
        ot = mk("Reshape", [mk("MatMul", [qg, state]), const("ot", [bsz, hq, 1, dv])])
        os_.append(mk("Mul", [ot, const("scale", scale, np.float32)]))
    o = mk("Concat", os_, axis=2) if t > 1 else os_[0]
    mk("Reshape", [mk("Transpose", [o], perm=[0, 2, 1, 3]), const("oshape", [bsz, t, hq * dv])],
       outs[0])
    return nodes, inits


def rewrite_recurrent(nodes, graph, names, types) -> tuple[list, list, int]:
    """(new node list, new initializers, count) of the rewrites above on ``nodes``."""
    if not any(nd.op_type in ("CausalConvWithState", "LinearAttention") for nd in nodes):
        return list(nodes), [], 0
    from onnx import helper, numpy_helper

    from m100.frontend.onnx_rewrite import _static_shapes, replace_nodes

    shapes = _static_shapes(graph)
    by_op = {"CausalConvWithState": _causal_conv, "LinearAttention": _linear_attention}
    return replace_nodes(nodes, lambda node: by_op[node.op_type](
        node, shapes, types, names, helper, numpy_helper) if node.op_type in by_op else None)
