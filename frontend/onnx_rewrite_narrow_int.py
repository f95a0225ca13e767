"""int4 / uint4 / int2 / uint2 tensors as int8 / uint8 holders, and CastLike -> Cast (issue 11).

torch-mlir's ONNX importer does not know INT2 / UINT2 (element types 25, 26) and lowers a Cast to
INT4 / UINT4 not at all; the M100 holds such values in bytes anyway. When every node that reads or
writes a narrow integer value is one this module (or onnx_rewrite_qruntime.py) rewrites exactly,
the graph is retyped: those values become INT8 (signed) / UINT8 (unsigned) holding the same
numbers, and

- ``Cast(x: float -> narrow)`` -> ``t = trunc(x)`` wrapped into the type's range modulo 2**bits
  (two's complement for the signed types), NaN and +-inf -> 0, then ``Cast`` to the holder
  (:func:`cast_to_narrow`). ONNX leaves an out-of-range float -> integer conversion undefined;
  this is what onnx.reference computes with ml_dtypes >= 0.5.4 (the node tests' expected outputs,
  e.g. ``test_cast_FLOAT_to_INT4``: -9 -> 7) and the rule ONNX gives for integer -> integer;
- ``Cast(x: narrow -> any)`` reads the holder (the same values);
- ``QuantizeLinear`` / ``DequantizeLinear`` with a narrow type: onnx_rewrite_qruntime.py, with the
  narrow type's range.

The ONNX backend (tools/onnx_backend.py) feeds narrow inputs as int8 / uint8 values and converts the
outputs back (range-checked). ``CastLike(x, like)`` becomes ``Cast(x, to=type of like)`` (``like``
is read only for its type). Anything else touching a narrow value leaves the graph as it is (the
importer then refuses it with one line).
"""

from __future__ import annotations

#: narrow ONNX integer type -> (holder type, lo, hi)
NARROW = {22: (3, -8, 7), 21: (2, 0, 15), 26: (3, -2, 1), 25: (2, 0, 3)}
_FLOATS = (1, 10)  # float, float16
#: ops whose narrow operands onnx_rewrite_qruntime.py handles (checked there again)
_QUANT = ("QuantizeLinear", "DequantizeLinear")


def castlike_to_cast(graph, types, helper) -> set[str]:
    """``CastLike(x, like)`` -> ``Cast(x, to=type(like))`` (attributes kept); returns the names
    of the ``like`` inputs (read no more)."""
    n = 0
    likes = set()
    nodes = []
    for node in graph.node:
        if node.op_type == "CastLike" and node.domain in ("", "ai.onnx") and \
                types.get(node.input[1]):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            nodes.append(helper.make_node("Cast", [node.input[0]], list(node.output),
                                          name=node.name, to=types[node.input[1]], **attrs))
            likes.add(node.input[1])
            n += 1
        else:
            nodes.append(node)
    if n:
        graph.ClearField("node")
        graph.node.extend(nodes)
    return likes


_F64 = 11


def f64_boundary(graph, types, helper) -> int:
    """float64 at the graph's boundary only (the M100 has no f64): a float64 graph input whose
    every consumer is a ``Cast`` to one type T (float32 or float16) is received as T -- the
    interpreter converts the given float64 values with one correct rounding (numpy's astype),
    which is exactly that Cast -- and the Casts become Identity; a float64 graph output made by a
    ``Cast`` from float32/float16 is produced as float32 (a float16 value widened exactly) and
    returned widened to float64 by the backend (exact); a float64 input read by nothing (a
    CastLike's ``like``, read for its type only) is received as float32. Anything else with float64 is left as it
    is (the scheduler refuses it in one line). Returns the number of values changed."""
    inits = {i.name for i in graph.initializer}
    outs = {o.name for o in graph.output}
    users: dict[str, list] = {}
    for node in graph.node:
        for i in node.input:
            users.setdefault(i, []).append(node)

    def cast_to(node):
        return next((a.i for a in node.attribute if a.name == "to"), 0) \
            if node.op_type == "Cast" and node.domain in ("", "ai.onnx") else None

    def identity(node, ins=None):
        return helper.make_node("Identity", ins or [node.input[0]], list(node.output),
                                name=node.name)

    retyped, swap = {}, {}
    for vi in graph.input:
        tt = vi.type.tensor_type
        if tt.elem_type != _F64 or vi.name in inits or vi.name in outs:
            continue
        us = users.get(vi.name, [])
        if not us:  # read by nothing (a CastLike's ``like``, after castlike_to_cast): no value
            retyped[vi.name] = 1
            continue
        tos = {cast_to(u) for u in us}
        if len(tos) == 1 and next(iter(tos)) in _FLOATS:
            retyped[vi.name] = next(iter(tos))
            swap.update({id(u): identity(u) for u in us})
    for node in graph.node:
        o = node.output[0] if node.output else ""
        if cast_to(node) == _F64 and o in outs and len(users.get(o, [])) == 0:
            src = retyped.get(node.input[0], types.get(node.input[0]))
            if src == 1:
                swap[id(node)] = identity(node)
            elif src == 10:
                swap[id(node)] = helper.make_node("Cast", [node.input[0]], [o], name=node.name,
                                                  to=1)
            else:
                continue
            retyped[o] = 1
    if not retyped:
        return 0
    nodes = [swap.get(id(n), n) for n in graph.node]
    graph.ClearField("node")
    graph.node.extend(nodes)
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if vi.name in retyped:
            vi.type.tensor_type.elem_type = retyped[vi.name]
    types.update(retyped)
    return len(retyped)


def cast_float_to_u8(node, types, names, helper, numpy_helper):
    """``Cast(float x -> uint8)``: torch-mlir lowers it as ``fptosi`` to i8, undefined (a CVU
    fault) from 128 on. -> ``QuantizeLinear(trunc(x), 1, 0 as uint8)``, whose lowering is the
    ``fptoui`` the CVU converts exactly; Cast truncates toward zero, and trunc(x) is an integer,
    which the quantization keeps (a value outside [0, 255], undefined for Cast, saturates)."""
    import numpy as np

    to = next((a.i for a in node.attribute if a.name == "to"), 0)
    if to != 2 or types.get(node.input[0]) not in _FLOATS:
        return None
    base = node.name or node.output[0]
    x = node.input[0]
    nodes, inits = [], []

    def op(t, ins, **at):
        out = names("u8c")
        nodes.append(helper.make_node(t, ins, [out], name=f"{base}/m100_{out}", **at))
        return out

    if types[x] != 1:
        x = op("Cast", [x], to=1)
    t = op("Mul", [op("Sign", [x]), op("Floor", [op("Abs", [x])])])
    one, zero = names("u8c_one"), names("u8c_zero")
    inits += [numpy_helper.from_array(np.asarray(1.0, np.float32), one),
              numpy_helper.from_array(np.asarray(0, np.uint8), zero)]
    nodes.append(helper.make_node("QuantizeLinear", [t, one, zero], [node.output[0]],
                                  name=f"{base}/m100_q"))
    return nodes, inits


def _out_types(graph, types) -> dict:
    t = dict(types)
    for node in graph.node:
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), 0)
            t[node.output[0]] = to
    return t


def _type_name(t: int) -> str:
    from onnx import TensorProto

    return TensorProto.DataType.Name(t).lower()


def narrow_values(graph, types) -> set[str] | None:
    """The names of narrow-typed values (narrow integers, float8), or None if there are none.
    Raises a one-line ``QuantRewriteError`` naming the node when one touching such a value is not
    handled here (e.g. an Add on int4 wraps at 4 bits: never computed in the int8 holder)."""
    t = _out_types(graph, types)
    narrow = {n for n, ty in t.items() if ty in NARROW or ty in F8 or ty in F4 or ty in E8M0}
    fl8 = F8 | F4 | E8M0
    if not narrow:
        return None
    for node in graph.node:
        touched = [v for v in list(node.input) + list(node.output) if v in narrow]
        if not touched:
            continue
        src = t.get(node.input[0]) if node.input else None
        out_t = t.get(node.output[0]) if node.output else None
        why = None
        if node.op_type == "Cast":
            rm = next((a.s for a in node.attribute if a.name == "round_mode"), b"up")
            if out_t in E8M0 and rm not in E8M0_ROUND:
                why = f"round_mode {rm.decode()!r} is not one of up/down/nearest"
            elif out_t in fl8 and src not in _FLOATS:
                why = "only float32/float16 convert to float8/float4"
            elif src in fl8 and out_t not in _FLOATS:
                why = "float8/float4 convert to float32/float16 only"
            elif out_t in NARROW and src not in _FLOATS and src not in NARROW:
                why = "an integer -> narrow integer conversion (wrap-around) is not supported"
        elif node.op_type not in ("DequantizeLinear", "QuantizeLinear", "Identity"):
            why = ("only Cast, QuantizeLinear, DequantizeLinear and Identity read or write such "
                   "values (held in bytes)")
        if why:
            from m100.frontend.onnx_rewrite_quant import QuantRewriteError

            v = touched[0]
            raise QuantRewriteError(f"{node.op_type} '{node.name or node.output[0]}': {_type_name(t[v])} "
                             f"tensor '{v}': {why}")
    return narrow


def cast_from_f8(node, types, names, helper, numpy_helper):
    """``Cast(x: float8 -> f32/f16)`` -> the table lookup of :func:`decode_f8`."""
    to = next((a.i for a in node.attribute if a.name == "to"), 0)
    src = types.get(node.input[0])
    if src not in (F8 | F4 | E8M0) or to not in _FLOATS:
        return None
    return decode_f8(node.input[0], src, to, node.output[0], names, helper, numpy_helper,
                     node.name or node.output[0])


def cast_to_narrow(node, types, names, helper, numpy_helper):
    """``Cast(float x -> narrow)`` -> trunc, wrap modulo 2**bits, Cast to the holder (None
    otherwise). Exact in f32: ``t = sign(x) * floor(|x|)`` is ``trunc(x)``; ``r = t - m * floor(t /
    m)`` (``m = 2**bits``: the division by a power of two and the product are exact, and the
    difference, an integer in [0, m), is representable, so the subtraction is exact) is ``t mod
    m``; a signed type takes ``r - m`` where ``r > hi``. NaN stays NaN and +-inf gives
    inf - inf = NaN, which the final conversion (the CVU's ``ftoi``: NaN -> 0, docs/isa.md) maps
    to 0, as onnx.reference does."""
    import numpy as np

    to = next((a.i for a in node.attribute if a.name == "to"), 0)
    src = types.get(node.input[0])
    if to not in NARROW or src not in _FLOATS:
        return None
    holder, lo, hi = NARROW[to]
    base = node.name or node.output[0]
    k = [0]
    inits = []

    def nm():
        k[0] += 1
        return names("nar")

    def const(v):
        n = nm()
        inits.append(numpy_helper.from_array(np.asarray(v, np.float32), n))
        return n

    def op(t, ins, out=None, **at):
        out = out or nm()
        nodes.append(helper.make_node(t, ins, [out], name=f"{base}/m100_{out}", **at))
        return out

    nodes: list = []
    m = float(hi - lo + 1)  # 2**bits
    x = node.input[0] if src == 1 else op("Cast", [node.input[0]], to=1)
    t = op("Mul", [op("Sign", [x]), op("Floor", [op("Abs", [x])])])  # trunc, exact
    r = op("Sub", [t, op("Mul", [op("Floor", [op("Mul", [t, const(1.0 / m)])]), const(m)])])
    if lo < 0:  # two's complement: [hi + 1, m) -> [lo, 0)
        r = op("Where", [op("Greater", [r, const(float(hi))]), op("Sub", [r, const(m)]), r])
    op("Cast", [r], node.output[0], to=holder)
    return nodes, inits


def retype(graph, nodes, narrow: set[str]) -> None:
    """Narrow-typed graph inputs / outputs / value_info / Cast targets (in ``nodes``) -> their
    holder types."""
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        tt = vi.type.tensor_type
        if vi.name in narrow and tt.elem_type in NARROW:
            tt.elem_type = NARROW[tt.elem_type][0]
        elif vi.name in narrow and (tt.elem_type in F8 or tt.elem_type in F4 or tt.elem_type in E8M0):
            tt.elem_type = 2  # the bits, as uint8
    for node in nodes:
        if node.op_type == "Cast":
            for a in node.attribute:
                if a.name == "to" and a.i in NARROW:
                    a.i = NARROW[a.i][0]





#: float8 ONNX types -> the ml_dtypes name; held as their bits in a uint8
F8 = {17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz"}
#: float8 e8m0 (a power of two 2**(e - 127), 0xFF = NaN): decoded by the same table; not encoded
E8M0 = {24: "float8_e8m0fnu"}


def f8_table(t: int):
    """The 256 values of float8 type ``t`` by bit pattern, as f32 (ml_dtypes, what onnx.reference
    converts with; NaN patterns stay NaN)."""
    import ml_dtypes
    import numpy as np

    return np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, (F8 | F4 | E8M0)[t])).astype(np.float32)


def decode_f8(x: str, t: int, to: int, out: str, names, helper, numpy_helper, base: str):
    """f8 bits ``x`` (uint8 holder) -> values of float type ``to`` into ``out``: a Gather from
    the 256-entry table (the CSU gather routine), exact."""
    tab, idx = names("f8_table"), names("f8_idx")
    inits = [numpy_helper.from_array(f8_table(t), tab)]
    nodes = [helper.make_node("Cast", [x], [idx], name=f"{base}/m100_{idx}", to=7)]
    if to == 1:
        nodes.append(helper.make_node("Gather", [tab, idx], [out], name=f"{base}/m100_gather"))
    else:
        v = names("f8_val")
        nodes += [helper.make_node("Gather", [tab, idx], [v], name=f"{base}/m100_gather"),
                  helper.make_node("Cast", [v], [out], name=f"{base}/m100_{out}", to=to)]
    return nodes, inits



def unrewritten_narrow_quant(node, types, narrow: set[str], consts: set[str]) -> bool:
    """True if ``node`` (a QuantizeLinear / DequantizeLinear left as it is) touches a narrow or
    float8 value that will be held in a byte: torch-mlir would then quantize to the holder's
    range / dequantize the bits (silently wrong). A constant int4 DequantizeLinear input is
    rewritten to float weights elsewhere, and constants are not retyped: not such a value."""
    vals = [v for v in list(node.input) + list(node.output) if v in narrow and v not in consts]
    return bool(vals)


#: float4 e2m1 (no NaN / inf) is held like float8: its code in a byte (sign bit 0x8)
F4 = {23: "float4_e2m1fn"}


def _ml(t: int):
    import ml_dtypes

    return getattr(ml_dtypes, (F8 | F4)[t])


def encode_float(x: str, src: int, t: int, saturate: bool, out: str, names, helper, numpy_helper,
                 base: str):
    """f32/f16 ``x`` -> the code of float8/float4 type ``t`` (round to nearest even, the ONNX
    ``saturate`` rule) as a uint8 holder into ``out``. The positive finite values v_0 < ... < v_n
    of the type have codes 0..n; the code of |x| is the number of midpoints (v_k + v_k+1) / 2 below
    it, plus one at a midpoint whose upper neighbour has the even code (ties to even). Beyond the
    midpoint above v_n the value overflows: saturate -> v_n (|x| clamped first), else the code
    ml_dtypes gives (inf / NaN). The sign bit is added for x < 0 or x = -0.0 (via 1 / x), except
    where the type has no negative zero (fnuz). NaN -> the type's NaN code (a NaN's sign is not
    visible to the CVU: every NaN takes +NaN's code). Exactness: midpoints of values with <= 4
    significant bits are f32 numbers; comparisons are exact."""
    import numpy as np

    dt = _ml(t)
    f4 = t in F4
    ncodes = 8 if f4 else 128
    sign_bit = 8 if f4 else 128
    vals = np.arange(ncodes, dtype=np.uint8).view(dt).astype(np.float32)
    finite = [k for k in range(ncodes) if np.isfinite(vals[k])]
    n = finite[-1]
    assert finite == list(range(n + 1)) and np.all(np.diff(vals[:n + 1]) > 0)
    v = vals[:n + 1].astype(np.float64)
    ulp_top = v[n] - v[n - 1]
    mids = list((v[:-1] + v[1:]) / 2) + [v[n] + ulp_top / 2]  # the last: overflow threshold
    mids = np.array(mids, np.float32)
    assert np.all(mids.astype(np.float64) == np.array(list((v[:-1] + v[1:]) / 2) + [v[n] + ulp_top / 2]))
    # a tie at mid k rounds up iff code k + 1 is even (k odd); the overflow mid rounds up iff n odd
    odd = np.array([(k % 2 == 1) for k in range(n + 1)])

    def code_of(val):
        return int(np.array([val], np.float32).astype(dt).view(np.uint8)[0])

    nan_code = code_of(np.nan)
    pos_ovf, neg_ovf = code_of(1e30), code_of(-1e30)
    nodes, inits = [], []

    def const(a, dtype=np.float32):
        nm = names("enc_c")
        inits.append(numpy_helper.from_array(np.asarray(a, dtype), nm))
        return nm

    def op(ty, ins, o=None, **at):
        o = o or names("enc")
        nodes.append(helper.make_node(ty, ins, [o], name=f"{base}/m100_{o}", **at))
        return o

    xf = x if src == 1 else op("Cast", [x], to=1)
    a = op("Abs", [xf])
    if saturate:
        a = op("Min", [a, const(v[n])])
    au = op("Unsqueeze", [a, const([-1], np.int64)])
    above = op("Greater", [au, const(mids)])
    tie = op("And", [op("Equal", [au, const(mids)]), const(odd, np.bool_)])
    cnt = op("ReduceSum", [op("Cast", [op("Or", [above, tie])], to=1), const([-1], np.int64)],
             keepdims=0)
    zero = const(0.0)
    neg = op("Or", [op("Less", [xf, zero]), op("Less", [op("Div", [const(1.0), xf]), zero])])
    signed = op("Add", [cnt, op("Where", [neg, const(float(sign_bit)), zero])])
    if "fnuz" in (F8 | F4)[t]:  # no negative zero
        signed = op("Where", [op("Equal", [cnt, zero]), zero, signed])
    ovf = op("Where", [neg, const(float(neg_ovf)), const(float(pos_ovf))])
    code = op("Where", [op("Greater", [cnt, const(float(n))]), ovf, signed])
    # NaN: every ordered comparison is false (x == x may be folded to true by canonicalization)
    ordered = op("Or", [op("GreaterOrEqual", [xf, zero]), op("Less", [xf, zero])])
    code = op("Where", [ordered, code, const(float(nan_code))])
    op("QuantizeLinear", [code, const(1.0), const(0, np.uint8)], out)
    return nodes, inits


def cast_to_float8(node, types, names, helper, numpy_helper):
    """``Cast(f32/f16 x -> float8/float4)`` (``saturate``, default 1) -> :func:`encode_float`."""
    at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    to, src = int(at.get("to", 0)), types.get(node.input[0])
    if to not in (F8 | F4) or src not in _FLOATS or at.get("round_mode", b"up") not in (b"up", "up"):
        return None
    return encode_float(node.input[0], src, to, bool(at.get("saturate", 1)), node.output[0],
                        names, helper, numpy_helper, node.name or node.output[0])


#: the round_modes of a conversion to float8e8m0 (:func:`cast_to_e8m0`)
E8M0_ROUND = (b"up", b"down", b"nearest")


def e8m0_thresholds(round_mode: bytes):
    """(thresholds [255] f64, strict [255] bool): the float8e8m0 code of a finite |x| is the number of
    thresholds below it (``|x| > t`` if strict, else ``|x| >= t``); the 255th is the overflow to
    NaN (left out when saturating). From onnx.numpy_helper.to_float8e8m0, which works on the f32
    bits (E = exponent field, F = fraction field; the sign is ignored):

    - down: E, i.e. #{k in 1..254: |x| >= 2**(k - 127)} (254 thresholds: f32 max < 2**128);
    - up: E + (F > 0), i.e. #{k: |x| > t_k} with t_1 = 0 (any f32 subnormal goes to 1) and
      t_k = 2**(k - 128) for k >= 2;
    - nearest: E + bit 22 of F for E >= 1 (ties away from zero), (|x| > 2**-127) for E = 0,
      i.e. t_1 = 2**-127 (strict) and t_k = 1.5 * 2**(k - 128) (|x| >= t_k) for k >= 2.

    Every threshold is an f32 number (2**-127 is a subnormal), so the comparisons are exact."""
    import numpy as np

    k = np.arange(1, 256, dtype=np.float64)
    if round_mode == b"down":
        return np.ldexp(1.0, (k[:254] - 127).astype(int)), np.zeros(254, bool)  # no overflow
    if round_mode == b"up":
        t = np.ldexp(1.0, (k - 128).astype(int))
        t[0] = 0.0
        return t, np.ones(255, bool)
    t = 1.5 * np.ldexp(1.0, (k - 128).astype(int))
    t[0] = 2.0 ** -127
    strict = np.zeros(255, bool)
    strict[0] = True
    return t, strict


def cast_to_e8m0(node, types, names, helper, numpy_helper):
    """``Cast(f32/f16 x -> float8e8m0)`` (``saturate`` default 1, ``round_mode`` up/down/nearest,
    default up), as onnx.reference computes it (onnx.numpy_helper.to_float8e8m0 on the f32 value;
    the sign is ignored): the code of a finite |x| is the number of :func:`e8m0_thresholds` below
    it (one broadcast comparison and a sum, like :func:`encode_float`); without ``saturate`` a
    value above the 255th threshold gives 0xFF; +-inf and NaN give 0xFF. Into a uint8 holder."""
    import numpy as np

    at = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    rm = at.get("round_mode", b"up")
    rm = rm.encode() if isinstance(rm, str) else rm
    src = types.get(node.input[0])
    if int(at.get("to", 0)) not in E8M0 or src not in _FLOATS or rm not in E8M0_ROUND:
        return None
    t, strict = e8m0_thresholds(rm)
    if at.get("saturate", 1):
        t, strict = t[:254], strict[:254]
    assert np.all(t.astype(np.float32).astype(np.float64) == t)  # exact f32 thresholds
    base = node.name or node.output[0]
    nodes, inits = [], []

    def const(a, dtype=np.float32):
        nm = names("e8m0_c")
        inits.append(numpy_helper.from_array(np.asarray(a, dtype), nm))
        return nm

    def op(ty, ins, o=None, **at):
        o = o or names("e8m0")
        nodes.append(helper.make_node(ty, ins, [o], name=f"{base}/m100_{o}", **at))
        return o

    xf = node.input[0] if src == 1 else op("Cast", [node.input[0]], to=1)
    a = op("Unsqueeze", [op("Abs", [xf]), const([-1], np.int64)])
    tc = const(t)
    above = op("Greater", [a, tc])
    if not strict.all():
        at_t = op("And", [op("Equal", [a, tc]), const(~strict, np.bool_)])
        above = op("Or", [above, at_t])
    cnt = op("ReduceSum", [op("Cast", [above], to=1), const([-1], np.int64)], keepdims=0)
    # +-inf and NaN (every comparison false) -> 0xFF
    finite = op("LessOrEqual", [op("Abs", [xf]), const(np.finfo(np.float32).max)])
    code = op("Where", [finite, cnt, const(255.0)])
    op("QuantizeLinear", [code, const(1.0), const(0, np.uint8)], node.output[0])
    return nodes, inits


__all__ = ["E8M0", "F4", "F8", "NARROW", "cast_to_e8m0", "cast_to_float8", "e8m0_thresholds", "encode_float", "castlike_to_cast", "cast_from_f8",
           "cast_to_narrow", "decode_f8", "f64_boundary", "f8_table", "narrow_values", "retype",
           "unrewritten_narrow_quant"]
