"""``Cast`` to int16 / uint16 as a table lookup (torch-mlir cannot lower it).

torch-mlir's ONNX importer maps no ONNX element type to torch's ``int16`` / ``uint16`` in ``Cast``
(its dtype table stops at int8, int32, int64, uint8), so every ``Cast(x, to=INT16 | UINT16)`` was
refused in one line, whatever ``x`` was: the integer fuzzer (``m100.tools.fuzz_int``) drew it in
about one graph in ten. 16-bit values themselves are fine (graph inputs, initializers and every
op on them import), so only the change of type is missing. A ``Gather`` from a 16-bit table changes
it exactly:

- 1-byte sources (bool, int8, uint8): ``y = Gather(T, Cast(x, INT32) - lo)`` with ``T[i] =
  wrap16(lo + i)`` over the source's range ``[lo, hi]`` (2 or 256 entries);
- every other source (int16, uint16, int32, int64, float types): ``i = BitwiseAnd(n, 0xFFFF)``
  with ``n`` the source itself (integers; int64 is held as int32 by the runtime, whose low 16 bits
  are the same) or ``Cast(x, INT32)`` (floats: truncation toward zero, as ONNX defines), and
  ``y = Gather(T, i)`` with the 65536-entry ``T[i] = wrap16(i)`` (a two's complement low half).

``wrap16`` keeps the low 16 bits (numpy's ``astype``, ORT's ``static_cast``). A float outside the
target's range is undefined in ONNX; here it wraps like the integers (what numpy and ORT do on x86
through a 32-bit conversion). A ``Cast`` to the type the value already has becomes ``Identity``.
``BitwiseAnd`` needs opset 18; in older models the Cast is left to be refused as before.
"""

from __future__ import annotations

import numpy as np

_BOOL, _INT8, _UINT8, _UINT16, _INT16, _INT32, _INT64 = 9, 3, 2, 4, 5, 6, 7
_TARGET = {_INT16: np.int16, _UINT16: np.uint16}
#: 1-byte sources: their value range
_SMALL = {_BOOL: (0, 1), _INT8: (-128, 127), _UINT8: (0, 255)}
_INTEGER = (_UINT16, _INT16, _INT32, _INT64)
_FLOATS = (1, 10, 16)  # float, float16, bfloat16 (double is refused by the importer anyway)


def _to(node) -> int | None:
    return next((a.i for a in node.attribute if a.name == "to"), None)


def _cast16(node, types, names, opset, helper, numpy_helper):
    """(nodes, initializers) replacing ``node`` (a Cast to int16/uint16), or None to keep it."""
    dst, src = _to(node), types.get(node.input[0])
    base = node.name or node.output[0]
    if src == dst:
        return [helper.make_node("Identity", [node.input[0]], [node.output[0]],
                                 name=f"{base}/m100_Identity")], []
    npt = _TARGET[dst]
    if src in _SMALL:
        lo, hi = _SMALL[src]
        table = numpy_helper.from_array(np.arange(lo, hi + 1).astype(npt), names("c16_table"))
        wide, idx = names("c16_wide"), names("c16_index")
        low = numpy_helper.from_array(np.array(lo, np.int32), names("c16_low"))
        return [helper.make_node("Cast", [node.input[0]], [wide], to=_INT32,
                                 name=f"{base}/m100_Cast"),
                helper.make_node("Sub", [wide, low.name], [idx], name=f"{base}/m100_Sub"),
                helper.make_node("Gather", [table.name, idx], [node.output[0]], axis=0,
                                 name=f"{base}/m100_Gather")], [table, low]
    if opset < 18 or src not in _INTEGER + _FLOATS:
        return None
    nodes = []
    n = node.input[0]
    if src in _FLOATS:
        n = names("c16_int")
        nodes.append(helper.make_node("Cast", [node.input[0]], [n], to=_INT32,
                                      name=f"{base}/m100_Cast"))
        src = _INT32
    if src in (_INT16, _UINT16):  # widened first (uint16 zero-extends), so 0xFFFF is a mask
        wide = names("c16_wide")
        nodes.append(helper.make_node("Cast", [n], [wide], to=_INT32, name=f"{base}/m100_Widen"))
        n = wide
    mask = numpy_helper.from_array(np.array(0xFFFF, np.int64 if src == _INT64 else np.int32),
                                   names("c16_mask"))
    # T[i] = the int16/uint16 whose bits are i
    bits = np.arange(1 << 16, dtype=np.uint16)
    table = numpy_helper.from_array(bits.view(np.int16) if npt is np.int16 else bits,
                                    names("c16_table"))
    idx = names("c16_index")
    nodes += [helper.make_node("BitwiseAnd", [n, mask.name], [idx], name=f"{base}/m100_And"),
              helper.make_node("Gather", [table.name, idx], [node.output[0]], axis=0,
                               name=f"{base}/m100_Gather")]
    return nodes, [table, mask]


def rewrite_cast16(nodes, names, types, opset: int) -> tuple[list, list, int]:
    """(new node list, new initializers, count): every ``Cast`` to int16/uint16 in ``nodes`` as
    above (``types``: value name -> TensorProto element type)."""
    if not any(n.op_type == "Cast" and _to(n) in _TARGET for n in nodes):
        return list(nodes), [], 0
    from onnx import helper, numpy_helper

    from m100.frontend.onnx_rewrite import replace_nodes

    def one(node):
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or _to(node) not in _TARGET:
            return None
        return _cast16(node, types, names, opset, helper, numpy_helper)

    return replace_nodes(nodes, one)
