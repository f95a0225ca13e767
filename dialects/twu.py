"""The ``twu`` dialect: Tensor Walker address patterns.

Attributes
----------
``#twu.walk<SPACE[TPB], BASE, DTYPE, [(INITIAL, STEP, FINAL), ...]>``
    Maps 1:1 to :class:`m100.targets.m100.isa.Walk`: memory space ``ddr``/``sram``/``hbsm``, the TPB
    (printed in brackets for ``hbsm`` or when non-zero), the base byte address, the element type
    (``i4``, ``i8``, ``i32``, ``f16``, ``bf16``, ``f32``) and the TWU levels, outermost first, in
    elements. Example: ``#twu.walk<hbsm[1], 1024, f32, [(0, 64, 4032), (0, 1, 63)]>`` walks a 64x64
    f32 tile at byte 1024 of TPB 1's HBSM, row-major. ``verify()`` checks every level (final - initial
    a non-negative multiple of step; a step-0 repeat level needs final >= 1). Machine-dependent checks
    (level budget, register width, address range) run in the ``tpb`` op verifiers, which know the
    machine.

``#twu.access<AFFINE_MAP, [BOUNDS]>``
    The access of an operand *before* walk synthesis (the placed level): the instruction visits the
    iteration points ``0 <= d_i < BOUNDS[i]`` in row-major order and reads/writes the element
    ``map(d)`` of the operand's buffer (row-major in the buffer's shape; a map with one result more
    than the buffer's rank indexes ``[slots] + shape``, the first result selecting the slot).
    Example: the transpose of a
    32x64 buffer read as a 64x32 tensor is ``#twu.access<affine_map<(d0, d1) -> (d1, d0)>, [64, 32]>``.
    ``twu-materialize`` (issue 5) turns it into a ``#twu.walk``; :meth:`AccessAttr.to_walk` does it
    for pure affine maps (one level per map dimension, no folding).

Helpers shared with the other m100 dialects (element-type mapping, exact float printing) live here
because ``twu`` is the lowest of the four.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from immutabledict import immutabledict
from xdsl.dialects.builtin import (I64, AffineMapAttr, BFloat16Type, DenseArrayBase,
                                   DictionaryAttr, Float16Type, Float32Type, IntAttr, IntegerAttr,
                                   IntegerType, Signedness, StringAttr, i64)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute
from xdsl.ir.affine import AffineBinaryOpExpr, AffineBinaryOpKind, AffineMap
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from m100.targets.m100.isa import DType, IsaError, Level, Space, Walk

# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------
SPACE_NAMES = {Space.DDR: "ddr", Space.SRAM: "sram", Space.HBSM: "hbsm"}
SPACE_BY_NAME = {v: k for k, v in SPACE_NAMES.items()}


_DTYPE_TYPES = {DType.I8: IntegerType(8), DType.I32: IntegerType(32), DType.I4: IntegerType(4),
                DType.I16: IntegerType(16),
                DType.F16: Float16Type(), DType.BF16: BFloat16Type(), DType.F32: Float32Type()}


def dtype_to_type(d: DType) -> Attribute:
    """The builtin element type of an ISA element type (``i4`` is ``IntegerType(4)``)."""
    return _DTYPE_TYPES[DType(d)]


def type_to_dtype(t: Attribute) -> DType:
    """The ISA element type of a builtin type; raises VerifyException for unsupported types."""
    if (isinstance(t, IntegerType) and t.width.data in (4, 8, 16, 32)
            and t.signedness.data == Signedness.SIGNLESS):
        return {4: DType.I4, 8: DType.I8, 16: DType.I16, 32: DType.I32}[t.width.data]
    if isinstance(t, Float16Type):
        return DType.F16
    if isinstance(t, BFloat16Type):
        return DType.BF16
    if isinstance(t, Float32Type):
        return DType.F32
    raise VerifyException(f"element type {t} is not an M100 element type "
                          "(i4, i8, i16, i32, f16, bf16, f32)")


def is_element_type(t: Attribute) -> bool:
    try:
        type_to_dtype(t)
        return True
    except VerifyException:
        return False


def format_float(v: float) -> str:
    """A float literal the xDSL lexer reads back exactly (always has a '.'; inf/nan as words)."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = repr(float(v))
    if "." not in s:
        mant, _, exp = s.partition("e")
        s = f"{mant}.0" + (f"e{exp}" if exp else "")
    return s


def parse_float_lit(parser: AttrParser) -> float:
    """Parse what :func:`format_float` prints (also accepts a bare integer)."""
    neg = parser.parse_optional_punctuation("-") is not None
    word = parser.parse_optional_identifier()
    if word is not None:
        if word not in ("inf", "nan"):
            parser.raise_error(f"expected a float, got '{word}'")
        v = math.inf if word == "inf" else math.nan
    else:
        v = float(parser.parse_number())
    return -v if neg else v


def parse_buffer_operand(parser, optional: bool = False):
    """An already-defined SSA operand whose type the syntax does not spell (buffers).

    xDSL 0.74 deprecates untyped operand parsing (it exists for exactly this case and works for
    values defined earlier, which SSA dominance guarantees here); the warning is silenced."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        v = parser.parse_optional_operand()
    if v is None and not optional:
        parser.raise_error("expected an SSA value (%name)")
    return v


def parse_text(parser) -> str:
    """A string literal; xDSL prints non-ASCII text as byte escapes that lex as a bytes literal."""
    s = parser.parse_optional_str_literal()
    if s is not None:
        return s
    b = parser.parse_optional_bytes_literal()
    if b is None:
        parser.raise_error("string literal expected")
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        parser.raise_error("string literal is not valid UTF-8")


def checked_params(parser, cls, params: tuple) -> tuple:
    """Run ``cls``'s verifier on freshly parsed parameters and report a failure as a parse error
    at the attribute (so ``--parsing-diagnostics`` and error locations work)."""
    try:
        cls.new(params).verify()
    except VerifyException as e:
        parser.raise_error(str(e))
    return params


# Attributes are immutable and xDSL builds them slowly (~50 us each, verified on construction):
# the helpers below memoize the common ones (a 2000-instruction program builds ~4x faster).
@functools.lru_cache(maxsize=8192)
def _int_attr(v: int) -> IntegerAttr:
    return i64_attr(v)


_I64_MIN, _I64_MAX = -(1 << 63), 1 << 63


def i64_attr(v: int) -> IntegerAttr:
    """``IntegerAttr(v, i64)``: for a plain ``int`` in ``[-2**63, 2**63)`` (which xDSL's
    signless normalization leaves as it is and its ``verify`` accepts) the attribute with fields
    ``value = IntAttr(v)``, ``type = i64`` set directly, without xDSL's generic check of each
    parameter (~20 us an attribute: the emitter builds one per distinct predicted cycle, ~10 000
    on ResNet-50); anything else through ``IntegerAttr`` (normalized, or its error).
    ``test_i64_attr_is_the_generic_build`` compares it with ``IntegerAttr(v, i64)``."""
    if type(v) is int and _I64_MIN <= v < _I64_MAX:
        a = IntegerAttr.__new__(IntegerAttr)
        object.__setattr__(a, "value", IntAttr(v))
        object.__setattr__(a, "type", i64)
        return a
    return IntegerAttr(v, i64)


def trusted_attr(cls, *params, isa=None):
    """An attribute of ``cls`` from parameters built by this package's own code (``int_attr``,
    ``i64_array``, ``StringAttr``, ``ArrayAttr`` of our attributes: of the declared kinds by
    construction, no converters): xDSL's generic check of every parameter against its declared
    constraint is skipped, the attribute's own ``verify`` runs. For the attributes built once per
    operand or instruction of a program (``WalkAttr.from_isa`` in twu-materialize, the
    ``#sync.actions`` of sync-insert); ``test_trusted_attributes_are_the_generic_ones`` builds
    both ways and requires equal attributes that pass the generic check. ``isa``: the ISA
    object the attribute stands for, kept as its decoded form (``to_isa`` returns it); only for
    an object equal, field by field and type by type, to what ``to_isa`` would decode."""
    attr = cls.__new__(cls)
    for (f, _), p in zip(cls.get_irdl_definition().parameters, params, strict=True):
        object.__setattr__(attr, f, p)
    if isa is not None:
        object.__setattr__(attr, "_isa", isa)
    attr.verify()
    return attr


def dict_attr(value: dict) -> DictionaryAttr:
    """``DictionaryAttr(value)`` for a dict of this package's own making (``str`` keys, attribute
    values): the same attribute -- its ``immutabledict`` -- without the dataclass ``__init__`` /
    ``__post_init__`` (whose ``isinstance`` against xDSL's ABC-based classes is a Python call);
    the attribute's own ``verify`` runs. twu-materialize builds one per instruction
    (``test_dict_attr_is_the_generic_one``)."""
    attr = DictionaryAttr.__new__(DictionaryAttr)
    object.__setattr__(attr, "data", immutabledict(value))
    attr.verify()
    return attr


def canonical_walk(w: Walk) -> bool:
    """``w`` is exactly what ``WalkAttr.to_isa`` decodes for it: a ``Space`` and a ``DType``
    member, plain ``int`` fields, a tuple of ``Level``s of plain ``int``s."""
    return (type(w.space) is Space and type(w.dtype) is DType and type(w.tpb) is int
            and type(w.base) is int and type(w.levels) is tuple
            and all(type(lv) is Level and type(lv.initial) is int and type(lv.step) is int
                    and type(lv.final) is int for lv in w.levels))


def int_attr(v: int) -> IntegerAttr:
    return _int_attr(int(v))


@functools.lru_cache(maxsize=8192)
def _i64_array(values: tuple[int, ...]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    return _i64_array(tuple(int(x) for x in values))


def array_values(a: DenseArrayBase) -> tuple[int, ...]:
    # attributes are immutable: unpack once per attribute object (buffer dims and walk levels
    # are asked for ~0.5M times while compiling ResNet-18)
    got = a.__dict__.get("_m100_values")
    if got is None:
        got = tuple(int(x) for x in a.get_values())
        object.__setattr__(a, "_m100_values", got)
    return got


def isa_guard(fn, *args, prefix: str = ""):
    """Run an ISA/machine check; re-raise its M100Error as a VerifyException.

    (``m100.errors`` is imported only when the check raised: an import statement per call was
    ~1/3 of this function's cost, and the final verification of ResNet-50 calls it ~35 000 times.)"""
    try:
        return fn(*args)
    except Exception as e:
        from m100.errors import M100Error
        if isinstance(e, M100Error):
            raise VerifyException(f"{prefix}{e}") from None
        raise


# ----------------------------------------------------------------------------------------------
# #twu.walk
# ----------------------------------------------------------------------------------------------
def parse_space_tpb(parser: AttrParser) -> tuple[str, int]:
    """Parse the memory-space prefix shared by walks and buffers: ``hbsm[3]``, ``ddr``, ``sram``."""
    space = parser.parse_identifier()
    tpb = 0
    if parser.parse_optional_punctuation("[") is not None:
        tpb = parser.parse_integer()
        parser.parse_punctuation("]")
    return space, tpb


def format_space_tpb(space: str, tpb: int) -> str:
    """The inverse of :func:`parse_space_tpb` (HBSM always names its TPB)."""
    return f"{space}[{tpb}]" if space == "hbsm" or tpb != 0 else space


@irdl_attr_definition
class WalkAttr(ParametrizedAttribute):
    """``#twu.walk<space[tpb], base, dtype, [(initial, step, final), ...]>`` = one ISA Walk."""
    name = "twu.walk"
    space: StringAttr
    tpb: IntegerAttr[I64]
    base: IntegerAttr[I64]
    dtype: Attribute
    levels: DenseArrayBase  # flattened (initial, step, final) triples, outermost level first

    def __init__(self, space: str, tpb: int, base: int, dtype: Attribute,
                 levels: Sequence[tuple[int, int, int]]):
        flat = [int(v) for lv in levels for v in lv]
        super().__init__(StringAttr(space), int_attr(tpb), int_attr(base), dtype, i64_array(flat))

    # --- ISA mapping ---------------------------------------------------------------------------
    @staticmethod
    @functools.lru_cache(maxsize=8192)
    def from_isa(w: Walk) -> WalkAttr:
        # parameters of the declared kinds by construction: only the walk's own verify runs
        # (twu-materialize builds one per operand: the generic check was ~half of the cost).
        # A canonical ``w`` is what :meth:`to_isa` would decode (the space, element type and
        # integer round trips are exact), so the attribute keeps it instead of decoding its
        # own copy later (ResNet-50: ~25 000 walks, each asked for by sync-insert and the
        # final verification); any other ``w`` (int-valued enums, numpy integers) is decoded.
        return trusted_attr(WalkAttr, StringAttr(SPACE_NAMES[Space(w.space)]), int_attr(w.tpb),
                            int_attr(w.base), dtype_to_type(w.dtype),
                            i64_array([v for lv in w.levels
                                       for v in (lv.initial, lv.step, lv.final)]),
                            isa=w if canonical_walk(w) else None)

    def at(self, tpb: int, base: int) -> WalkAttr:
        """This walk at another TPB and base: the attribute :meth:`from_isa` builds for
        ``Walk(space, tpb, base, dtype, levels)`` of this one (equal to it, parameter by
        parameter, with the same decoded walk), sharing this one's space, element type and levels
        attributes. ``verify``'s checks of those passed when this attribute was built (every
        constructor verifies), so only the one that reads ``tpb`` / ``base`` runs, with its
        message. twu-materialize builds a program's walks this way from one walk per loop nest,
        space and element type (ResNet-50: ~26 000 walks; ``from_isa``'s hashed walk, its
        parameter attributes and the full ``verify`` were ~8 us each). A ``tpb`` / ``base``
        that is not a plain ``int`` goes through :meth:`from_isa` (``test_walk_at_is_from_isa``)."""
        w = self.to_isa()  # (canonical: ``from_isa`` keeps only a canonical walk, the decoder
        # makes one)
        if type(tpb) is not int or type(base) is not int:
            return WalkAttr.from_isa(Walk(w.space, tpb, base, w.dtype, w.levels))
        if tpb < 0 or base < 0:  # (``verify``'s one check of the two; the rest passed before)
            raise VerifyException("#twu.walk: tpb and base must be >= 0")
        attr = WalkAttr.__new__(WalkAttr)
        object.__setattr__(attr, "space", self.space)
        object.__setattr__(attr, "tpb", _int_attr(tpb))
        object.__setattr__(attr, "base", _int_attr(base))
        object.__setattr__(attr, "dtype", self.dtype)
        object.__setattr__(attr, "levels", self.levels)
        object.__setattr__(attr, "_isa", w.moved(tpb, base))
        return attr

    def to_isa(self) -> Walk:
        # attributes are immutable and Walk is frozen: decode once per attribute object (verify,
        # sync-insert and emission all ask for it; ResNet-18 asks ~170k times for ~6k walks)
        got = self.__dict__.get("_isa")
        if got is None:
            got = Walk(SPACE_BY_NAME[self.space.data], self.tpb.value.data, self.base.value.data,
                       type_to_dtype(self.dtype), tuple(Level(*t) for t in self.level_triples()))
            object.__setattr__(self, "_isa", got)
        return got

    def level_triples(self) -> list[tuple[int, int, int]]:
        v = array_values(self.levels)
        return [(v[i], v[i + 1], v[i + 2]) for i in range(0, len(v), 3)]

    # --- syntax ----------------------------------------------------------------------------------
    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            space, tpb = parse_space_tpb(parser)
            parser.parse_punctuation(",")
            base = parser.parse_integer()
            parser.parse_punctuation(",")
            dtype = parser.parse_type()
            parser.parse_punctuation(",")

            def level() -> tuple[int, int, int]:
                parser.parse_punctuation("(")
                a = parser.parse_integer()
                parser.parse_punctuation(",")
                b = parser.parse_integer()
                parser.parse_punctuation(",")
                c = parser.parse_integer()
                parser.parse_punctuation(")")
                return (a, b, c)

            levels = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, level)
        flat = [v for lv in levels for v in lv]
        return checked_params(parser, cls, (StringAttr(space), int_attr(tpb), int_attr(base),
                                            dtype, i64_array(flat)))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{format_space_tpb(self.space.data, self.tpb.value.data)}")
        printer.print_string(f", {self.base.value.data}, ")
        printer.print_attribute(self.dtype)
        lv = ", ".join(f"({a}, {b}, {c})" for a, b, c in self.level_triples())
        printer.print_string(f", [{lv}]>")

    def verify(self) -> None:
        if self.space.data not in SPACE_BY_NAME:
            raise VerifyException(f"#twu.walk: unknown memory space '{self.space.data}' "
                                  "(ddr, sram, hbsm)")
        type_to_dtype(self.dtype)
        if len(array_values(self.levels)) % 3:  # unpacked once per attribute (cached)
            raise VerifyException("#twu.walk: levels must be (initial, step, final) triples")
        if self.tpb.value.data < 0 or self.base.value.data < 0:
            raise VerifyException("#twu.walk: tpb and base must be >= 0")
        for lv in self.to_isa().levels:  # the space and element type are known by now
            try:
                lv.check()
            except IsaError as e:
                raise VerifyException(f"#twu.walk: {e}") from None

    def check(self, machine, what: str = "walk") -> None:
        """Machine checks (level budget, register width, address range, TPB) as VerifyException."""
        isa_guard(self.to_isa().check, machine, what)


# ----------------------------------------------------------------------------------------------
# #twu.access
# ----------------------------------------------------------------------------------------------
@irdl_attr_definition
class AccessAttr(ParametrizedAttribute):
    """``#twu.access<affine_map, [bounds]>``: an operand's affine access before walk synthesis."""
    name = "twu.access"
    map: AffineMapAttr
    bounds: DenseArrayBase

    def __init__(self, amap: AffineMap | AffineMapAttr, bounds: Sequence[int]):
        if isinstance(amap, AffineMap):
            amap = AffineMapAttr(amap)
        super().__init__(amap, i64_array(bounds))

    @staticmethod
    def identity(shape: Sequence[int]) -> AccessAttr:
        return AccessAttr(AffineMap.identity(len(shape)), shape)

    @property
    def affine_map(self) -> AffineMap:
        return self.map.data

    @property
    def shape(self) -> tuple[int, ...]:
        return array_values(self.bounds)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            amap = parser.parse_attribute()
            if not isinstance(amap, AffineMapAttr):
                parser.raise_error("#twu.access expects an affine_map<...> first")
            parser.parse_punctuation(",")
            bounds = parser.parse_comma_separated_list(parser.Delimiter.SQUARE,
                                                       parser.parse_integer)
        return checked_params(parser, cls, (amap, i64_array(bounds)))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_attribute(self.map)
        printer.print_string(f", [{', '.join(str(b) for b in self.shape)}]>")

    def verify(self) -> None:
        m = self.affine_map
        if m.num_symbols:
            raise VerifyException("#twu.access: the map may not use symbols")
        if m.num_dims != len(self.shape):
            raise VerifyException(f"#twu.access: the map has {m.num_dims} dims but "
                                  f"{len(self.shape)} bounds are given")
        if any(b < 1 for b in self.shape):
            raise VerifyException(f"#twu.access: bounds {list(self.shape)} must all be >= 1")

    # --- analysis ------------------------------------------------------------------------------
    # both below are functions of the (immutable) attribute, kept on it: scheduled programs share
    # access attributes between ops (ResNet-18 32: 3059 operands, 509 attributes)
    def is_pure_affine(self) -> bool:
        got = self.__dict__.get("_pure")
        if got is None:
            got = self._is_pure_affine()
            object.__setattr__(self, "_pure", got)
        return got

    def _is_pure_affine(self) -> bool:
        bad = (AffineBinaryOpKind.Mod, AffineBinaryOpKind.FloorDiv, AffineBinaryOpKind.CeilDiv)
        for r in self.affine_map.results:
            for e in r.dfs():
                if isinstance(e, AffineBinaryOpExpr) and e.kind in bad:
                    return False
        return True

    def coefficients(self) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
        """(constant term per result, [per dim: coefficient per result]) of a pure affine map."""
        got = self.__dict__.get("_coeffs")
        if got is None:
            got = self._coefficients()
            object.__setattr__(self, "_coeffs", got)
        return got[0], list(got[1])

    def _coefficients(self) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        m = self.affine_map
        zero = [0] * m.num_dims
        c0 = m.eval(zero, [])
        coeffs = []
        for d in range(m.num_dims):
            unit = list(zero)
            unit[d] = 1
            coeffs.append(tuple(a - b for a, b in zip(m.eval(unit, []), c0)))
        return tuple(c0), tuple(coeffs)

    def index_range(self) -> list[tuple[int, int]]:
        """Per map result, the (min, max) index over the iteration domain (pure affine maps)."""
        c0, coeffs = self.coefficients()
        out = []
        for r, c in enumerate(c0):
            lo = hi = c
            for d, b in enumerate(self.shape):
                k = coeffs[d][r] * (b - 1)
                lo += min(0, k)
                hi += max(0, k)
            out.append((lo, hi))
        return out

    def check_buffer(self, buffer_shape: Sequence[int], what: str = "access") -> None:
        """Raise VerifyException unless the access stays inside a buffer of ``buffer_shape``."""
        m = self.affine_map
        if len(m.results) != len(buffer_shape):
            raise VerifyException(f"{what}: the map has {len(m.results)} results but the buffer "
                                  f"has rank {len(buffer_shape)}")
        if not self.is_pure_affine():
            return  # mod/div maps: bounds are checked at walk synthesis
        for r, ((lo, hi), n) in enumerate(zip(self.index_range(), buffer_shape)):
            if lo < 0 or hi >= n:
                raise VerifyException(f"{what}: index {r} ranges over [{lo}, {hi}] but the buffer "
                                      f"dimension has size {n} (buffer {list(buffer_shape)})")

    def to_walk(self, space: Space, tpb: int, base: int, dtype: DType,
                buffer_shape: Sequence[int]) -> Walk:
        """The walk of a pure affine access into a row-major buffer (one level per map dim)."""
        if not self.is_pure_affine():
            raise VerifyException("#twu.access: only pure affine maps convert directly to a walk")
        strides = [math.prod(buffer_shape[i + 1:]) for i in range(len(buffer_shape))]
        c0, coeffs = self.coefficients()
        offset = sum(c * s for c, s in zip(c0, strides))
        levels = []
        for d, b in enumerate(self.shape):
            stride = sum(c * s for c, s in zip(coeffs[d], strides))
            levels.append(Level.span(b, stride, offset if d == 0 else 0))
        if not levels:
            levels = [Level(offset, 1, offset)]
        return Walk(Space(space), tpb, base, DType(dtype), tuple(levels))


TWU = Dialect("twu", [], [WalkAttr, AccessAttr])

__all__ = ["TWU", "WalkAttr", "AccessAttr", "dtype_to_type", "type_to_dtype", "format_float",
           "parse_float_lit", "SPACE_NAMES", "SPACE_BY_NAME", "isa_guard", "is_element_type"]
