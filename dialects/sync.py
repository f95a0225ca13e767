"""The ``sync`` dialect: dataflow tokens and Synchronization Unit actions.

Types
-----
``!sync.token``
    An *unallocated* dataflow edge: every ``tpb`` op returns one when it is done; ops list the tokens
    they wait for in ``after(...)``. ``sync-insert`` (issue 6) turns tokens into counter traffic.

Attributes (resolved level, 1:1 with :mod:`m100.targets.m100.isa`)
-------------------------------------------------------------------
``#sync.monitor<tpb = T, counter = C, expected = E[, per_block = P]>``  = ``isa.Monitor``
    Block ``b`` of the instruction waits until counter C of TPB T is ``>= E + b * P``.
``#sync.update<counter = C, mask = M[, amount = A][, trigger = block]>`` = ``isa.Update``
    Add A (default 1) to counter C on every TPB of mask M, at the end (default) or after each block.
``#sync.actions<blocks = B[, monitors = [...]][, updates = [...]]>`` = ``isa.Sync``

Ops
---
``%t = sync.join %a, %b, ...``
    A token that is done when all operands are done (merges edges; no hardware cost).
``%t = sync.barrier %a, ... {tpb_mask = M}``
    A global point among the TPBs of mask M (a CCB barrier): every later op of those TPBs waits for
    it. ``sync-insert`` lowers it to counter traffic; use it only where a real global point exists.

Verifiers: counters are non-negative, masks non-zero, amounts >= 1, blocks >= 1 (attribute level);
counter ids below the machine's ``su_counters`` and masks naming existing TPBs (op level, machine of
the enclosing ``tpb.program``, see :func:`machine_of`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from xdsl.dialects.builtin import I64, ArrayAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (IRDLOperation, base, irdl_attr_definition, prop_def,
                       result_def, traits_def, var_operand_def)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from m100.targets.m100.isa import Monitor, Sync, Trigger, Update

from .fast_init import irdl_init
from .fast_verify import fast_op_definition
from .twu import checked_params, int_attr, isa_guard, trusted_attr


@irdl_attr_definition
class TokenType(ParametrizedAttribute, TypeAttribute):
    """``!sync.token``: an unallocated dataflow edge (done-ness of an op)."""
    name = "sync.token"


TOKEN = TokenType()  # the one instance the op builders share (attributes are immutable)


def _parse_kv(parser: AttrParser, allowed: Sequence[str]) -> dict[str, object]:
    """``<key = value, ...>`` with integer values (or identifiers for ``trigger``)."""
    out: dict[str, object] = {}

    def one() -> None:
        key = parser.parse_identifier()
        if key not in allowed:
            parser.raise_error(f"unexpected key '{key}' (expected one of {', '.join(allowed)})")
        parser.parse_punctuation("=")
        if key == "trigger":
            out[key] = parser.parse_identifier()
        elif key in ("monitors", "updates"):
            out[key] = parser.parse_comma_separated_list(parser.Delimiter.SQUARE,
                                                         parser.parse_attribute)
        else:
            out[key] = parser.parse_integer()

    parser.parse_comma_separated_list(parser.Delimiter.ANGLE, one)
    return out


def _need_keys(parser: AttrParser, d: dict[str, object], keys: Sequence[str], what: str) -> None:
    for k in keys:
        if k not in d:
            parser.raise_error(f"{what}: missing '{k}'")


# parameters of the declared kinds by construction: only the attribute's own verify runs
# (``from_isa`` builds one per instruction of a program, sync-insert's output; the generic check
# was ~20 % of the pass on ResNet-50 224, docs/sync.md)
_trusted = trusted_attr


@irdl_attr_definition
class MonitorAttr(ParametrizedAttribute):
    """``#sync.monitor<tpb = T, counter = C, expected = E[, per_block = P]>``."""
    name = "sync.monitor"
    tpb: IntegerAttr[I64]
    counter: IntegerAttr[I64]
    expected: IntegerAttr[I64]
    per_block: IntegerAttr[I64]

    def __init__(self, tpb: int, counter: int, expected: int, per_block: int = 0):
        super().__init__(int_attr(tpb), int_attr(counter), int_attr(expected), int_attr(per_block))

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def from_isa(m: Monitor) -> MonitorAttr:
        return _trusted(MonitorAttr, int_attr(m.tpb), int_attr(m.counter), int_attr(m.expected),
                        int_attr(m.per_block))

    def to_isa(self) -> Monitor:
        return Monitor(self.tpb.value.data, self.counter.value.data, self.expected.value.data,
                       self.per_block.value.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        d = _parse_kv(parser, ("tpb", "counter", "expected", "per_block"))
        _need_keys(parser, d, ("tpb", "counter", "expected"), "#sync.monitor")
        return checked_params(parser, cls, tuple(int_attr(d.get(k, 0)) for k in
                                                 ("tpb", "counter", "expected", "per_block")))

    def print_parameters(self, printer: Printer) -> None:
        m = self.to_isa()
        s = f"<tpb = {m.tpb}, counter = {m.counter}, expected = {m.expected}"
        if m.per_block:
            s += f", per_block = {m.per_block}"
        printer.print_string(s + ">")

    def verify(self) -> None:
        m = self.to_isa()
        if m.tpb < 0 or m.counter < 0 or m.expected < 0 or m.per_block < 0:
            raise VerifyException(f"#sync.monitor: tpb, counter, expected and per_block must be "
                                  f">= 0 (got {m})")


_TRIGGERS = {"end": Trigger.END, "block": Trigger.BLOCK}
_TRIGGER_NAMES = {v: k for k, v in _TRIGGERS.items()}


@irdl_attr_definition
class UpdateAttr(ParametrizedAttribute):
    """``#sync.update<counter = C, mask = M[, amount = A][, trigger = end|block]>``."""
    name = "sync.update"
    counter: IntegerAttr[I64]
    mask: IntegerAttr[I64]
    amount: IntegerAttr[I64]
    trigger: StringAttr

    def __init__(self, counter: int, mask: int, amount: int = 1, trigger: str = "end"):
        super().__init__(int_attr(counter), int_attr(mask), int_attr(amount), StringAttr(trigger))

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def from_isa(u: Update) -> UpdateAttr:
        return _trusted(UpdateAttr, int_attr(u.counter), int_attr(u.tpb_mask), int_attr(u.amount),
                        StringAttr(Trigger(u.trigger).name.lower()))

    def to_isa(self) -> Update:
        return Update(self.counter.value.data, self.mask.value.data, self.amount.value.data,
                      _TRIGGERS[self.trigger.data])

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        d = _parse_kv(parser, ("counter", "mask", "amount", "trigger"))
        _need_keys(parser, d, ("counter", "mask"), "#sync.update")
        return checked_params(parser, cls, (int_attr(d["counter"]), int_attr(d["mask"]),
                                            int_attr(d.get("amount", 1)),
                                            StringAttr(str(d.get("trigger", "end")))))

    def print_parameters(self, printer: Printer) -> None:
        s = f"<counter = {self.counter.value.data}, mask = {self.mask.value.data}"
        if self.amount.value.data != 1:
            s += f", amount = {self.amount.value.data}"
        if self.trigger.data != "end":
            s += f", trigger = {self.trigger.data}"
        printer.print_string(s + ">")

    def verify(self) -> None:
        if self.trigger.data not in _TRIGGERS:
            raise VerifyException(f"#sync.update: trigger must be 'end' or 'block', "
                                  f"not '{self.trigger.data}'")
        if self.counter.value.data < 0:
            raise VerifyException(f"#sync.update: counter {self.counter.value.data} must be >= 0")
        if self.mask.value.data <= 0:
            raise VerifyException(f"#sync.update: TPB mask {self.mask.value.data} names no TPB")
        if self.amount.value.data < 1:
            raise VerifyException(f"#sync.update: amount {self.amount.value.data} must be >= 1")


_ACTIONS_PARAMS = ("blocks", "monitors", "updates")
_I64_END = 1 << 63  # a field below 2**63 is an i64 as it is (``twu.i64_attr``)


def canonical_sync(s: Sync) -> bool:
    """``s`` is exactly what ``ActionsAttr.to_isa`` decodes for it: plain ``int`` fields, a
    ``Trigger`` member per update, tuples of ``Monitor`` / ``Update``."""
    return (type(s.blocks) is int and type(s.monitors) is tuple and type(s.updates) is tuple
            and all(type(m) is Monitor and type(m.tpb) is int and type(m.counter) is int
                    and type(m.expected) is int and type(m.per_block) is int
                    for m in s.monitors)
            and all(type(u) is Update and type(u.counter) is int and type(u.tpb_mask) is int
                    and type(u.amount) is int and type(u.trigger) is Trigger
                    and u.trigger in _TRIGGER_NAMES for u in s.updates))


@irdl_attr_definition
class ActionsAttr(ParametrizedAttribute):
    """``#sync.actions<blocks = B, monitors = [#sync.monitor...], updates = [#sync.update...]>``."""
    name = "sync.actions"
    blocks: IntegerAttr[I64]
    monitors: ArrayAttr[MonitorAttr]
    updates: ArrayAttr[UpdateAttr]

    def __init__(self, blocks: int = 1, monitors: Sequence[MonitorAttr] = (),
                 updates: Sequence[UpdateAttr] = ()):
        super().__init__(int_attr(blocks), ArrayAttr(monitors), ArrayAttr(updates))

    @staticmethod
    def from_isa(s: Sync) -> ActionsAttr:
        """The attribute of ``s``. Not memoized as a whole (sync-insert's syncs are nearly all
        distinct: an lru_cache hashed each one, its monitors and updates, for ~5 % hits); the
        monitor and update attributes are. A canonical ``s`` (plain ints, a ``Trigger``
        member, tuples) is what :meth:`to_isa` would decode, so the attribute keeps it."""
        return _trusted(ActionsAttr, int_attr(s.blocks),
                        ArrayAttr([MonitorAttr.from_isa(m) for m in s.monitors]),
                        ArrayAttr([UpdateAttr.from_isa(u) for u in s.updates]),
                        isa=s if canonical_sync(s) else None)

    @staticmethod
    def lazy(s: Sync) -> ActionsAttr:
        """:meth:`from_isa`'s attribute, its parameters built on first read: sync-insert gives
        every instruction op of a program one (62 892 on the 1024-token LLaMA prefill layer,
        ~17 us each), and what reads them after it -- the op's ``to_isa``, the machine check,
        the emission -- reads the ``Sync`` (``to_isa``), not the parameters; printing, equality,
        hashing or ``parameters`` build them (:meth:`__getattr__`), the same as
        :meth:`from_isa`'s. Only for a canonical ``s`` whose attribute verifies (every field an
        ``i64``, blocks >= 1, monitors' fields >= 0, updates' counter >= 0, mask >= 1, amount
        >= 1: the checks :meth:`from_isa` runs); any other goes through :meth:`from_isa`
        (its error, or its attribute)."""
        if not (canonical_sync(s) and 1 <= s.blocks < _I64_END
                and all(0 <= m.tpb < _I64_END and 0 <= m.counter < _I64_END
                        and 0 <= m.expected < _I64_END and 0 <= m.per_block < _I64_END
                        for m in s.monitors)
                and all(0 <= u.counter < _I64_END and 1 <= u.tpb_mask < _I64_END
                        and 1 <= u.amount < _I64_END for u in s.updates)):
            return ActionsAttr.from_isa(s)
        attr = ActionsAttr.__new__(ActionsAttr)
        object.__setattr__(attr, "_isa", s)
        return attr

    def __getattr__(self, name: str):
        # only reached when ``name`` is not set: the parameters of a :meth:`lazy` attribute
        if name in _ACTIONS_PARAMS:
            d = self.__dict__
            s = d.get("_isa")
            if s is not None and "blocks" not in d:
                full = ActionsAttr.from_isa(s)
                for f in _ACTIONS_PARAMS:
                    object.__setattr__(self, f, full.__dict__[f])
                return d[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    @property
    def parameters(self) -> tuple[Attribute, ...]:
        # xDSL's reads each field with ``__getattribute__``, which skips ``__getattr__``
        return (self.blocks, self.monitors, self.updates)

    def to_isa(self) -> Sync:
        got = self.__dict__.get("_isa")  # immutable attribute, frozen Sync: decode once
        if got is None:
            got = Sync(self.blocks.value.data, tuple(m.to_isa() for m in self.monitors),
                       tuple(u.to_isa() for u in self.updates))
            object.__setattr__(self, "_isa", got)
        return got

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        d = _parse_kv(parser, ("blocks", "monitors", "updates"))
        mons, ups = d.get("monitors", []), d.get("updates", [])
        if not all(isinstance(m, MonitorAttr) for m in mons):  # type: ignore[union-attr]
            parser.raise_error("#sync.actions: monitors must be #sync.monitor attributes")
        if not all(isinstance(u, UpdateAttr) for u in ups):  # type: ignore[union-attr]
            parser.raise_error("#sync.actions: updates must be #sync.update attributes")
        return checked_params(parser, cls, (int_attr(d.get("blocks", 1)), ArrayAttr(mons),
                                            ArrayAttr(ups)))  # type: ignore[arg-type]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<blocks = {self.blocks.value.data}")
        for key, items in (("monitors", self.monitors), ("updates", self.updates)):
            if items.data:
                printer.print_string(f", {key} = [")
                printer.print_list(items.data, printer.print_attribute)
                printer.print_string("]")
        printer.print_string(">")

    def verify(self) -> None:
        if self.blocks.value.data < 1:
            raise VerifyException(f"#sync.actions: blocks must be >= 1, not {self.blocks.value.data}")

    def check(self, machine, own_tpb: int | None, what: str = "sync") -> None:
        """Machine checks (counter ids, TPB masks, expected ranges) as VerifyException."""
        isa_guard(self.to_isa().check, machine, own_tpb, prefix=f"{what}: ")


# ----------------------------------------------------------------------------------------------
# machine lookup shared by all m100 ops
# ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=32)
def resolve_machine(name: str, spec: str | None = None):
    """The Machine a ``tpb.program`` names: its ``machine_spec`` (JSON of ``Machine.spec()``, carried
    for any machine that is not a preset) or else the preset / machine file ``name``. Cached: a
    machine is built once per process, not once per op. Raises ``MachineError``."""
    from m100.targets.m100.machine import MachineError, get_machine, machine_from_spec
    if spec is None:
        return get_machine(name)
    m = machine_from_spec(spec)
    if m.name != name:
        raise MachineError(f"machine_spec describes machine '{m.name}', not '{name}'")
    return m


def machine_of(op: Operation):
    """The Machine of the nearest ``tpb.program`` that is ``op`` or encloses it (None outside
    one). The one way from an op to its machine: verifiers, passes and the translation use it.
    A program naming no valid machine raises VerifyException."""
    p: Operation | None = op
    while p is not None:
        if p.name == "tpb.program":
            props = p.properties
            name = props.get("machine")
            spec = props.get("machine_spec")
            # the answer is a function of the two (immutable) properties: kept on the program
            # against their identities (the final verification asks once per op: ~35 000 times
            # on ResNet-50)
            memo = p.__dict__.get("_m100_machine")
            if memo is not None and memo[0] is name and memo[1] is spec:
                return memo[2]
            m = None
            if isinstance(name, StringAttr):
                m = isa_guard(resolve_machine, name.data,
                              spec.data if isinstance(spec, StringAttr) else None,
                              prefix=f"'{p.name}': ")
            p.__dict__["_m100_machine"] = (name, spec, m)
            return m
        p = p.parent_op()
    return None


def check_mask(op: Operation, mask: int, what: str = "TPB mask") -> None:
    if mask <= 0:
        raise VerifyException(f"'{op.name}': {what} {mask} names no TPB")
    m = machine_of(op)
    if m is not None and mask & ~m.all_tpbs_mask:
        raise VerifyException(f"'{op.name}': {what} {mask:#x} names a TPB that machine "
                              f"'{m.name}' ({m.num_tpbs} TPBs) does not have")


# ----------------------------------------------------------------------------------------------
# ops
# ----------------------------------------------------------------------------------------------
def _parse_token_list(parser: Parser) -> list:
    ops = []
    first = parser.parse_optional_operand(TokenType())
    if first is not None:
        ops.append(first)
        while parser.parse_optional_punctuation(",") is not None:
            ops.append(parser.parse_operand(TokenType()))
    return ops


@fast_op_definition
class JoinOp(IRDLOperation):
    """``%t = sync.join %a, %b``: done when every operand token is done (no hardware cost)."""
    name = "sync.join"
    inputs = var_operand_def(base(TokenType))
    result = result_def(TokenType)
    traits = traits_def(Pure())

    def __init__(self, inputs: Sequence):
        irdl_init(self, operands=[list(inputs)], result_types=[TOKEN])

    def print(self, printer: Printer) -> None:
        if self.inputs:
            printer.print_string(" ")
            printer.print_list(self.inputs, printer.print_operand)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> JoinOp:
        op = cls(_parse_token_list(parser))
        if (attrs := parser.parse_optional_attr_dict()):
            op.attributes.update(attrs)
        return op

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException("'sync.join' needs at least one token to join")


@fast_op_definition
class BarrierOp(IRDLOperation):
    """``%t = sync.barrier %a, ... {tpb_mask = M}``: a global point among the TPBs of mask M."""
    name = "sync.barrier"
    inputs = var_operand_def(base(TokenType))
    tpb_mask = prop_def(IntegerAttr[I64])
    result = result_def(TokenType)

    def __init__(self, inputs: Sequence, tpb_mask: int):
        super().__init__(operands=[list(inputs)], result_types=[TokenType()],
                         properties={"tpb_mask": int_attr(tpb_mask)})

    def print(self, printer: Printer) -> None:
        if self.inputs:
            printer.print_string(" ")
            printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(f" mask {self.tpb_mask.value.data}")
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> BarrierOp:
        inputs = _parse_token_list(parser)
        parser.parse_keyword("mask")
        op = cls(inputs, parser.parse_integer())
        if (attrs := parser.parse_optional_attr_dict()):
            op.attributes.update(attrs)
        return op

    def verify_(self) -> None:
        check_mask(self, self.tpb_mask.value.data)


SYNC = Dialect("sync", [JoinOp, BarrierOp], [TokenType, MonitorAttr, UpdateAttr, ActionsAttr])

__all__ = ["SYNC", "TokenType", "MonitorAttr", "UpdateAttr", "ActionsAttr", "JoinOp", "BarrierOp",
           "machine_of", "resolve_machine", "check_mask"]
