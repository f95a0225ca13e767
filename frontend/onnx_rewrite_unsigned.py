"""ONNX rewrites of integer ops that torch-mlir lowers inexactly: unsigned ones it lowers as signed,
and signed ``Neg`` (applied before it).

MLIR integers are signless and torch has no uint16/32/64: torch-mlir keeps ONNX's unsignedness
only in some ops (``extui``, ``uitofp``, ``cmpi ult``, ``maxui``/``minui``) and lowers others with
their signed form on the same bits, so a uint8 200 is read as -56. Each op below was a silently
wrong result (found by the integer differential fuzzer, ``m100.tools.fuzz_int``):

- ``Mod`` and ``Div`` (``remsi`` / ``divsi``: 200 % 7 gave 0, 161 / 6 gave 241). uint8: the operands
  are cast to int64 (zero extension), the op runs signed on the exact values, the result is cast
  back. uint16 (torch-mlir cannot lower a Cast from it): the quotient is computed with ops
  torch-mlir lowers unsigned (BitShift, unsigned compares, Where) and a signed Div whose operands
  are both below 2**15: for a divisor b < 2**15, ``q0 = ((a >> 1) / b) << 1``, ``r = a - q0 b``
  (< 2b), ``q = q0 + (r >= b)``; for b >= 2**15, ``q = (a >= b)``; Mod is ``a - q b``. uint32 /
  uint64 graph inputs (range-checked to [0, 2**31) at run time, where signed and unsigned agree)
  are left as they are; other uint32/64 Mods and Divs are refused with one line.
- ``Abs`` (``math.absi``: 254 gave 2) is the identity on unsigned values; ``Sign`` is
  ``Where(x > 0, 1, 0)`` (the compare is lowered unsigned).
- Order-based ops (``TopK``, ``MaxPool``, ``Clip``) of uint8/uint16
  compare signed (TopK of [..., 200, 255] picked 127): their inputs go
  through ``x + 2**(w-1)`` (wrapping: the same bits as ``x XOR 2**(w-1)``), which maps unsigned
  order onto signed order, and their value outputs back through the same Add (indices are
  unchanged). ``Add`` takes 8/16-bit integers from opset 14 on (``BitwiseXor`` only from 18): in
  older models a uint8 ``MaxPool`` is left to ``onnx_rewrite_quant`` (Cast to float and back),
  the others are refused in one line. uint32/uint64 values are left as they are (held as i32, range-checked
  graph inputs compare the same either way). ``ReduceMax``/``ReduceMin`` of uint8 are not flipped:
  torch-mlir lowers them unsigned (``maxui``/``minui``), which the CVU reduction computes on the
  zero-extended values (``passes/schedule/from_ir/cvu.py``; flipped, ``maxui`` was wrong).
  ``ArgMax``/``ArgMin`` of uint8 are lowered unsigned too (``cmpi ugt``), but the CSU routine
  compares signed: their input is zero-extended to int32 (a Cast) instead of flipped; uint16
  ones are refused by the scheduler.
- ``Neg`` of int8/int16/int32/int64 is lowered through f32 (``sitofp``, ``negf``, ``fptosi``):
  an int32 beyond 2**24 lost its low bits (Neg of 16777217 gave -16777216: silently wrong) and
  the int8 -128 faulted instead of wrapping to -128 as ONNX (numpy) does. It becomes
  ``Sub(0, x)`` (``subi``: exact, wrapping in 8/16 bits; an i32 overflow is the interpreter's
  fault).
"""

from __future__ import annotations

import numpy as np

_UNSIGNED = (2, 4, 12, 13)  # TensorProto UINT8, UINT16, UINT32, UINT64


def _unsigned_div_mod(node, graph, types, names, helper):
    """Mod / Div of unsigned integers: see the module doc."""
    t = types.get(node.input[0])
    if t not in _UNSIGNED or types.get(node.input[1]) != t:
        return None
    from onnx import TensorProto

    if t == TensorProto.UINT16:
        return _uint16_div_mod(node, names, helper)
    if t != TensorProto.UINT8:
        # torch-mlir cannot lower a Cast from uint32/64. uint32/uint64 graph inputs are
        # range-checked to [0, 2**31) by the runtime (held as i32), so its remsi is exact on
        # them; a computed value may be a wrapped pattern: refused
        inputs = {i.name for i in graph.input} - {i.name for i in graph.initializer}
        if all(x in inputs for x in node.input[:2]):
            return None
        from m100.frontend.onnx_import import FrontendError
        raise FrontendError(f"{node.op_type} '{node.name or node.output[0]}' of "
                            f"{TensorProto.DataType.Name(t).lower()} is not supported (torch-mlir "
                            "computes it signed; only uint8, or uint32/uint64 graph inputs)")

    base = node.name or node.output[0]
    op = node.op_type
    a, b, m = names(f"u{op.lower()}_a"), names(f"u{op.lower()}_b"), names(f"u{op.lower()}")
    nodes = [helper.make_node("Cast", [node.input[0]], [a], to=TensorProto.INT64,
                              name=f"{base}/m100_Cast_a"),
             helper.make_node("Cast", [node.input[1]], [b], to=TensorProto.INT64,
                              name=f"{base}/m100_Cast_b"),
             helper.make_node(op, [a, b], [m], name=f"{base}/m100_{op}",
                              **{at.name: helper.get_attribute_value(at) for at in node.attribute}),
             helper.make_node("Cast", [m], [node.output[0]], to=t, name=f"{base}/m100_Cast")]
    return nodes, []


def _uint16_div_mod(node, names, helper):
    """uint16 Div / Mod without a Cast from uint16 (see the module doc)."""
    a, b = node.input[0], node.input[1]
    base = node.name or node.output[0]
    from onnx import numpy_helper

    # raw data: torch-mlir's importer does not read uint16 constants from int32_data
    inits = [numpy_helper.from_array(np.array(v, np.uint16), names("u16_c")) for v in (0, 1, 1 << 15)]
    zero, one, half = (i.name for i in inits)
    out = []

    def mk(op, ins, **attrs):
        o = names(f"u16_{op.lower()}")
        out.append(helper.make_node(op, ins, [o], name=f"{base}/m100_{op}_{len(out)}", **attrs))
        return o

    a2 = mk("BitShift", [a, one], direction="RIGHT")  # a >> 1 < 2**15
    q0 = mk("BitShift", [mk("Div", [a2, b]), one], direction="LEFT")  # exact for b < 2**15
    r = mk("Sub", [a, mk("Mul", [q0, b])])  # 0 <= r < 2b, no wrap-around
    q_small = mk("Add", [q0, mk("Where", [mk("GreaterOrEqual", [r, b]), one, zero])])
    q_big = mk("Where", [mk("GreaterOrEqual", [a, b]), one, zero])  # b >= 2**15: q is 0 or 1
    q = mk("Where", [mk("GreaterOrEqual", [b, half]), q_big, q_small])
    if node.op_type == "Div":
        out[-1].output[0] = node.output[0]
    else:  # Mod: fmod 0 and 1 agree on unsigned values
        out.append(helper.make_node("Sub", [a, mk("Mul", [q, b])], [node.output[0]],
                                    name=f"{base}/m100_Sub_mod"))
    return out, inits



_ORDER_OPS = {  # op -> (the inputs that are values, the outputs that are values)
    "TopK": ((0,), (0,)), "MaxPool": ((0,), (0,)), "ArgMax": ((0,), ()), "ArgMin": ((0,), ()),
    "Clip": ((0, 1, 2), (0,)),
}
_SIGN_BIT = {2: np.uint8(1 << 7), 4: np.uint16(1 << 15)}  # TensorProto UINT8, UINT16


def _flip_order(node, types, names, helper, opset: int):
    """An order-based op of uint8/uint16 on ``x + 2**(w-1)`` (see the module doc)."""
    t = types.get(node.input[0])
    if t not in _SIGN_BIT or (opset < 14 and node.op_type == "MaxPool"):
        return None
    if node.op_type in ("ArgMax", "ArgMin"):
        # torch-mlir lowers these with an unsigned compare (``cmpi ugt``), so a flipped input
        # would be compared wrongly, and the CSU compares signed: a uint8 input is
        # zero-extended to int32 instead (exact); uint16 (torch-mlir can not Cast from it) is
        # refused by the scheduler in one line (``ir_index.argmax_info``)
        from onnx import TensorProto

        if t != TensorProto.UINT8:
            return None
        base = node.name or node.output[0]
        w = names("uwide")
        new = helper.make_node(node.op_type, [w], list(node.output), name=base)
        new.attribute.extend(node.attribute)
        new.domain = node.domain
        return [helper.make_node("Cast", [node.input[0]], [w], to=TensorProto.INT32,
                                 name=f"{base}/m100_Widen"), new], []
    if opset < 14:
        from onnx import TensorProto

        from m100.frontend.onnx_import import FrontendError
        raise FrontendError(f"{node.op_type} '{node.name or node.output[0]}' of "
                            f"{TensorProto.DataType.Name(t).lower()} in opset {opset} is not "
                            "supported (torch-mlir compares it signed; convert the model to opset "
                            ">= 14)")
    from onnx import numpy_helper

    base = node.name or node.output[0]
    c = numpy_helper.from_array(np.array(_SIGN_BIT[t]), names("usign"))
    ins_at, outs_at = _ORDER_OPS[node.op_type]
    pre, post = [], []
    new = helper.make_node(node.op_type, list(node.input), list(node.output), name=base)
    new.attribute.extend(node.attribute)
    new.domain = node.domain
    for i in ins_at:
        if i < len(node.input) and node.input[i]:
            f = names("uflip")
            pre.append(helper.make_node("Add", [node.input[i], c.name], [f],
                                        name=f"{base}/m100_Flip_in{i}"))
            new.input[i] = f
    for i in outs_at:
        if i < len(node.output) and node.output[i]:
            f = names("uflip")
            post.append(helper.make_node("Add", [f, c.name], [node.output[i]],
                                         name=f"{base}/m100_Flip_out{i}"))
            new.output[i] = f
    return pre + [new] + post, [c]


def _abs_sign(node, types, names, helper):
    t = types.get(node.input[0])
    if t not in _UNSIGNED:
        return None
    base = node.name or node.output[0]
    if node.op_type == "Abs":
        return [helper.make_node("Identity", [node.input[0]], [node.output[0]],
                                 name=f"{base}/m100_Identity")], []
    from onnx import helper as h, numpy_helper

    npt = h.tensor_dtype_to_np_dtype(t)
    zero, one = (numpy_helper.from_array(np.array(v, npt), names("usign")) for v in (0, 1))
    gt = names("upos")
    return [helper.make_node("Greater", [node.input[0], zero.name], [gt], name=f"{base}/m100_Gt"),
            helper.make_node("Where", [gt, one.name, zero.name], [node.output[0]],
                             name=f"{base}/m100_Where")], [zero, one]


_SIGNED = (3, 5, 6, 7)  # TensorProto INT8, INT16, INT32, INT64


def _signed_neg(node, types, names, helper):
    """``Neg`` of a signed integer as ``Sub(0, x)`` (see the module doc)."""
    t = types.get(node.input[0])
    if t not in _SIGNED:
        return None
    from onnx import helper as h, numpy_helper

    zero = numpy_helper.from_array(np.array(0, h.tensor_dtype_to_np_dtype(t)), names("uzero"))
    base = node.name or node.output[0]
    return [helper.make_node("Sub", [zero.name, node.input[0]], [node.output[0]],
                             name=f"{base}/m100_Sub")], [zero]


def rewrite_unsigned(nodes, graph, names, types, opset: int) -> tuple[list, list, int]:
    """(new node list, new initializers, count) of the rewrites above on ``nodes`` (the nodes of
    ``graph``, maybe already rewritten; ``types``: value name -> TensorProto element type)."""
    ops = set(_ORDER_OPS) | {"Div", "Mod", "Abs", "Sign"}
    if not any((n.op_type in ops and types.get(n.input[0]) in _UNSIGNED) or
               (n.op_type == "Neg" and types.get(n.input[0]) in _SIGNED) for n in nodes):
        return list(nodes), [], 0
    from onnx import helper

    from m100.frontend.onnx_rewrite import replace_nodes

    def one(node):
        if node.op_type in ("Div", "Mod"):
            return _unsigned_div_mod(node, graph, types, names, helper)
        if node.op_type in ("Abs", "Sign"):
            return _abs_sign(node, types, names, helper)
        if node.op_type == "Neg":
            return _signed_neg(node, types, names, helper)
        if node.op_type in _ORDER_OPS:
            return _flip_order(node, types, names, helper, opset)
        return None

    return replace_nodes(nodes, one)
