"""xDSL's generic op verification (``OpDef.verify``), compiled per op class into plain predicates.

Why: the final verification of a compiled program runs ``OpDef.verify`` on every op (ResNet-18
224: ~16 000 ops, most of them ``tpb`` instructions and ``hbsm.alloc``s). It walks the op's
definition each time: the operand segment sizes are unpacked from their dense array (once for the
check and once per named-operand access), every constraint object is asked through a
``VerificationContext``... about half of the verification's CPU.

What: :func:`compile_def` turns an ``OpDef`` whose shape it knows (no regions or successors;
operands all single, one variadic alone, or all variadic sized by an ``operandSegmentSizes``
property; single results; constraints built from ``BaseAttr``, ``EqAttrConstraint``,
``ParamAttrConstraint``, ``AnyAttr``, ``AnyOf`` of classes, ``ArrayOfConstraint`` /
``RangeOf``) into one predicate over an op that is true exactly when ``OpDef.verify`` accepts
the op's structure (operand and result counts and types, segment sizes, properties present /
known / of their constraints, attributes), written out as Python source per class
(:class:`_Source`: one statement per check, since session 34). :func:`fast_op_definition` is
``irdl_op_definition`` whose ``verify_`` asks that predicate first: when it holds, the generic
check is skipped (it would pass); when it does not, the generic ``OpDef.verify`` runs and
raises its own message. Traits are verified as before (``trait.verify``), then the class's own
``verify_``. A definition of any other shape keeps the
generic check. ``test/unit/dialects/test_fast_verify.py`` compares the predicate with
``OpDef.verify`` on mutated ops of every class installed here.

Also :func:`segment_sizes`: the ``operandSegmentSizes`` values of an op, memoized on the op
against the identity of the (immutable) property, and accessors for variadic operands that use
it (``fast_op_definition`` installs them in place of xDSL's, which unpack the array at every
access; the slices returned are the same ``op.operands[a:b]``).

And xDSL's ``IsolatedFromAbove.verify`` is replaced (at import) by :func:`_isolated_from_above`,
the same walk with the ancestor test answered by the blocks walked (xDSL's own method is kept as
``_XDSL_ISOLATED``: the tests' oracle).
The classes installed here also get :func:`_leaf_verify` as ``Operation.verify`` (xDSL's checks
of an op without regions, in the same order, without its per-operand ABC ``isinstance``;
``test_leaf_verify_is_xdsls`` compares it with xDSL's method).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter

from xdsl.dialects.builtin import ArrayAttr, ArrayOfConstraint, DenseArrayBase, i32
from xdsl.ir import (Attribute, Block, BlockArgument, ErasedSSAValue, Operation, OpResult, Region,
                     SSAValue)
from xdsl.irdl import (AttrSizedOperandSegments, OpDef, OptAttributeDef, OptPropertyDef,
                       irdl_op_definition)
from xdsl.irdl.constraints import (AnyAttr, AnyOf, AttrConstraint, BaseAttr, EqAttrConstraint,
                                   EqIntConstraint, ParamAttrConstraint, RangeLengthConstraint,
                                   RangeOf)
from xdsl.irdl.operations import (BeforeVariadicSingleAccessor, OperandDef, OptionalDef,
                                    VariadicDef)
from xdsl.traits import IsolatedFromAbove
from xdsl.utils.exceptions import VerifyException

_SEG = "operandSegmentSizes"
_STRUCTS: dict[int, struct.Struct] = {}


class _Unknown(Exception):
    """A definition or constraint outside what :func:`compile_def` handles."""


def _attr_pred(c: AttrConstraint) -> Callable[[Attribute], bool]:
    """A predicate true exactly when ``c.verify(attr, ctx)`` would not raise."""
    if isinstance(c, AnyAttr):
        return lambda a: True
    if isinstance(c, BaseAttr):
        base = c.attr
        return lambda a: isinstance(a, base)
    if isinstance(c, EqAttrConstraint):
        want = c.attr
        same = _canonical_equal(want)
        if same is not None:
            # ``IntegerAttr[I64]``'s ``IntegerType(64)`` is its own instance, not builtin's
            # ``i64`` that every attribute of this package carries: ``==`` was a dataclass
            # ``__eq__`` and two nested ones per integer property (~8 % of the final verification)
            return lambda a: a is want or a is same or a == want
        return lambda a: a is want or a == want
    if isinstance(c, ParamAttrConstraint):
        base, preds = c.base_attr, tuple(_attr_pred(p) for p in c.param_constrs)
        n = len(preds)
        fields = _param_fields(base)
        if fields is not None and len(fields) == n == 2:
            # the common case (``IntegerAttr[I64]``: value and type): an attribute of exactly
            # ``base`` has ``base``'s parameters, read by name (xDSL's ``parameters`` builds the
            # tuple through the class's definition at every call); a subclass may define others
            f0, f1 = fields
            p0, p1 = preds

            def param2(a: Attribute) -> bool:
                if type(a) is base:
                    d = a.__dict__
                    if f0 in d and f1 in d:
                        return p0(d[f0]) and p1(d[f1])
                if not isinstance(a, base):
                    return False
                ps = a.parameters
                return len(ps) == n and all(p(x) for p, x in zip(preds, ps))
            return param2

        def param(a: Attribute) -> bool:
            if not isinstance(a, base):
                return False
            ps = a.parameters
            return len(ps) == n and all(p(x) for p, x in zip(preds, ps))
        return param
    if isinstance(c, AnyOf) and c._abstr_constr is None:  # noqa: SLF001
        # xDSL's ``AnyOf.verify``: the constraint of the attribute's exact class, if any
        by_class = {b: _attr_pred(k) for b, k in c._based_constrs.items()}  # noqa: SLF001

        def any_of(a: Attribute) -> bool:
            p = by_class.get(a.__class__)
            return p is not None and p(a)
        return any_of
    if isinstance(c, ArrayOfConstraint):
        each = _range_pred(c.elem_range_constraint)
        return lambda a: isinstance(a, ArrayAttr) and each(a.data)
    raise _Unknown(repr(c))


def _canonical_equal(want: Attribute) -> Attribute | None:
    """The builtin dialect's shared instance equal to ``want`` but not ``want`` itself (``i64``
    for a constraint's own ``IntegerType(64)``), or None. Attributes are immutable, so an
    attribute that *is* that instance equals ``want`` (checked here, once)."""
    from xdsl.dialects import builtin
    for name in _CANONICAL:
        x = getattr(builtin, name, None)
        if x is not None and x is not want and type(x) is type(want) and x == want:
            return x
    return None


#: the builtin dialect's shared type instances :func:`_canonical_equal` looks among
_CANONICAL = ("i64", "i32", "i16", "i8", "i1", "f64", "f32", "f16")


def _param_fields(base: type) -> tuple[str, ...] | None:
    """The parameter field names of a parametrized attribute class, in ``parameters`` order
    (None: not such a class, or its instances keep the fields elsewhere than ``__dict__``)."""
    try:
        fields = tuple(f for f, _ in base.get_irdl_definition().parameters)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return None
    if getattr(base, "__slots__", None) or any(
            hasattr(getattr(base, f, None), "__get__") for f in fields):
        return None  # a descriptor (property) of that name would answer ``parameters`` instead
    return fields


def _range_pred(r) -> Callable[[tuple], bool]:
    """A predicate over a sequence of attributes: ``RangeOf`` (any length)."""
    if type(r) is RangeOf:
        if type(r.constr) is BaseAttr:
            # (every operand group of the dialects: tokens, buffers) -- ``isinstance`` per
            # element in C, not a generator step and a predicate call each (~156 000 operands
            # on ResNet-50)
            base = r.constr.attr
            return lambda xs: all(map(isinstance, xs, repeat(base)))
        p = _attr_pred(r.constr)
        return lambda xs: all(p(x) for x in xs)
    raise _Unknown(repr(r))


def segment_sizes(op: Operation) -> tuple[int, ...]:
    """``op.properties['operandSegmentSizes'].get_values()``, memoized on the op against the
    identity of the property (attributes are immutable; a pass that changes the operands sets a
    new one)."""
    a = op.properties[_SEG]
    m = op.__dict__.get("_m100_seg")
    if m is not None and m[0] is a:
        return m[1]
    raw = a.data.data  # type: ignore[attr-defined]
    if a.elt_type == i32 and len(raw) % 4 == 0:  # type: ignore[attr-defined]
        n = len(raw) // 4
        s = _STRUCTS.get(n)
        if s is None:
            s = _STRUCTS[n] = struct.Struct(i32.format[0] + str(n) + i32.format[1:])
        v = s.unpack(raw)
    else:
        v = a.get_values()  # type: ignore[attr-defined]
    op.__dict__["_m100_seg"] = (a, v)
    return v


class _VariadicOperands:
    """Accessor of the ``idx``-th variadic operand group of an op sized by
    ``operandSegmentSizes`` (xDSL's ``VariadicAttrAccessor`` with the sizes memoized)."""

    def __init__(self, idx: int):
        self.idx = idx

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        v = segment_sizes(obj)
        start = sum(v[:self.idx])
        # ``obj.operands[a:b]`` is this slice of the tuple xDSL keeps (without the view object)
        return obj._operands[start:start + v[self.idx]]  # noqa: SLF001

    def __set__(self, obj, value):
        raise NotImplementedError("Cannot write to named operands, regions, results, or "
                                  "successors.")


def compile_def(op_def: OpDef) -> Callable[[Operation], bool] | None:
    """The structural part of ``op_def.verify`` as one predicate, or None when the definition has
    a shape this module does not handle (then the generic check is kept)."""
    try:
        return _compile(op_def)
    except _Unknown:
        return None


def _compile(op_def: OpDef) -> Callable[[Operation], bool]:
    if op_def.regions or op_def.successors:
        raise _Unknown("regions/successors")
    seg_opt = [o for o in op_def.options if isinstance(o, AttrSizedOperandSegments)]
    if len(seg_opt) != len(op_def.options) or (seg_opt and not seg_opt[0].as_property):
        raise _Unknown("options")
    # results: single ones only
    rdefs = op_def.results
    if any(isinstance(d, VariadicDef) for _, d in rdefs):
        raise _Unknown("variadic result")
    results = [_single_constr(d.constr) for _, d in rdefs]
    # operands
    odefs = op_def.operands
    if any(isinstance(d, OptionalDef) or not isinstance(d, OperandDef) for _, d in odefs):
        raise _Unknown("optional operand")
    variadic = [isinstance(d, VariadicDef) for _, d in odefs]
    if seg_opt:
        if not all(variadic):
            raise _Unknown("segments with single operands")
        single, groups = None, [d.constr for _, d in odefs]
    elif not any(variadic):
        single, groups = [_single_constr(d.constr) for _, d in odefs], None
    elif len(odefs) == 1:
        single, groups = None, [odefs[0][1].constr]
    else:
        raise _Unknown("several variadic operands without sizes")
    return _Source().predicate(op_def, results, single, groups, bool(seg_opt))


def _single_constr(r) -> AttrConstraint:
    """The element constraint of a single (non-variadic) operand/result definition."""
    if type(r) is RangeLengthConstraint and isinstance(r.length, EqIntConstraint) and \
            r.length.value == 1 and type(r.constraint) is RangeOf:
        return r.constraint.constr
    raise _Unknown(repr(r))


class _Source:
    """A class's structural predicate as Python source, compiled once per class: one statement
    per check, in the order of the checks it replaced, the constraint objects bound as names.

    Why: until session 34 the predicate was a loop over ``(name, closure, optional)`` triples
    and closures per operand group and result (ResNet-50: 21 properties a convolution, 9 of them
    ``IntegerAttr[I64]`` through ``param2``'s nested closures; ~40 000 ops, ~4.5 us each). The
    statements are those closures' tests written out, with the same answers: ``BaseAttr`` an
    ``isinstance``; ``EqAttrConstraint`` identity with the wanted instance or its builtin twin,
    then ``==``; a two-parameter ``ParamAttrConstraint`` of a class whose fields live in
    ``__dict__`` reads them there for an attribute of exactly that class (``param2``'s fast
    path), every other attribute goes to the closure (:func:`_attr_pred`); a ``RangeOf`` of a
    ``BaseAttr`` an ``isinstance`` per element in C; any other constraint is its closure. A
    value of a class in :data:`_PLAIN_VALUES` has its type read from ``_type``, any other is
    asked ``.type``. ``test_compiled_predicate_is_the_generic_check`` compares the predicate
    with xDSL's ``OpDef.verify`` on mutants of every installed class."""

    def __init__(self):
        self.ns: dict[str, object] = {"_PLAIN": _PLAIN_VALUES, "_TYPE": _TYPE_FIELD,
                                      "_repeat": repeat, "_seg_sizes": segment_sizes,
                                      "_Dense": DenseArrayBase, "_i32": i32}

    def bind(self, obj: object) -> str:
        name = f"_k{len(self.ns)}"
        self.ns[name] = obj
        return name

    def check(self, c: AttrConstraint, var: str, ind: str, depth: int) -> list[str]:
        """Statements that ``return False`` unless ``_attr_pred(c)(var)`` holds."""
        if isinstance(c, AnyAttr):
            return []
        if isinstance(c, BaseAttr):
            return [f"{ind}if not isinstance({var}, {self.bind(c.attr)}): return False"]
        if isinstance(c, EqAttrConstraint):
            want, same = self.bind(c.attr), _canonical_equal(c.attr)
            twin = f" or {var} is {self.bind(same)}" if same is not None else ""
            return [f"{ind}if not ({var} is {want}{twin} or {var} == {want}): return False"]
        whole = self.bind(_attr_pred(c))  # (raises _Unknown for a constraint it does not know)
        fields = _param_fields(c.base_attr) if isinstance(c, ParamAttrConstraint) else None
        if fields is None or len(fields) != len(c.param_constrs) or len(fields) != 2:
            return [f"{ind}if not {whole}({var}): return False"]
        d = f"d{depth}"
        f0, f1 = fields
        out = [f"{ind}if type({var}) is {self.bind(c.base_attr)} and {f0!r} in "
               f"({d} := {var}.__dict__) and {f1!r} in {d}:"]
        for i, (f, pc) in enumerate(zip(fields, c.param_constrs)):
            x = f"x{depth}_{i}"
            out.append(f"{ind} {x} = {d}[{f!r}]")
            out += self.check(pc, x, ind + " ", depth + 1)
        out += [f"{ind} pass", f"{ind}elif not {whole}({var}): return False"]
        return out

    def entries(self, defs: dict, optional: type, where: str) -> list[str]:
        out = []
        for k, d in defs.items():
            out.append(f" v = {where}.get({k!r})")
            body = self.check(d.constr, "v", "  ", 1)
            if isinstance(d, optional):
                if body:
                    out += [" if v is not None:", *body]
            else:
                out += [" if v is None: return False", *(b[1:] for b in body)]
        return out

    def value_type(self, c: AttrConstraint, var: str) -> list[str]:
        """Statements that ``return False`` unless ``c`` accepts the type of value ``var``."""
        return [f" t = {var}._type if type({var}) in _PLAIN else {var}.type",
                *self.check(c, "t", " ", 1)]

    def group(self, r, part: str) -> list[str]:
        """Statements that ``return False`` unless ``_range_pred(r)`` accepts ``part``."""
        if type(r) is RangeOf and type(r.constr) is BaseAttr:
            return [f" if not all(map(isinstance, {part}, _repeat({self.bind(r.constr.attr)}))):"
                    " return False"]
        return [f" if not {self.bind(_range_pred(r))}({part}): return False"]

    def predicate(self, op_def: OpDef, results: list, single: list | None, groups: list | None,
                  seg: bool) -> Callable[[Operation], bool]:
        lines = ["def ok(op):", " p = op.properties",
                 f" if not {self.bind(frozenset(op_def.properties))}.issuperset(p): return False",
                 *self.entries(op_def.properties, OptPropertyDef, "p")]
        if op_def.attributes:
            lines += [" a = op.attributes",
                      *self.entries(op_def.attributes, OptAttributeDef, "a")]
        lines += [" if op.regions or op._successors: return False", " res = op.results",
                  f" if len(res) != {len(results)}: return False"]
        # (values unpacked: ``SSAValues.__getitem__`` is a Python method)
        if results:
            lines.append(f" {''.join(f'r{i}, ' for i in range(len(results)))}= res")
        for i, c in enumerate(results):
            lines += self.value_type(c, f"r{i}")
        lines.append(" ops = op._operands")
        if single is not None:
            lines.append(f" if len(ops) != {len(single)}: return False")
            if single:
                lines.append(f" {''.join(f'o{i}, ' for i in range(len(single)))}= ops")
            for i, c in enumerate(single):
                lines += self.value_type(c, f"o{i}")
            lines.append(" return True")
        else:
            if seg:
                lines += [f" seg = p[{_SEG!r}]",
                          " if not isinstance(seg, _Dense) or (seg.elt_type is not _i32 and "
                          "seg.elt_type != _i32): return False",
                          " sizes = _seg_sizes(op)",
                          f" if len(sizes) != {len(groups)} or sum(sizes) != len(ops) or "
                          "min(sizes, default=0) < 0: return False"]
            # the operand types once, sliced per group
            lines.append(" types = list(map(_TYPE, ops)) if _PLAIN.issuperset(map(type, ops)) "
                         "else [o.type for o in ops]")
            if not seg:
                lines += self.group(groups[0], "types")
            else:
                at = "0"
                for i, r in enumerate(groups):
                    end = f"{at} + sizes[{i}]" if i + 1 < len(groups) else "len(types)"
                    lines += [f" e{i} = {end}", *self.group(r, f"types[{at}:e{i}]")]
                    at = f"e{i}"
            lines.append(" return True")
        self.ns["_source"] = text = "\n".join(lines)  # (kept for reading: ``ok.__globals__``)
        exec(compile(text, f"<fast_verify {op_def.name}>", "exec"), self.ns)
        return self.ns["ok"]  # type: ignore[return-value]


# The value classes whose ``type`` is xDSL's ``SSAValue.type`` property (``return self._type``):
# their types are read from the field in C (``attrgetter``), not by a Python property call per
# operand; a value of any other class is asked ``.type``.
_TYPE_FIELD = attrgetter("_type")
_SSA_TYPE = SSAValue.__dict__.get("type")
_PLAIN_VALUES = frozenset(
    c for c in (OpResult, BlockArgument)
    if isinstance(_SSA_TYPE, property) and getattr(c, "type", None) is _SSA_TYPE
    and _SSA_TYPE.fget.__code__.co_names == ("_type",))  # (its body reads that field alone)


def install(cls: type, custom: Callable[[Operation], None] | None) -> type:
    """Give the decorated op class ``cls`` a ``verify_`` that checks its structure with the
    compiled predicate (the generic ``OpDef.verify`` when it fails, for its message), its traits,
    then ``custom`` (the class's own ``verify_`` before decoration); and fast accessors for its
    variadic operand groups when they are sized by ``operandSegmentSizes``."""
    op_def = cls.get_irdl_definition()  # type: ignore[attr-defined]
    ok = compile_def(op_def)
    if ok is None:
        return cls
    traits = op_def.traits  # iterated at each call: may be lazy (``lazy_traits_def``)
    generic = op_def.verify

    def verify_(self) -> None:
        if not ok(self):
            generic(self)
        else:
            for t in traits:
                t.verify(self)
        if custom is not None:
            custom(self)

    cls.verify_ = verify_  # type: ignore[attr-defined]
    if cls.verify is Operation.verify:  # (no regions / successors defined; no own ``verify``)
        cls.verify = _leaf_verify  # type: ignore[method-assign]
    if any(isinstance(o, AttrSizedOperandSegments) for o in op_def.options):
        for i, (name, _) in enumerate(op_def.operands):
            setattr(cls, name, _VariadicOperands(i))
    for i, (name, _) in enumerate(op_def.results):  # (all single: ``_compile`` refuses others)
        if isinstance(cls.__dict__.get(name), BeforeVariadicSingleAccessor):
            setattr(cls, name, _SingleResult(i))
    return cls


_TUPLE_ITEM = tuple.__getitem__


class _SingleResult:
    """Accessor of the ``idx``-th result of an op whose results are all single: xDSL's
    ``BeforeVariadicSingleAccessor`` (``op.results[idx]``) with the item read from the results
    tuple directly (xDSL's goes through ``get_op_constructs`` and ``SSAValues.__getitem__``, two
    Python calls: ResNet-50's emitter asks ``op.done`` / ``op.result`` ~60 000 times)."""

    __slots__ = ("idx",)

    def __init__(self, idx: int):
        self.idx = idx

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return _TUPLE_ITEM(obj.results, self.idx)

    def __set__(self, obj, value):
        raise NotImplementedError("Cannot write to named operands, regions, results, or "
                                  "successors.")


_ERASED: dict[type, bool] = {}


def _leaf_verify(self: Operation, verify_nested_ops: bool = True) -> None:
    """xDSL's ``Operation.verify`` for an op of a class :func:`install` handles (one that
    defines no regions and no successors: every ``tpb`` instruction, ``hbsm`` and ``sync`` op).

    An op that has no regions and no successors and is not the last op of its block (where
    xDSL checks the terminator rules) gets the same checks in the same order: no operand is an
    ``ErasedSSAValue`` (the class asked once per class: ``isinstance`` against xDSL's ABC-based
    classes is a Python call per operand), then its ``verify_`` with xDSL's error. Any other op
    -- regions or successors after all, the last op of a block -- gets xDSL's method itself
    (``test_leaf_verify_is_xdsls`` compares the two on every installed class)."""
    if self.regions or self._successors:  # noqa: SLF001
        return _XDSL_OP_VERIFY(self, verify_nested_ops)
    block = self.parent
    if block is not None and block._last_op is self:  # noqa: SLF001 - ``last_op``
        return _XDSL_OP_VERIFY(self, verify_nested_ops)
    for operand in self._operands:  # noqa: SLF001 - the tuple ``operands`` views
        t = type(operand)
        e = _ERASED.get(t)
        if e is None:
            e = _ERASED[t] = issubclass(t, ErasedSSAValue)
        if e:
            raise ValueError("Erased SSA value is used by the operation")
    try:
        self.verify_()
    except VerifyException as err:
        self.emit_error(f"Operation does not verify: {err}", err)


_XDSL_OP_VERIFY = Operation.verify


def fast_op_definition(cls: type) -> type:
    """``irdl_op_definition`` with :func:`install`'s verifier and accessors."""
    custom = getattr(cls, "verify_", None)  # the class's own checks (inherited ones included)
    if custom is Operation.verify_:
        custom = None
    return install(irdl_op_definition(cls), custom)


def _isolated_from_above(self: IsolatedFromAbove, op: Operation) -> None:
    """``IsolatedFromAbove.verify`` of xDSL, with the ancestor test answered by the blocks walked.

    xDSL asks ``op.is_ancestor(operand.owner)`` for every operand under ``op`` (the module of a
    resolved ResNet-50 program: ~140 000 operands, each walked up to the module). The same walk
    here keeps the blocks it has entered (every one is under ``op``): an operand defined by an
    operation in one of them, or an argument of one of them, is inside ``op`` (and not ``op``
    itself, whose block is outside). Any other operand -- defined in a region not walked yet, in
    a nested isolated op, outside ``op``, or not an ``OpResult`` / ``BlockArgument`` -- gets
    xDSL's own test. The walk's order, the ops tested and the message are xDSL's
    (``test_isolated_from_above_is_xdsls`` compares it with ``_XDSL_ISOLATED``)."""
    regions: list[Region] = list(op.regions)
    seen: set[int] = set()
    while regions:
        region = regions.pop()
        for block in region.blocks:
            seen.add(id(block))
        for block in region.blocks:
            for child_op in block.ops:
                for operand in child_op._operands:  # noqa: SLF001 - the tuple ``operands`` views
                    t = type(operand)
                    if t is OpResult:
                        b = operand.op.parent
                        if b is not None and id(b) in seen:
                            continue
                    elif t is BlockArgument and id(operand.block) in seen:
                        continue
                    owner = operand.owner
                    if not op.is_ancestor(owner) or owner is op:
                        raise VerifyException(
                            "Operation using value defined out of its "
                            f"IsolatedFromAbove parent: {child_op}"
                        )
                if child_op.regions and not child_op.has_trait(IsolatedFromAbove):
                    regions += child_op.regions  # (an op without regions adds none)


_XDSL_ISOLATED = IsolatedFromAbove.verify  # xDSL's own method (the tests' oracle)
IsolatedFromAbove.verify = _isolated_from_above  # type: ignore[method-assign]


def _block_verify(self: Block) -> None:
    """xDSL's ``Block.verify`` (kept as ``_XDSL_BLOCK_VERIFY``: the tests' oracle): the same
    checks in the same order, the op list followed by ``_next_op`` (xDSL's ``BlockOps``
    iterator is a Python ``__next__`` per op; like it, the next op is read before an op is
    verified) and the parent test by identity (xDSL's ``!=`` calls ``_IRNode.__eq__``, which
    is ``is``: installed only then). An empty block gets xDSL's method (its terminator rules).
    The module of a resolved ResNet-50 program: ~40 000 ops in its blocks."""
    op = self._first_op  # noqa: SLF001 - ``first_op``
    if op is None:
        return _XDSL_BLOCK_VERIFY(self)
    while op is not None:
        nxt = op._next_op  # noqa: SLF001 - ``next_op``
        if op.parent is not self:
            raise ValueError("Parent pointer of operation does not refer to containing region")
        op.verify()
        op = nxt


_XDSL_BLOCK_VERIFY = Block.verify
if (getattr(Block.__eq__, "__code__", None) is not None
        and Block.__eq__.__code__.co_code == (lambda s, o: s is o).__code__.co_code
        and Block.__ne__ is object.__ne__):
    Block.verify = _block_verify  # type: ignore[method-assign]


__all__ = ["compile_def", "fast_op_definition", "install",
           "segment_sizes"]
