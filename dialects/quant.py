"""The ``quant`` dialect: MLIR's uniform quantized types and cast ops (xDSL 0.74 has none).

Types (the syntax of MLIR's ``quant`` dialect, ``mlir/lib/Dialect/Quant/IR/TypeParser.cpp``)
---------------------------------------------------------------------------------------------
``!quant.uniform<STORAGE[<MIN:MAX>]:EXPRESSED, SCALE[:ZP]>``
    Per-tensor: ``real = SCALE * (stored - ZP)``. Example ``!quant.uniform<i8:f32, 1.250000e-02:-3>``.
``!quant.uniform<STORAGE[<MIN:MAX>]:EXPRESSED:AXIS, {S0[:Z0], S1[:Z1], ...}>``
    Per-axis: scale/zero point ``i`` apply to index ``i`` of dimension ``AXIS`` of the tensor.

``STORAGE`` is ``iN`` (signed) or ``uN`` (unsigned), 1 <= N <= 32: ``i8``, ``u8``, ``i4``, ``u4``
(``siN``/``uiN`` are read as ``iN``/``uN``, as MLIR does). ``<MIN:MAX>`` narrows the storage range
(printed only when it differs from the full range of the type, e.g. ``i8<-127:127>`` for symmetric
weights). ``EXPRESSED`` is a float type. A zero point of 0 is not printed. Scales print like MLIR's
``printFloat``: ``%e`` with 6 digits when that reads back to the same double, else the shortest
round-trip digits in the same ``d.ddde-XX`` form (MLIR falls back to APFloat's default digits there,
e.g. ``7.8431372549019607E-3``; both read back to the same double).

Ops (MLIR's ``quant.qcast`` / ``quant.dcast`` / ``quant.scast``)
----------------------------------------------------------------
``%q = quant.qcast %f : tensor<..xf32> to tensor<..x!quant.uniform<..>>``  quantize (round half to
even, saturate to the storage range: the ONNX QuantizeLinear rule);
``%f = quant.dcast %q : tensor<..x!quant.uniform<..>> to tensor<..xf32>``  dequantize;
``%s = quant.scast %q : tensor<..x!quant.uniform<i8:..>> to tensor<..xi8>`` (and back) reinterpret
between a quantized type and its storage integer type (no data change; ``u8`` storage is the
signless ``i8`` bit pattern).

Verifiers raise one line naming the type and the rule, e.g. ``!quant.uniform: illegal scale: -1.0
(must be finite and > 0)``.
"""

from __future__ import annotations

import math

import numpy as _np
from collections.abc import Sequence

from xdsl.dialects.builtin import (AnyFloat, ArrayAttr, FloatData, IntAttr, IntegerType,
                                   Signedness, TensorType)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (IRDLOperation, irdl_attr_definition, irdl_op_definition, operand_def,
                       result_def, traits_def)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

__all__ = ["Quant", "UniformQuantizedType", "UniformQuantizedPerAxisType", "QuantizedType",
           "QCastOp", "DCastOp", "SCastOp", "format_scale", "storage_range"]

MAX_STORAGE_BITS = 32


def storage_range(width: int, signed: bool) -> tuple[int, int]:
    """The full value range of a ``width``-bit storage integer."""
    if signed:
        return -(1 << (width - 1)), (1 << (width - 1)) - 1
    return 0, (1 << width) - 1


def format_scale(x: float) -> str:
    """A scale as MLIR's ``printFloat`` writes it when 6 digits are exact, else the shortest
    round-trip digits (always with a ``.``: ``1e-30`` is not an MLIR float literal)."""
    s = f"{x:.6e}"
    if float(s) == x:
        return s
    return _np.format_float_scientific(float(x), unique=True, trim="0")


# --------------------------------------------------------------------------------------------------
# parsing / printing helpers shared by both types
# --------------------------------------------------------------------------------------------------
def _parse_storage(parser: AttrParser) -> tuple[int, bool, int, int]:
    """``iN`` / ``uN`` / ``siN`` / ``uiN``, optional ``<min:max>`` -> (width, signed, min, max)."""
    pos = parser.pos
    t = parser.parse_optional_type()
    if t is not None:
        if not isinstance(t, IntegerType):
            parser.raise_error(f"!quant.uniform: storage type must be an integer (iN or uN), not {t}",
                               pos, parser.pos)
        width = t.width.data
        signed = t.signedness.data != Signedness.UNSIGNED
    else:
        ident = parser.parse_optional_identifier()
        if ident is None or not ident.startswith("u") or not ident[1:].isdigit():
            parser.raise_error("!quant.uniform: expected a storage type (iN or uN)", pos, parser.pos)
        width = int(ident[1:])
        signed = False
    if not 1 <= width <= MAX_STORAGE_BITS:
        parser.raise_error(f"!quant.uniform: illegal storage type size: {width} (1..{MAX_STORAGE_BITS})",
                           pos, parser.pos)
    lo, hi = storage_range(width, signed)
    if parser.parse_optional_punctuation("<"):
        lo = _parse_signed_int(parser)
        parser.parse_punctuation(":")
        hi = _parse_signed_int(parser)
        parser.parse_punctuation(">")
    return width, signed, lo, hi


def _parse_signed_int(parser: AttrParser) -> int:
    neg = parser.parse_optional_punctuation("-") is not None
    v = parser.parse_integer(allow_negative=False, allow_boolean=False)
    return -v if neg else v


def _parse_scale_zp(parser: AttrParser) -> tuple[float, int]:
    pos = parser.pos
    num = parser.parse_number(allow_boolean=False)
    scale = float(num)
    zp = 0
    if parser.parse_optional_punctuation(":"):
        zp = _parse_signed_int(parser)
    del pos
    return scale, zp


def _storage_text(width: int, signed: bool, lo: int, hi: int) -> str:
    s = f"{'i' if signed else 'u'}{width}"
    if (lo, hi) != storage_range(width, signed):
        s += f"<{lo}:{hi}>"
    return s


def _qp_text(scale: float, zp: int) -> str:
    return format_scale(scale) + (f":{zp}" if zp != 0 else "")


def _check_common(kind: str, width: int, signed: bool, lo: int, hi: int, expressed: Attribute,
                  scales: Sequence[float], zps: Sequence[int]) -> None:
    if not 1 <= width <= MAX_STORAGE_BITS:
        raise VerifyException(f"{kind}: illegal storage type size: {width} (1..{MAX_STORAGE_BITS})")
    full_lo, full_hi = storage_range(width, signed)
    if not full_lo <= lo < hi <= full_hi:
        raise VerifyException(
            f"{kind}: illegal storage min and storage max: ({lo}:{hi}) "
            f"(need {full_lo} <= min < max <= {full_hi} for {'i' if signed else 'u'}{width})")
    if not isinstance(expressed, AnyFloat):
        raise VerifyException(f"{kind}: expressed type must be floating point, not {expressed}")
    for s in scales:
        if not (math.isfinite(s) and s > 0.0):
            raise VerifyException(f"{kind}: illegal scale: {s} (must be finite and > 0)")
    for z in zps:
        if not lo <= z <= hi:
            raise VerifyException(
                f"{kind}: illegal zero point {z}: outside the storage range [{lo}, {hi}]")


# --------------------------------------------------------------------------------------------------
# types
# --------------------------------------------------------------------------------------------------
class QuantizedType:
    """Common accessors of the two uniform quantized types (a mixin; not an attribute itself)."""

    storage_width: IntAttr
    is_signed: IntAttr
    storage_min: IntAttr
    storage_max: IntAttr
    expressed_type: Attribute

    @property
    def width(self) -> int:
        return self.storage_width.data

    @property
    def signed(self) -> bool:
        return bool(self.is_signed.data)

    @property
    def qmin(self) -> int:
        return self.storage_min.data

    @property
    def qmax(self) -> int:
        return self.storage_max.data

    @property
    def storage_type(self) -> IntegerType:
        """The signless integer type that holds the stored values (``i8`` for ``i8`` and ``u8``)."""
        return IntegerType(self.width)

    @property
    def storage_text(self) -> str:
        return _storage_text(self.width, self.signed, self.qmin, self.qmax)


@irdl_attr_definition
class UniformQuantizedType(QuantizedType, ParametrizedAttribute, TypeAttribute):
    """``!quant.uniform<i8:f32, 1.250000e-02:-3>``: one scale and zero point for the whole tensor."""

    name = "quant.uniform"
    storage_width: IntAttr
    is_signed: IntAttr
    storage_min: IntAttr
    storage_max: IntAttr
    expressed_type: Attribute
    scale_value: FloatData
    zero_point_value: IntAttr

    def __init__(self, storage: str | tuple[int, bool], expressed: Attribute, scale: float,
                 zero_point: int = 0, qmin: int | None = None, qmax: int | None = None):
        width, signed = _storage_spec(storage)
        lo, hi = storage_range(width, signed)
        super().__init__(IntAttr(width), IntAttr(int(signed)), IntAttr(lo if qmin is None else qmin),
                         IntAttr(hi if qmax is None else qmax), expressed, FloatData(float(scale)),
                         IntAttr(int(zero_point)))

    @classmethod
    def new(cls, params: Sequence[Attribute]):
        # The parser builds every ``!quant.uniform`` through this class (one name, one class in
        # xDSL); the per-axis form has 8 parameters and becomes the per-axis class, as in MLIR.
        if cls is UniformQuantizedType and len(params) == 8:
            return UniformQuantizedPerAxisType.new(params)
        return super().new(params)

    @property
    def scale(self) -> float:
        return self.scale_value.data

    @property
    def zero_point(self) -> int:
        return self.zero_point_value.data

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return _parse_uniform(parser)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.storage_text}:")
        printer.print_attribute(self.expressed_type)
        printer.print_string(f", {_qp_text(self.scale, self.zero_point)}>")

    def verify(self) -> None:
        _check_common("!quant.uniform", self.width, self.signed, self.qmin, self.qmax,
                      self.expressed_type, [self.scale], [self.zero_point])


@irdl_attr_definition
class UniformQuantizedPerAxisType(QuantizedType, ParametrizedAttribute, TypeAttribute):
    """``!quant.uniform<i8:f32:0, {2.0:1, 3.0}>``: scale/zero point per index of one dimension.

    Named ``quant.uniform`` like in MLIR. xDSL maps one name to one class, so only
    :class:`UniformQuantizedType` is registered; its parser builds this class when an axis follows
    the expressed type (``UniformQuantizedType.new``)."""

    name = "quant.uniform"
    storage_width: IntAttr
    is_signed: IntAttr
    storage_min: IntAttr
    storage_max: IntAttr
    expressed_type: Attribute
    axis: IntAttr
    scale_values: ArrayAttr[FloatData]
    zero_point_values: ArrayAttr[IntAttr]

    def __init__(self, storage: str | tuple[int, bool], expressed: Attribute, axis: int,
                 scales: Sequence[float], zero_points: Sequence[int] | None = None,
                 qmin: int | None = None, qmax: int | None = None):
        width, signed = _storage_spec(storage)
        lo, hi = storage_range(width, signed)
        zps = [0] * len(scales) if zero_points is None else list(zero_points)
        super().__init__(IntAttr(width), IntAttr(int(signed)), IntAttr(lo if qmin is None else qmin),
                         IntAttr(hi if qmax is None else qmax), expressed, IntAttr(int(axis)),
                         ArrayAttr([FloatData(float(s)) for s in scales]),
                         ArrayAttr([IntAttr(int(z)) for z in zps]))

    @property
    def quantized_dimension(self) -> int:
        return self.axis.data

    @property
    def scales(self) -> tuple[float, ...]:
        return tuple(s.data for s in self.scale_values.data)

    @property
    def zero_points(self) -> tuple[int, ...]:
        return tuple(z.data for z in self.zero_point_values.data)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.storage_text}:")
        printer.print_attribute(self.expressed_type)
        qps = ", ".join(_qp_text(s, z) for s, z in zip(self.scales, self.zero_points))
        printer.print_string(f":{self.quantized_dimension}, {{{qps}}}>")

    def verify(self) -> None:
        kind = "!quant.uniform (per-axis)"
        if self.quantized_dimension < 0:
            raise VerifyException(f"{kind}: illegal quantized dimension: {self.quantized_dimension}")
        if len(self.scales) != len(self.zero_points):
            raise VerifyException(
                f"{kind}: illegal number of scales and zeroPoints: "
                f"{len(self.scales)}, {len(self.zero_points)}")
        if not self.scales:
            raise VerifyException(f"{kind}: needs at least one scale")
        _check_common(kind, self.width, self.signed, self.qmin, self.qmax, self.expressed_type,
                      self.scales, self.zero_points)


def _storage_spec(storage: str | tuple[int, bool]) -> tuple[int, bool]:
    if isinstance(storage, tuple):
        return int(storage[0]), bool(storage[1])
    if storage[:1] not in ("i", "u") or not storage[1:].isdigit():
        raise ValueError(f"storage type must be 'iN' or 'uN', not {storage!r}")
    return int(storage[1:]), storage[0] == "i"


def _parse_uniform(parser: AttrParser) -> Sequence[Attribute]:
    parser.parse_punctuation("<")
    width, signed, lo, hi = _parse_storage(parser)
    parser.parse_punctuation(":")
    pos = parser.pos
    expressed = parser.parse_type()
    if not isinstance(expressed, AnyFloat):
        parser.raise_error(f"!quant.uniform: expressed type must be floating point, not {expressed}",
                           pos, parser.pos)
    axis = None
    if parser.parse_optional_punctuation(":"):
        axis = _parse_signed_int(parser)
    parser.parse_punctuation(",")
    common = [IntAttr(width), IntAttr(int(signed)), IntAttr(lo), IntAttr(hi), expressed]
    if axis is None:
        scale, zp = _parse_scale_zp(parser)
        parser.parse_punctuation(">")
        return [*common, FloatData(scale), IntAttr(zp)]
    qps = parser.parse_comma_separated_list(Parser.Delimiter.BRACES, lambda: _parse_scale_zp(parser))
    parser.parse_punctuation(">")
    return [*common, IntAttr(axis), ArrayAttr([FloatData(s) for s, _ in qps]),
            ArrayAttr([IntAttr(z) for _, z in qps])]


# --------------------------------------------------------------------------------------------------
# ops
# --------------------------------------------------------------------------------------------------
def _elem(t: Attribute) -> Attribute:
    return t.get_element_type() if isinstance(t, TensorType) else t


def _shape(t: Attribute):
    return tuple(t.get_shape()) if isinstance(t, TensorType) else None


def _check_per_axis(op_name: str, qtype_holder: Attribute) -> None:
    q = _elem(qtype_holder)
    if not isinstance(q, UniformQuantizedPerAxisType):
        return
    shape = _shape(qtype_holder)
    if shape is None:
        raise VerifyException(f"{op_name}: a per-axis quantized type needs a tensor, got {qtype_holder}")
    ax = q.quantized_dimension
    if ax >= len(shape):
        raise VerifyException(
            f"{op_name}: quantized dimension {ax} is out of range for rank {len(shape)} ({qtype_holder})")
    if shape[ax] >= 0 and shape[ax] != len(q.scales):
        raise VerifyException(
            f"{op_name}: dimension {ax} has size {shape[ax]} but the type has {len(q.scales)} scales")


class _CastOp(IRDLOperation):
    input = operand_def()
    result = result_def()
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `to` type($result)"

    def __init__(self, value, result_type: Attribute):
        super().__init__(operands=[value], result_types=[result_type])

    def _same_shape(self) -> None:
        a, b = self.input.type, self.result.type
        if isinstance(a, TensorType) != isinstance(b, TensorType) or _shape(a) != _shape(b):
            raise VerifyException(f"{self.name}: input {a} and result {b} must have the same shape")

    def _verify_float_quant(self, qtype, ftype, qrole: str, frole: str) -> None:
        """qcast/dcast: the ``qrole`` side is !quant.uniform, the ``frole`` side its expressed type."""
        self._same_shape()
        q, f = _elem(qtype), _elem(ftype)
        if not isinstance(q, QuantizedType):
            raise VerifyException(f"{self.name}: {qrole} element type must be !quant.uniform, not {q}")
        if f != q.expressed_type:
            raise VerifyException(
                f"{self.name}: {frole} element type {f} must be the expressed type {q.expressed_type}")
        _check_per_axis(self.name, qtype)


@irdl_op_definition
class QCastOp(_CastOp):
    """Quantize: float -> quantized type (round half to even, saturate)."""

    name = "quant.qcast"

    def verify_(self) -> None:
        self._verify_float_quant(self.result.type, self.input.type, "result", "input")


@irdl_op_definition
class DCastOp(_CastOp):
    """Dequantize: quantized type -> its expressed float type."""

    name = "quant.dcast"

    def verify_(self) -> None:
        self._verify_float_quant(self.input.type, self.result.type, "input", "result")


@irdl_op_definition
class SCastOp(_CastOp):
    """Storage cast: quantized type <-> its storage integer type (same bits)."""

    name = "quant.scast"

    def verify_(self) -> None:
        self._same_shape()
        a, b = _elem(self.input.type), _elem(self.result.type)
        q, i = (a, b) if isinstance(a, QuantizedType) else (b, a)
        if not isinstance(q, QuantizedType) or isinstance(i, QuantizedType):
            raise VerifyException(
                f"quant.scast: exactly one of {self.input.type} and {self.result.type} must be quantized")
        if not isinstance(i, IntegerType) or i.width.data != q.width:
            raise VerifyException(
                f"quant.scast: the integer side must be the storage type i{q.width}, not {i}")
        _check_per_axis("quant.scast", self.input.type if isinstance(a, QuantizedType) else self.result.type)


Quant = Dialect("quant", [QCastOp, DCastOp, SCastOp], [UniformQuantizedType])
