"""Quantized ONNX operators whose parameters are run-time tensors -> exact plain ONNX ops (issue 11).

Real quantized models carry scales and zero points as constants; raise-quant-casts and
fold-quantized-contractions turn those into int8 TCU contractions. When a scale, a zero point or a
weight is a graph *input* (the ONNX node tests pass every operand so), torch-mlir's lowerings
extract the scalars into the loop bodies (``tensor.extract``, which no M100 unit runs), wrap u8
through i8 arithmetic and compute in f64. Rewritten here instead, per the ONNX definitions
(``onnx.reference``), into elementwise ops, float contractions of integer values and casts that the
stack compiles exactly (u8/u16 conversions run on the CVU's integer lane, ir_facts.py):

- ``DequantizeLinear(x, s, zp)`` -> ``(Cast(x, f32) - Cast(zp, f32)) * s`` (f32; ``Cast`` to the
  scale's / ``output_dtype`` type last), the parameters reshaped along ``axis`` (or repeated per block
  of ``block_size``).
- ``QuantizeLinear(x, s, zp)`` -> ``Cast(Clip(Round(x / s) + zp, lo, hi), T)`` (``Round`` is half to
  even like ``np.rint``; the sum is exact in f32 where it matters: beyond 2**24 it clips anyway).
- ``QLinearMatMul`` / ``QLinearConv`` / ``MatMulInteger`` / ``ConvInteger``: the zero-point-centred
  operands as integer-valued f32 tensors, ``MatMul`` / ``Conv`` in f32 -- exact, because every product
  and partial sum is an integer below 2**24 (checked statically from the element types and the
  reduction length; otherwise the node is left to torch-mlir) -- then for the QLinear ops the
  requantization ``rint(acc * M) + zy`` with ``M = (sa * sb) / sy`` in the scales' type (as
  onnx.reference computes it) and the product rounded *exactly*: ``acc * M`` in f32 plus its rounding
  error (Dekker's two-product with Veltkamp splitting, exact in f32), which decides the rounding
  when the f32 product lands on a .5 tie.

Anything else (float8 / int4 / int2 types, ``precision``, a blocked parameter of unknown shape)
is left alone (the later stages refuse it with one line).
"""

from __future__ import annotations

import numpy as np

#: integer element types (TensorProto numbers) -> (lo, hi)
_INT_RANGE = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767),
              6: (-(1 << 31), (1 << 31) - 1),
              # int4 / uint4 / int2 / uint2: held in int8 / uint8 (onnx_rewrite_narrow_int.py)
              22: (-8, 7), 21: (0, 15), 26: (-2, 1), 25: (0, 3)}
_HOLDER = {22: 3, 21: 2, 26: 3, 25: 2}
U16 = 4  # uint16: a QuantizeLinear result is held as the int16 of the same bits
_F32, _F16 = 1, 10
_EXACT = 1 << 24  # f32 holds every integer below this exactly


class _B:
    """A small node builder: nodes, new initializers, fresh names."""

    def __init__(self, names, helper, numpy_helper, base: str, types: dict | None = None):
        self.types = types or {}
        self.nodes: list = []
        self.inits: list = []
        self.names = names
        self.h = helper
        self.nh = numpy_helper
        self.base = base

    def const(self, value, dtype=np.float32) -> str:
        n = self.names("qrt_c")
        self.inits.append(self.nh.from_array(np.asarray(value, dtype), n))
        return n

    def op(self, op_type: str, ins: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.names("qrt")
        self.nodes.append(self.h.make_node(op_type, ins, [out], name=f"{self.base}/m100_{out}",
                                           **attrs))
        return out

    def cast(self, x: str, to: int, out: str | None = None) -> str:
        if self.types.get(x) == to:  # torch-mlir refuses some same-type Casts
            return self.op("Identity", [x], out) if out else x
        return self.op("Cast", [x], out, to=to)

    def to_int(self, c: str, t: int, out: str) -> bool:
        """Integer-valued f32 ``c`` (inside t's range) -> element type ``t`` into ``out``. torch-mlir
        lowers ``Cast`` to uint8 as ``fptosi`` to i8 (undefined above 127); a QuantizeLinear with
        scale 1 and zero point 0 is its ``fptoui`` (for int16 its ``fptosi``: torch-mlir cannot lower
        that Cast). uint16: torch-mlir crashes on both (False: the node is left alone)."""
        t = _HOLDER.get(t, t)
        if t in (2, 5):  # uint8, int16 (torch-mlir cannot lower a Cast to int16 either)
            zero = self.const(0, np.uint8 if t == 2 else np.int16)
            self.op("QuantizeLinear", [c, self.const(1.0), zero], out)
            return True
        if t == 4:
            return False
        self.cast(c, t, out)
        return True


def _attrs(node, helper) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _is_const(name: str, consts: set[str]) -> bool:
    return not name or name in consts


def _param(b: _B, p: str, shapes: dict, x: str, axis: int, block: int, to_f32: bool) -> str | None:
    """Parameter ``p`` (scale or zero point) shaped to broadcast against ``x`` (as f32 when
    ``to_f32``); None when its shape or ``x``'s is not known statically."""
    ps, xs = shapes.get(p), shapes.get(x)
    if ps is None or xs is None:
        return None
    v = b.cast(p, _F32) if to_f32 else p
    n = int(np.prod(ps)) if ps else 1
    rank = len(xs)
    if n == 1 and not block:
        return b.op("Reshape", [v, b.const([], np.int64)]) if ps else v
    axis %= max(rank, 1)
    if not block:
        if len(ps) != 1:
            return None
        shape = [1] * rank
        shape[axis] = -1
        return b.op("Reshape", [v, b.const(shape, np.int64)])
    if len(ps) != rank or xs[axis] > ps[axis] * block or xs[axis] <= (ps[axis] - 1) * block:
        return None
    # repeat each entry block times along axis: Unsqueeze, Expand, Reshape, Slice the remainder
    u = b.op("Unsqueeze", [v, b.const([axis + 1], np.int64)])
    full = list(ps[:axis + 1]) + [block] + list(ps[axis + 1:])
    e = b.op("Expand", [u, b.const(full, np.int64)])
    rep = list(ps)
    rep[axis] = ps[axis] * block
    r = b.op("Reshape", [e, b.const(rep, np.int64)])
    if rep[axis] != xs[axis]:
        r = b.op("Slice", [r, b.const([0], np.int64), b.const([xs[axis]], np.int64),
                           b.const([axis], np.int64)])
    return r


def dequantize(node, types, shapes, consts, names, helper, numpy_helper):
    x, s = node.input[0], node.input[1]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    narrow_x = types.get(x) in _HOLDER and x not in consts  # a run-time int4/int2 input
    if _is_const(s, consts) and _is_const(zp, consts) and not narrow_x:
        return None
    at = _attrs(node, helper)
    if types.get(x) not in _INT_RANGE or types.get(s) not in (_F32, _F16):
        return None
    out_t = int(at.get("output_dtype", 0)) or types[s]
    if out_t not in (_F32, _F16):
        return None
    b = _B(names, helper, numpy_helper, node.name or node.output[0], types)
    axis, block = int(at.get("axis", 1)), int(at.get("block_size", 0))
    sr = _param(b, s, shapes, x, axis, block, True)
    zr = _param(b, zp, shapes, x, axis, block, True) if zp else None
    if sr is None or (zp and zr is None):
        return None
    xf = b.cast(x, _F32)
    if zr is not None:
        xf = b.op("Sub", [xf, zr])
    y = node.output[0]
    if out_t == _F32:
        b.op("Mul", [xf, sr], y)
    else:
        b.cast(b.op("Mul", [xf, sr]), out_t, y)
    return b.nodes, b.inits


def quantize(node, types, shapes, consts, names, helper, numpy_helper):
    x, s = node.input[0], node.input[1]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    at = _attrs(node, helper)
    from m100.frontend.onnx_rewrite_narrow_int import F4, F8, decode_f8, encode_float

    byte_held = set(_HOLDER) | set(F8) | set(F4)  # torch-mlir would quantize to the holder's range
    # uint16: torch-mlir crashes on it (held as the int16 of the same bits, see below)
    narrow_t = types.get(zp) in byte_held | {U16} or int(at.get("output_dtype", 0)) in byte_held | {U16}
    if _is_const(s, consts) and _is_const(zp, consts) and not narrow_t:
        return None  # int4 etc. always here: torch-mlir would clip to the int8 holder's range
    if at.get("precision") or types.get(x) not in (_F32, _F16) or types.get(s) not in (_F32, _F16):
        return None
    t = types.get(zp) if zp else int(at.get("output_dtype", 0)) or 2
    if t in F8 or t in F4:  # x / s [+ a float4 zero point], then the float8 / float4 rounding
        b = _B(names, helper, numpy_helper, node.name or node.output[0], types)
        both16 = types[x] == _F16 and types[s] == _F16  # numpy divides f16 by f16 in f16
        sr = _param(b, s, shapes, x, int(at.get("axis", 1)), int(at.get("block_size", 0)),
                    not both16)
        if sr is None:
            return None
        xv = x if both16 or types[x] == _F32 else b.cast(x, _F32)
        q = b.op("Div", [xv, sr])
        if t in F4 and zp:  # onnx.reference adds a float4 zero point before the rounding
            if zp in consts:
                return None  # a float4 initializer: torch-mlir cannot read it (one-line refusal)
            zr = _param(b, zp, shapes, x, int(at.get("axis", 1)), int(at.get("block_size", 0)),
                        False)
            if zr is None:
                return None
            # decoded at x's shape (a table gather; a 0-d gather index does not lower)
            zf = b.op("Expand", [zr, b.const(list(shapes[x]), np.int64)])
            zd = names("f4_zp")
            dn, di = decode_f8(zf, t, _F16 if both16 else _F32, zd, names, helper, numpy_helper,
                               b.base)
            b.nodes += dn
            b.inits += di
            q = b.op("Add", [q, zd])  # in f16 when both are f16 (numpy's f16 + float4)
        if both16:  # the f16 quotient (rounded once: f32 division then f16 rounding is exact)
            q = b.cast(q, _F32)
        en, ei = encode_float(q, _F32, t, bool(at.get("saturate", 1)), node.output[0], names,
                              helper, numpy_helper, b.base)
        return b.nodes + en, b.inits + ei
    if t not in _INT_RANGE or t == 6:
        return None
    lo, hi = _INT_RANGE[t]
    b = _B(names, helper, numpy_helper, node.name or node.output[0], types)
    axis, block = int(at.get("axis", 1)), int(at.get("block_size", 0))
    both16 = types[x] == _F16 and types[s] == _F16  # numpy divides f16 by f16 in f16
    sr = _param(b, s, shapes, x, axis, block, not both16)
    zr = _param(b, zp, shapes, x, axis, block, True) if zp else None
    if sr is None or (zp and zr is None):
        return None
    xv = x if both16 or types[x] == _F32 else b.cast(x, _F32)
    r = b.op("Round", [b.op("Div", [xv, sr])])
    if both16:
        r = b.cast(r, _F32)
    if zr is not None:
        r = b.op("Add", [r, zr])
    c = b.op("Clip", [r, b.const(lo), b.const(hi)])
    if t == U16:  # the int16 with the same bits (c - 2**16 from 2**15 on, exact in f32); the
        # output is retyped int16 (onnx_rewrite_quant.rewrite_quantized: graph outputs only)
        c = b.op("Where", [b.op("GreaterOrEqual", [c, b.const(32768.0)]),
                           b.op("Sub", [c, b.const(65536.0)]), c])
        t = 5
    if not b.to_int(c, t, node.output[0]):
        return None
    return b.nodes, b.inits


def _centred(b: _B, v: str, zp: str, types, shapes, per_row_axis: int | None = None) -> str | None:
    """``Cast(v, f32) - Cast(zp, f32)``; a 1-D zero point of several entries broadcast along
    ``per_row_axis`` of ``v`` (ConvInteger/QLinearConv weights: the output channel), or along the
    last axis when None (a MatMul's b: per column, numpy broadcasting)."""
    vf = b.cast(v, _F32)
    if not zp:
        return vf
    zs = shapes.get(zp)
    if zs is None:
        return None
    zf = b.cast(zp, _F32)
    n = int(np.prod(zs)) if zs else 1
    if n > 1 and per_row_axis is not None:
        rank = len(shapes.get(v) or [])
        if len(zs) != 1 or not rank:
            return None
        shape = [1] * rank
        shape[per_row_axis] = -1
        zf = b.op("Reshape", [zf, b.const(shape, np.int64)])
    elif n > 1 and len(zs) != 1:
        return None
    elif n == 1 and zs:
        zf = b.op("Reshape", [zf, b.const([], np.int64)])
    return b.op("Sub", [vf, zf])


def _span(types, v: str, zp: str) -> int | None:
    """max |v - zp| over the element type's range."""
    if types.get(v) not in (2, 3):  # the 8-bit types these operators take
        return None
    r = _INT_RANGE[types[v]]
    lo, hi = r
    return hi - lo if zp else max(-lo, hi)


def _exact_rint_product(b: _B, a: str, m: str) -> str:
    """``rint(a * m)`` of the exact real product of two f32 tensors (``a`` integer-valued, below
    2**24): p = fl(a * m) and its exact error e (Dekker's two-product; Veltkamp splits by 4097 give
    12-bit halves whose products are exact); only a tie p = k + 1/2 needs e, which says on which side
    of the tie the real product lies (rounding is monotone and k + 1/2 is an f32 below 2**23, so
    p never crosses a tie)."""
    c = b.const(4097.0)

    def split(v):
        t = b.op("Mul", [v, c])
        hi = b.op("Sub", [t, b.op("Sub", [t, v])])
        return hi, b.op("Sub", [v, hi])

    p = b.op("Mul", [a, m])
    ah, al = split(a)
    mh, ml = split(m)
    e = b.op("Sub", [b.op("Mul", [ah, mh]), p])
    e = b.op("Add", [e, b.op("Mul", [ah, ml])])
    e = b.op("Add", [e, b.op("Mul", [al, mh])])
    e = b.op("Add", [e, b.op("Mul", [al, ml])])
    r0 = b.op("Round", [p])
    fl = b.op("Floor", [p])
    zero = b.const(0.0)
    up = b.op("Where", [b.op("Greater", [e, zero]), b.op("Add", [fl, b.const(1.0)]),
                        b.op("Where", [b.op("Less", [e, zero]), fl, r0])])
    tie = b.op("Equal", [b.op("Sub", [p, fl]), b.const(0.5)])
    return b.op("Where", [tie, up, r0])


def _requant(b: _B, acc: str, sa: str, sb: str, sy: str, zy: str, t: int, out: str, types,
             shapes, per_channel_rank: int | None) -> bool:
    """``Cast(Clip(rint(acc * (sa * sb / sy)) + zy, lo, hi), t)`` into ``out``."""
    st = types.get(sa)
    if st not in (_F32, _F16) or types.get(sb) != st or types.get(sy) != st:
        return False
    m = b.op("Div", [b.op("Mul", [sa, sb]), sy])  # in the scales' type, like onnx.reference
    if st != _F32:
        m = b.cast(m, _F32)
    sbs = shapes.get(sb)
    if sbs is None:
        return False
    if sbs and int(np.prod(sbs)) > 1:
        if len(sbs) != 1:
            return False
        if per_channel_rank is not None:  # conv: along the output channel (axis 1)
            shape = [1] * per_channel_rank
            shape[1] = -1
            m = b.op("Reshape", [m, b.const(shape, np.int64)])
        # matmul: per column of b, i.e. the last axis of the product (numpy broadcasting)
    r = _exact_rint_product(b, acc, m)
    if zy:
        zs = shapes.get(zy)
        if zs is None or (zs and int(np.prod(zs)) != 1):
            return False
        zf = b.cast(zy, _F32)
        if zs:
            zf = b.op("Reshape", [zf, b.const([], np.int64)])
        r = b.op("Add", [r, zf])
    lo, hi = _INT_RANGE[t]
    return b.to_int(b.op("Clip", [r, b.const(lo), b.const(hi)]), t, out)


def _reduction_len(node, shapes, kind: str) -> int | None:
    if kind == "matmul":
        s = shapes.get(node.input[0])
        return s[-1] if s else None
    w = shapes.get(node.input[1] if node.op_type == "ConvInteger" else node.input[3])
    return int(np.prod(w[1:])) if w else None


def integer_contraction(node, types, shapes, consts, names, helper, numpy_helper):
    """MatMulInteger / ConvInteger / QLinearMatMul / QLinearConv as an exact f32 contraction."""
    op = node.op_type
    ins = list(node.input) + [""] * 9
    if op == "MatMulInteger":
        a, b_, za, zb = ins[:4]
        kind = "matmul"
    elif op == "ConvInteger":
        a, b_, za, zb = ins[:4]
        kind = "conv"
    elif op == "QLinearMatMul":
        a, sa, za, b_, sb, zb, sy, zy = ins[:8]
        kind = "matmul"
    else:  # QLinearConv
        a, sa, za, b_, sb, zb, sy, zy, bias = ins[:9]
        kind = "conv"
        if bias:
            return None
    qlinear = op.startswith("QLinear")
    if qlinear and all(_is_const(v, consts) for v in (sa, za, b_, sb, zb, sy, zy)):
        return None  # constant weights and parameters: the int8 TCU path (onnx_rewrite_quant)
    ka, kb = _span(types, a, za), _span(types, b_, zb)
    k = _reduction_len(node, shapes, kind)
    if ka is None or kb is None or k is None or k * ka * kb >= _EXACT:
        return None
    at = _attrs(node, helper)
    if kind == "conv" and int(at.get("group", 1)) != 1:
        return None
    bld = _B(names, helper, numpy_helper, node.name or node.output[0], types)
    af = _centred(bld, a, za, types, shapes)
    bf = _centred(bld, b_, zb, types, shapes, per_row_axis=0 if kind == "conv" else None)
    if af is None or bf is None:
        return None
    if kind == "matmul":
        acc = bld.op("MatMul", [af, bf])
    else:
        acc = bld.op("Conv", [af, bf], **at)
    if not qlinear:
        bld.cast(acc, 6, node.output[0])  # int32
        return bld.nodes, bld.inits
    t = types.get(zy) if zy else types.get(a)
    if t not in (2, 3):
        return None
    rank = len(shapes.get(node.output[0]) or []) if kind == "conv" else None
    if not _requant(bld, acc, sa, sb, sy, zy, t, node.output[0], types, shapes, rank):
        return None
    return bld.nodes, bld.inits


def dynamic_quantize(node, types, names, helper, numpy_helper):
    """DynamicQuantizeLinear(x) -> (y u8, y_scale, y_zero_point): max/min of x widened to include
    0, scale = (max - min) / 255, zero point = rint(clip(0 - min / scale, 0, 255)),
    y = clip(rint(x / scale) + zero point, 0, 255); all f32. An all-zero x (max == min) has scale
    1.0, as onnxruntime's kernel computes it (``max == min ? 1.0f : ...``): the ONNX function body
    gives 0 (and divides by it), onnx.reference 1 / 255; y and the zero point are 0 in all three."""
    x = node.input[0]
    if types.get(x) != _F32:
        return None
    outs = list(node.output) + ["", "", ""]
    y, ys, yz = outs[:3]
    b = _B(names, helper, numpy_helper, node.name or y, types)
    zero = b.const(0.0)
    mx = b.op("Max", [b.op("ReduceMax", [x], keepdims=0), zero])
    mn = b.op("Min", [b.op("ReduceMin", [x], keepdims=0), zero])
    rng = b.op("Where", [b.op("Equal", [mx, mn]), b.const(255.0), b.op("Sub", [mx, mn])])
    scale = b.op("Div", [rng, b.const(255.0)])
    zp = b.op("Round", [b.op("Clip", [b.op("Sub", [zero, b.op("Div", [mn, scale])]), zero,
                                      b.const(255.0)])])
    q = b.op("Clip", [b.op("Add", [b.op("Round", [b.op("Div", [x, scale])]), zp]), zero,
                      b.const(255.0)])
    if y and not b.to_int(q, 2, y):
        return None
    if ys:
        b.op("Identity", [scale], ys)
    if yz and not b.to_int(zp, 2, yz):
        return None
    return b.nodes, b.inits


def dequantize_f8(node, types, shapes, consts, names, helper, numpy_helper):
    """DequantizeLinear of a float8 / float4 ``x`` (held as its bits): the decoded value (a table lookup,
    onnx_rewrite_narrow_int.decode_f8) times the scale; the zero point is 0 by definition (not
    read), the result cast to the scale's / ``output_dtype`` type."""
    from m100.frontend.onnx_rewrite_narrow_int import F4, F8, decode_f8

    x, s = node.input[0], node.input[1]
    at = _attrs(node, helper)
    if (types.get(x) not in F8 and types.get(x) not in F4) or types.get(s) not in (_F32, _F16) or x in consts:
        return None
    out_t = int(at.get("output_dtype", 0)) or types[s]
    b = _B(names, helper, numpy_helper, node.name or node.output[0], types)
    sr = _param(b, s, shapes, x, int(at.get("axis", 1)), int(at.get("block_size", 0)), True)
    if sr is None or out_t not in (_F32, _F16):
        return None
    v = names("f8_x")
    dn, di = decode_f8(x, types[x], _F32, v, names, helper, numpy_helper, b.base)
    b.nodes = dn + b.nodes
    b.inits += di
    y = node.output[0]
    if out_t == _F32:
        b.op("Mul", [v, sr], y)
    else:
        b.cast(b.op("Mul", [v, sr]), out_t, y)
    return b.nodes, b.inits


_BF16 = 16
_GIVE_CONST = "make the scales / zero points initializers"


def refusal(node, types, shapes, consts, helper) -> str | None:
    """Why a quantized ``node`` that no rewrite took would not compile -- what is unsupported and
    what to do, for one line naming the node -- or None where torch-mlir's own lowering of it does
    compile (constant scales / zero points: the QDQ fold; MatMulInteger of int8 operands without
    zero points: the int8 TCU). Measured forms: left to torch-mlir, these were refused later
    without the op's name (``tensor.extract`` of a run-time scalar, ``linalg.*_q`` convolutions,
    i32 x i32 TCU operands) or failed in its importer (bfloat16 initializers)."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return None
    ins = list(node.input) + [""] * 9
    tn = {1: "float32", 10: "float16", 16: "bfloat16", 2: "uint8", 3: "int8", 4: "uint16",
          5: "int16", 6: "int32"}

    def tname(v):
        return tn.get(types.get(v), f"type {types.get(v)}")

    if op in ("QuantizeLinear", "DequantizeLinear"):
        x, sc, zp = ins[:3]
        if types.get(sc) == _BF16:
            return "a bfloat16 scale is not supported; use a float32 or float16 scale"
        if _is_const(sc, consts) and _is_const(zp, consts):
            return None
        if any(v and shapes.get(v) is None for v in (x, sc, zp)):
            return "a run-time scale / zero point or input of unknown shape; give static shapes"
        if _attrs(node, helper).get("precision"):
            return "the precision attribute with run-time scales is not supported; " + _GIVE_CONST
        return (f"run-time scale / zero point with {tname(x)} input and {tname(sc)} scale are not "
                "supported; " + _GIVE_CONST)
    if op not in ("MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"):
        return None
    kind = "matmul" if "MatMul" in op else "conv"
    if op.startswith("QLinear"):
        a, _, za, b_, _, zb = ins[:6]
        if all(_is_const(v, consts) for v in ins[1:8] if v != b_) and _is_const(b_, consts):
            return None  # constant weights and parameters: the QDQ fold (onnx_rewrite_quant)
    else:
        a, b_, za, zb = ins[:4]
        if op == "MatMulInteger" and types.get(a) == 3 and types.get(b_) == 3 and not za \
                and not zb:
            return None  # torch-mlir's i8 x i8 -> i32 contraction, narrowed for the int8 TCU
    group = int(_attrs(node, helper).get("group", 1))
    if kind == "conv" and group != 1:
        return (f"group={group} with run-time weights or parameters is not supported; make the "
                "weights and " + _GIVE_CONST[5:])
    if op == "QLinearConv" and ins[8]:
        return "a bias with run-time weights or parameters is not supported; " + _GIVE_CONST
    ka, kb = _span(types, a, za), _span(types, b_, zb)
    k = _reduction_len(node, shapes, kind)
    if ka is not None and kb is not None and k is not None and k * ka * kb >= _EXACT:
        return (f"reduction length {k} with run-time {tname(a)} x {tname(b_)} operands is not "
                f"supported: the exact float32 form needs {k} * {ka} * {kb} < 2**24 and the int8 "
                "TCU form constant 8-bit weights; make the weights an initializer")
    return (f"this form with run-time {tname(a)} x {tname(b_)} operands is not supported; make "
            "the weights and " + _GIVE_CONST[5:])


def rewrite_runtime_quant(node, types, shapes, consts, names, helper, numpy_helper):
    """(nodes, initializers) replacing ``node``, or None if it is not handled here."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "DequantizeLinear":
        return dequantize(node, types, shapes, consts, names, helper, numpy_helper) or \
            dequantize_f8(node, types, shapes, consts, names, helper, numpy_helper)
    if node.op_type == "QuantizeLinear":
        return quantize(node, types, shapes, consts, names, helper, numpy_helper)
    if node.op_type == "DynamicQuantizeLinear":
        return dynamic_quantize(node, types, names, helper, numpy_helper)
    if node.op_type in ("MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"):
        return integer_contraction(node, types, shapes, consts, names, helper, numpy_helper)
    return None


__all__ = ["U16", "refusal", "rewrite_runtime_quant"]
