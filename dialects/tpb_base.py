"""Shared part of the ``tpb`` dialect: the instruction-op base class :class:`InstrOp` (syntax,
slots, ISA conversion, the two-level verifier) and helpers. See :mod:`m100.dialects.tpb`."""

from __future__ import annotations

import math
from operator import is_
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (ArrayAttr, DictionaryAttr, FloatAttr, IntegerAttr, StringAttr,
                                   UnitAttr, f64, i64)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (AttrSizedOperandSegments, IRDLOperation, opt_prop_def, prop_def, result_def,
                       var_operand_def)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from m100.errors import M100Error
from m100.targets.m100 import isa
from m100.targets.m100.isa import Instruction, Sync, Walk
from m100.targets.m100.machine import get_machine

from .fast_init import irdl_init
from .hbsm import BufferType, buffer_range
from .sync import TOKEN, ActionsAttr, TokenType, machine_of
from .twu import (SPACE_NAMES, AccessAttr, WalkAttr, format_float, i64_array, int_attr,
                  parse_buffer_operand)

LEVELS = ("placed", "resolved")


def program_of(op: Operation) -> Operation | None:
    """The nearest enclosing ``tpb.program`` op, or None."""
    p = op.parent_op()
    while p is not None and p.name != "tpb.program":
        p = p.parent_op()
    return p


def level_of(op: Operation) -> str:
    """The IR level (``placed``/``resolved``) of the enclosing program; ``placed`` outside one."""
    return program_level(program_of(op))


def program_level(p: Operation | None) -> str:
    """The IR level of the program ``p`` (``placed`` for None): :func:`level_of` of its ops."""
    lv = p.properties.get("level") if p is not None else None
    return lv.data if isinstance(lv, StringAttr) else "placed"


def print_params(printer: Printer, d: dict[str, Attribute], keyword: bool = False) -> None:
    """`` {k = v, ...}`` with i64 integers and f64 floats bare (they parse back to the same
    attributes: bare literals default to i64/f64), everything else as usual."""
    if not d:
        return
    if keyword:
        printer.print_string(" attributes")
    printer.print_string(" {")
    for i, (k, v) in enumerate(d.items()):
        if i:
            printer.print_string(", ")
        printer.print_identifier_or_string_literal(k)
        if isinstance(v, UnitAttr):
            continue
        printer.print_string(" = ")
        if isinstance(v, IntegerAttr) and v.type == i64:
            printer.print_string(str(v.value.data))
        elif isinstance(v, FloatAttr) and v.type == f64 and math.isfinite(v.value.data):
            printer.print_string(format_float(v.value.data))
        else:
            printer.print_attribute(v)
    printer.print_string("}")


def access_shape(acc: AccessAttr, t: BufferType) -> tuple[int, ...]:
    """The index space an access addresses: the buffer's shape, or ``[slots] + shape`` when the
    map has one result more than the buffer's rank (the first result selects the slot)."""
    if len(acc.affine_map.results) == len(t.dims) + 1:
        return (t.num_slots, *t.dims)
    return t.dims


def to_param(v: object) -> Attribute:
    """Python value -> parameter attribute: int -> i64, float -> f64, str -> string,
    True -> unit, sequence of ints -> array<i64>; attributes pass through."""
    if isinstance(v, Attribute):
        return v
    if v is True:
        return UnitAttr()
    if isinstance(v, int) and not isinstance(v, bool):
        return int_attr(v)
    if isinstance(v, float):
        return _f(v)
    if isinstance(v, str):
        return StringAttr(v)
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return i64_array(v)  # type: ignore[arg-type]
    raise TypeError(f"cannot make a tpb parameter of {v!r}")


def _f(v: float) -> FloatAttr:
    return FloatAttr(float(v), f64)


def _fval(a: Attribute | None, default: float = 0.0) -> float:
    return default if a is None else float(a.value.data)  # type: ignore[union-attr]


def _ival(a: Attribute | None, default: int = 0) -> int:
    return default if a is None else int(a.value.data)  # type: ignore[union-attr]



def _same_key(old: tuple, new: tuple) -> bool:
    """Two memo keys of :meth:`InstrOp._memo_key` hold the same objects, position by position
    (identity: an equal attribute of another identity is a miss, never a wrong hit; the memo
    holds the old key's objects, so no identity of it is reused)."""
    return len(old) == len(new) and all(map(is_, old, new))


# ----------------------------------------------------------------------------------------------
# instruction ops: common part
# ----------------------------------------------------------------------------------------------


_SLOT_NAMES: dict[tuple[str, ...], ArrayAttr] = {}
_HBSM = isa.Space.HBSM


def _slot_names(names: tuple[str, ...]) -> ArrayAttr:
    """``ArrayAttr`` of the slot names' ``StringAttr``s, one shared instance per tuple of names
    (attributes are immutable)."""
    a = _SLOT_NAMES.get(names)
    if a is None:
        a = _SLOT_NAMES[names] = ArrayAttr([StringAttr(n) for n in names])
    return a


#: ``isa_walks``: when every slot has a ``#twu.walk``, take the walks as they are, by name, without
#: the canonical slot order (which only printing needs); False: the slot-by-slot loop (the tests
#: compare both)
WALKS_AT_ONCE = True


class InstrOp(IRDLOperation):
    """Base of every tpb instruction op (see the module docstring for the syntax)."""
    bufs = var_operand_def(BufferType)
    deps = var_operand_def(TokenType)
    buf_slots = prop_def(ArrayAttr[StringAttr])
    walks = prop_def(DictionaryAttr)
    sync = opt_prop_def(ActionsAttr)
    done = result_def(TokenType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    KIND: ClassVar[type[Instruction]]
    UNIT_KEY: ClassVar[str] = "tpb"
    PARAMS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, unit: int, slots: dict[str, object], deps: Sequence[SSAValue] = (),
                 sync: ActionsAttr | Sync | None = None, params: dict[str, object] | None = None,
                 attributes: dict[str, Attribute] | None = None):
        """``slots``: name -> ``(buffer or None, access/walk or None)``, or just a buffer SSA value,
        an ``isa.Walk`` or a ``#twu.walk``/``#twu.access`` attribute. ``params``: name -> attribute
        or plain Python value (see :func:`to_param`)."""
        bufs, names, walks = [], [], {}
        for name, spec in slots.items():
            if isinstance(spec, tuple):
                buf, acc = spec
            elif isinstance(spec, SSAValue):
                buf, acc = spec, None
            else:
                buf, acc = None, spec
            if buf is not None:
                bufs.append(buf)
                names.append(name)
            if acc is not None:
                walks[name] = WalkAttr.from_isa(acc) if isinstance(acc, Walk) else acc
        props: dict[str, Attribute] = {"buf_slots": _slot_names(tuple(names)),
                                       "walks": DictionaryAttr(walks),
                                       self.UNIT_KEY: int_attr(unit)}
        if isinstance(sync, Sync):
            sync = ActionsAttr.from_isa(sync)
        if sync is not None:
            props["sync"] = sync
        props.update({k: to_param(v) for k, v in (params or {}).items() if v is not None})
        irdl_init(self, operands=[bufs, list(deps)], result_types=[TOKEN], properties=props,
                  attributes=attributes or {})

    # --- slots -----------------------------------------------------------------------------------
    @property
    def unit_index(self) -> int:
        return self.properties[self.UNIT_KEY].value.data  # type: ignore[attr-defined]

    def required_slots(self) -> list[str]:
        raise NotImplementedError

    def optional_slots(self) -> list[str]:
        return []

    def slot_buffers(self) -> dict[str, SSAValue]:
        return {n.data: b for n, b in zip(self.buf_slots.data, self.bufs)}

    def slot_accesses(self) -> dict[str, Attribute]:
        return dict(self.walks.data)

    def slot_names(self) -> list[str]:
        """Slots in canonical order (required, optional, then any unknown name)."""
        present = set(self.slot_buffers()) | set(self.slot_accesses())
        order = [s for s in self.required_slots() + self.optional_slots() if s in present]
        return order + sorted(present - set(order))

    def describe(self) -> str:
        return f"'{self.name}' ({self.UNIT_KEY} {self.unit_index})"

    # --- syntax ----------------------------------------------------------------------------------
    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.UNIT_KEY} {self.unit_index}")
        bufs, accs = self.slot_buffers(), self.slot_accesses()
        for name in self.slot_names():
            printer.print_string(f" {name}(")
            if name in bufs:
                printer.print_operand(bufs[name])
                if name in accs:
                    printer.print_string(", ")
            if name in accs:
                printer.print_attribute(accs[name])
            printer.print_string(")")
        if self.deps:
            printer.print_string(" after(")
            printer.print_list(self.deps, printer.print_operand)
            printer.print_string(")")
        if self.sync is not None:
            printer.print_string(" sync ")
            printer.print_attribute(self.sync)
        d = {k: self.properties[k] for k in self.PARAMS if k in self.properties}
        d.update(self.attributes)
        print_params(printer, d)

    @classmethod
    def parse(cls, parser: Parser) -> InstrOp:
        parser.parse_keyword(cls.UNIT_KEY)
        unit = parser.parse_integer()
        slots: dict[str, tuple[SSAValue | None, Attribute | None]] = {}
        deps: list[SSAValue] = []
        sync = None
        while (word := parser.parse_optional_identifier()) is not None:
            if word == "after":
                deps = parser.parse_comma_separated_list(
                    parser.Delimiter.PAREN, lambda: parser.parse_operand(TokenType()))
            elif word == "sync":
                sync = parser.parse_attribute()
                if not isinstance(sync, ActionsAttr):
                    parser.raise_error("'sync' expects a #sync.actions<...> attribute")
            else:
                if word in slots:
                    parser.raise_error(f"operand slot '{word}' given twice")
                parser.parse_punctuation("(")
                buf = parse_buffer_operand(parser, optional=True)
                acc = None
                if buf is None or parser.parse_optional_punctuation(",") is not None:
                    acc = parser.parse_attribute()
                parser.parse_punctuation(")")
                slots[word] = (buf, acc)
        d = parser.parse_optional_attr_dict()
        params = {k: v for k, v in d.items() if k in cls.PARAMS}
        attrs = {k: v for k, v in d.items() if k not in cls.PARAMS}
        return cls(unit, slots, deps, sync, params, attrs)

    # --- ISA conversion --------------------------------------------------------------------------
    def isa_walks(self, synthesize: bool = False) -> dict[str, Walk]:
        """slot -> Walk. With ``synthesize``, slots without a walk get a stand-in walk of the right
        space/TPB/type/element count (from the access bounds or the buffer shape) at address 0."""
        accs = self.walks.data
        if WALKS_AT_ONCE and all(type(a) is WalkAttr for a in accs.values()) and all(
                n.data in accs for n in self.buf_slots.data):
            # every slot has its walk (the resolved level; sync-insert's input): the same walks
            # by name (the kinds' ``_build`` read them by name, never by position)
            return {name: acc.to_isa() for name, acc in accs.items()}
        bufs, accs = self.slot_buffers(), dict(accs)
        out: dict[str, Walk] = {}
        for name in self.slot_names():
            acc = accs.get(name)
            if isinstance(acc, WalkAttr):
                out[name] = acc.to_isa()
            elif not synthesize:
                what = "an affine access" if acc is not None else "no walk"
                raise VerifyException(f"{self.describe()}: operand '{name}' has {what}; the "
                                      "resolved level needs a #twu.walk (run twu-materialize)")
            elif name in bufs:
                t: BufferType = bufs[name].type  # type: ignore[assignment]
                shape = acc.shape if isinstance(acc, AccessAttr) else t.dims
                tpb = t.tpb_index
                if self._multicast(name):  # the ISA's convention for multicast destinations
                    tpb = 0 if self.UNIT_KEY == "engine" else self.unit_index
                out[name] = Walk.strided(t.space_enum, tpb, 0, t.dtype, tuple(shape))
        return out

    def build_instruction(self, synthesize: bool = False) -> Instruction:
        """:meth:`to_instruction` built anew, neither read from nor written to the memo (a pass
        that sets a field of the op from the result right after, as sync-insert does, records
        the final instruction with :meth:`remember_instruction`: building the memo's key here
        too would be thrown away)."""
        return self._to_instruction(synthesize)

    def _memo_key(self, synthesize: bool) -> tuple:
        """What :meth:`to_instruction` is a function of, flat, compared by identity
        (:func:`_same_key`): the properties and attributes (names and values; their counts keep the
        two apart), the operand count, and with ``synthesize`` the buffer operands' types (stand-in
        walks are made from them). Without ``synthesize`` the instruction does not read the types:
        every walk is a ``#twu.walk`` property (:meth:`isa_walks`), the kinds' ``_build`` read
        properties only -- ``test_instruction_memo`` changes a buffer's type under a kept memo and
        compares with a fresh build. Until session 29 the key was the properties' and attributes'
        ``(name, value)`` pairs and every buffer's type, compared by a Python loop: ~10 us an
        instruction, paid by the final verification and again by the emission (the 7B prefill layer:
        62 892 instructions)."""
        p, a = self.properties, self.attributes
        if synthesize:
            return (True, len(p), *p, *p.values(), len(a), *a, *a.values(),
                    *(b.type for b in self.bufs))
        return (False, len(p), *p, *p.values(), len(a), *a, *a.values(), len(self._operands))

    def remember_instruction(self, inst: Instruction) -> None:
        """Record ``inst`` as :meth:`to_instruction` of the op as it is now (a pass that has just
        set the op's last field from ``inst``, e.g. sync-insert's ``sync``, saves the rebuild;
        ``test_remembered_instruction_equals_a_fresh_build`` checks they are equal)."""
        self.__dict__["_m100_inst"] = (self._memo_key(False), inst)

    def to_instruction(self, synthesize: bool = False) -> Instruction:
        """The ISA instruction (resolved ops). Raises VerifyException naming a missing field.

        Memoized on the op: the instruction is a function of the op's properties, attributes and
        operand count (and, for the stand-in walks of ``synthesize``, its buffer operands' types),
        all immutable attributes, so it is rebuilt only when one of them is replaced (compared by
        identity; the memo holds them, so identities stay valid)."""
        key = self._memo_key(synthesize)
        memo = self.__dict__.get("_m100_inst")
        if memo is not None and _same_key(memo[0], key):
            return memo[1]
        inst = self._to_instruction(synthesize)
        self.__dict__["_m100_inst"] = (key, inst)
        return inst

    def _to_instruction(self, synthesize: bool) -> Instruction:
        walks = self.isa_walks(synthesize)
        if self.sync is None and not synthesize:
            raise VerifyException(f"{self.describe()}: no sync actions; the resolved level needs "
                                  "'sync #sync.actions<...>' (run sync-insert)")
        sync = self.sync.to_isa() if self.sync is not None else Sync()
        for name in self.required_slots():
            if name not in walks:
                raise VerifyException(f"{self.describe()}: operand '{name}' is missing")
        try:
            return self._build(walks, sync)
        except (KeyError, ValueError, TypeError) as e:
            raise VerifyException(f"{self.describe()}: cannot form the instruction: {e}") from None

    def _build(self, w: dict[str, Walk], sync: Sync) -> Instruction:
        raise NotImplementedError

    @classmethod
    def from_instruction(cls, inst: Instruction) -> InstrOp:
        raise NotImplementedError

    # --- verification ----------------------------------------------------------------------------
    def verify_(self) -> None:
        me = self.describe  # formatted for a message only (~16 000 instructions a program)
        names = [n.data for n in self.buf_slots.data]
        bufs_ = self.bufs
        if len(set(names)) != len(names) or len(names) != len(bufs_):
            raise VerifyException(f"{me()}: each buffer operand needs exactly one distinct slot name")
        required = self.required_slots()
        allowed = set(required).union(self.optional_slots())
        # (the slots' buffers and walks read in place: ``slot_buffers`` / ``slot_accesses`` copy)
        bufs, accs = dict(zip(names, bufs_)), self.walks.data
        for name in set(bufs) | set(accs):
            if name not in allowed:
                raise VerifyException(f"{me()}: unknown operand slot '{name}' (expected: "
                                      f"{', '.join(self.required_slots() + self.optional_slots())})")
        for name in required:
            if name not in bufs and name not in accs:
                raise VerifyException(f"{me()}: operand '{name}' has neither a buffer nor a walk")
        for name, acc in accs.items():
            if type(acc) is WalkAttr:  # (the resolved level's every operand: no ABC isinstance)
                if name in bufs:
                    self._check_walk_in_buffer(name, acc, bufs[name])
                continue
            if not isinstance(acc, (WalkAttr, AccessAttr)):
                raise VerifyException(f"{me()}: operand '{name}' must be a #twu.walk or #twu.access")
            if isinstance(acc, AccessAttr):
                if name not in bufs:
                    raise VerifyException(f"{me()}: operand '{name}' has an access but no buffer")
                acc.check_buffer(access_shape(acc, bufs[name].type),  # type: ignore[arg-type]
                                 f"{me()}: operand '{name}'")
            elif name in bufs:
                self._check_walk_in_buffer(name, acc, bufs[name])
        # (one walk up to the program for both: ``machine_of(self)`` and ``level_of(self)``)
        prog = program_of(self)
        machine = machine_of(prog) if prog is not None else None
        level = program_level(prog)
        m = machine if machine is not None else get_machine(None)
        if level == "resolved":
            inst = self.to_instruction()
            try:
                inst.check(m)
            except M100Error as e:
                raise VerifyException(f"{me()}: {e}") from None
            return
        if machine is not None:
            if self.UNIT_KEY == "engine":
                if not 0 <= self.unit_index < machine.ccb_dma_engines:
                    raise VerifyException(f"{me()}: DMA engine {self.unit_index} does not exist "
                                          f"(the CCB has {machine.ccb_dma_engines})")
            else:
                try:
                    machine.check_tpb(self.unit_index)
                except M100Error as e:
                    raise VerifyException(f"{me()}: {e}") from None
        inst = self.to_instruction(synthesize=True)
        try:
            for name, acc in accs.items():
                if isinstance(acc, WalkAttr):
                    acc.to_isa().check(m, f"operand '{name}'")
            if self.sync is not None:
                own = None if self.UNIT_KEY == "engine" else self.unit_index
                self.sync.to_isa().check(m, own)
            inst._check(m)
        except M100Error as e:
            raise VerifyException(f"{me()}: {e}") from None

    def _check_walk_in_buffer(self, name: str, walk: WalkAttr, buf: SSAValue) -> None:
        # (the final verification asks once per buffer operand: ResNet-50 43 634 times.) What
        # it reads of the walk is kept on its (immutable) attribute, what it reads of the
        # buffer on its (immutable, verified) type, one tuple each; the messages are made from
        # the walk itself, only on a failure (``test_walk_in_buffer_is_the_definition``)
        fit = walk.__dict__.get("_m100_fit")
        if fit is None:
            w = walk.to_isa()
            fit = (w.space, w.dtype, w.tpb, *w.byte_range())
            object.__setattr__(walk, "_m100_fit", fit)
        t: BufferType = buf.type  # type: ignore[assignment]
        where = t.__dict__.get("_m100_where")
        if where is None:  # (a buffer type is immutable and verified: these never raise)
            where = (t.space_enum, t.dtype, t.tpb_index)
            object.__setattr__(t, "_m100_where", where)
        space, dtype, tpb, lo, hi = fit
        if space is not where[0] or dtype is not where[1]:
            w = walk.to_isa()
            raise VerifyException(f"{self.describe()}: operand '{name}': the walk "
                                  f"({SPACE_NAMES[w.space]}, {w.dtype.short}) does not match its "
                                  f"buffer {t}")
        if space is _HBSM and tpb != where[2] and not self._multicast(name):
            raise VerifyException(f"{self.describe()}: operand '{name}': the walk is in TPB "
                                  f"{tpb}'s HBSM but its buffer is in TPB {where[2]}'s")
        rng = buffer_range(buf)
        if rng is not None and (lo < rng[0] or hi > rng[1]):
            raise VerifyException(f"{self.describe()}: operand '{name}': the walk touches "
                                  f"bytes [{lo}, {hi}) outside its buffer's [{rng[0]}, "
                                  f"{rng[1]})")

    def _multicast(self, name: str) -> bool:
        return False
