"""The two ops of torch-mlir's ``tm_tensor`` dialect that ONNX TopK lowers to (generic form only).

``tm_tensor.sort dimension(d) outs(%values, %indices)`` sorts ``%values`` along ``d`` in place,
permuting ``%indices`` alike; its region compares two elements (``tm_tensor.yield`` of an ``i1``:
``cmpf oge`` for TopK largest, ``ole`` for smallest). torch-mlir produces it for TopK only, with an
iota as the indices and slices of the first K after it; m100-schedule lowers that to the CSU's
``topk`` routine (ties by the lower index, as ONNX TopK defines). Nothing else of tm_tensor is
known here (the frontend names TopK when another tm_tensor op appears).
"""
from __future__ import annotations

from xdsl.dialects.builtin import I64, IntegerAttr
from xdsl.ir import Dialect
from xdsl.irdl import (AttrSizedOperandSegments, IRDLOperation, irdl_op_definition, prop_def,
                       region_def, traits_def, var_operand_def, var_result_def)
from xdsl.traits import IsTerminator


@irdl_op_definition
class SortOp(IRDLOperation):
    name = "tm_tensor.sort"
    inputs = var_operand_def()
    outputs = var_operand_def()
    results_ = var_result_def()
    dimension = prop_def(IntegerAttr[I64])
    region = region_def()
    irdl_options = (AttrSizedOperandSegments(as_property=True),)


@irdl_op_definition
class YieldOp(IRDLOperation):
    name = "tm_tensor.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())


TMTensor = Dialect("tm_tensor", [SortOp, YieldOp])
