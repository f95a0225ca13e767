"""``MatMulInteger`` with constant 8-bit weights -> the int8 TCU contraction (issue 11).

torch-mlir lowers ``MatMulInteger(a, B, za, zb)`` with zero points as ``(extsi(a) - za) @
(extsi(B) - zb)`` on i32 operands (an i64 accumulator), which no TCU path takes; without zero
points, ``a`` int8, it is ``extsi(a) @ extsi(B)`` and m100-graph makes it the i8 x i8 -> i32
contraction (the int8 TCU rate). Rewritten here, exactly, into that form:

    y = MatMulInteger(a', B') + (o - za) * colsum(B')

- ``B' = B - zb`` (constant; ``zb`` per tensor or per column) when every entry fits int8;
- ``a' = a`` for int8 ``a`` (``o = 0``), ``a' = a - 128`` as int8 for uint8 ``a`` (``o = 128``:
  ``Cast(a, int32) - 128`` then ``Cast`` to int8, values in [-128, 127]);
- the correction ``(o - za) * colsum(B')`` is a constant int32 vector (added as the contraction's
  bias) when ``za`` is a constant scalar, else computed from the run-time scalar ``za`` (what
  ``DynamicQuantizeLinear`` produces) with int32 ops.

Identity: ``(a - za) @ B' = (a' + o - za) @ B' = a' @ B' + (o - za) * 1^T B'``, all in integers.
When ``B - zb`` leaves int8 (uint8 weights, or int8 weights with a zero point), ``B' = B - ob``
(``ob`` = 128 for uint8 ``B``, else 0) and the weight zero point moves out too:
``- (rowsum(a') + K * (o - za)) * (zb - ob)`` per column, ``rowsum(a') = a' @ 1`` on the TCU.
Exactness: every partial sum is bounded statically by ``K * 128 * max|B'| + 255 *
max|colsum(B')| [+ 383 * K * max|zb - ob|] < 2**31`` (else the node is left to the f32 emulation
of onnx_rewrite_qruntime / torch-mlir). A batched ``a`` ``[..., M, K]`` (static shape) is
flattened to ``[prod(...) * M, K]`` (``Reshape``) and the result reshaped back: one contraction.
Not taken (left as before): non-constant or batched ``B``, a per-row ``za``, ``a`` of rank 1 or of
dynamic shape.
"""

from __future__ import annotations

import numpy as np

_U8, _S8, _I32 = 2, 3, 6
_I32_MAX = (1 << 31) - 1


def matmul_integer_i8(node, inits, types, shapes, names, helper, numpy_helper):
    """(nodes, initializers) replacing a ``MatMulInteger`` node, or None (not this form)."""
    if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx"):
        return None
    a, b, za, zb = (list(node.input) + ["", "", ""])[:4]
    ta, sa = types.get(a), shapes.get(a)
    if ta not in (_U8, _S8) or sa is None or len(sa) < 2 or b not in inits:
        return None
    if any(not isinstance(d, int) or d <= 0 for d in sa):
        return None  # a batched a needs static dims to be flattened to [M, K]
    if (zb and zb not in inits) or types.get(b) not in (_U8, _S8):
        return None
    w = np.asarray(inits[b]).astype(np.int64)
    if w.ndim != 2 or w.shape[0] != sa[-1]:
        return None
    k, n = w.shape
    zbv = np.asarray(inits[zb]).astype(np.int64) if zb else np.zeros((), np.int64)
    if zbv.size not in (1, n) or zbv.ndim > 1:
        return None
    wc = w - zbv.reshape(-1)[None, :]
    zc = None  # B - zb = wc - zc: the weight zero point moved out (when B - zb leaves int8)
    if wc.min() < -128 or wc.max() > 127:
        ob = 128 if types.get(b) == _U8 else 0
        wc = w - ob
        zc = np.broadcast_to(zbv.reshape(-1) - ob, (n,)).astype(np.int64)
    za_val = 0
    if za:
        if za in inits:
            zav = np.asarray(inits[za])
            if zav.size != 1:
                return None  # per-row zero point of a
            za_val = int(zav.reshape(()))
        else:
            zs = shapes.get(za)
            if zs is None or int(np.prod(zs)) != 1 or types.get(za) != ta:
                return None
            za_val = None  # run time
    off = 128 if ta == _U8 else 0
    colsum = wc.sum(axis=0)
    bound = k * 128 * int(np.abs(wc).max(initial=0)) + 255 * int(np.abs(colsum).max(initial=0))
    if zc is not None:  # + (rowsum(a') + K * c) * zc, |rowsum(a')| <= 128 K, |c| <= 255
        bound += (128 + 255) * k * int(np.abs(zc).max(initial=0))
    if bound > _I32_MAX:
        return None
    base = node.name or node.output[0]
    nodes, new_inits = [], []

    def const(v, dt) -> str:
        nm = names("qi8_c")
        new_inits.append(numpy_helper.from_array(np.asarray(v, dt), nm))
        return nm

    def op(ty, ins, out=None, **at) -> str:
        out = out or names("qi8")
        nodes.append(helper.make_node(ty, ins, [out], name=f"{base}/m100_{out}", **at))
        return out

    a8 = a
    if ta == _U8:  # a - 128 in int8 (extui, subi, trunci on the CVU's integer lane)
        a8 = op("Cast", [op("Sub", [op("Cast", [a], to=_I32), const(128, np.int32)])], to=_S8)
    y = node.output[0]
    if len(sa) > 2:  # batched a [..., M, K] @ B [K, N]: one [prod(...) * M, K] contraction
        a8 = op("Reshape", [a8, const([int(np.prod(sa[:-1])), k], np.int64)])
        y = names("qi8")
    last = y if zc is None else None
    if za_val is not None and not np.any((off - za_val) * colsum):
        acc = op("MatMulInteger", [a8, const(wc, np.int8)], last)
    else:
        acc = op("MatMulInteger", [a8, const(wc, np.int8)])
        if za_val is not None:
            acc = op("Add", [acc, const((off - za_val) * colsum, np.int32)], last)
        else:  # c = o - za at run time (a scalar: 0-d or [1], broadcast)
            d = op("Sub", [const(off, np.int32), op("Cast", [za], to=_I32)])
            acc = op("Add", [acc, op("Mul", [d, const(colsum, np.int32)])], last)
    if zc is not None:  # - (rowsum(a') + K * c) * zc; rowsum(a') by the TCU (a' @ 1)
        rs = op("MatMulInteger", [a8, const(np.ones((k, 1)), np.int8)])
        if za_val is None:
            t = op("Add", [rs, op("Mul", [d, const(k, np.int32)])])
        else:
            t = op("Add", [rs, const(k * (off - za_val), np.int32)])
        op("Sub", [acc, op("Mul", [t, const(zc.reshape(1, n), np.int32)])], y)
    if y != node.output[0]:
        op("Reshape", [y, const(list(sa[:-1]) + [n], np.int64)], node.output[0])
    return nodes, new_inits


def s8_runtime_contraction(node, types, shapes) -> bool:
    """``MatMulInteger(a, B)`` of int8 ``a`` [M, K] and a run-time int8 ``B`` [K, N] (a graph input,
    e.g. a weight compiled by shape: frontend/shape_only.py) without zero points: left to
    torch-mlir, whose ``extsi(a) @ extsi(B)`` m100-graph makes the i8 x i8 -> i32 TCU contraction --
    exact while no partial sum can leave int32 (``K * 128 * 128 < 2**31``). (Not the f32 emulation
    of onnx_rewrite_qruntime, which holds only while ``K * 128 * 128 < 2**24``: a W8A8 LLM's weights
    are run-time symbols and its projections must run at the int8 rate.)"""
    if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx"):
        return False
    a, b, za, zb = (list(node.input) + ["", "", ""])[:4]
    sa, sb = shapes.get(a), shapes.get(b)
    return (not za and not zb and types.get(a) == _S8 and types.get(b) == _S8
            and sa is not None and sb is not None and len(sa) == 2 and len(sb) == 2
            and sa[1] == sb[0] and sb[0] * 128 * 128 <= _I32_MAX)


def u8_qdq_to_s8(nodes, inits, new_inits, graph, numpy_helper) -> int:
    """A uint8 ``QuantizeLinear(x, s, z)`` whose value is read only by ``DequantizeLinear``s (with
    constant uint8 zero points ``z'``) -> int8 with zero points ``z - 128`` / ``z' - 128``: the
    int8 value is the uint8 one minus 128 (``clip(r + z, 0, 255) - 128 = clip(r + z - 128, -128,
    127)``) and every ``(q - z') * s'`` is unchanged. onnxruntime's ``quantize_static`` default
    (U8S8) then folds into i8 x i8 -> i32 contractions like S8S8 (fold-quantized-contractions
    takes int8 activations only) -- the inverse of onnxruntime's own QDQS8ToU8 rewrite. Graph
    outputs and inputs keep their type. Edits ``nodes`` in place; returns the number retyped."""
    outs = {o.name for o in graph.output}
    users: dict[str, list] = {}
    for nd in nodes:
        for i in nd.input:
            users.setdefault(i, []).append(nd)
    fresh = {t.name: t for t in new_inits}

    def const_u8(name):
        if not name:
            return None
        if name in fresh:
            v = numpy_helper.to_array(fresh[name])
        elif name in inits:
            v = np.asarray(inits[name])
        else:
            return None
        return v if v.dtype == np.uint8 else None

    def shifted(nd, v):
        nm = f"{nd.output[0]}_m100_s8zp"
        new_inits.append(numpy_helper.from_array((v.astype(np.int16) - 128).astype(np.int8), nm))
        return nm

    changed = set()
    for q in nodes:
        if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx") or len(q.input) < 3:
            continue
        y = q.output[0]
        zq = const_u8(q.input[2])
        us = users.get(y, [])
        if zq is None or y in outs or not us or any(
                a.name == "output_dtype" or a.name == "precision" for a in q.attribute):
            continue
        if not all(u.op_type == "DequantizeLinear" and u.domain in ("", "ai.onnx")
                   and list(u.input).index(y) == 0 and len(u.input) > 2
                   and const_u8(u.input[2]) is not None for u in us):
            continue
        for u in us:
            u.input[2] = shifted(u, const_u8(u.input[2]))
        q.input[2] = shifted(q, zq)
        changed.add(y)
    for vi in graph.value_info:
        if vi.name in changed:
            vi.type.tensor_type.elem_type = _S8
    return len(changed)


__all__ = ["matmul_integer_i8", "s8_runtime_contraction", "u8_qdq_to_s8"]
