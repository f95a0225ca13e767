"""xDSL's common-subexpression elimination without hashing the constants' bytes.

Why: xDSL's CSE keys every candidate op by ``OperationInfo``, whose hash includes the hash of each
property -- for an ``arith.constant`` of weights, Python's hash of the whole ``bytes`` of the
data (SipHash over every byte, once per bytes object). m100-graph runs CSE twice, first on the
frontend's weights, then on the weights layout-nhwc / fold-batchnorm made anew: ResNet-18
hashes 47 MB twice (~0.03 CPU-s of each ~0.04 CPU-s CSE), ResNet-50 100 MB twice.

What: the same driver (xDSL 0.74's ``CSEDriver``: the same walk, scopes, side-effect rules,
replacements and erasures) whose known-ops table hashes a ``DenseIntOrFPElementsAttr`` property
by (name, element-and-shape type, byte length, its first and last :data:`SAMPLE` bytes) instead
of all its bytes. Two ops are still the same
op exactly when xDSL's ``OperationInfo.__eq__`` says so (names, attributes, properties --
bytes compared in full --, operands, result types, regions): a dict finds an equal key whatever
the hash, as long as equal keys hash equal, which they do (equal attributes have equal types
and equal bytes, so equal lengths and ends). So every CSE decision is xDSL's;
``test_cse_weights.py`` compares the printed module with xDSL's pass on models with equal,
distinct and same-shaped constants.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.traits import IsolatedFromAbove
from xdsl.transforms import common_subexpression_elimination as xcse


#: bytes from each end of a constant's data that enter its hash (same-shaped weights -- ResNet-50's
#: batch-norm vectors, its repeated blocks -- must not all fall into one bucket: every op of a
#: bucket is compared with every other, and xDSL's ``__eq__`` hashes both again)
SAMPLE = 64


def _property_hash(item) -> int:
    name, value = item
    if type(value) is DenseIntOrFPElementsAttr:
        data = value.data.data
        return hash((name, DenseIntOrFPElementsAttr, value.type, len(data), data[:SAMPLE],
                     data[-SAMPLE:]))
    return hash(item)


class _Info(xcse.OperationInfo):
    """``OperationInfo`` with a dense property hashed by its type, length and ends (equality:
    xDSL's, which compares all the bytes)."""

    def __hash__(self):
        return hash((self.name,
                     sum(hash(i) for i in self.op.attributes.items()),
                     sum(_property_hash(i) for i in self.op.properties.items()),
                     hash(self.op.result_types),
                     hash(self.op.operands)))


class _KnownOps(xcse.KnownOps):
    def __getitem__(self, k):
        return self._known_ops[_Info(k)]

    def __setitem__(self, k, v):
        self._known_ops[_Info(k)] = v

    def __contains__(self, k):
        return _Info(k) in self._known_ops

    def get(self, k, default=None):
        return self._known_ops.get(_Info(k), default)

    def pop(self, k):
        return self._known_ops.pop(_Info(k))


class _Driver(xcse.CSEDriver):
    """xDSL's driver; its two scope-opening methods make :class:`_KnownOps` (xDSL 0.74's code
    with ``KnownOps`` replaced)."""

    def _simplify_block(self, block: Block):
        for op in block.ops:
            if op.regions:
                if op.has_trait(IsolatedFromAbove, value_if_unregistered=True):
                    old_scope = self._known_ops
                    self._known_ops = _KnownOps()
                    for region in op.regions:
                        self._simplify_region(region)
                    self._known_ops = old_scope
                else:
                    for region in op.regions:
                        self._simplify_region(region)
            self._simplify_operation(op)

    def _simplify_region(self, region: Region):
        if not region.blocks:
            return
        if len(region.blocks) == 1:
            old_scope = self._known_ops
            self._known_ops = _KnownOps(self._known_ops)
            self._simplify_block(region.block)
            self._known_ops = old_scope


def cse(ctx: Context, module: ModuleOp) -> None:
    """``CommonSubexpressionElimination().apply(ctx, module)`` with constants' bytes unhashed."""
    _Driver(_known_ops=_KnownOps()).simplify(module)


@dataclass(frozen=True)
class CseWeights(ModulePass):
    """xDSL's common-subexpression elimination, a weights constant hashed by its ends (not its bytes).

    What: merges ops that xDSL's ``cse`` merges -- the same driver, scopes, side-effect rules and
    equality (``OperationInfo.__eq__``: a dense constant's bytes compared in full) -- with the
    known-ops table hashing a ``DenseIntOrFPElementsAttr`` property by its name, type, byte
    length and first / last :data:`SAMPLE` bytes (module doc).
    Why: m100-graph runs CSE twice over every weight of a model (ResNet-50: 100 MB hashed twice).
    Pre: any module. Post: the module xDSL's ``cse`` gives (``test_cse_weights.py``).
    Options: none."""

    name = "cse-weights"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        cse(ctx, op)


__all__ = ["CseWeights", "cse"]
