"""The ``hbsm`` dialect: buffers in DDR, CCB SRAM and the HBSM of a TPB.

Types
-----
``!hbsm.buffer<SPACE[TPB], SHAPExELEM[, slots = N]>``
    A buffer of ``SHAPE`` elements of ``ELEM`` (``i4 i8 i32 f16 bf16 f32``), row-major, in memory space
    ``ddr``/``sram``/``hbsm`` (the TPB in brackets, printed for ``hbsm`` or when non-zero), with
    ``N >= 1`` slots for multi-buffering (slot ``s`` starts ``s * slot_bytes`` after the first one;
    ``slot_bytes = ceil(elements * bits / 8)``). Example: ``!hbsm.buffer<hbsm[0], 64x32xf32, slots = 2>``.

Ops
---
``%b = hbsm.alloc [offset N] : !hbsm.buffer<...>``
    A buffer. Without ``offset`` it is *unallocated* (placed level; ``hbsm-allocate`` assigns it); with
    it, it occupies bytes ``[N, N + slots * slot_bytes)`` of its space. Verifier: the range lies inside
    the machine's space (``hbsm_bytes`` for HBSM), the TPB exists.
``%f = hbsm.fifo producer P consumers [C, ...] [offset N] : !hbsm.buffer<..., slots = D>``
    A ring buffer of ``D`` slots written by TPB ``P`` and read by TPBs ``C...`` (``sync-insert`` adds
    the back-pressure counters). It lives in the HBSM of the producer or of a consumer.
``%v = hbsm.view %b[O0, O1, ...] [slot S] : !hbsm.buffer<A> -> !hbsm.buffer<B>``
    The box of shape ``B`` at element offsets ``O`` of ``%b`` (in ``%b``'s row-major layout), in slot
    ``S`` of ``%b`` if given (then ``B`` has one slot), else in every slot (``B`` has ``%b``'s slots).

The machine for range checks is the one of the enclosing ``tpb.program`` (none outside a program).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import I64, DenseArrayBase, IntegerAttr, StringAttr
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (IRDLOperation, irdl_attr_definition, operand_def,
                       opt_prop_def, prop_def, result_def, traits_def)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from m100.errors import M100Error
from m100.targets.m100.isa import DType, Space, space_size

from .fast_init import irdl_init
from .fast_verify import fast_op_definition
from .sync import machine_of
from .twu import (SPACE_BY_NAME, SPACE_NAMES, array_values, checked_params, format_space_tpb,
                  i64_array, int_attr, isa_guard, parse_buffer_operand, parse_space_tpb,
                  type_to_dtype)


@irdl_attr_definition
class BufferType(ParametrizedAttribute, TypeAttribute):
    """``!hbsm.buffer<space[tpb], SHAPExELEM[, slots = N]>``."""
    name = "hbsm.buffer"
    space: StringAttr
    tpb: IntegerAttr[I64]
    shape: DenseArrayBase
    element_type: Attribute
    slots: IntegerAttr[I64]

    def __init__(self, space: str | Space, tpb: int, shape: Sequence[int], element_type: Attribute,
                 slots: int = 1):
        if not isinstance(space, str):
            space = SPACE_NAMES[Space(space)]
        super().__init__(StringAttr(space), int_attr(tpb), i64_array(shape), element_type,
                         int_attr(slots))

    @property
    def space_enum(self) -> Space:
        return SPACE_BY_NAME[self.space.data]

    @property
    def tpb_index(self) -> int:
        return self.tpb.value.data

    @property
    def dims(self) -> tuple[int, ...]:
        return array_values(self.shape)

    @property
    def num_slots(self) -> int:
        return self.slots.value.data

    @property
    def dtype(self) -> DType:
        got = self.__dict__.get("_m100_dtype")  # immutable attribute: decoded once
        if got is None:
            got = type_to_dtype(self.element_type)
            object.__setattr__(self, "_m100_dtype", got)
        return got

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def slot_bytes(self) -> int:
        got = self.__dict__.get("_m100_slot_bytes")
        if got is None:
            got = (self.num_elements * self.dtype.bits + 7) // 8
            object.__setattr__(self, "_m100_slot_bytes", got)
        return got

    @property
    def total_bytes(self) -> int:
        got = self.__dict__.get("_m100_total_bytes")  # immutable attribute: computed once
        if got is None:
            got = self.slot_bytes * self.num_slots
            object.__setattr__(self, "_m100_total_bytes", got)
        return got

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            space, tpb = parse_space_tpb(parser)
            parser.parse_punctuation(",")
            dims, elem = parser.parse_ranked_shape()
            slots = 1
            if parser.parse_optional_punctuation(",") is not None:
                parser.parse_keyword("slots")
                parser.parse_punctuation("=")
                slots = parser.parse_integer()
        return checked_params(parser, cls, (StringAttr(space), int_attr(tpb), i64_array(dims), elem,
                                            int_attr(slots)))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{format_space_tpb(self.space.data, self.tpb_index)}, ")
        for d in self.dims:
            printer.print_string(f"{d}x")
        printer.print_attribute(self.element_type)
        if self.num_slots != 1:
            printer.print_string(f", slots = {self.num_slots}")
        printer.print_string(">")

    def verify(self) -> None:
        if self.space.data not in SPACE_BY_NAME:
            raise VerifyException(f"!hbsm.buffer: unknown memory space '{self.space.data}' "
                                  "(ddr, sram, hbsm)")
        type_to_dtype(self.element_type)
        if any(d < 1 for d in self.dims):
            raise VerifyException(f"!hbsm.buffer: every dimension must be >= 1, got "
                                  f"{list(self.dims)}")
        if self.num_slots < 1:
            raise VerifyException(f"!hbsm.buffer: slots must be >= 1, not {self.num_slots}")
        if self.tpb_index < 0:
            raise VerifyException(f"!hbsm.buffer: TPB {self.tpb_index} must be >= 0")
        if self.space.data != "hbsm" and self.tpb_index != 0:
            raise VerifyException(f"!hbsm.buffer: a {self.space.data} buffer has no TPB "
                                  f"(got {self.tpb_index})")


def _check_placement(op: IRDLOperation, t: BufferType, offset: IntegerAttr | None) -> None:
    m = machine_of(op)
    if m is None:
        if offset is not None and offset.value.data < 0:
            raise VerifyException(f"'{op.name}': offset {offset.value.data} must be >= 0")
        return
    if t.space_enum is Space.HBSM:
        try:  # isa_guard's check, its message made only on an error (~19 000 allocs a program)
            m.check_tpb(t.tpb_index)
        except M100Error as e:
            raise VerifyException(f"'{op.name}': {e}") from None
    if offset is not None:
        start, size = offset.value.data, space_size(m, t.space_enum)
        end = start + t.total_bytes
        if start < 0 or end > size:
            raise VerifyException(
                f"'{op.name}': bytes [{start}, {end}) ({t.total_bytes} bytes) fall outside "
                f"{t.space.data.upper()} of machine '{m.name}' (size {size})")


def _parse_offset(parser: Parser) -> IntegerAttr | None:
    if parser.parse_optional_keyword("offset") is not None:
        return int_attr(parser.parse_integer())
    return None


@fast_op_definition
class AllocOp(IRDLOperation):
    """``%b = hbsm.alloc [offset N] : !hbsm.buffer<...>`` (no offset: unallocated)."""
    name = "hbsm.alloc"
    offset = opt_prop_def(IntegerAttr[I64])
    result = result_def(BufferType)

    assembly_format = "(`offset` $offset^)? attr-dict `:` type($result)"

    def __init__(self, buffer_type: BufferType, offset: int | None = None):
        props = {} if offset is None else {"offset": int_attr(offset)}
        irdl_init(self, operands=[], result_types=[buffer_type], properties=props)

    def verify_(self) -> None:
        _check_placement(self, self.result.type, self.offset)  # type: ignore[arg-type]


@fast_op_definition
class FifoOp(IRDLOperation):
    """``%f = hbsm.fifo producer P consumers [C...] [offset N] : !hbsm.buffer<..., slots = D>``."""
    name = "hbsm.fifo"
    producer = prop_def(IntegerAttr[I64])
    consumers = prop_def(DenseArrayBase)
    offset = opt_prop_def(IntegerAttr[I64])
    result = result_def(BufferType)

    def __init__(self, buffer_type: BufferType, producer: int, consumers: Sequence[int],
                 offset: int | None = None):
        props: dict[str, Attribute] = {"producer": int_attr(producer),
                                       "consumers": i64_array(consumers)}
        if offset is not None:
            props["offset"] = int_attr(offset)
        super().__init__(result_types=[buffer_type], properties=props)

    def print(self, printer: Printer) -> None:
        cons = ", ".join(str(c) for c in array_values(self.consumers))
        printer.print_string(f" producer {self.producer.value.data} consumers [{cons}]")
        if self.offset is not None:
            printer.print_string(f" offset {self.offset.value.data}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> FifoOp:
        parser.parse_keyword("producer")
        producer = parser.parse_integer()
        parser.parse_keyword("consumers")
        cons = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
        off = _parse_offset(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if not isinstance(t, BufferType):
            parser.raise_error("hbsm.fifo must have an !hbsm.buffer type")
        op = cls(t, producer, cons, None if off is None else off.value.data)
        op.attributes.update(attrs)
        return op

    def verify_(self) -> None:
        t: BufferType = self.result.type  # type: ignore[assignment]
        cons = array_values(self.consumers)
        prod = self.producer.value.data
        if not cons:
            raise VerifyException("'hbsm.fifo' needs at least one consumer TPB")
        if t.space_enum is not Space.HBSM:
            raise VerifyException(f"'hbsm.fifo' must live in an HBSM, not {t.space.data}")
        if t.tpb_index != prod and t.tpb_index not in cons:
            raise VerifyException(f"'hbsm.fifo' lives in TPB {t.tpb_index}'s HBSM, which is neither "
                                  f"the producer ({prod}) nor a consumer ({list(cons)})")
        m = machine_of(self)
        for tpb in (prod, *cons):
            if m is not None:
                isa_guard(m.check_tpb, tpb, prefix="'hbsm.fifo': ")
            elif tpb < 0:
                raise VerifyException(f"'hbsm.fifo': TPB {tpb} must be >= 0")
        _check_placement(self, t, self.offset)


@fast_op_definition
class ViewOp(IRDLOperation):
    """``%v = hbsm.view %b[offsets] [slot S] : !hbsm.buffer<A> -> !hbsm.buffer<B>``."""
    name = "hbsm.view"
    source = operand_def(BufferType)
    offsets = prop_def(DenseArrayBase)
    slot = opt_prop_def(IntegerAttr[I64])
    result = result_def(BufferType)
    traits = traits_def(Pure())

    def __init__(self, source: SSAValue, offsets: Sequence[int], result_type: BufferType,
                 slot: int | None = None):
        props: dict[str, Attribute] = {"offsets": i64_array(offsets)}
        if slot is not None:
            props["slot"] = int_attr(slot)
        super().__init__(operands=[source], result_types=[result_type], properties=props)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.source)
        printer.print_string(f"[{', '.join(str(o) for o in array_values(self.offsets))}]")
        if self.slot is not None:
            printer.print_string(f" slot {self.slot.value.data}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.source.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> ViewOp:
        src = parse_buffer_operand(parser)
        offs = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
        slot = None
        if parser.parse_optional_keyword("slot") is not None:
            slot = parser.parse_integer()
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        parser.parse_type()
        parser.parse_punctuation("->")
        t = parser.parse_type()
        if not isinstance(t, BufferType):
            parser.raise_error("hbsm.view must produce an !hbsm.buffer")
        op = cls(src, offs, t, slot)
        op.attributes.update(attrs)
        return op

    def verify_(self) -> None:
        a: BufferType = self.source.type  # type: ignore[assignment]
        b: BufferType = self.result.type  # type: ignore[assignment]
        offs = array_values(self.offsets)
        if (a.space, a.tpb, a.element_type) != (b.space, b.tpb, b.element_type):
            raise VerifyException("'hbsm.view': the view must keep the space, TPB and element "
                                  f"type of its source ({a} -> {b})")
        if len(offs) != len(a.dims) or len(b.dims) != len(a.dims):
            raise VerifyException(f"'hbsm.view': source rank {len(a.dims)}, {len(offs)} offsets and "
                                  f"view rank {len(b.dims)} must agree")
        for i, (o, n, full) in enumerate(zip(offs, b.dims, a.dims)):
            if o < 0 or o + n > full:
                raise VerifyException(f"'hbsm.view': dimension {i}: [{o}, {o + n}) exceeds the "
                                      f"source size {full}")
        if self.slot is not None:
            s = self.slot.value.data
            if not 0 <= s < a.num_slots:
                raise VerifyException(f"'hbsm.view': slot {s} does not exist (source has "
                                      f"{a.num_slots} slots)")
            if b.num_slots != 1:
                raise VerifyException("'hbsm.view': a view of one slot has slots = 1")
        elif b.num_slots != a.num_slots:
            raise VerifyException(f"'hbsm.view': without 'slot' the view keeps the source's "
                                  f"{a.num_slots} slots")


_OWNER_KIND: dict[type, int] = {}
_TUPLE_ITEM = tuple.__getitem__


def buffer_range(value: SSAValue) -> tuple[int, int] | None:
    """[start, end) bytes of a buffer value if it is allocated (alloc/fifo with offset or a view of
    one), else None. A view's range covers its box in the selected slot (or in every slot)."""
    owner = value.owner
    k = _OWNER_KIND.get(type(owner))
    if k is None:  # the classes asked once per class (xDSL's ops: an ABC ``isinstance`` each)
        k = _OWNER_KIND[type(owner)] = (1 if isinstance(owner, (AllocOp, FifoOp)) else
                                        2 if isinstance(owner, ViewOp) else 0)
    if k == 1:
        # (the final verification asks ~43 000 times a program: the optional property read
        # from the dict its accessor reads, the first result from the results tuple without
        # ``SSAValues.__getitem__``'s Python call)
        off = owner.properties.get("offset")
        if off is None:
            return None
        t: BufferType = _TUPLE_ITEM(owner.results, 0).type  # type: ignore[assignment]
        start = off.value.data
        return start, start + t.total_bytes
    if k == 2:
        parent = buffer_range(owner.source)
        if parent is None:
            return None
        a: BufferType = owner.source.type  # type: ignore[assignment]
        b: BufferType = owner.result.type  # type: ignore[assignment]
        strides = [math.prod(a.dims[i + 1:]) for i in range(len(a.dims))]
        offs = array_values(owner.offsets)
        first = sum(o * s for o, s in zip(offs, strides))
        last = sum((o + n - 1) * s for o, n, s in zip(offs, b.dims, strides))
        bits = a.dtype.bits
        start = parent[0] + (first * bits) // 8
        end = parent[0] + ((last + 1) * bits + 7) // 8
        if owner.slot is not None:
            shift = owner.slot.value.data * a.slot_bytes
            return start + shift, end + shift
        return start, end + (a.num_slots - 1) * a.slot_bytes
    return None


def buffer_root(value: SSAValue):
    """The alloc/fifo op a buffer value comes from (through views), or None."""
    owner = value.owner
    while isinstance(owner, ViewOp):
        owner = owner.source.owner
    return owner if isinstance(owner, (AllocOp, FifoOp)) else None


HBSM = Dialect("hbsm", [AllocOp, FifoOp, ViewOp], [BufferType])

__all__ = ["HBSM", "BufferType", "AllocOp", "FifoOp", "ViewOp", "buffer_range", "buffer_root"]
