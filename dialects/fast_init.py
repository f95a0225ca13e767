"""xDSL's generic op builder (``irdl_op_init``) specialized per op class, for the ops a compile
creates by the thousand (``tpb`` instructions, ``hbsm.alloc``, ``sync.join``).

Why: the scheduler's emitter builds one ``tpb`` instruction, one ``hbsm.alloc`` per piece buffer
and the joins of the segment barriers (ResNet-18 224: ~16 000 ops); half of ``emit_program``'s
CPU was xDSL's ``irdl_op_init``: every operand group matched through ``SSAValue.get`` (a
``match`` with an ``isa`` per operand), four ``irdl_build_arg_list`` walks over the definition,
and a fresh ``DenseArrayBase`` for ``operandSegmentSizes`` packed and verified per op.

What: :func:`irdl_init` takes ``IRDLOperation.__init__``'s keyword arguments. For a class whose
definition has no regions or successors, single results and no option other than
``AttrSizedOperandSegments`` (the shapes of the classes that call it), and operands that are all
``OpResult`` / ``BlockArgument`` values in groups of the sizes their definitions allow (one for a
single operand, any for a variadic one), it builds the same operand list, result types,
properties (``None`` dropped, the user's first, then ``operandSegmentSizes``: one shared
immutable ``DenseArrayBase`` per sizes tuple) and attributes that ``irdl_op_init`` builds, and
sets what ``Operation.__init__`` would set with them (below). Anything else (an ``Operation``
given as an operand, a ``None`` group, a wrong count, another shape of definition) goes to
``IRDLOperation.__init__``, which converts it or raises its own error. ``ENABLED = False`` always
takes the generic path. Those fields are set directly
(:func:`_operation_init`: the same operand tuple, uses linked in the same order, results,
property / attribute dicts, location, empty successors and regions, and the definition's defaults
``IRDLOperation.__post_init__`` fills, found once per class): ResNet-50's emitter builds ~38 000
ops, and ``Operation.__init__``'s setters, generators and per-op walk of the definition's
defaults were ~18 % of ``emit_program``. ``test/unit/dialects/test_fast_init.py`` builds every
op of compiled programs both ways (this builder and xDSL's ``IRDLOperation.__init__``) and
requires the same whole op state (fields in order, uses and their links, results, dicts,
location), printed text, and the generic errors for bad arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import UNKNOWN_LOC, DenseArrayBase, i32
from xdsl.ir import Attribute, BlockArgument, Operation, OpResult, SSAValues, Use
from xdsl.irdl import AttrSizedOperandSegments, IRDLOperation
from xdsl.irdl.operations import OptionalDef, VariadicDef

ENABLED = True

_SEG = AttrSizedOperandSegments.attribute_name
_VALUES = (OpResult, BlockArgument)
# class -> None (generic) or (per operand definition: 0 single / 1 optional / 2 variadic,
#          number of results, segment sizes as a property, as an attribute)
_PLANS: dict[type, tuple | None] = {}
_SIZES: dict[tuple[int, ...], DenseArrayBase] = {}
_PLAIN: dict[type, bool] = {}  # result type class -> an Attribute that is no Sequence


def _plan(cls: type) -> tuple | None:
    op_def = cls.get_irdl_definition()  # type: ignore[attr-defined]
    if op_def.regions or op_def.successors:
        return None
    if any(isinstance(d, VariadicDef) for _, d in op_def.results):  # optional ones too
        return None
    prop = attr = False
    for o in op_def.options:
        if type(o) is not AttrSizedOperandSegments:
            return None
        if o.as_property:
            prop = True
        else:
            attr = True
    kinds = tuple(1 if isinstance(d, OptionalDef) else 2 if isinstance(d, VariadicDef) else 0
                  for _, d in op_def.operands)
    return kinds, len(op_def.results), prop, attr


def segment_sizes_attr(sizes: tuple[int, ...]) -> DenseArrayBase:
    """``DenseArrayBase.from_list(i32, sizes)``, one shared instance per sizes tuple."""
    a = _SIZES.get(sizes)
    if a is None:
        a = _SIZES[sizes] = DenseArrayBase.from_list(i32, list(sizes))
    return a


def irdl_init(op: IRDLOperation, *, operands: Sequence = (), result_types: Sequence = (),
              properties: Mapping[str, Attribute | None] | None = None,
              attributes: Mapping[str, Attribute | None] | None = None) -> None:
    """``IRDLOperation.__init__(op, operands=..., result_types=..., properties=...,
    attributes=...)`` (module doc)."""
    cls = type(op)
    try:
        plan = _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _plan(cls)
    if plan is None or not ENABLED:
        return _generic(op, operands, result_types, properties, attributes)
    kinds, n_res, prop, attr = plan
    if len(operands) != len(kinds) or len(result_types) != n_res:
        return _generic(op, operands, result_types, properties, attributes)
    flat: list = []
    sizes = []
    for kind, grp in zip(kinds, operands):
        if type(grp) in _VALUES:  # one value given alone: irdl_op_init's size 1
            flat.append(grp)
            sizes.append(1)
            continue
        if type(grp) is not list and type(grp) is not tuple:
            return _generic(op, operands, result_types, properties, attributes)
        n = len(grp)
        if (kind == 0 and n != 1) or (kind == 1 and n > 1):
            return _generic(op, operands, result_types, properties, attributes)
        for v in grp:
            if type(v) not in _VALUES:  # an Operation (converted there), or an error
                return _generic(op, operands, result_types, properties, attributes)
        flat.extend(grp)
        sizes.append(n)
    for t in result_types:
        plain = _PLAIN.get(type(t))
        if plain is None:  # irdl_op_init expands a Sequence given for a result
            plain = _PLAIN[type(t)] = isinstance(t, Attribute) and not isinstance(t, Sequence)
        if not plain:
            return _generic(op, operands, result_types, properties, attributes)
    props = {k: v for k, v in properties.items() if v is not None} if properties else {}
    attrs = {k: v for k, v in attributes.items() if v is not None} if attributes else {}
    if prop:
        props[_SEG] = segment_sizes_attr(tuple(sizes))
    if attr:
        attrs[_SEG] = segment_sizes_attr(tuple(sizes))
    _operation_init(op, cls, flat, result_types, props, attrs)


# class -> (property defaults, attribute defaults) that IRDLOperation.__post_init__ fills in,
# or None: the class has its own __post_init__ (called as Operation.__init__ calls it)
_DEFAULTS: dict[type, tuple | None] = {}


def _defaults(cls: type) -> tuple | None:
    if cls.__post_init__ is not IRDLOperation.__post_init__ or not isinstance(cls.name, str) \
            or cls.name == "":
        return None  # a class of its own (or Operation.__post_init__'s asserts): the call
    op_def = cls.get_irdl_definition()  # type: ignore[attr-defined]
    return (tuple((k, d.default_value) for k, d in op_def.properties.items()
                  if not isinstance(d, OptionalDef) and d.default_value is not None),
            tuple((k, d.default_value) for k, d in op_def.attributes.items()
                  if not isinstance(d, OptionalDef) and d.default_value is not None))


def _operation_init(op: Operation, cls: type, flat: list, result_types, props: dict,
                    attrs: dict) -> None:
    """``Operation.__init__(op, operands=flat, result_types=..., properties=props,
    attributes=attrs, successors=[], regions=[])`` on a fresh op: the same fields in the same
    order (``props`` / ``attrs`` are the caller's own new dicts)."""
    try:
        dfl = _DEFAULTS[cls]
    except KeyError:
        dfl = _DEFAULTS[cls] = _defaults(cls)
    operands = SSAValues(flat)
    uses = []
    for i, v in enumerate(operands):  # IRWithUses.add_use, in operand order
        u = Use(op, i)
        first = v.first_use
        u._next_use = first
        if first is not None:
            first._prev_use = u
        v.first_use = u
        uses.append(u)
    op._operands = operands
    op._operand_uses = tuple(uses)
    op.results = SSAValues([OpResult(t, op, i) for i, t in enumerate(result_types)])
    op.properties = props
    op.attributes = attrs
    op.location = UNKNOWN_LOC
    op._successors = ()
    op._successor_uses = ()
    op.regions = ()
    if dfl is None:
        op.__post_init__()
        return
    pd, ad = dfl
    for k, d in pd:
        if k not in props:
            props[k] = d
    for k, d in ad:
        if k not in attrs:
            attrs[k] = d


def _generic(op, operands, result_types, properties, attributes) -> None:
    IRDLOperation.__init__(op, operands=operands, result_types=result_types,
                           properties=properties, attributes=attributes)


__all__ = ["ENABLED", "irdl_init", "segment_sizes_attr"]
