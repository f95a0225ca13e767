"""``Pow`` of an integer base by an integer exponent, exactly, by square-and-multiply.

torch-mlir lowers an integer ``Pow`` through f64 (``sitofp``, ``math.powf``, ``fptosi``), which the
M100 has no unit for (refused: "element type f64"). ONNX's result is the integer power (ORT:
``static_cast<T>(std::pow(x, y))``, numpy: ``x ** y``). With ``yp = max(y, 0)`` and the bits of
``yp`` taken by ``Div``/``Mod`` (opset-independent; ``yp >= 0``)::

    r = 1, b = x
    for k in 0..4:   r = r * (bit_k(yp) ? b : 1);   b = (yp >= 2**(k+1) ? b : 0) ** 2
    r = r * (yp >= 32 ? b : 1)

``b`` is squared only while ``yp`` has higher bits, so a square overflows only when the true power
does (then ``|x| >= 2`` and ``|x|**yp >= b**2``): the CVU's integer lane faults on it, as on any
product outside i32 (never a wrapped number). ``yp >= 32`` with ``|x| <= 1`` gives 0, 1 or the
parity of ``-1`` (bit 0 is in ``r``). A negative exponent gives what ``std::pow`` truncated gives:
1 for ``x = 1``, +-1 for ``x = -1`` by parity, 0 otherwise (``x = 0`` is undefined in ONNX; 0 here).
Only int32/int64 bases with an integer exponent are rewritten (int64 is held as int32 by the
runtime); a float exponent with an integer base stays (and is refused).
"""

from __future__ import annotations

import numpy as np

_INT_BASE = (6, 7)  # int32, int64
_INT_EXP = (2, 3, 4, 5, 6, 7, 12, 13)  # uint8, int8, uint16, int16, int32, int64, uint32, uint64


def rewrite_int_pow(node, types, names, helper, numpy_helper):
    """(nodes, initializers) replacing ``node`` (an integer ``Pow``) as above, or None."""
    tx, ty = types.get(node.input[0]), types.get(node.input[1])
    if tx not in _INT_BASE or ty not in _INT_EXP:
        return None
    npt = np.int64 if tx == 7 else np.int32
    base = node.name or node.output[0]
    nodes, inits, n = [], [], [0]

    def const(v):
        t = numpy_helper.from_array(np.array(v, npt), names("ipow_c"))
        inits.append(t)
        return t.name

    def op(kind, ins, **attrs):
        n[0] += 1
        out = names(f"ipow_{kind.lower()}")
        nodes.append(helper.make_node(kind, ins, [out], name=f"{base}/m100_{kind}{n[0]}", **attrs))
        return out

    x, y = node.input[0], node.input[1]
    if ty != tx:
        y = op("Cast", [y], to=tx)
    zero, one = const(0), const(1)
    yp = op("Max", [y, zero])
    r, b = None, x
    for k in range(5):
        bit = op("Mod", [op("Div", [yp, const(1 << k)]), const(2)])
        f = op("Where", [op("Equal", [bit, one]), b, one])
        r = f if r is None else op("Mul", [r, f])
        bb = op("Where", [op("Greater", [yp, const((2 << k) - 1)]), b, zero])
        b = op("Mul", [bb, bb])
    r = op("Mul", [r, op("Where", [op("Greater", [yp, const(31)]), b, one])])
    # negative exponents: 1 for x = 1, (-1)**y for x = -1, else 0
    odd = op("Equal", [op("Mod", [y, const(2)]), one])
    minus_one = op("Where", [odd, const(-1), one])
    neg = op("Where", [op("Equal", [x, one]), one,
                       op("Where", [op("Equal", [x, const(-1)]), minus_one, zero])])
    nodes.append(helper.make_node("Where", [op("Less", [y, zero]), neg, r], [node.output[0]],
                                  name=f"{base}/m100_Where"))
    return nodes, inits
