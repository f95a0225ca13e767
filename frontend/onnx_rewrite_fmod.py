"""Float ``Mod`` with ``fmod=1`` (C's ``fmod``) computed exactly, through ``arith.remf``.

torch-mlir lowers it as ``a - b * trunc(a / b)``: the division rounds, so as soon as the quotient
has more than 24 significant bits the result is far off (fmod(3.36e10, -0.43) gave 2048 instead of
0.048; silently wrong, found by comparing against numpy's ``fmod`` on a wide range). Its
lowering of ``fmod=0`` (Python's ``%``) is exact instead: ``arith.remf`` (IEEE fmod, the CVU's
``rem`` stage in the float lane) plus the sign fix ``r + b`` where ``r != 0`` and the signs differ.

Because ``fmod(a, b) = sign(a) * fmod(|a|, |b|)`` and, on non-negative operands, Python's ``%``
is ``fmod`` (no sign fix applies), the rewrite is::

    m = Mod(Abs(a), Abs(b), fmod=0);  y = Where(a < 0, Neg(m), m)

exact for every finite ``a`` and non-zero ``b``; NaN for ``b == 0`` or an infinite ``a`` (as fmod);
``fmod(a, inf) = a``. The sign of a zero result may differ from C's (``-0`` vs ``+0`` for ``a <= -0``
only through ``Neg(0) = -0``, which is C's sign too).
"""

from __future__ import annotations

_FLOATS = (1, 10, 16)  # float, float16, bfloat16


def rewrite_float_fmod(node, types, names, helper, numpy_helper):
    """(nodes, initializers) replacing a float ``Mod(fmod=1)``, or None to keep ``node``."""
    fmod = next((a.i for a in node.attribute if a.name == "fmod"), 0)
    t = types.get(node.input[0])
    if fmod != 1 or t not in _FLOATS:
        return None
    import numpy as np
    from onnx import helper as h

    a, b = node.input[:2]
    base = node.name or node.output[0]
    zero = numpy_helper.from_array(np.zeros((), h.tensor_dtype_to_np_dtype(t)), names("fm_zero"))
    aa, ab, m, neg, lt = (names(f"fm_{s}") for s in ("abs_a", "abs_b", "rem", "neg", "lt"))
    return [helper.make_node("Abs", [a], [aa], name=f"{base}/m100_AbsA"),
            helper.make_node("Abs", [b], [ab], name=f"{base}/m100_AbsB"),
            helper.make_node("Mod", [aa, ab], [m], fmod=0, name=f"{base}/m100_Mod"),
            helper.make_node("Neg", [m], [neg], name=f"{base}/m100_Neg"),
            helper.make_node("Less", [a, zero.name], [lt], name=f"{base}/m100_Less"),
            helper.make_node("Where", [lt, neg, m], [node.output[0]],
                             name=f"{base}/m100_Where")], [zero]
