"""The ``tpb`` dialect: TPB functional-unit instructions, at two levels, inside a program container.

Every instruction op (``tpb.matmul``, ``tpb.conv2d``, ``tpb.cvu``, ``tpb.copy``, ``tpb.fill``,
``tpb.broadcast``, ``tpb.csu``, ``tpb.dma``) has one syntax::

    %done = tpb.KIND tpb T  SLOT(%buffer[, ACCESS]) ...  [after(%tok, ...)] [sync #sync.actions<...>]
            [{param = value, ..., discardable = value}]

* ``tpb T`` places the op on TPB ``T`` (``engine E`` for ``tpb.dma``, a CCB DMA engine).
* Each operand *slot* (named after the ISA field: ``a b c`` for matmul, ``src dst`` for copies, ...)
  holds an ``!hbsm.buffer`` SSA value and/or an access: ``#twu.access<...>`` (placed level; absent =
  the whole buffer, row-major) or ``#twu.walk<...>`` (resolved). ``SLOT(#twu.walk<...>)`` without a
  buffer is a resolved operand that no IR buffer describes (what ``m100-translate --from-bin`` makes).
* ``after(...)`` lists the ``!sync.token`` values the op waits for; the op's result token is done
  when the op is. ``sync`` holds the concrete SU actions (resolved level).
* The dictionary holds the kind's parameters (``m``, ``n``, ``k``, ``stages`` ...; see each op) and
  any discardable attributes (e.g. the scheduler's ``pred_start``/``pred_end`` cycles).

Levels (``tpb.program "MACHINE" LEVEL``; ops outside a program are checked at the placed level on the
default machine):

* ``placed`` -- dataflow: buffers may be unallocated, accesses affine, ordering by tokens. The
  verifier checks slots, accesses against buffer shapes, and the instruction's shape/type rules
  (``isa.Instruction._check`` on walks synthesized from the accesses), TPB ids against the machine.
* ``resolved`` -- every operand a ``#twu.walk``, every op a ``sync`` attribute, every buffer
  allocated: the op maps 1:1 to an ISA instruction and is verified with ``Instruction.check(machine)``;
  anything missing is reported naming the op and the field.

Containers: ``tpb.program`` (machine, level, fingerprint, metadata; body: ``tpb.segment``,
``tpb.symbol``, ``tpb.stream`` per cluster (``ccb`` for the DMA stream), buffers, instruction ops).
See ``docs/dialects.md`` for worked examples of both levels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (I64, ArrayAttr, DenseArrayBase, DictionaryAttr, FloatAttr,
                                   IntegerAttr, StringAttr, UnitAttr, f64, i64)
from xdsl.ir import Attribute, Block, Dialect, Operation, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (AttrSizedOperandSegments, IRDLOperation, irdl_attr_definition,
                       irdl_op_definition, lazy_traits_def, opt_prop_def, prop_def, region_def,
                       result_def, traits_def, var_operand_def)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, NoTerminator
from xdsl.utils.exceptions import VerifyException

from m100.errors import M100Error
from m100.targets.m100 import isa
from m100.targets.m100.isa import (ROUTINE_OPERANDS, Act, CvuOp, Epilogue, Instruction, Ref,
                                   RefKind, Requant, Routine, Stage, Sync, Walk)
from m100.targets.m100.machine import Machine, get_machine

from .hbsm import BufferType, buffer_range
from .sync import ActionsAttr, TokenType, machine_of
from .twu import (SPACE_BY_NAME, SPACE_NAMES, AccessAttr, WalkAttr, array_values, checked_params,
                  dtype_to_type,
                  format_float, i64_array, int_attr, parse_buffer_operand, parse_float_lit,
                  parse_text, type_to_dtype)

LEVELS = ("placed", "resolved")


def program_of(op: Operation) -> ProgramOp | None:
    p = op.parent_op()
    while p is not None and not isinstance(p, ProgramOp):
        p = p.parent_op()
    return p


def level_of(op: Operation) -> str:
    p = program_of(op)
    return p.level.data if p is not None else "placed"


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


# ----------------------------------------------------------------------------------------------
# #tpb.stage (a CVU pipeline stage)
# ----------------------------------------------------------------------------------------------
@irdl_attr_definition
class StageAttr(ParametrizedAttribute):
    """``#tpb.stage<OP(ARG, ...)[, axis = A][, fparam = F][, iparams = [..]]>`` = ``isa.Stage``.

    ARG is ``inN`` (input walk N), ``sN`` (the result of stage N) or a float immediate. Example:
    ``#tpb.stage<add(in0, s1)>``, ``#tpb.stage<layernorm(in0, in1, in2), axis = 1, fparam = 1.0e-05>``.
    """
    name = "tpb.stage"
    op: StringAttr
    args: ArrayAttr  # StringAttr "inN"/"sN" or FloatAttr immediates
    axis: IntegerAttr[I64]
    fparam: FloatAttr
    iparams: DenseArrayBase

    def __init__(self, op: str, args: Sequence[Attribute], axis: int = -1, fparam: float = 0.0,
                 iparams: Sequence[int] = ()):
        super().__init__(StringAttr(op), ArrayAttr(args), int_attr(axis), _f(fparam),
                         i64_array(iparams))

    @staticmethod
    def from_isa(s: Stage) -> StageAttr:
        args: list[Attribute] = []
        for r in s.args:
            if r.kind is RefKind.IMM:
                args.append(_f(r.imm))
            else:
                args.append(StringAttr(("in" if r.kind is RefKind.INPUT else "s") + str(r.index)))
        return StageAttr(CvuOp(s.op).name.lower(), args, s.axis, s.fparam, s.iparams)

    def to_isa(self) -> Stage:
        refs = []
        for a in self.args.data:
            if isinstance(a, FloatAttr):
                refs.append(Ref(RefKind.IMM, 0, float(a.value.data)))
            else:
                s = a.data  # type: ignore[attr-defined]
                if s.startswith("in"):
                    refs.append(Ref(RefKind.INPUT, int(s[2:])))
                else:
                    refs.append(Ref(RefKind.STAGE, int(s[1:])))
        return Stage(CvuOp[self.op.data.upper()], tuple(refs), self.axis.value.data,
                     float(self.fparam.value.data), array_values(self.iparams))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            op = parser.parse_identifier()

            def arg() -> Attribute:
                word = parser.parse_optional_identifier()
                if word is not None and word not in ("inf", "nan"):
                    if not ((word.startswith("in") and word[2:].isdigit())
                            or (word.startswith("s") and word[1:].isdigit())):
                        parser.raise_error(f"stage argument '{word}' is not inN, sN or a number")
                    return StringAttr(word)
                if word is not None:
                    return _f(float(word))
                return _f(parse_float_lit(parser))

            args = parser.parse_comma_separated_list(parser.Delimiter.PAREN, arg)
            axis, fparam, iparams = -1, 0.0, []
            while parser.parse_optional_punctuation(",") is not None:
                key = parser.parse_identifier()
                parser.parse_punctuation("=")
                if key == "axis":
                    axis = parser.parse_integer()
                elif key == "fparam":
                    fparam = parse_float_lit(parser)
                elif key == "iparams":
                    iparams = parser.parse_comma_separated_list(parser.Delimiter.SQUARE,
                                                                parser.parse_integer)
                else:
                    parser.raise_error(f"unknown stage key '{key}' (axis, fparam, iparams)")
        return checked_params(parser, cls, (StringAttr(op), ArrayAttr(args), int_attr(axis),
                                            _f(fparam), i64_array(iparams)))

    def print_parameters(self, printer: Printer) -> None:
        args = []
        for a in self.args.data:
            args.append(format_float(a.value.data) if isinstance(a, FloatAttr)  # type: ignore
                        else a.data)  # type: ignore[attr-defined]
        s = f"<{self.op.data}({', '.join(args)})"
        if self.axis.value.data != -1:
            s += f", axis = {self.axis.value.data}"
        if float(self.fparam.value.data) != 0.0 or str(self.fparam.value.data).startswith("-"):
            s += f", fparam = {format_float(self.fparam.value.data)}"
        if len(self.iparams.get_values()):
            s += f", iparams = [{', '.join(str(v) for v in array_values(self.iparams))}]"
        printer.print_string(s + ">")

    def verify(self) -> None:
        if self.op.data.upper() not in CvuOp.__members__:
            raise VerifyException(f"#tpb.stage: unknown CVU op '{self.op.data}' (known: "
                                  f"{', '.join(o.name.lower() for o in CvuOp)})")
        for a in self.args.data:
            if not isinstance(a, (FloatAttr, StringAttr)):
                raise VerifyException("#tpb.stage: arguments are inN, sN or float immediates")


# ----------------------------------------------------------------------------------------------
# instruction ops: common part
# ----------------------------------------------------------------------------------------------


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
                names.append(StringAttr(name))
            if acc is not None:
                walks[name] = WalkAttr.from_isa(acc) if isinstance(acc, Walk) else acc
        props: dict[str, Attribute] = {"buf_slots": ArrayAttr(names), "walks": DictionaryAttr(walks),
                                       self.UNIT_KEY: int_attr(unit)}
        if isinstance(sync, Sync):
            sync = ActionsAttr.from_isa(sync)
        if sync is not None:
            props["sync"] = sync
        props.update({k: to_param(v) for k, v in (params or {}).items() if v is not None})
        super().__init__(operands=[bufs, list(deps)], result_types=[TokenType()],
                         properties=props, attributes=attributes or {})

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
        bufs, accs = self.slot_buffers(), self.slot_accesses()
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

    def to_instruction(self, synthesize: bool = False) -> Instruction:
        """The ISA instruction (resolved ops). Raises VerifyException naming a missing field."""
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
        me = self.describe()
        if len(set(n.data for n in self.buf_slots.data)) != len(self.buf_slots.data) or \
                len(self.buf_slots.data) != len(self.bufs):
            raise VerifyException(f"{me}: each buffer operand needs exactly one distinct slot name")
        allowed = set(self.required_slots()) | set(self.optional_slots())
        bufs, accs = self.slot_buffers(), self.slot_accesses()
        for name in set(bufs) | set(accs):
            if name not in allowed:
                raise VerifyException(f"{me}: unknown operand slot '{name}' (expected: "
                                      f"{', '.join(self.required_slots() + self.optional_slots())})")
        for name in self.required_slots():
            if name not in bufs and name not in accs:
                raise VerifyException(f"{me}: operand '{name}' has neither a buffer nor a walk")
        for name, acc in accs.items():
            if not isinstance(acc, (WalkAttr, AccessAttr)):
                raise VerifyException(f"{me}: operand '{name}' must be a #twu.walk or #twu.access")
            if isinstance(acc, AccessAttr):
                if name not in bufs:
                    raise VerifyException(f"{me}: operand '{name}' has an access but no buffer")
                acc.check_buffer(access_shape(acc, bufs[name].type),  # type: ignore[arg-type]
                                 f"{me}: operand '{name}'")
            elif name in bufs:
                self._check_walk_in_buffer(name, acc, bufs[name])
        machine = machine_of(self)
        level = level_of(self)
        m = machine if machine is not None else get_machine(None)
        if level == "resolved":
            inst = self.to_instruction()
            try:
                inst.check(m)
            except M100Error as e:
                raise VerifyException(f"{me}: {e}") from None
            return
        if machine is not None:
            unit_check = (lambda: None) if self.UNIT_KEY == "engine" else (
                lambda: machine.check_tpb(self.unit_index))
            try:
                unit_check()
            except M100Error as e:
                raise VerifyException(f"{me}: {e}") from None
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
            raise VerifyException(f"{me}: {e}") from None

    def _check_walk_in_buffer(self, name: str, walk: WalkAttr, buf: SSAValue) -> None:
        me = self.describe()
        t: BufferType = buf.type  # type: ignore[assignment]
        w = walk.to_isa()
        if w.space is not t.space_enum or w.dtype is not t.dtype:
            raise VerifyException(f"{me}: operand '{name}': the walk ({SPACE_NAMES[w.space]}, "
                                  f"{w.dtype.short}) does not match its buffer {t}")
        if w.space is isa.Space.HBSM and w.tpb != t.tpb_index and not self._multicast(name):
            raise VerifyException(f"{me}: operand '{name}': the walk is in TPB {w.tpb}'s HBSM but "
                                  f"its buffer is in TPB {t.tpb_index}'s")
        rng = buffer_range(buf)
        if rng is not None:
            lo, hi = w.byte_range()
            if lo < rng[0] or hi > rng[1]:
                raise VerifyException(f"{me}: operand '{name}': the walk touches bytes [{lo}, {hi}) "
                                      f"outside its buffer's [{rng[0]}, {rng[1]})")

    def _multicast(self, name: str) -> bool:
        return False


# ----------------------------------------------------------------------------------------------
# TCU
# ----------------------------------------------------------------------------------------------
_EPI = ("accumulate", "act", "clamp_lo", "clamp_hi", "requant")


class _TcuOp(InstrOp):
    tpb = prop_def(IntegerAttr[I64])
    accumulate = opt_prop_def(UnitAttr)
    act = opt_prop_def(StringAttr)
    clamp_lo = opt_prop_def(FloatAttr)
    clamp_hi = opt_prop_def(FloatAttr)
    requant = opt_prop_def(DenseArrayBase)  # [multiplier, shift, zero_point, qmin, qmax]

    def optional_slots(self) -> list[str]:
        return ["bias", "per_channel"]

    def _epilogue(self, w: dict[str, Walk]) -> tuple[bool, Epilogue]:
        act = Act[self.act.data.upper()] if self.act is not None else Act.NONE
        rq = None
        if self.requant is not None:
            mul, sh, zp, lo, hi = array_values(self.requant)
            rq = Requant(mul, sh, zp, lo, hi, w.get("per_channel"))
        elif "per_channel" in w:
            raise ValueError("operand 'per_channel' needs a 'requant' parameter")
        return self.accumulate is not None, Epilogue(w.get("bias"), act, _fval(self.clamp_lo),
                                                     _fval(self.clamp_hi), rq)

    @staticmethod
    def _epilogue_params(accumulate: bool, ep: Epilogue, slots: dict) -> dict[str, Attribute]:
        p: dict[str, Attribute] = {}
        if accumulate:
            p["accumulate"] = UnitAttr()
        if ep.act is not Act.NONE:
            p["act"] = StringAttr(Act(ep.act).name.lower())
        if ep.clamp_lo != 0.0 or str(ep.clamp_lo).startswith("-"):
            p["clamp_lo"] = _f(ep.clamp_lo)
        if ep.clamp_hi != 0.0 or str(ep.clamp_hi).startswith("-"):
            p["clamp_hi"] = _f(ep.clamp_hi)
        if ep.bias is not None:
            slots["bias"] = (None, ep.bias)
        if ep.requant is not None:
            r = ep.requant
            p["requant"] = i64_array([r.multiplier, r.shift, r.zero_point, r.qmin, r.qmax])
            if r.per_channel is not None:
                slots["per_channel"] = (None, r.per_channel)
        return p

    def verify_(self) -> None:
        if self.act is not None and self.act.data.upper() not in Act.__members__:
            raise VerifyException(f"{self.describe()}: unknown activation '{self.act.data}' "
                                  f"(known: {', '.join(a.name.lower() for a in Act)})")
        if self.requant is not None and len(self.requant.get_values()) != 5:
            raise VerifyException(f"{self.describe()}: requant is [multiplier, shift, zero_point, "
                                  "qmin, qmax]")
        super().verify_()


@irdl_op_definition
class MatmulOp(_TcuOp):
    """``tpb.matmul tpb T a(..) b(..) c(..) [bias(..)] [per_channel(..)] {m, n, k, [accumulate],
    [act, clamp_lo, clamp_hi, requant]}``: TCU ``C[m,n] (+)= A[m,k] @ B[k,n]`` + epilogue."""
    name = "tpb.matmul"
    m = prop_def(IntegerAttr[I64])
    n = prop_def(IntegerAttr[I64])
    k = prop_def(IntegerAttr[I64])
    KIND: ClassVar = isa.MatMul
    PARAMS: ClassVar = ("m", "n", "k") + _EPI

    def required_slots(self) -> list[str]:
        return ["a", "b", "c"]

    def _build(self, w, sync):
        acc, ep = self._epilogue(w)
        return isa.MatMul(self.unit_index, w["a"], w["b"], w["c"], self.m.value.data,
                          self.n.value.data, self.k.value.data, acc, ep, sync)

    @classmethod
    def from_instruction(cls, inst):
        slots = {"a": (None, inst.a), "b": (None, inst.b), "c": (None, inst.c)}
        p = {"m": int_attr(inst.m), "n": int_attr(inst.n), "k": int_attr(inst.k)}
        p.update(cls._epilogue_params(inst.accumulate, inst.epilogue, slots))
        return cls(inst.tpb, slots, (), inst.sync, p)


@irdl_op_definition
class Conv2dOp(_TcuOp):
    """``tpb.conv2d tpb T x(..) w(..) y(..) [bias(..)] {n, h, width, c, f, kh, kw, [stride,
    pad, dilation, groups], epilogue...}``: TCU NHWC convolution (see ``isa.Conv2D``)."""
    name = "tpb.conv2d"
    n = prop_def(IntegerAttr[I64])
    h = prop_def(IntegerAttr[I64])
    width = prop_def(IntegerAttr[I64])
    c = prop_def(IntegerAttr[I64])
    f = prop_def(IntegerAttr[I64])
    kh = prop_def(IntegerAttr[I64])
    kw = prop_def(IntegerAttr[I64])
    stride = opt_prop_def(DenseArrayBase)
    pad = opt_prop_def(DenseArrayBase)
    dilation = opt_prop_def(DenseArrayBase)
    groups = opt_prop_def(IntegerAttr[I64])
    KIND: ClassVar = isa.Conv2D
    PARAMS: ClassVar = ("n", "h", "width", "c", "f", "kh", "kw", "stride", "pad", "dilation",
                        "groups") + _EPI

    def required_slots(self) -> list[str]:
        return ["x", "w", "y"]

    def _build(self, w, sync):
        acc, ep = self._epilogue(w)
        arr = lambda a, d: tuple(array_values(a)) if a is not None else d  # noqa: E731
        return isa.Conv2D(self.unit_index, w["x"], w["w"], w["y"],
                          *(getattr(self, k).value.data for k in ("n", "h", "width", "c", "f",
                                                                  "kh", "kw")),
                          stride=arr(self.stride, (1, 1)), pad=arr(self.pad, (0, 0, 0, 0)),
                          dilation=arr(self.dilation, (1, 1)), groups=_ival(self.groups, 1),
                          accumulate=acc, epilogue=ep, sync=sync)

    def verify_(self) -> None:
        for k, n in (("stride", 2), ("pad", 4), ("dilation", 2)):
            a = getattr(self, k)
            if a is not None and len(a.get_values()) != n:
                raise VerifyException(f"{self.describe()}: '{k}' needs {n} values")
        super().verify_()

    @classmethod
    def from_instruction(cls, inst):
        slots = {"x": (None, inst.x), "w": (None, inst.w), "y": (None, inst.y)}
        p = {k: int_attr(getattr(inst, k)) for k in ("n", "h", "width", "c", "f", "kh", "kw")}
        if tuple(inst.stride) != (1, 1):
            p["stride"] = i64_array(inst.stride)
        if tuple(inst.pad) != (0, 0, 0, 0):
            p["pad"] = i64_array(inst.pad)
        if tuple(inst.dilation) != (1, 1):
            p["dilation"] = i64_array(inst.dilation)
        if inst.groups != 1:
            p["groups"] = int_attr(inst.groups)
        p.update(cls._epilogue_params(inst.accumulate, inst.epilogue, slots))
        return cls(inst.tpb, slots, (), inst.sync, p)


# ----------------------------------------------------------------------------------------------
# CVU
# ----------------------------------------------------------------------------------------------
@irdl_op_definition
class CvuPipelineOp(InstrOp):
    """``tpb.cvu tpb T in0(..) ... out(..) {in_shapes = [array<i64: ..>, ..], out_shape =
    array<i64: ..>, stages = [#tpb.stage<..>, ..]}``: a CVU pipeline (see ``isa.CvuPipeline``)."""
    name = "tpb.cvu"
    tpb = prop_def(IntegerAttr[I64])
    in_shapes = prop_def(ArrayAttr[DenseArrayBase])
    out_shape = prop_def(DenseArrayBase)
    stages = prop_def(ArrayAttr[StageAttr])
    KIND: ClassVar = isa.CvuPipeline
    PARAMS: ClassVar = ("in_shapes", "out_shape", "stages")

    def required_slots(self) -> list[str]:
        return [f"in{i}" for i in range(len(self.in_shapes.data))] + ["out"]

    def _build(self, w, sync):
        n = len(self.in_shapes.data)
        return isa.CvuPipeline(self.unit_index, tuple(w[f"in{i}"] for i in range(n)),
                               tuple(array_values(s) for s in self.in_shapes.data), w["out"],
                               array_values(self.out_shape),
                               tuple(s.to_isa() for s in self.stages.data), sync)

    @classmethod
    def from_instruction(cls, inst):
        slots = {f"in{i}": (None, w) for i, w in enumerate(inst.inputs)}
        slots["out"] = (None, inst.output)
        p = {"in_shapes": ArrayAttr([i64_array(s) for s in inst.in_shapes]),
             "out_shape": i64_array(inst.out_shape),
             "stages": ArrayAttr([StageAttr.from_isa(s) for s in inst.stages])}
        return cls(inst.tpb, slots, (), inst.sync, p)


# ----------------------------------------------------------------------------------------------
# DTDU, CSU, DMA
# ----------------------------------------------------------------------------------------------
@irdl_op_definition
class CopyOp(InstrOp):
    """``tpb.copy tpb T src(..) dst(..)``: DTDU copy (dst may be another TPB's HBSM)."""
    name = "tpb.copy"
    tpb = prop_def(IntegerAttr[I64])
    KIND: ClassVar = isa.Copy

    def required_slots(self) -> list[str]:
        return ["src", "dst"]

    def _build(self, w, sync):
        return isa.Copy(self.unit_index, w["src"], w["dst"], sync)

    @classmethod
    def from_instruction(cls, inst):
        return cls(inst.tpb, {"src": (None, inst.src), "dst": (None, inst.dst)}, (), inst.sync)


@irdl_op_definition
class FillOp(InstrOp):
    """``tpb.fill tpb T dst(..) {value = 0.0 : f64}``: DTDU fill."""
    name = "tpb.fill"
    tpb = prop_def(IntegerAttr[I64])
    value = prop_def(FloatAttr)
    KIND: ClassVar = isa.Fill
    PARAMS: ClassVar = ("value",)

    def required_slots(self) -> list[str]:
        return ["dst"]

    def _build(self, w, sync):
        return isa.Fill(self.unit_index, w["dst"], float(self.value.value.data), sync)

    @classmethod
    def from_instruction(cls, inst):
        return cls(inst.tpb, {"dst": (None, inst.dst)}, (), inst.sync, {"value": _f(inst.value)})


@irdl_op_definition
class BroadcastOp(InstrOp):
    """``tpb.broadcast tpb T src(..) dst(..) {tpb_mask = M}``: DTDU broadcast to a TPB mask."""
    name = "tpb.broadcast"
    tpb = prop_def(IntegerAttr[I64])
    tpb_mask = prop_def(IntegerAttr[I64])
    KIND: ClassVar = isa.Broadcast
    PARAMS: ClassVar = ("tpb_mask",)

    def required_slots(self) -> list[str]:
        return ["src", "dst"]

    def _build(self, w, sync):
        return isa.Broadcast(self.unit_index, w["src"], w["dst"], self.tpb_mask.value.data, sync)

    def _multicast(self, name: str) -> bool:
        return name == "dst"

    @classmethod
    def from_instruction(cls, inst):
        return cls(inst.tpb, {"src": (None, inst.src), "dst": (None, inst.dst)}, (), inst.sync,
                   {"tpb_mask": int_attr(inst.tpb_mask)})


@irdl_op_definition
class CsuOp(InstrOp):
    """``tpb.csu tpb T op0(..) op1(..) ... {routine = "gather", params = array<i64: ..>}``:
    CSU call of a cluster-CPU routine (table in docs/isa.md)."""
    name = "tpb.csu"
    tpb = prop_def(IntegerAttr[I64])
    routine = prop_def(StringAttr)
    params = opt_prop_def(DenseArrayBase)
    KIND: ClassVar = isa.CsuCall
    PARAMS: ClassVar = ("routine", "params")

    def _routine(self) -> Routine:
        try:
            return Routine[self.routine.data.upper()]
        except KeyError:
            raise VerifyException(f"{self.describe()}: unknown CSU routine '{self.routine.data}' "
                                  f"(known: {', '.join(r.name.lower() for r in Routine)})") from None

    def required_slots(self) -> list[str]:
        return [f"op{i}" for i in range(ROUTINE_OPERANDS[self._routine()])]

    def _build(self, w, sync):
        r = self._routine()
        return isa.CsuCall(self.unit_index, r, tuple(w[f"op{i}"] for i in range(ROUTINE_OPERANDS[r])),
                           array_values(self.params) if self.params is not None else (), sync)

    @classmethod
    def from_instruction(cls, inst):
        slots = {f"op{i}": (None, w) for i, w in enumerate(inst.operands)}
        p: dict[str, Attribute] = {"routine": StringAttr(Routine(inst.routine).name.lower())}
        if inst.params:
            p["params"] = i64_array(inst.params)
        return cls(inst.tpb, slots, (), inst.sync, p)


@irdl_op_definition
class DmaOp(InstrOp):
    """``tpb.dma engine E src(..) dst(..) [{tpb_mask = M}]``: CCB DMA (DRB broadcast if M != 0)."""
    name = "tpb.dma"
    engine = prop_def(IntegerAttr[I64])
    tpb_mask = opt_prop_def(IntegerAttr[I64])
    KIND: ClassVar = isa.Dma
    UNIT_KEY: ClassVar = "engine"
    PARAMS: ClassVar = ("tpb_mask",)

    def required_slots(self) -> list[str]:
        return ["src", "dst"]

    def _build(self, w, sync):
        return isa.Dma(self.unit_index, w["src"], w["dst"], _ival(self.tpb_mask), sync)

    def _multicast(self, name: str) -> bool:
        return name == "dst" and _ival(self.tpb_mask) != 0

    @classmethod
    def from_instruction(cls, inst):
        p = {"tpb_mask": int_attr(inst.tpb_mask)} if inst.tpb_mask else {}
        return cls(inst.engine, {"src": (None, inst.src), "dst": (None, inst.dst)}, (), inst.sync, p)


INSTR_OPS: tuple[type[InstrOp], ...] = (MatmulOp, Conv2dOp, CvuPipelineOp, CopyOp, FillOp, BroadcastOp,
                                        CsuOp, DmaOp)
OP_BY_KIND: dict[type[Instruction], type[InstrOp]] = {o.KIND: o for o in INSTR_OPS}


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


@irdl_op_definition
class ProgramOp(IRDLOperation):
    """``tpb.program "MACHINE" LEVEL [attributes {fingerprint = "0x..", metadata = ["k", "v", ..]}]
    {...}``.

    The program for one machine (a preset name or machine file); ``LEVEL`` is ``placed`` or
    ``resolved`` and selects how strictly the ops inside are verified. At the resolved level every
    ``hbsm.alloc``/``hbsm.fifo`` must have an offset and no ``sync.barrier`` may remain.
    """
    name = "tpb.program"
    machine = prop_def(StringAttr)
    level = prop_def(StringAttr)
    fingerprint = opt_prop_def(StringAttr)
    metadata = opt_prop_def(ArrayAttr[StringAttr])  # key, value, key, value, ...
    body = region_def("single_block")
    traits = traits_def(NoTerminator())
    PROPS: ClassVar = ("fingerprint", "metadata")

    def __init__(self, machine: str, level: str = "placed", ops: Sequence[Operation] = (),
                 fingerprint: int | None = None, metadata: dict[str, str] | None = None):
        props: dict[str, Attribute] = {"machine": StringAttr(machine), "level": StringAttr(level)}
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

    def get_machine(self) -> Machine:
        try:
            return get_machine(self.machine.data)
        except M100Error as e:
            raise VerifyException(f"'tpb.program': {e}") from None

    def verify_(self) -> None:
        if self.level.data not in LEVELS:
            raise VerifyException(f"'tpb.program': level must be 'placed' or 'resolved', not "
                                  f"'{self.level.data}'")
        self.get_machine()
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


@irdl_op_definition
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
        m = prog.get_machine() if prog is not None else None
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


@irdl_op_definition
class SegmentOp(IRDLOperation):
    """``tpb.segment "NAME" SPACE ADDRESS data "HEX"``: initial memory contents (weights,
    constants) at a DDR or CCB SRAM address = ``program.Segment``."""
    name = "tpb.segment"
    seg_name = prop_def(StringAttr)
    space = prop_def(StringAttr)
    address = prop_def(IntegerAttr[I64])
    data = prop_def(StringAttr)  # hex
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp),))

    def __init__(self, name: str, space: str, address: int, data: bytes):
        super().__init__(properties={"seg_name": StringAttr(name), "space": StringAttr(space),
                                     "address": int_attr(address), "data": StringAttr(data.hex())})

    @property
    def bytes(self) -> bytes:
        return bytes.fromhex(self.data.data)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.seg_name.data)
        printer.print_string(f" {self.space.data} {self.address.value.data} data ")
        printer.print_string_literal(self.data.data)
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
            n = len(bytes.fromhex(self.data.data))
        except ValueError:
            raise VerifyException(f"'tpb.segment' \"{self.seg_name.data}\": data is not a hex "
                                  "string") from None
        prog = program_of(self)
        if prog is not None:
            m = prog.get_machine()
            size = isa.space_size(m, SPACE_BY_NAME[self.space.data])
            a = self.address.value.data
            if a < 0 or a + n > size:
                raise VerifyException(f"'tpb.segment' \"{self.seg_name.data}\": bytes [{a}, {a + n}) "
                                      f"fall outside {self.space.data.upper()} (size {size})")


@irdl_op_definition
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
        if self.role.data not in ("input", "output"):
            raise VerifyException(f"{me}: role must be 'input' or 'output', not '{self.role.data}'")
        if self.space.data not in SPACE_BY_NAME:
            raise VerifyException(f"{me}: unknown memory space '{self.space.data}'")
        type_to_dtype(self.element_type)
        prog = program_of(self)
        if prog is not None:
            from m100.targets.m100.program import Program  # noqa: F401  (contract check only)
            m = prog.get_machine()
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


TPB = Dialect("tpb", [*INSTR_OPS, ProgramOp, StreamOp, SegmentOp, SymbolOp], [StageAttr])

__all__ = ["TPB", "InstrOp", "MatmulOp", "Conv2dOp", "CvuPipelineOp", "CopyOp", "FillOp", "BroadcastOp",
           "CsuOp", "DmaOp", "ProgramOp", "StreamOp", "SegmentOp", "SymbolOp", "StageAttr",
           "INSTR_OPS", "OP_BY_KIND", "level_of", "program_of", "LEVELS"]
