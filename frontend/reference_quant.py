"""Reference handlers of the ``quant`` ops (:mod:`m100.dialects.quant`), written from the ONNX
definitions: QuantizeLinear ``q = saturate(round_half_even(x / scale) + zero_point)`` (computed in
the expressed float type, like torch-mlir's lowering of it), DequantizeLinear
``x = (q - zero_point) * scale``; ``scast`` reinterprets the storage bits. Per-axis parameters
broadcast along the quantized dimension. Split from ``reference_ops.py`` (module size rule)."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import TensorType

from m100.dialects.quant import QuantizedType, UniformQuantizedPerAxisType

from .reference_common import ReferenceError, _loc, np_dtype


def _params(q: QuantizedType, rank: int, fdt: np.dtype):
    if isinstance(q, UniformQuantizedPerAxisType):
        shape = [1] * rank
        shape[q.quantized_dimension] = len(q.scales)
        return (np.asarray(q.scales, np.float64).astype(fdt).reshape(shape),
                np.asarray(q.zero_points, np.int64).reshape(shape))
    return np.asarray(q.scale, np.float64).astype(fdt), np.int64(q.zero_point)  # type: ignore[attr-defined]


def _qtype(op, t) -> QuantizedType:
    e = t.get_element_type() if isinstance(t, TensorType) else t
    if not isinstance(e, QuantizedType):
        raise ReferenceError(f"{_loc(op)}: expected a quantized type, got {t}")
    return e


def _h_qcast(ex, op, args, env):
    x = np.asarray(args[0])
    q = _qtype(op, op.results[0].type)
    fdt = np_dtype(q.expressed_type)
    scale, zp = _params(q, x.ndim, fdt)
    with np.errstate(all="ignore"):
        r = np.rint(x.astype(fdt) / scale).astype(np.float64) + zp
    r = np.clip(np.nan_to_num(r, nan=0.0), q.qmin, q.qmax)
    return [r.astype(np_dtype(op.results[0].type))]


def _h_dcast(ex, op, args, env):
    v = np.asarray(args[0])
    q = _qtype(op, op.input.type)
    fdt = np_dtype(op.results[0].type)
    scale, zp = _params(q, v.ndim, fdt)
    return [((v.astype(np.int64) - zp).astype(fdt) * scale).astype(fdt)]


def _h_scast(ex, op, args, env):
    return [np.asarray(args[0]).astype(np_dtype(op.results[0].type))]  # two's complement rewrap


HANDLERS = {"quant.qcast": _h_qcast, "quant.dcast": _h_dcast, "quant.scast": _h_scast}
