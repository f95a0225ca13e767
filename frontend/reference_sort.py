"""Reference handler of ``tm_tensor.sort`` (torch-mlir's lowering of ONNX TopK).

The comparator region must be one ``cmpf``/``cmpi`` of the two value arguments: ``>``/``>=``
sorts descending, ``<``/``<=`` ascending; ties keep their order (a stable sort, the ONNX TopK
order of equal values: lower index first). Every operand is permuted alike along ``dimension``.
"""
from __future__ import annotations

import numpy as np

from .reference_common import ReferenceError

# MLIR predicate numbers: descending for > / >=, ascending for < / <=
_CMPF_DESC = {2: True, 3: True, 4: False, 5: False}
_CMPI_DESC = {4: True, 5: True, 2: False, 3: False}


def _h_sort(ex, op, args, env):
    body = list(op.regions[0].blocks[0].ops)
    bargs = op.regions[0].blocks[0].args
    cmp = body[0] if body else None
    table = _CMPF_DESC if cmp is not None and cmp.name == "arith.cmpf" else _CMPI_DESC
    pred = cmp.properties["predicate"].value.data if cmp is not None and \
        cmp.name in ("arith.cmpf", "arith.cmpi") else None
    if len(body) != 2 or pred not in table or list(cmp.operands) != [bargs[0], bargs[1]]:
        raise ReferenceError("tm_tensor.sort: only a comparator of one cmpf/cmpi of the values "
                             "is supported")
    axis = op.dimension.value.data
    x = np.asarray(args[0])
    key = -x.astype(np.float64) if table[pred] else x.astype(np.float64)
    order = np.argsort(key, axis=axis, kind="stable")
    return [np.take_along_axis(np.asarray(a), order, axis=axis) for a in args]


HANDLERS = {"tm_tensor.sort": _h_sort}
