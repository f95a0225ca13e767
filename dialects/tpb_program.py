"""The ``tpb`` container ops: ``tpb.program``, ``tpb.stream``, ``tpb.segment``, ``tpb.symbol``.

See :mod:`m100.dialects.tpb` and docs/dialects.md."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import I64, ArrayAttr, DenseArrayBase, IntegerAttr, StringAttr
from xdsl.ir import Attribute, Block, Data, Operation, Region
from xdsl.irdl import (IRDLOperation, irdl_attr_definition, lazy_traits_def, opt_prop_def,
                       prop_def, region_def, traits_def)
from xdsl.irdl.constraints import AnyOf, BaseAttr
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, NoTerminator
from xdsl.utils.exceptions import VerifyException

from m100.errors import M100Error
from m100.targets.m100 import isa
from m100.targets.m100.machine import Machine

from .fast_verify import fast_op_definition
from .twu import (SPACE_BY_NAME, SPACE_NAMES, array_values, dtype_to_type, i64_array, int_attr,
                  parse_text, type_to_dtype)
from .sync import machine_of
from .tpb_base import LEVELS, InstrOp, print_params, program_of
from .tpb_ops import DmaOp


# ----------------------------------------------------------------------------------------------
# containers
# ----------------------------------------------------------------------------------------------
def _print_dict_and(printer: Printer, op: Operation, props: Sequence[str], keyword: bool) -> None:
    d = {k: op.properties[k] for k in props if k in op.properties}
    d.update(op.attributes)
    print_params(printer, d, keyword)


def _split(d: dict[str, Attribute], props: Sequence[str]):
    return ({k: v for k, v in d.items() if k in props},
            {k: v for k, v in d.items() if k not in props})


@fast_op_definition
class ProgramOp(IRDLOperation):
    """``tpb.program "MACHINE" LEVEL [attributes {fingerprint = "0x..", machine_spec = "{..}",
    metadata = ["k", "v", ..]}] {...}``.

    The program for one machine: a preset name, or any machine with its description carried in
    ``machine_spec`` (``Machine.spec()`` JSON; a machine file path also works as the name). The
    machine of any op inside is :func:`m100.dialects.sync.machine_of`. ``LEVEL`` is ``placed`` or
    ``resolved`` and selects how strictly the ops inside are verified. At the resolved level every
    ``hbsm.alloc``/``hbsm.fifo`` must have an offset and no ``sync.barrier`` may remain.
    """
    name = "tpb.program"
    machine = prop_def(StringAttr)
    level = prop_def(StringAttr)
    fingerprint = opt_prop_def(StringAttr)
    machine_spec = opt_prop_def(StringAttr)
    metadata = opt_prop_def(ArrayAttr[StringAttr])  # key, value, key, value, ...
    body = region_def("single_block")
    traits = traits_def(NoTerminator())
    PROPS: ClassVar = ("fingerprint", "machine_spec", "metadata")

    def __init__(self, machine: str | Machine, level: str = "placed", ops: Sequence[Operation] = (),
                 fingerprint: int | None = None, metadata: dict[str, str] | None = None,
                 machine_spec: str | None = None):
        """``machine``: a name, or a Machine (a non-preset one is carried as ``machine_spec``)."""
        if isinstance(machine, Machine):
            if machine_spec is None and not machine.is_preset():
                machine_spec = machine.spec()
            machine = machine.name
        props: dict[str, Attribute] = {"machine": StringAttr(machine), "level": StringAttr(level)}
        if machine_spec is not None:
            props["machine_spec"] = StringAttr(machine_spec)
        if fingerprint is not None:
            props["fingerprint"] = StringAttr(f"{fingerprint:#018x}")
        if metadata:
            props["metadata"] = ArrayAttr([StringAttr(x) for kv in metadata.items() for x in kv])
        super().__init__(properties=props, regions=[Region(Block(ops))])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.machine.data)
        printer.print_string(f" {self.level.data}")
        _print_dict_and(printer, self, self.PROPS, True)
        printer.print_string(" ")
        printer.print_region(self.body)

    @classmethod
    def parse(cls, parser: Parser) -> ProgramOp:
        machine = parse_text(parser)
        level = parser.parse_identifier()
        d = parser.parse_optional_attr_dict_with_keyword()
        props, attrs = _split(dict(d.data) if d is not None else {}, cls.PROPS)
        body = parser.parse_region()
        if not body.blocks:
            body.add_block(Block())
        op = cls.create(properties={"machine": StringAttr(machine), "level": StringAttr(level),
                                    **props}, attributes=attrs, regions=[body])
        return op

    def metadata_dict(self) -> dict[str, str]:
        """The metadata as a dict (xDSL parses non-ASCII string literals as bytes: decoded)."""
        if self.metadata is None:
            return {}
        vals = [a.data.decode() if isinstance(a.data, bytes) else a.data  # type: ignore
                for a in self.metadata.data]
        return dict(zip(vals[0::2], vals[1::2]))

    def verify_(self) -> None:
        if self.level.data not in LEVELS:
            raise VerifyException(f"'tpb.program': level must be 'placed' or 'resolved', not "
                                  f"'{self.level.data}'")
        machine_of(self)
        if self.metadata is not None and len(self.metadata.data) % 2:
            raise VerifyException("'tpb.program': metadata is a flat list of key, value strings")
        if self.fingerprint is not None:
            try:
                int(self.fingerprint.data, 16)
            except ValueError:
                raise VerifyException("'tpb.program': fingerprint must be a hex string") from None
        if self.level.data != "resolved":
            return
        for op in self.body.walk():
            if op.name in ("hbsm.alloc", "hbsm.fifo") and op.properties.get("offset") is None:
                raise VerifyException(f"'tpb.program' (resolved): '{op.name}' of "
                                      f"{op.results[0].type} has no offset (run hbsm-allocate)")
            if op.name == "sync.barrier":
                raise VerifyException("'tpb.program' (resolved): 'sync.barrier' is not lowered to "
                                      "counters (run sync-insert)")


def programs(op: Operation) -> list[ProgramOp]:
    """``[p for p in op.walk() if isinstance(p, ProgramOp)]``: the same ops in the same
    (pre-)order, found by following each block's op list and descending only into ops that
    have regions, with the class tested once per class. xDSL's ``walk`` nests a generator per
    op, region and block (~0.15 CPU-s for ResNet-50's ~38 000 ops, in each backend stage).
    ``test_programs_is_the_walk`` compares it with that walk."""
    out: list[ProgramOp] = []
    _programs(op, out)
    return out


def _programs(op: Operation, out: list) -> None:
    if _is_program(op):
        out.append(op)
    for region in op.regions:
        for block in region.blocks:
            o = block.first_op
            while o is not None:
                if o.regions:
                    _programs(o, out)
                elif _is_program(o):
                    out.append(o)
                o = o.next_op


def class_test(cls: type) -> Callable[[object], bool]:
    """``lambda o: isinstance(o, cls)`` with the answer kept per class of ``o`` (an ``isinstance``
    against xDSL's ABC-based op classes is a Python call for a subclass; the walks that find
    programs or count instructions ask it of every op)."""
    seen: dict[type, bool] = {}

    def test(o: object) -> bool:
        t = type(o)
        k = seen.get(t)
        if k is None:
            k = seen[t] = isinstance(o, cls)
        return k
    return test


_is_program = class_test(ProgramOp)


@fast_op_definition
class StreamOp(IRDLOperation):
    """``tpb.stream cluster K {...}`` / ``tpb.stream ccb {...}``: one cluster's (or the CCB's DMA)
    instruction stream, in issue order."""
    name = "tpb.stream"
    cluster = prop_def(IntegerAttr[I64])
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), HasParent(ProgramOp))

    def __init__(self, cluster: int, ops: Sequence[Operation] = ()):
        super().__init__(properties={"cluster": int_attr(cluster)}, regions=[Region(Block(ops))])

    def print(self, printer: Printer) -> None:
        c = self.cluster.value.data
        printer.print_string(" ccb" if c == -1 else f" cluster {c}")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body)

    @classmethod
    def parse(cls, parser: Parser) -> StreamOp:
        if parser.parse_optional_keyword("ccb") is not None:
            c = -1
        else:
            parser.parse_keyword("cluster")
            c = parser.parse_integer()
        d = parser.parse_optional_attr_dict_with_keyword()
        attrs = dict(d.data) if d is not None else {}
        body = parser.parse_region()
        if not body.blocks:
            body.add_block(Block())
        return cls.create(properties={"cluster": int_attr(c)}, attributes=attrs, regions=[body])

    def verify_(self) -> None:
        c = self.cluster.value.data
        prog = program_of(self)
        m = machine_of(prog) if prog is not None else None
        if m is not None and not (c == -1 or 0 <= c < m.clusters):
            raise VerifyException(f"'tpb.stream': cluster {c} does not exist on machine '{m.name}' "
                                  f"({m.clusters} clusters; ccb = the DMA stream)")
        for op in self.body.ops:
            if isinstance(op, DmaOp) and c != -1:
                raise VerifyException(f"'tpb.stream' cluster {c}: a 'tpb.dma' belongs to the ccb "
                                      "stream")
            if isinstance(op, InstrOp) and not isinstance(op, DmaOp):
                if c == -1:
                    raise VerifyException(f"'tpb.stream' ccb: only 'tpb.dma' ops belong here, "
                                          f"not '{op.name}'")
                if m is not None and 0 <= op.unit_index < m.num_tpbs and \
                        m.cluster_of(op.unit_index) != c:
                    raise VerifyException(f"'tpb.stream' cluster {c}: {op.describe()} is in "
                                          f"cluster {m.cluster_of(op.unit_index)}")


@irdl_attr_definition
class BytesAttr(Data[bytes]):
    """``#tpb.bytes<"HEX">``: a segment's bytes as bytes (``SegmentOp``'s custom form prints
    them as the hex string a parsed segment holds as a ``StringAttr``)."""
    name = "tpb.bytes"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> bytes:
        with parser.in_angle_brackets():
            text = parser.parse_str_literal()
        try:
            return bytes.fromhex(text)
        except ValueError:
            parser.raise_error("#tpb.bytes: not a hex string")

    def print_parameter(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.data.hex())


@fast_op_definition
class SegmentOp(IRDLOperation):
    """``tpb.segment "NAME" SPACE ADDRESS data "HEX"``: initial memory contents (weights,
    constants) at a DDR or CCB SRAM address = ``program.Segment``."""
    name = "tpb.segment"
    seg_name = prop_def(StringAttr)
    space = prop_def(StringAttr)
    address = prop_def(IntegerAttr[I64])
    #: the bytes (``#tpb.bytes``, built from bytes) or their hex text (``StringAttr``, parsed)
    data = prop_def(AnyOf((BaseAttr(StringAttr), BaseAttr(BytesAttr))))
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp),))

    def __init__(self, name: str, space: str, address: int, data: bytes):
        # the bytes themselves: the verifier and ``bytes`` (the emitter) read them, and no hex
        # text of tens of MB of weights is made unless the op is printed (ResNet-50: 103 MB,
        # ~0.17 CPU-s to hex and ~0.6 to decode)
        super().__init__(properties={"seg_name": StringAttr(name), "space": StringAttr(space),
                                     "address": int_attr(address), "data": BytesAttr(bytes(data))})

    @property
    def bytes(self) -> bytes:
        d = self.data
        return d.data if type(d) is BytesAttr else bytes.fromhex(d.data)

    @property
    def nbytes(self) -> int:
        """``len(self.bytes)`` for valid data, without decoding a hex text."""
        d = self.data
        return len(d.data) if type(d) is BytesAttr else len(d.data) // 2

    @property
    def hex(self) -> str:
        d = self.data
        return d.data.hex() if type(d) is BytesAttr else d.data

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.seg_name.data)
        printer.print_string(f" {self.space.data} {self.address.value.data} data ")
        printer.print_string_literal(self.hex)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> SegmentOp:
        name = parse_text(parser)
        space = parser.parse_identifier()
        addr = parser.parse_integer()
        parser.parse_keyword("data")
        data = parse_text(parser)
        op = cls.create(properties={"seg_name": StringAttr(name), "space": StringAttr(space),
                                    "address": int_attr(addr), "data": StringAttr(data)})
        op.attributes.update(parser.parse_optional_attr_dict())
        return op

    def verify_(self) -> None:
        if self.space.data not in ("ddr", "sram"):
            raise VerifyException(f"'tpb.segment' \"{self.seg_name.data}\": segments live in ddr "
                                  f"or sram, not '{self.space.data}'")
        try:
            n = len(self.bytes)
        except ValueError:
            raise VerifyException(f"'tpb.segment' \"{self.seg_name.data}\": data is not a hex "
                                  "string") from None
        prog = program_of(self)
        if prog is not None:
            m = machine_of(prog)
            size = isa.space_size(m, SPACE_BY_NAME[self.space.data])
            a = self.address.value.data
            if a < 0 or a + n > size:
                raise VerifyException(f"'tpb.segment' \"{self.seg_name.data}\": bytes [{a}, {a + n}) "
                                      f"fall outside {self.space.data.upper()} (size {size})")


@fast_op_definition
class SymbolOp(IRDLOperation):
    """``tpb.symbol "NAME" input|output SHAPExELEM at SPACE[TPB] ADDRESS``: a program input or
    output tensor, row-major = ``program.Symbol``."""
    name = "tpb.symbol"
    sym = prop_def(StringAttr)
    role = prop_def(StringAttr)
    shape = prop_def(DenseArrayBase)
    element_type = prop_def(Attribute)
    space = prop_def(StringAttr)
    tpb = prop_def(IntegerAttr[I64])
    address = prop_def(IntegerAttr[I64])
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp),))

    def __init__(self, name: str, role: str, shape: Sequence[int], element_type: Attribute,
                 space: str, address: int, tpb: int = 0):
        super().__init__(properties={
            "sym": StringAttr(name), "role": StringAttr(role), "shape": i64_array(shape),
            "element_type": element_type, "space": StringAttr(space), "tpb": int_attr(tpb),
            "address": int_attr(address)})

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.sym.data)
        printer.print_string(f" {self.role.data} ")
        for d in array_values(self.shape):
            printer.print_string(f"{d}x")
        printer.print_attribute(self.element_type)
        sp, t = self.space.data, self.tpb.value.data
        printer.print_string(f" at {sp}" + (f"[{t}]" if sp == "hbsm" or t else "")
                             + f" {self.address.value.data}")
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> SymbolOp:
        name = parse_text(parser)
        role = parser.parse_identifier()
        dims, elem = parser.parse_ranked_shape()
        parser.parse_keyword("at")
        space = parser.parse_identifier()
        tpb = 0
        if parser.parse_optional_punctuation("[") is not None:
            tpb = parser.parse_integer()
            parser.parse_punctuation("]")
        addr = parser.parse_integer()
        op = cls(name, role, dims, elem, space, addr, tpb)
        op.attributes.update(parser.parse_optional_attr_dict())
        return op

    def verify_(self) -> None:
        me = f"'tpb.symbol' \"{self.sym.data}\""
        if self.role.data not in ("input", "output", "weight"):
            raise VerifyException(f"{me}: role must be 'input', 'output' or 'weight', not "
                                  f"'{self.role.data}'")
        if self.space.data not in SPACE_BY_NAME:
            raise VerifyException(f"{me}: unknown memory space '{self.space.data}'")
        type_to_dtype(self.element_type)
        prog = program_of(self)
        if prog is not None:
            from m100.targets.m100.program import Program  # noqa: F401  (contract check only)
            m = machine_of(prog)
            sym = self.to_symbol()
            size = isa.space_size(m, sym.space)
            if sym.address < 0 or sym.address + sym.nbytes > size:
                raise VerifyException(f"{me}: bytes [{sym.address}, {sym.address + sym.nbytes}) "
                                      f"fall outside {self.space.data.upper()} (size {size})")
            if sym.space is isa.Space.HBSM:
                try:
                    m.check_tpb(sym.tpb)
                except M100Error as e:
                    raise VerifyException(f"{me}: {e}") from None

    def to_symbol(self):
        from m100.targets.m100.program import Symbol
        return Symbol(self.sym.data, self.role.data, array_values(self.shape),
                      type_to_dtype(self.element_type), SPACE_BY_NAME[self.space.data],
                      self.address.value.data, self.tpb.value.data)

    @staticmethod
    def from_symbol(s) -> SymbolOp:
        return SymbolOp(s.name, s.role, s.shape, dtype_to_type(s.dtype), SPACE_NAMES[s.space],
                        s.address, s.tpb)
