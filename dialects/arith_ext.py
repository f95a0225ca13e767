"""``ArithExt``: xDSL 0.74's ``arith`` dialect plus the ops it lacks that torch-mlir emits.

- ``arith.remf``: the IEEE remainder of a division rounded toward zero, ``fmod(a, b)`` (the sign
  of ``a``; exact, NaN for ``b == 0`` or an infinite ``a``). torch-mlir lowers ONNX ``Mod`` of
  floats with ``fmod=0`` to it (``torch.remainder``: ``remf`` plus a sign fix), and
  ``frontend/onnx_rewrite_fmod.py`` routes ``fmod=1`` through it too. The CVU computes it with
  its ``rem`` stage (docs/isa.md, "CVU lanes").

It REPLACES xDSL's ``arith`` in :mod:`m100.context` (as ``LinalgExt`` replaces ``linalg``): the other
ops are xDSL's own classes, so ``isinstance`` checks against ``xdsl.dialects.arith`` still hold.
"""

from __future__ import annotations

from xdsl.dialects.arith import Arith as _XdslArith
from xdsl.dialects.arith import FloatingPointLikeBinaryOperation
from xdsl.ir import Dialect
from xdsl.irdl import irdl_op_definition, traits_def
from xdsl.traits import Pure


@irdl_op_definition
class RemFOp(FloatingPointLikeBinaryOperation):
    """``fmod(lhs, rhs)`` (C's ``fmod``; MLIR's ``arith.remf``)."""

    name = "arith.remf"

    traits = traits_def(Pure())


ArithExt = Dialect("arith", [*_XdslArith.operations, RemFOp], list(_XdslArith.attributes),
                   list(_XdslArith._interfaces))

__all__ = ["ArithExt", "RemFOp"]
