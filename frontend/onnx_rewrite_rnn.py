"""``RNN`` / ``GRU`` / ``LSTM`` unrolled over their static sequence length, before torch-mlir.

torch-mlir lowers the recurrent ops to an ``scf.for`` time loop that no M100 unit runs (every case
with a sequence longer than 1 was refused as "unsupported op 'scf.for'", without the op's name),
and cannot lower the reverse and bidirectional forms at all; it drops LSTM's peephole weights.
This rewrite emits the ONNX definition step by step (per direction ``d``, ``H`` = hidden size,
gates in the ONNX order: GRU ``z, r, h``; LSTM ``i, o, f, c``; peepholes ``i, o, f``):

* the input projection of all time steps at once, one matmul ``X[S*B, I] @ W[d]^T`` plus
  ``Wb + Rb`` (GRU with ``linear_before_reset``: ``Rbh`` stays with ``H @ Rh^T``), so the TCU sees
  one large contraction; per step ``t`` its row block;
* per step: ``H @ R[d]^T`` (one matmul for all gates; GRU: ``z, r`` together, then
  ``(r * H) @ Rh^T`` or ``r * (H @ Rh^T + Rbh)``), the gates' activations, the state update
  (``RNN``: ``H = f(.)``; ``GRU``: ``H = (1 - z) * h~ + z * H``; ``LSTM``:
  ``C = f * C + i * c~``, ``H = o * h(C)``, ``i, f`` seeing ``P * C_prev`` and ``o`` ``P * C``);
* ``clip``: the gates' pre-activations clipped to ``[-clip, clip]`` (onnxruntime's reading);
* ``sequence_lens`` (unless a constant equal to the sequence length): a step ``t >= len[b]``
  keeps batch ``b``'s state and writes zeros to ``Y`` (``Where`` on ``t < len``), which for the
  reverse direction also starts each sequence at its own last element;
* outputs ``Y [S, D, B, H]``, ``Y_h`` / ``Y_c [D, B, H]`` (``layout`` 1: batch first).

Activations: the defaults and any of :data:`_ACTS` given by name (their ONNX op with its default
parameters); ``activation_alpha`` / ``activation_beta``, ``Affine`` / ``ScaledTanh``, LSTM
``input_forget`` and a non-static input shape are refused in one line naming the op and the node.
"""

from __future__ import annotations

import numpy as np

#: activation name (lower case) -> the ONNX op computing it with the op's default parameters
_ACTS = {a.lower(): a for a in ("Tanh", "Sigmoid", "Relu", "HardSigmoid", "LeakyRelu", "Elu",
                                "Softsign", "Softplus", "ThresholdedRelu")}
#: op -> (gates, default activations per direction)
_KIND = {"RNN": (1, ("Tanh",)), "GRU": (3, ("Sigmoid", "Tanh")),
         "LSTM": (4, ("Sigmoid", "Tanh", "Tanh"))}


def _refuse(node, what: str):
    from m100.frontend.onnx_import import FrontendError

    name = node.name or next((o for o in node.output if o), "")
    raise FrontendError(f"{node.op_type} '{name}': {what} is not supported")


def rewrite_rnn(node, graph, shapes, names, helper, numpy_helper):
    """(nodes, initializers) of the unrolled ``node`` (RNN / GRU / LSTM), or a
    :class:`~m100.frontend.onnx_import.FrontendError` for a form it does not handle."""
    op = node.op_type
    n_gates, default_acts = _KIND[op]
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    ins = list(node.input) + [""] * (8 - len(node.input))
    x_in, w_in, r_in, b_in, lens_in, h0_in = ins[:6]
    c0_in, p_in = (ins[6], ins[7]) if op == "LSTM" else ("", "")
    if op != "LSTM" and any(ins[6:]):
        _refuse(node, "an input beyond initial_h")
    hid = int(a.get("hidden_size", 0))
    direction = a.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    layout = int(a.get("layout", 0))
    if direction not in ("forward", "reverse", "bidirectional"):
        _refuse(node, f"direction '{direction}'")
    dirs = 2 if direction == "bidirectional" else 1
    if "activation_alpha" in a or "activation_beta" in a:
        _refuse(node, "activation_alpha / activation_beta")
    if int(a.get("input_forget", 0)):
        _refuse(node, "input_forget = 1")
    acts = [s.decode() if isinstance(s, bytes) else str(s) for s in a.get("activations", [])]
    if not acts:
        acts = list(default_acts) * dirs
    if len(acts) != len(default_acts) * dirs:
        _refuse(node, f"{len(acts)} activations (expected {len(default_acts) * dirs})")
    for s in acts:
        if s.lower() not in _ACTS:
            _refuse(node, f"activation '{s}'")
    acts = [_ACTS[s.lower()] for s in acts]
    clip = a.get("clip")
    xs = shapes.get(x_in)
    if xs is None or len(xs) != 3 or hid <= 0:
        _refuse(node, "an input X without a static [seq, batch, input] shape")
    seq, batch, _ = (xs[1], xs[0], xs[2]) if layout else xs
    const_lens = next((numpy_helper.to_array(t) for t in graph.initializer if t.name == lens_in),
                      None) if lens_in else None
    masked = bool(lens_in) and not (const_lens is not None and np.all(const_lens == seq))

    base = node.name or next((o for o in node.output if o), op)
    nodes, inits = [], []

    def mk(op_type, inputs, **kw):
        out = names(f"{op.lower()}_{op_type.lower()}")
        nodes.append(helper.make_node(op_type, inputs, [out],
                                      name=f"{base}/m100_{op_type}_{len(nodes)}", **kw))
        return out

    def const(hint, value, dtype=np.int64):
        nm = names(f"{op.lower()}_{hint}")
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), nm))
        return nm

    def take(v, start, stop, axis):  # v[start:stop] along axis
        return mk("Slice", [v, const("s", [start]), const("e", [stop]), const("a", [axis])])

    def row(v, i):  # v[i] of a [n, ...] value
        return mk("Squeeze", [take(v, i, i + 1, 0), const("ax", [0])])

    def gate_act(v, act):
        if clip is not None:
            v = mk("Clip", [v, const("lo", -float(clip), np.float32),
                            const("hi", float(clip), np.float32)])
        return mk(act, [v])

    x = mk("Transpose", [x_in], perm=[1, 0, 2]) if layout else x_in
    x2 = mk("Reshape", [x, const("shape", [seq * batch, xs[2]])])
    if masked:  # valid[t] = t < len: [B, 1] bools
        lens = mk("Cast", [lens_in], to=7)
        valid = [mk("Unsqueeze", [mk("Less", [const("t", t), lens]), const("ax", [1])])
                 for t in range(seq)]
        zeros_bh = const("zeros", np.zeros((batch, hid)), np.float32)
    gh = n_gates * hid
    ys, hs, cs = [], [], []
    for d in range(dirs):
        wt = mk("Transpose", [row(w_in, d)], perm=[1, 0])  # [I, G*H]
        rt = mk("Transpose", [row(r_in, d)], perm=[1, 0])  # [H, G*H]
        xw = mk("MatMul", [x2, wt])
        rbh = None
        if b_in:
            bd = row(b_in, d)
            wb, rb = take(bd, 0, gh, 0), take(bd, gh, 2 * gh, 0)
            if op == "GRU" and int(a.get("linear_before_reset", 0)):
                rbh = take(rb, 2 * hid, 3 * hid, 0)
                rb = mk("Concat", [take(rb, 0, 2 * hid, 0),
                                   const("zero_bias", np.zeros(hid), np.float32)], axis=0)
            xw = mk("Add", [xw, mk("Add", [wb, rb])])
        xw = mk("Reshape", [xw, const("shape", [seq, batch, gh])])
        h = row(h0_in, d) if h0_in else const("h0", np.zeros((batch, hid)), np.float32)
        c = (row(c0_in, d) if c0_in else const("c0", np.zeros((batch, hid)), np.float32)) \
            if op == "LSTM" else None
        if p_in:
            pd = row(p_in, d)
            p_i, p_o, p_f = (take(pd, k * hid, (k + 1) * hid, 0) for k in range(3))
        f_act, *rest = acts[d * len(default_acts):(d + 1) * len(default_acts)]
        if op == "GRU":
            rt_zr, rt_h = take(rt, 0, 2 * hid, 1), take(rt, 2 * hid, 3 * hid, 1)
        y_t = [None] * seq
        steps = range(seq) if (direction == "forward" or (dirs == 2 and d == 0)) \
            else range(seq - 1, -1, -1)
        for t in steps:
            xt = row(xw, t)  # [B, G*H]
            if op == "RNN":
                h_new = gate_act(mk("Add", [xt, mk("MatMul", [h, rt])]), f_act)
            elif op == "GRU":
                zr = mk("Add", [take(xt, 0, 2 * hid, 1), mk("MatMul", [h, rt_zr])])
                z = gate_act(take(zr, 0, hid, 1), f_act)
                r = gate_act(take(zr, hid, 2 * hid, 1), f_act)
                xh = take(xt, 2 * hid, 3 * hid, 1)
                if rbh is not None:
                    hr = mk("Mul", [r, mk("Add", [mk("MatMul", [h, rt_h]), rbh])])
                else:
                    hr = mk("MatMul", [mk("Mul", [r, h]), rt_h])
                hh = gate_act(mk("Add", [xh, hr]), rest[0])
                one_z = mk("Sub", [const("one", 1.0, np.float32), z])
                h_new = mk("Add", [mk("Mul", [one_z, hh]), mk("Mul", [z, h])])
            else:  # LSTM
                g = mk("Add", [xt, mk("MatMul", [h, rt])])
                gi, go, gf, gc = (take(g, k * hid, (k + 1) * hid, 1) for k in range(4))
                if p_in:
                    gi = mk("Add", [gi, mk("Mul", [p_i, c])])
                    gf = mk("Add", [gf, mk("Mul", [p_f, c])])
                i_, f_ = gate_act(gi, f_act), gate_act(gf, f_act)
                c_new = mk("Add", [mk("Mul", [f_, c]), mk("Mul", [i_, gate_act(gc, rest[0])])])
                if p_in:
                    go = mk("Add", [go, mk("Mul", [p_o, c_new])])
                h_new = mk("Mul", [gate_act(go, f_act), mk(rest[1], [c_new])])
                c = mk("Where", [valid[t], c_new, c]) if masked else c_new
            if masked:
                y_t[t] = mk("Where", [valid[t], h_new, zeros_bh])
                h = mk("Where", [valid[t], h_new, h])
            else:
                y_t[t] = h = h_new
        ys.append(mk("Concat", [mk("Unsqueeze", [y, const("ax", [0, 1])]) for y in y_t], axis=0))
        hs.append(mk("Unsqueeze", [h, const("ax", [0])]))
        if op == "LSTM":
            cs.append(mk("Unsqueeze", [c, const("ax", [0])]))
    outs = list(node.output) + [""] * (3 - len(node.output))
    for i, (vals, axis) in enumerate(((ys, 1), (hs, 0), (cs, 0))):
        if not outs[i]:
            continue
        v = vals[0] if dirs == 1 else mk("Concat", vals, axis=axis)
        if layout:
            v = mk("Transpose", [v], perm=[2, 0, 1, 3] if i == 0 else [1, 0, 2])
        nodes.append(helper.make_node("Identity", [v], [outs[i]], name=f"{base}/m100_out_{i}"))
    return nodes, inits
