"""ONNX rewrites of quantized operators before torch-mlir (issue 11); run by ``onnx_rewrite``.

torch-mlir lowers ``QLinearConv`` wrongly for per-channel weights and for uint8 tensors (measured
against onnxruntime: up to 0.8 off on a small conv net -- a silently wrong result), does not lower
``QLinearAdd``/``QGemm``/``MatMulNBits`` (com.microsoft) at all, and cannot read INT4/UINT4
initializers. Rewritten here into forms it lowers correctly, each per the ONNX definition, keeping
every output name:

- ``QLinearConv(x, xs, xz, w, ws, wz, ys, yz[, B])`` -> ``DequantizeLinear`` of x and w (axis 0 for
  per-channel w), of B (int32, scale ``xs * ws``, zero point 0), ``Conv`` (same attributes),
  ``QuantizeLinear(ys, yz)``: the QDQ form onnxruntime itself writes, which raise-quant-casts and
  fold-quantized-contractions turn back into an int8 contraction with a requant epilogue.
- ``QLinearMatMul(a, as, az, b, bs, bz, ys, yz)`` -> ``DequantizeLinear`` x2 (b per column: axis
  -1 of a 2-D b), ``MatMul``, ``QuantizeLinear``.
- ``DequantizeLinear`` of a constant INT4/UINT4 tensor (opset 21, optionally blocked with
  ``block_size``) -> the dequantized float initializer, computed in float32 and rounded once to the
  scale's type (what the operator defines); the int4 packing is not kept yet.
- ``DequantizeLinear`` of uint8 per axis (torch-mlir's lowering is wrong) -> ``(Cast(x) - zp) *
  scale`` with the constant parameters reshaped along the axis.
- ``QLinearAdd`` / ``QGemm`` (com.microsoft, what ``quantize_static(QOperator)`` writes for Add and
  Gemm) -> ``DequantizeLinear``s, ``Add`` / ``Gemm`` (int32 bias of scale ``as * bs``),
  ``QuantizeLinear``.
- ``MaxPool`` on uint8 (torch-mlir compares the signless bytes as signed) -> ``Cast`` to float,
  ``MaxPool``, ``Cast`` back (exact: max commutes with the monotone exact casts).
- ``MatMulNBits`` (com.microsoft, bits=4, constant weights) -> ``MatMul`` with the dequantized
  ``[K, N]`` weights (``(q - zp) * scale`` per block of ``block_size`` along K; zero point 8 when
  absent) ``+ bias``.

Anything else quantized (non-constant int4 tensors, ``MatMulNBits`` with ``g_idx`` or bits != 4)
raises one clear :class:`~m100.frontend.onnx_import.FrontendError`-style ``ValueError`` message.
"""

from __future__ import annotations

import numpy as np


class QuantRewriteError(ValueError):
    """A quantized node this rewrite cannot express exactly (the message names the node)."""


def _attrs(node, helper) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _where(node) -> str:
    return f"'{node.name or node.output[0]}'"


def _qlinear_conv(node, inits, names, helper, numpy_helper):
    x, xs, xz, w, ws, wz, ys, yz = node.input[:8]
    b = node.input[8] if len(node.input) > 8 and node.input[8] else None
    base = node.name or node.output[0]
    xf, wf, yf = names("qlc_x"), names("qlc_w"), names("qlc_y")
    ws_arr = inits.get(ws)
    w_axis = {} if ws_arr is None or ws_arr.ndim == 0 or ws_arr.size == 1 else {"axis": 0}
    nodes = [helper.make_node("DequantizeLinear", [x, xs, xz], [xf], name=f"{base}/m100_dq_x"),
             helper.make_node("DequantizeLinear", [w, ws, wz], [wf], name=f"{base}/m100_dq_w",
                              **w_axis)]
    new_inits = []
    conv_in = [xf, wf]
    if b is not None:
        if xs not in inits or ws not in inits:
            raise QuantRewriteError(f"QLinearConv {_where(node)}: a bias needs constant x/w scales")
        bscale = (inits[xs].astype(np.float32) * inits[ws].astype(np.float32)).astype(np.float32)
        bs_name, bz_name, bf = names("qlc_bs"), names("qlc_bz"), names("qlc_b")
        new_inits += [numpy_helper.from_array(bscale.reshape(-1) if bscale.size > 1 else
                                              bscale.reshape(()), bs_name),
                      numpy_helper.from_array(np.zeros(bscale.shape if bscale.size > 1 else (),
                                                       np.int32).reshape(-1 if bscale.size > 1 else ()),
                                              bz_name)]
        nodes.append(helper.make_node("DequantizeLinear", [b, bs_name, bz_name], [bf],
                                      name=f"{base}/m100_dq_b", **({"axis": 0} if bscale.size > 1 else {})))
        conv_in.append(bf)
    conv_attrs = _attrs(node, helper)
    nodes.append(helper.make_node("Conv", conv_in, [yf], name=f"{base}/m100_conv", **conv_attrs))
    nodes.append(helper.make_node("QuantizeLinear", [yf, ys, yz], [node.output[0]],
                                  name=f"{base}/m100_q_y"))
    return nodes, new_inits


def _qlinear_matmul(node, inits, ranks, names, helper):
    a, as_, az, b, bs, bz, ys, yz = node.input[:8]
    base = node.name or node.output[0]
    af, bf, yf = names("qlm_a"), names("qlm_b"), names("qlm_y")
    bs_arr = inits.get(bs)
    b_axis = {}
    if bs_arr is not None and bs_arr.ndim >= 1 and bs_arr.size > 1:
        if ranks.get(b) != 2 or bs_arr.ndim != 1:
            raise QuantRewriteError(f"QLinearMatMul {_where(node)}: per-column b scales need a 2-D b")
        b_axis = {"axis": 1}
    return [helper.make_node("DequantizeLinear", [a, as_, az], [af], name=f"{base}/m100_dq_a"),
            helper.make_node("DequantizeLinear", [b, bs, bz], [bf], name=f"{base}/m100_dq_b",
                             **b_axis),
            helper.make_node("MatMul", [af, bf], [yf], name=f"{base}/m100_matmul"),
            helper.make_node("QuantizeLinear", [yf, ys, yz], [node.output[0]],
                             name=f"{base}/m100_q_y")], []


def _qlinear_add(node, names, helper):
    """com.microsoft QLinearAdd(A, As, Az, B, Bs, Bz, Cs, Cz) -> DQ, DQ, Add, Q."""
    a, as_, az, b, bs, bz, cs, cz = (list(node.input) + [""] * 8)[:8]
    base = node.name or node.output[0]
    af, bf, yf = names("qla_a"), names("qla_b"), names("qla_y")
    return [helper.make_node("DequantizeLinear", [a, as_, az] if az else [a, as_], [af],
                             name=f"{base}/m100_dq_a"),
            helper.make_node("DequantizeLinear", [b, bs, bz] if bz else [b, bs], [bf],
                             name=f"{base}/m100_dq_b"),
            helper.make_node("Add", [af, bf], [yf], name=f"{base}/m100_add"),
            helper.make_node("QuantizeLinear", [yf, cs, cz] if cz else [yf, cs], [node.output[0]],
                             name=f"{base}/m100_q_y")], []


def _qgemm(node, inits, names, helper, numpy_helper):
    """com.microsoft QGemm(A, as, az, B, bs, bz, C, ys, yz) -> DQ A, DQ B (per output channel),
    DQ C (int32, scale as * bs), Gemm (alpha, transA, transB), Q (float output without ys)."""
    ins = list(node.input) + [""] * (9 - len(node.input))
    a, as_, az, b, bs, bz, c, ys, yz = ins[:9]
    at = _attrs(node, helper)
    if at.get("beta", 1.0) != 1.0:
        raise QuantRewriteError(f"QGemm {_where(node)}: beta != 1 is not supported")
    base = node.name or node.output[0]
    af, bf, yf = names("qg_a"), names("qg_b"), names("qg_y")
    bs_arr = inits.get(bs)
    per_ch = bs_arr is not None and bs_arr.size > 1
    b_axis = {"axis": 0 if at.get("transB", 0) else 1} if per_ch else {}
    nodes = [helper.make_node("DequantizeLinear", [a, as_, az], [af], name=f"{base}/m100_dq_a"),
             helper.make_node("DequantizeLinear", [b, bs, bz], [bf], name=f"{base}/m100_dq_b",
                              **b_axis)]
    new_inits = []
    gemm_in = [af, bf]
    if c:
        if as_ not in inits or bs not in inits:
            raise QuantRewriteError(f"QGemm {_where(node)}: a bias needs constant a/b scales")
        sc = (inits[as_].astype(np.float32) * inits[bs].astype(np.float32)).astype(np.float32)
        sn, zn, cf = names("qg_cs"), names("qg_cz"), names("qg_c")
        shape = (-1,) if sc.size > 1 else ()
        new_inits += [numpy_helper.from_array(sc.reshape(shape), sn),
                      numpy_helper.from_array(np.zeros(sc.size if sc.size > 1 else (), np.int32), zn)]
        nodes.append(helper.make_node("DequantizeLinear", [c, sn, zn], [cf], name=f"{base}/m100_dq_c",
                                      **({"axis": 0} if sc.size > 1 else {})))
        gemm_in.append(cf)
    gattrs = {k: v for k, v in at.items() if k in ("alpha", "transA", "transB")}
    if ys:
        nodes.append(helper.make_node("Gemm", gemm_in, [yf], name=f"{base}/m100_gemm", **gattrs))
        nodes.append(helper.make_node("QuantizeLinear", [yf, ys, yz] if yz else [yf, ys],
                                      [node.output[0]], name=f"{base}/m100_q_y"))
    else:
        nodes.append(helper.make_node("Gemm", gemm_in, [node.output[0]], name=f"{base}/m100_gemm",
                                      **gattrs))
    return nodes, new_inits


def _maxpool_u8(node, names, helper):
    """MaxPool on uint8: torch-mlir compares signless i8 as signed (200 < 100). MaxPool commutes
    with the exact uint8 -> float -> uint8 casts, so Cast, MaxPool in float, Cast back."""
    from onnx import TensorProto

    base = node.name or node.output[0]
    xf, yf = names("mp_x"), names("mp_y")
    return [helper.make_node("Cast", [node.input[0]], [xf], to=TensorProto.FLOAT,
                             name=f"{base}/m100_cast_in"),
            helper.make_node("MaxPool", [xf], [yf], name=f"{base}/m100_maxpool",
                             **_attrs(node, helper)),
            helper.make_node("Cast", [yf], [node.output[0]], to=TensorProto.UINT8,
                             name=f"{base}/m100_cast_out")], []


def _dq_u8_per_axis(node, inits, ranks, names, helper, numpy_helper):
    """DequantizeLinear of uint8 with per-axis (1-D) scale/zero point: torch-mlir's lowering is
    wrong (ONNX node test test_dequantizelinear_axis: 1525 instead of 24). Rewritten per the
    definition: (Cast(x, f32) - Cast(zp, f32)) * scale with the parameters reshaped to broadcast
    along ``axis`` (exact in f32: |x - zp| < 2**8)."""
    from onnx import TensorProto

    x, sc = node.input[0], node.input[1]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    rank = ranks.get(x)
    if rank is None or ranks.get(sc) != 1:
        return None
    if sc in inits and (inits[sc].dtype != np.float32 or inits[sc].size == 1):
        return None
    axis = int(_attrs(node, helper).get("axis", 1)) % rank
    base = node.name or node.output[0]
    shape_name = names("dqu8_shape")
    shape = [1] * rank
    shape[axis] = -1
    new_inits = [numpy_helper.from_array(np.array(shape, np.int64), shape_name)]
    xf, centered, s_r = names("dqu8_x"), names("dqu8_c"), names("dqu8_s")
    nodes = [helper.make_node("Cast", [x], [xf], to=TensorProto.FLOAT, name=f"{base}/m100_cast"),
             helper.make_node("Reshape", [sc, shape_name], [s_r], name=f"{base}/m100_scale_r")]
    if zp is not None:
        zf, z_r = names("dqu8_zf"), names("dqu8_z")
        nodes += [helper.make_node("Cast", [zp], [zf], to=TensorProto.FLOAT, name=f"{base}/m100_zcast"),
                  helper.make_node("Reshape", [zf, shape_name], [z_r], name=f"{base}/m100_zp_r"),
                  helper.make_node("Sub", [xf, z_r], [centered], name=f"{base}/m100_sub_zp")]
    else:
        centered = xf
    nodes.append(helper.make_node("Mul", [centered, s_r], [node.output[0]], name=f"{base}/m100_scale"))
    return nodes, new_inits


def _expand_blocked(p: np.ndarray, shape, axis: int, block: int) -> np.ndarray:
    """A per-tensor / per-axis / blocked DequantizeLinear parameter broadcast to ``shape``."""
    rank = len(shape)
    axis = axis % rank
    if p.ndim == 0 or p.size == 1:
        return np.broadcast_to(p.reshape(()), shape)
    if p.ndim == 1 and not block:
        s = [1] * rank
        s[axis] = p.size
        return np.broadcast_to(p.reshape(s), shape)
    if p.ndim == rank and block:
        return np.repeat(p, block, axis=axis)[tuple(slice(0, d) for d in shape)]
    raise QuantRewriteError(f"DequantizeLinear: parameter of shape {p.shape} does not fit {shape}")


def _dq_int4_constant(node, inits, helper, numpy_helper):
    x, s = node.input[0], node.input[1]
    z = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if x not in inits or s not in inits or (z is not None and z not in inits):
        raise QuantRewriteError(f"DequantizeLinear {_where(node)}: int4 tensors must be constant "
                                "initializers (with constant scale and zero point)")
    at = _attrs(node, helper)
    q = inits[x].astype(np.int64)
    scale = inits[s]
    zp = inits[z].astype(np.int64) if z is not None else np.zeros((), np.int64)
    axis, block = int(at.get("axis", 1)), int(at.get("block_size", 0))
    se = _expand_blocked(scale, q.shape, axis, block).astype(np.float32)
    ze = _expand_blocked(zp, q.shape, axis, block)
    real = ((q - ze).astype(np.float32) * se).astype(scale.dtype)
    return [], [numpy_helper.from_array(real, node.output[0])]


def _matmul_nbits(node, inits, names, helper, numpy_helper):
    at = _attrs(node, helper)
    k, n, bits, block = int(at["K"]), int(at["N"]), int(at.get("bits", 4)), int(at["block_size"])
    ins = list(node.input) + [""] * (6 - len(node.input))
    a, bq, sc, zp, g_idx, bias = ins[:6]
    if bits != 4 or g_idx:
        raise QuantRewriteError(f"MatMulNBits {_where(node)}: only bits=4 without g_idx is supported")
    if bq not in inits or sc not in inits or (zp and zp not in inits):
        raise QuantRewriteError(f"MatMulNBits {_where(node)}: weights, scales and zero points must "
                                "be constant initializers")
    nb = (k + block - 1) // block
    packed = inits[bq].astype(np.uint8).reshape(n, nb, block // 2)
    q = np.empty((n, nb, block), np.int64)
    q[..., 0::2] = packed & 0xF
    q[..., 1::2] = packed >> 4
    scales = inits[sc].reshape(n, nb)
    if zp:
        z = inits[zp]
        if z.dtype != np.uint8:
            raise QuantRewriteError(f"MatMulNBits {_where(node)}: float zero points are not supported")
        zb = z.reshape(n, -1)
        zz = np.empty((n, zb.shape[1] * 2), np.int64)
        zz[:, 0::2] = zb & 0xF
        zz[:, 1::2] = zb >> 4
        zz = zz[:, :nb]
    else:
        zz = np.full((n, nb), 8, np.int64)
    real = ((q - zz[..., None]).astype(np.float32) * scales[..., None].astype(np.float32))
    w = real.reshape(n, nb * block)[:, :k].T.astype(scales.dtype)  # [K, N]
    wname = names("nbits_w")
    base = node.name or node.output[0]
    if bias:
        mid = names("nbits_y")
        nodes = [helper.make_node("MatMul", [a, wname], [mid], name=f"{base}/m100_matmul"),
                 helper.make_node("Add", [mid, bias], [node.output[0]], name=f"{base}/m100_bias")]
    else:
        nodes = [helper.make_node("MatMul", [a, wname], [node.output[0]], name=f"{base}/m100_matmul")]
    return nodes, [numpy_helper.from_array(np.ascontiguousarray(w), wname)]


def _uint16_quantize(node, types, helper) -> str | None:
    """The output of a QuantizeLinear to uint16 (torch-mlir crashes on it; rewritten by
    onnx_rewrite_qruntime.quantize into the int16 of the same bits), else None."""
    if node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx"):
        return None
    zp = node.input[2] if len(node.input) > 2 else ""
    od = next((a.i for a in node.attribute if a.name == "output_dtype"), 0)
    return node.output[0] if (types.get(zp) if zp else od) == 4 else None


class _LazyInits(dict):
    """``{initializer name: numpy array}``, each decoded on first access."""

    def __init__(self, graph, numpy_helper):
        super().__init__()
        self._protos = {i.name: i for i in graph.initializer}
        self._nh = numpy_helper

    def __contains__(self, name) -> bool:
        return name in self._protos

    def __iter__(self):
        return iter(self._protos)

    def __getitem__(self, name):
        if not dict.__contains__(self, name):
            dict.__setitem__(self, name, self._nh.to_array(self._protos[name]))
        return dict.__getitem__(self, name)

    def get(self, name, default=None):
        return self[name] if name in self._protos else default


def rewrite_quantized(graph, names, ranks, types) -> tuple[list, list, int, set[str]]:
    """(nodes, new initializers, number rewritten, initializer names no longer needed)."""
    from onnx import TensorProto, helper, numpy_helper

    from m100.frontend import onnx_rewrite_narrow_int as narrow_int
    from m100.frontend.onnx_rewrite import _static_shapes
    from m100.frontend.onnx_rewrite_qint8 import (matmul_integer_i8, s8_runtime_contraction,
                                                  u8_qdq_to_s8)
    from m100.frontend.onnx_rewrite_qruntime import refusal, rewrite_runtime_quant

    inits = _LazyInits(graph, numpy_helper)  # decodes only the initializers a rewrite reads
    int4 = {TensorProto.INT4, TensorProto.UINT4}
    consts = set(inits) | {o for nd in graph.node if nd.op_type == "Constant" for o in nd.output}
    shapes = _static_shapes(graph)
    out_nodes, new_inits = [], []
    likes = narrow_int.castlike_to_cast(graph, types, helper)
    count = len(likes) + narrow_int.f64_boundary(graph, types, helper)
    # int4/uint4/int2/uint2 values held in int8/uint8 (onnx_rewrite_narrow_int.py)
    narrow = narrow_int.narrow_values(graph, types)
    graph_outs = {o.name for o in graph.output}
    read = {i for nd in graph.node for i in nd.input}
    u16_outs: set[str] = set()  # uint16 QuantizeLinear results, held as int16 bits
    for node in graph.node:
        # constant 8-bit weights: the int8 TCU contraction (onnx_rewrite_qint8.py); else run-time
        # scales / zero points / weights: exact plain ops (onnx_rewrite_qruntime.py)
        u16 = _uint16_quantize(node, types, helper)
        if u16 and (u16 not in graph_outs or u16 in read):
            raise QuantRewriteError(f"QuantizeLinear {_where(node)}: a uint16 result is supported "
                                    "only as a graph output read by no other op")
        if s8_runtime_contraction(node, types, shapes) and node.input[1] not in consts:
            repl = None  # int8 x run-time int8 weights: the i8 TCU contraction as it is
        else:
            repl = matmul_integer_i8(node, inits, types, shapes, names, helper, numpy_helper) or \
                rewrite_runtime_quant(node, types, shapes, consts, names, helper, numpy_helper)
        why = refusal(node, types, shapes, consts, helper) if repl is None else None
        if why:  # would be refused later without the op's name (onnx_rewrite_qruntime.refusal)
            raise QuantRewriteError(f"{node.op_type} {_where(node)}: {why}")
        if u16 and repl is None:
            raise QuantRewriteError(f"QuantizeLinear {_where(node)}: this uint16 form (a "
                                    "parameter of unknown shape, precision) is not supported")
        if u16:
            u16_outs.add(u16)
        if repl is None and narrow and node.op_type == "Cast":
            repl = narrow_int.cast_to_narrow(node, types, names, helper, numpy_helper) or \
                narrow_int.cast_from_f8(node, types, names, helper, numpy_helper) or \
                narrow_int.cast_to_float8(node, types, names, helper, numpy_helper) or \
                narrow_int.cast_to_e8m0(node, types, names, helper, numpy_helper)
        if repl is None and node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
            repl = narrow_int.cast_float_to_u8(node, types, names, helper, numpy_helper)
        if repl is not None:
            pass
        elif node.domain in ("", "ai.onnx"):
            if node.op_type == "QLinearConv":
                repl = _qlinear_conv(node, inits, names, helper, numpy_helper)
            elif node.op_type == "QLinearMatMul":
                repl = _qlinear_matmul(node, inits, ranks, names, helper)
            elif node.op_type == "DequantizeLinear" and types.get(node.input[0]) in int4:
                repl = _dq_int4_constant(node, inits, helper, numpy_helper)
            elif node.op_type == "DequantizeLinear" and types.get(node.input[0]) == TensorProto.UINT8:
                repl = _dq_u8_per_axis(node, inits, ranks, names, helper, numpy_helper)
            elif node.op_type == "MaxPool" and types.get(node.input[0]) == TensorProto.UINT8 \
                    and len(node.output) == 1:
                repl = _maxpool_u8(node, names, helper)
        elif node.domain == "com.microsoft" and node.op_type == "MatMulNBits":
            repl = _matmul_nbits(node, inits, names, helper, numpy_helper)
        elif node.domain == "com.microsoft" and node.op_type == "QLinearAdd":
            repl = _qlinear_add(node, names, helper)
        elif node.domain == "com.microsoft" and node.op_type == "QGemm":
            repl = _qgemm(node, inits, names, helper, numpy_helper)
        if repl is None and narrow and node.op_type in ("QuantizeLinear", "DequantizeLinear") \
                and narrow_int.unrewritten_narrow_quant(node, types, narrow, consts):
            raise QuantRewriteError(f"{node.op_type} {_where(node)}: this form with an "
                                    "int4/int2/float8 tensor is not supported")
        if repl is None:
            out_nodes.append(node)
        else:
            out_nodes.extend(repl[0])
            new_inits.extend(repl[1])
            count += 1
    if narrow:
        narrow_int.retype(graph, out_nodes, narrow)
        count += 1
    for vi in list(graph.output) + list(graph.value_info):
        if vi.name in u16_outs:  # the backend views the int16 result as uint16 (same bits)
            vi.type.tensor_type.elem_type = TensorProto.INT16
    count += u8_qdq_to_s8(out_nodes, inits, new_inits, graph, numpy_helper)
    used = {i for nd in out_nodes for i in nd.input} | {o.name for o in graph.output}
    before = {i for nd in graph.node for i in nd.input} | likes
    dead = {name for name in inits if name in before and name not in used}
    return out_nodes, new_inits, count, dead


__all__ = ["QuantRewriteError", "rewrite_quantized"]
