"""Dense elements attributes <-> numpy: the one decoder (and encoder) of the project.

``dense<...>`` constants are stored little-endian in ``DenseIntOrFPElementsAttr.data``; a splat is
stored as a single element. :func:`dense_to_numpy` decodes every element type the frontend emits,
bit-exactly: ``bf16`` is widened to float32 (exact: bf16 is the high half of an f32), ``i1`` is
bool, odd integer widths go to the next wider numpy integer. :func:`numpy_to_dense` is the inverse
(``bf16`` rounds to nearest even, which is exact for values that came from bf16; the bf16 bit
conversions are the ISA's, :mod:`m100.targets.m100.numerics`).

Used by the graph passes (``passes/graph/common.py``), the schedule's IR facts and the numpy
reference executor (``frontend/reference*.py``); nothing else decodes dense attributes.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    TensorType,
)
from xdsl.ir import Attribute

from m100.errors import M100Error
from m100.targets.m100.numerics import bf16_bits_to_f32, f32_to_bf16_bits


class DenseError(M100Error, ValueError):
    """A dense attribute whose element type has no numpy decoding."""


def storage_dtype(t: Attribute) -> np.dtype:
    """The numpy dtype of one stored element of type ``t`` (bf16: ``<u2``, its raw bits)."""
    if isinstance(t, Float32Type):
        return np.dtype("<f4")
    if isinstance(t, Float64Type):
        return np.dtype("<f8")
    if isinstance(t, Float16Type):
        return np.dtype("<f2")
    if isinstance(t, BFloat16Type):
        return np.dtype("<u2")
    if isinstance(t, IndexType):
        return np.dtype("<i8")
    if isinstance(t, IntegerType):
        w = t.width.data
        if w == 1:
            return np.dtype("u1")
        unsigned = t.signedness.data.name == "UNSIGNED"
        for bits in (8, 16, 32, 64):
            if w <= bits:
                return np.dtype(f"<{'u' if unsigned else 'i'}{bits // 8}")
    raise DenseError(f"dense constants of element type {t} are not supported")


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The value of a dense attribute as a numpy array of its shape (bit-exact; bf16 as float32,
    i1 as bool). Raises :class:`DenseError` for an element type without a decoding."""
    et = attr.get_element_type()
    shape = tuple(attr.get_shape())
    arr = np.frombuffer(attr.data.data, dtype=storage_dtype(et))
    if isinstance(et, BFloat16Type):
        arr = bf16_bits_to_f32(arr)
    elif isinstance(et, IntegerType) and et.width.data == 1:
        arr = arr != 0
    else:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    n = math.prod(shape)
    if arr.size == 1 and n != 1:
        return np.full(shape, arr[0], dtype=arr.dtype)
    if arr.size != n:
        raise DenseError(f"dense constant of type {attr.type} holds {arr.size} elements, not {n}")
    # every branch above made a new array of its own (``astype`` copies): no second copy
    return arr.reshape(shape)


def dense_view(attr: DenseIntOrFPElementsAttr) -> np.ndarray | None:
    """:func:`dense_to_numpy` of ``attr`` for reading only, without its copy: a read-only view of
    the attribute's bytes in its shape, or None where the decoded array is not the stored bytes
    as they are (bf16 widened, i1 as bool, a splat, a byte order other than the machine's, an
    element type without a decoding) -- the caller decodes those. Where it answers, the same
    dtype, shape and bits as :func:`dense_to_numpy` (``test_dense_view_is_dense_to_numpy``);
    writing into it raises numpy's ValueError. Weights are most of a model's bytes (ResNet-50:
    100 MB): the graph passes that only read them and the scheduler's weight tensors (emitted
    as the same bytes, :func:`m100.passes.schedule.emit_core.const_bytes`) take this view."""
    et = attr.get_element_type()
    if not isinstance(et, (IntegerType, IndexType, Float16Type, Float32Type, Float64Type)) or \
            (isinstance(et, IntegerType) and et.width.data == 1):
        return None
    try:
        dt = storage_dtype(et)
    except DenseError:
        return None
    shape = tuple(attr.get_shape())
    data = attr.data.data
    if not dt.isnative or len(data) != math.prod(shape) * dt.itemsize:
        return None
    return np.frombuffer(data, dtype=dt).reshape(shape)


def numpy_to_dense(arr: np.ndarray, ty: TensorType) -> DenseIntOrFPElementsAttr:
    """A dense attribute of type ``ty`` holding ``arr`` (cast to the element type)."""
    et = ty.get_element_type()
    shape = tuple(ty.get_shape())
    a = np.asarray(arr)
    if isinstance(et, BFloat16Type):
        data = f32_to_bf16_bits(np.broadcast_to(a.astype(np.float32), shape))
    elif isinstance(et, IntegerType) and et.width.data == 1:
        data = np.broadcast_to(a.astype(bool), shape).astype(np.uint8) * np.uint8(0xFF)  # as xDSL
    else:
        data = np.broadcast_to(a, shape).astype(storage_dtype(et), copy=False)
    # ``tobytes`` writes C order whatever the layout (a transposed weight, a broadcast): the
    # same bytes as a contiguous copy first, without that copy
    return DenseIntOrFPElementsAttr(ty, BytesAttr(data.tobytes()))


__all__ = ["DenseError", "bf16_bits_to_f32", "dense_to_numpy", "dense_view", "f32_to_bf16_bits",
           "numpy_to_dense", "storage_dtype"]
