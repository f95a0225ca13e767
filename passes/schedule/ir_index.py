"""Index ops of classified linalg IR: gather (``csu.gather``) and arg-max/min (``csu.argmax``).

Split out of :mod:`.from_ir` (size rule). torch-mlir lowers ONNX Gather / GatherElements to a
``linalg.generic`` whose body extracts from the data tensor at ``index_cast(indices)`` on the
gathered axis and ``linalg.index`` elsewhere, and ArgMax / ArgMin to a two-result reduction
(value, index). These readers recognise exactly those forms and say what they compute; anything
else is one :class:`ScheduleError`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.ir.affine import AffineMap

from .graph import ScheduleError
from .ir_facts import _shape, linear_map


@dataclass
class GatherInfo:
    table: SSAValue  # the data tensor (defined outside the generic)
    indices: SSAValue  # the generic's input
    axis: int
    elements: bool  # GatherElements (indices of the output's shape) vs Gather (rows)
    table_shape: tuple[int, ...]
    out_shape: tuple[int, ...]

    @property
    def outer(self) -> int:
        return math.prod(self.table_shape[:self.axis])

    @property
    def inner(self) -> int:
        return math.prod(self.table_shape[self.axis + 1:])


_IGNORED = ("arith.constant", "arith.cmpi", "cf.assert", "linalg.yield")


def gather_info(op: Operation, where: str) -> GatherInfo:
    """What a ``csu.gather`` generic computes (see the module doc)."""
    ins = list(op.inputs)  # type: ignore[attr-defined]
    block = op.regions[0].blocks[0]
    bad = ScheduleError(f"{where}: this gather form is not supported (one index input, one "
                        "tensor.extract at index_cast(index) on one axis, linalg.index elsewhere)")
    if len(ins) != 1 or len(op.results) != 1:
        raise bad
    exs = [o for o in block.ops if o.name == "tensor.extract"]
    yld = list(block.ops)[-1]
    if len(exs) != 1 or yld.operands[0] is not exs[0].results[0]:
        raise bad
    ex = exs[0]
    table = ex.operands[0]
    if table.owner is not None and isinstance(table.owner, Operation) and \
            table.owner.parent_block() is block:
        raise bad
    for o in block.ops:
        if o is ex or o.name in _IGNORED or o.name in ("linalg.index", "arith.index_cast"):
            continue
        raise bad
    tshape, oshape = _shape(table), _shape(op.results[0])
    pos: list[tuple[str, int]] = []
    for p, v in enumerate(ex.operands[1:]):
        o = v.owner
        if isinstance(o, Operation) and o.name == "linalg.index":
            pos.append(("dim", o.properties["dim"].value.data))  # type: ignore[union-attr]
        elif isinstance(o, Operation) and o.name == "arith.constant" and \
                o.value.value.data == 0 and p < min(len(tshape), len(oshape)) and \
                tshape[p] == oshape[p] == 1:  # type: ignore[union-attr]
            # canonicalization folds ``linalg.index p`` of a unit axis to the constant 0
            pos.append(("dim", p))
        elif isinstance(o, Operation) and o.name == "arith.index_cast" and \
                isinstance(o.operands[0], BlockArgument) and o.operands[0].index == 0 and \
                o.operands[0].block is block:
            pos.append(("idx", 0))
        else:
            raise bad
    axes = [p for p, (k, _) in enumerate(pos) if k == "idx"]
    if len(axes) != 1:
        raise bad
    axis = axes[0]
    maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
    r = len(oshape)
    if linear_map(maps[1]) != linear_map(AffineMap.identity(r)) or len(tshape) != r or \
            any(k == "dim" and d != p for p, (k, d) in enumerate(pos)):
        raise bad
    in_map = linear_map(maps[0])
    unit = [((tuple(1 if q == d else 0 for q in range(r))), 0) for d in range(r)]
    if in_map == unit:  # GatherElements: indices of the output's shape
        return GatherInfo(table, ins[0], axis, True, tshape, oshape)
    if in_map == [unit[axis]]:  # Gather (indices collapsed to 1-D on the gathered axis)
        return GatherInfo(table, ins[0], axis, False, tshape, oshape)
    raise bad


def flip_map(op: Operation) -> tuple[SSAValue, list] | None:
    """A generic that only reads ``src[.., c - d_k, ..]`` (torch-mlir's reversal of an axis, e.g.
    for ArgMax select_last_index): (src, the source's linear map over the output), else None."""
    block = op.regions[0].blocks[0]
    exs = [o for o in block.ops if o.name == "tensor.extract"]
    yld = list(block.ops)[-1]
    if len(exs) != 1 or len(op.results) != 1 or yld.operands[0] is not exs[0].results[0]:
        return None
    src = exs[0].operands[0]
    if isinstance(src.owner, Operation) and src.owner.parent_block() is block:
        return None
    r = len(_shape(op.results[0]))
    lin = []
    for v in exs[0].operands[1:]:
        o = v.owner
        if isinstance(o, Operation) and o.name == "linalg.index":
            d = o.properties["dim"].value.data  # type: ignore[union-attr]
            lin.append((tuple(1 if q == d else 0 for q in range(r)), 0))
        elif isinstance(o, Operation) and o.name == "arith.subi" and \
                isinstance(o.operands[1].owner, Operation) and \
                o.operands[1].owner.name == "linalg.index" and \
                isinstance(o.operands[0].owner, Operation) and \
                o.operands[0].owner.name == "arith.constant":
            d = o.operands[1].owner.properties["dim"].value.data  # type: ignore[union-attr]
            c = o.operands[0].owner.value.value.data  # type: ignore[union-attr]
            lin.append((tuple(-1 if q == d else 0 for q in range(r)), int(c)))
        elif isinstance(o, Operation) and o.name == "arith.constant" and \
                len(lin) < len(_shape(src)) and _shape(src)[len(lin)] == 1 and \
                o.value.value.data == 0:  # type: ignore[union-attr]
            # the reversed axis has size 1: canonicalize folded ``c - d_k`` to 0
            lin.append((tuple(0 for _ in range(r)), 0))
        else:
            return None
    if len(lin) != len(_shape(src)):
        return None
    maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
    if linear_map(maps[-1]) != linear_map(AffineMap.identity(r)):
        return None
    for o in block.ops:
        if o.name not in ("tensor.extract", "linalg.index", "arith.subi", "arith.constant",
                          "linalg.yield"):
            return None
    return src, lin


@dataclass
class ArgInfo:
    x: SSAValue
    axis: int
    in_shape: tuple[int, ...]
    largest: bool
    last: bool
    result: SSAValue  # the index result


def argmax_info(op: Operation, where: str, fills: dict) -> ArgInfo:
    """What a ``csu.argmax`` generic computes: the index of the row max/min along one axis,
    the first (``ogt``/``olt``) or the last (``oge``/``ole``) of equal extremes."""
    ins = list(op.inputs)  # type: ignore[attr-defined]
    outs = list(op.outputs)  # type: ignore[attr-defined]
    its = [str(i.data) for i in op.iterator_types]  # type: ignore[attr-defined]
    bad = ScheduleError(f"{where}: this arg-max/arg-min form is not supported (one input, one "
                        "reduced axis, a max/min value and its index)")
    if len(ins) != 1 or len(op.results) != 2 or its.count("reduction") != 1 or op.results[0].uses:
        raise bad
    axis = its.index("reduction")
    block = op.regions[0].blocks[0]
    cmps = [o for o in block.ops if o.name in ("arith.cmpf", "arith.cmpi")]
    sels = [o for o in block.ops if o.name == "arith.select"]
    if len(cmps) != 1 or len(sels) != 1:
        raise bad
    c = cmps[0]
    x_arg, acc_arg = block.args[0], block.args[1]
    pred = c.properties["predicate"].value.data  # type: ignore[union-attr]
    # (largest, last of equal extremes) per predicate: float ogt/oge/olt/ole, integer (signed:
    # torch-mlir widens unsigned inputs first) sgt/sge/slt/sle -- MLIR's predicate numbers
    forms = {2: (True, False), 3: (True, True), 4: (False, False), 5: (False, True)} \
        if c.name == "arith.cmpf" else \
        {4: (True, False), 5: (True, True), 2: (False, False), 3: (False, True)}
    if c.name == "arith.cmpi" and pred in (6, 7, 8, 9):
        raise ScheduleError(f"{where}: an arg-max/min with an unsigned compare (a uint16 input) is "
                            "not supported (the CSU compares signed; cast the input to int32)")
    if pred not in forms or list(c.operands) != [x_arg, acc_arg]:
        raise bad
    largest, last = forms[pred]
    init = fills.get(outs[0])
    if c.name == "arith.cmpf":
        start = -math.inf if largest else math.inf
    else:
        # an integer arg-max starts from the type's minimum (an arg-min from its maximum): a row
        # of only that value then keeps index 0 (the first) or takes the last, as the
        # definition does; the CSU routine compares exactly up to 32 bits
        et = x_arg.type
        bits = et.width.data if isinstance(et, IntegerType) else None
        if bits is None or bits > 32:
            raise ScheduleError(f"{where}: an integer arg-max/min of {et} is not supported "
                                "(up to 32-bit integers; cast the input)")
        start = -(1 << (bits - 1)) if largest else (1 << (bits - 1)) - 1
    if init is None or init != start or fills.get(outs[1]) != 0.0:
        raise ScheduleError(f"{where}: an arg-max/min must start from the type's lowest/highest "
                            "value and index 0")
    maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
    n = len(its)
    if linear_map(maps[0]) != linear_map(AffineMap.identity(n)):
        raise bad
    xt = ins[0].type
    if not isinstance(xt, TensorType):
        raise bad
    return ArgInfo(ins[0], axis, _shape(ins[0]), largest, last, op.results[1])


def iota_dim(op: Operation) -> int | None:
    """The dimension ``d`` of a no-input generic that yields ``index_cast(linalg.index d)``
    (torch-mlir's index tensor for a sort), else None."""
    if list(op.inputs) or len(op.results) != 1:  # type: ignore[attr-defined]
        return None
    ops = list(op.regions[0].blocks[0].ops)
    if [o.name for o in ops] != ["linalg.index", "arith.index_cast", "linalg.yield"] or \
            ops[1].operands[0] is not ops[0].results[0] or \
            ops[2].operands[0] is not ops[1].results[0]:
        return None
    return ops[0].properties["dim"].value.data  # type: ignore[union-attr]


@dataclass
class SortInfo:
    x: SSAValue
    axis: int
    shape: tuple[int, ...]
    largest: bool


def sort_info(op: Operation, where: str, iotas: dict) -> SortInfo:
    """A ``tm_tensor.sort`` of (values, iota along the sorted dim) by ``>=``/``>`` (descending,
    TopK largest) or ``<=``/``<`` (ascending): what the CSU topk routine computes with K = L
    (ties by the lower index, the ONNX TopK order)."""
    bad = ScheduleError(f"{where}: this sort is not supported (values and their index iota along "
                        "the sorted dimension, compared by one cmpf/cmpi)")
    ops_in = list(op.operands)
    if len(ops_in) != 2 or len(op.results) != 2:
        raise bad
    axis = op.dimension.value.data  # type: ignore[attr-defined]
    if iotas.get(ops_in[1]) != axis:
        raise bad
    body = list(op.regions[0].blocks[0].ops)
    args = op.regions[0].blocks[0].args
    if len(body) != 2 or body[0].name not in ("arith.cmpf", "arith.cmpi") or \
            list(body[0].operands) != [args[0], args[1]]:
        raise bad
    pred = body[0].properties["predicate"].value.data  # type: ignore[union-attr]
    # descending (largest) for > / >=, ascending for < / <= (MLIR's predicate numbers)
    desc = {2: True, 3: True, 4: False, 5: False} if body[0].name == "arith.cmpf" else \
        {4: True, 5: True, 2: False, 3: False}
    if pred not in desc:
        raise bad
    return SortInfo(ops_in[0], axis, _shape(ops_in[0]), desc[pred])
