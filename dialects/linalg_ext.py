"""The project's ``linalg`` dialect: all of xDSL 0.74's linalg plus what upstream MLIR emits and xDSL lacks.

xDSL 0.74's ``linalg`` cannot read what torch-mlir's ONNX pipeline produces:

* named ops it does not define: ``linalg.batch_matmul`` (every transformer), the quantized
  ``linalg.quantized_batch_matmul`` / ``conv_2d_nchw_fchw_q`` / ``conv_2d_nhwc_hwcf_q`` (MatMulInteger,
  ConvInteger, int8 models), ``linalg.matvec``,
  ``linalg.vecmat``, ``linalg.batch_matvec``, ``linalg.dot``, ``linalg.depthwise_conv_2d_nchw_chw`` and
  ``..._nhwc_hwc`` (MobileNet), ``linalg.conv_1d_ncw_fcw`` / ``conv_1d_nwc_wcf`` / ``conv_3d_ncdhw_fcdhw``,
  the pooling family (``pooling_nchw_sum`` for AveragePool, ``pooling_nhwc_*``, ``pooling_ndhwc_sum``,
  ``pooling_ncw_*``);
* the pretty form of a multi-result ``linalg.generic`` (``-> (tensor<..>, tensor<..>)``, what softmax
  lowers to) fails to parse with ``Expected '->'``.

:data:`LinalgExt` is a ``Dialect`` named ``linalg`` holding every xDSL linalg op and attribute, our
:class:`GenericOp` (a subclass of xDSL's, so ``isinstance(op, xdsl...GenericOp)`` still holds and xDSL
passes still match it) in place of xDSL's, and our named ops below. Register it instead of xDSL's
``Linalg`` (``m100.context.make_context`` does). Every named op here is a ``NamedOperation``: its pretty
form is ``linalg.<name> {strides = .., dilations = ..} ins(..) outs(..) -> type`` and its generic form is
the upstream one; ``get_indexing_maps()`` / ``get_iterator_types()`` give the loop structure (the same maps
as upstream's OpDSL definitions), which is what passes and the reference executor use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.builder import Builder
from xdsl.dialects import arith
from xdsl.dialects.builtin import AffineMapAttr, AnyFloat, ArrayAttr, IntegerType
from xdsl.dialects.linalg import Linalg as _XdslLinalg
from xdsl.dialects.linalg import ops as _ops
from xdsl.dialects.linalg.abstract_ops import ConvOperation, NamedOperation, PoolingOperation
from xdsl.dialects.linalg.attrs import IteratorTypeAttr
from xdsl.ir import Attribute, BlockArgument, Dialect, Region, SSAValue
from xdsl.ir.affine import AffineDimExpr, AffineMap
from xdsl.irdl import irdl_op_definition, prop_def
from xdsl.parser import Parser

__all__ = ["LinalgExt", "GenericOp", "EXTRA_OPS"]


# --------------------------------------------------------------------------------------------------
# linalg.generic whose pretty form with several results parses
# --------------------------------------------------------------------------------------------------
class GenericOp(_ops.GenericOp):
    """``linalg.generic`` (xDSL's definition) with a parser that accepts ``-> (t1, t2)`` result lists.

    Not re-decorated with ``irdl_op_definition`` (xDSL forbids redefining fields): it inherits the
    definition, and only its ``parse`` differs.
    """

    @classmethod
    def parse(cls, parser: Parser):
        # xDSL's parser reads the result types with parse_comma_separated_list(NONE, parse_attribute),
        # which reads "(t1, t2)" as the start of a function type and fails with "Expected '->'".
        return _parse_generic(cls, parser)


def _parse_generic(cls, parser: Parser):
    from typing import cast as _cast

    from xdsl.dialects.builtin import StringAttr
    from xdsl.dialects.linalg.attrs import IteratorType

    start = parser.pos
    attrs = parser.parse_optional_attr_dict()
    end = parser.pos
    if "indexing_maps" not in attrs:
        parser.raise_error("Expected indexing_maps for linalg.generic", start, end)
    if "iterator_types" not in attrs:
        parser.raise_error("Expected iterator_types for linalg.generic", start, end)
    indexing_maps = _cast(ArrayAttr[AffineMapAttr], attrs.pop("indexing_maps"))
    iterator_types: list[IteratorTypeAttr] = []
    for it in _cast(ArrayAttr[Attribute], attrs.pop("iterator_types")):
        if isinstance(it, IteratorTypeAttr):
            iterator_types.append(it)
        elif isinstance(it, StringAttr):
            iterator_types.append(IteratorTypeAttr(IteratorType(it.data)))
        else:
            parser.raise_error(f"Unknown iterator type {it}", start, end)
    doc = attrs.pop("doc", None)
    library_call = attrs.pop("library_call", None)

    def operand_group(keyword: str):
        pos = parser.pos
        if not parser.parse_optional_characters(keyword):
            return ()
        parser.parse_punctuation("(")
        unresolved = parser.parse_comma_separated_list(
            Parser.Delimiter.NONE, parser.parse_unresolved_operand
        )
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation(")")
        return parser.resolve_operands(unresolved, types, pos)

    ins = operand_group("ins")
    outs = operand_group("outs")
    extra = {}
    if parser.parse_optional_keyword("attrs"):
        parser.parse_punctuation("=")
        extra = parser.expect(parser.parse_optional_attr_dict, "expect extra attributes")
    body = parser.parse_region()
    res_types: Sequence[Attribute] = ()
    if parser.parse_optional_punctuation("->"):
        res_types = parser.parse_optional_comma_separated_list(
            Parser.Delimiter.PAREN, parser.parse_type
        )
        if res_types is None:
            res_types = [parser.parse_type()]
    op = cls(ins, outs, body, indexing_maps, iterator_types, res_types, doc, library_call)
    op.attributes |= attrs | extra
    return op


# --------------------------------------------------------------------------------------------------
# helpers for named ops
# --------------------------------------------------------------------------------------------------
def cast_signed(v: SSAValue, to: Attribute) -> SSAValue:
    """Upstream OpDSL's ``cast_signed`` (``TypeFn.cast_signed``): convert a scalar body value to
    ``to`` -- ``extsi``/``trunci`` between integers, ``extf``/``truncf`` between floats, ``sitofp``
    integer -> float, ``fptosi`` float -> integer; nothing when the types are equal."""
    t = v.type
    if t == to:
        return v
    if isinstance(t, IntegerType) and isinstance(to, IntegerType):
        if t.width.data < to.width.data:
            return arith.ExtSIOp(v, to).result
        return arith.TruncIOp(v, to).result
    if isinstance(t, AnyFloat) and isinstance(to, AnyFloat):
        if t.bitwidth < to.bitwidth:
            return arith.ExtFOp(v, to).result
        return arith.TruncFOp(v, to).result
    if isinstance(t, IntegerType) and isinstance(to, AnyFloat):
        return arith.SIToFPOp(v, to).result
    if isinstance(t, AnyFloat) and isinstance(to, IntegerType):
        return arith.FPToSIOp(v, to).result
    raise ValueError(f"linalg body: cannot cast {t} to {to}")


def _mac_region(inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
    """``out += cast(U, in0) * cast(U, in1)`` with ``U`` the output element type: upstream's
    matmul/conv body, including mixed element types (i8 x i8 -> i32, f16 x f16 -> f32, i8 x i4 -> i32;
    see :func:`cast_signed`)."""
    arg_types = NamedOperation.body_arg_types((*inputs, *outputs))
    out_t = arg_types[-1]
    is_float = isinstance(out_t, AnyFloat)
    add, mul = (arith.AddfOp, arith.MulfOp) if is_float else (arith.AddiOp, arith.MuliOp)

    @Builder.implicit_region(arg_types)
    def region(args: tuple[BlockArgument, ...]) -> None:
        a = cast_signed(args[0], out_t)
        b = cast_signed(args[1], out_t)
        _ops.YieldOp(add(args[2], mul(a, b)))

    return region


def _qmac_region(inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
    """out += (cast(U, in0) - cast(U, zp0)) * (cast(U, in1) - cast(U, zp1)): the body of the
    ``*_q`` / quantized ops (inputs: lhs, rhs, lhs zero point, rhs zero point; U = output type)."""
    arg_types = NamedOperation.body_arg_types((*inputs, *outputs))
    out_t = arg_types[-1]

    @Builder.implicit_region(arg_types)
    def region(args: tuple[BlockArgument, ...]) -> None:
        sub = arith.SubfOp if isinstance(out_t, AnyFloat) else arith.SubiOp
        mul = arith.MulfOp if isinstance(out_t, AnyFloat) else arith.MuliOp
        add = arith.AddfOp if isinstance(out_t, AnyFloat) else arith.AddiOp
        a = sub(cast_signed(args[0], out_t), cast_signed(args[2], out_t))
        b = sub(cast_signed(args[1], out_t), cast_signed(args[3], out_t))
        _ops.YieldOp(add(args[4], mul(a, b)))

    return region


def _pool_region(kind: str):
    def build(inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
        arg_types = NamedOperation.body_arg_types((*inputs, *outputs))
        is_float = isinstance(arg_types[-1], AnyFloat)
        op = {
            ("sum", True): arith.AddfOp,
            ("sum", False): arith.AddiOp,
            ("max", True): arith.MaximumfOp,
            ("max", False): arith.MaxSIOp,
            ("min", True): arith.MinimumfOp,
            ("min", False): arith.MinSIOp,
        }[(kind, is_float)]

        @Builder.implicit_region(arg_types)
        def region(args: tuple[BlockArgument, ...]) -> None:
            _ops.YieldOp(op(args[2], args[0]))

        return region

    return build


def _d(n: int):
    return tuple(AffineDimExpr(i) for i in range(n))


def _iters(parallel: int, reduction: int) -> ArrayAttr[IteratorTypeAttr]:
    return ArrayAttr(
        (IteratorTypeAttr.parallel(),) * parallel + (IteratorTypeAttr.reduction(),) * reduction
    )


def _default_maps(*maps: AffineMap):
    return ArrayAttr([AffineMapAttr(m) for m in maps])


# --------------------------------------------------------------------------------------------------
# contractions (matmul family); upstream carries `indexing_maps` as a property (default shown)
# --------------------------------------------------------------------------------------------------
class _Contraction(NamedOperation):
    PRINT_ATTRS_IN_FRONT: ClassVar[bool] = True
    N_PAR: ClassVar[int]
    N_RED: ClassVar[int] = 1

    def __init__(
        self,
        inputs: Sequence[SSAValue],
        outputs: Sequence[SSAValue] = (),
        res: Sequence[Attribute] | None = None,
        attributes: dict[str, Attribute] | None = None,
    ):
        if res is None:
            from xdsl.dialects.builtin import TensorType

            res = [o.type for o in outputs if isinstance(o.type, TensorType)]
        super().__init__(
            ins=inputs,
            outs=outputs,
            result_types=res,
            attributes=attributes,
            hidden_region=self.get_hidden_region(inputs, outputs),
        )

    @classmethod
    def get_hidden_region(cls, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
        return _mac_region(inputs, outputs)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        return tuple(m.data for m in self.indexing_maps.data)  # type: ignore[attr-defined]

    def get_indexing_maps(self) -> ArrayAttr[AffineMapAttr]:
        return self.indexing_maps  # type: ignore[attr-defined]

    def get_iterator_types(self) -> ArrayAttr[IteratorTypeAttr]:
        return _iters(self.N_PAR, self.N_RED)


@irdl_op_definition
class BatchMatmulOp(_Contraction):
    """C[b, m, n] += A[b, m, k] * B[b, k, n]."""

    name = "linalg.batch_matmul"
    N_PAR: ClassVar[int] = 3
    indexing_maps = prop_def(
        ArrayAttr[AffineMapAttr],
        default_value=_default_maps(
            AffineMap.from_callable(lambda b, m, n, k: (b, m, k)),
            AffineMap.from_callable(lambda b, m, n, k: (b, k, n)),
            AffineMap.from_callable(lambda b, m, n, k: (b, m, n)),
        ),
    )


@irdl_op_definition
class MatvecOp(_Contraction):
    """y[m] += A[m, k] * x[k]."""

    name = "linalg.matvec"
    N_PAR: ClassVar[int] = 1
    indexing_maps = prop_def(
        ArrayAttr[AffineMapAttr],
        default_value=_default_maps(
            AffineMap.from_callable(lambda m, k: (m, k)),
            AffineMap.from_callable(lambda m, k: (k,)),
            AffineMap.from_callable(lambda m, k: (m,)),
        ),
    )


@irdl_op_definition
class VecmatOp(_Contraction):
    """y[n] += x[k] * A[k, n]."""

    name = "linalg.vecmat"
    N_PAR: ClassVar[int] = 1
    indexing_maps = prop_def(
        ArrayAttr[AffineMapAttr],
        default_value=_default_maps(
            AffineMap.from_callable(lambda n, k: (k,)),
            AffineMap.from_callable(lambda n, k: (k, n)),
            AffineMap.from_callable(lambda n, k: (n,)),
        ),
    )


@irdl_op_definition
class BatchMatvecOp(_Contraction):
    """y[b, m] += A[b, m, k] * x[b, k]."""

    name = "linalg.batch_matvec"
    N_PAR: ClassVar[int] = 2
    indexing_maps = prop_def(
        ArrayAttr[AffineMapAttr],
        default_value=_default_maps(
            AffineMap.from_callable(lambda b, m, k: (b, m, k)),
            AffineMap.from_callable(lambda b, m, k: (b, k)),
            AffineMap.from_callable(lambda b, m, k: (b, m)),
        ),
    )


@irdl_op_definition
class DotOp(_Contraction):
    """c[] += a[k] * b[k]."""

    name = "linalg.dot"
    N_PAR: ClassVar[int] = 0
    indexing_maps = prop_def(
        ArrayAttr[AffineMapAttr],
        default_value=_default_maps(
            AffineMap.from_callable(lambda k: (k,)),
            AffineMap.from_callable(lambda k: (k,)),
            AffineMap(1, 0, ()),
        ),
    )


# --------------------------------------------------------------------------------------------------
# convolutions and pooling: `strides` / `dilations` are dense<..> : tensor<Nxi64> properties
# --------------------------------------------------------------------------------------------------
class _Window:
    """Mixin for the conv/pool ops below: their strides and dilations as Python lists."""

    def _sd(self):
        return list(self.strides.get_values()), list(self.dilations.get_values())  # type: ignore[attr-defined]


@irdl_op_definition
class Conv1DNcwFcwOp(ConvOperation, _Window):
    """O[n, f, w] += I[n, c, w*s + kw*d] * K[f, c, kw]."""

    name = "linalg.conv_1d_ncw_fcw"
    def get_iterator_types(self):
        return _iters(3, 2)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        n, f, ow, c, kw = _d(5)
        (s,), (d,) = self._sd()
        return (
            AffineMap(5, 0, (n, c, ow * s + kw * d)),
            AffineMap(5, 0, (f, c, kw)),
            AffineMap(5, 0, (n, f, ow)),
        )


@irdl_op_definition
class Conv1DNwcWcfOp(ConvOperation, _Window):
    """O[n, w, f] += I[n, w*s + kw*d, c] * K[kw, c, f]."""

    name = "linalg.conv_1d_nwc_wcf"
    def get_iterator_types(self):
        return _iters(3, 2)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        n, ow, f, kw, c = _d(5)
        (s,), (d,) = self._sd()
        return (
            AffineMap(5, 0, (n, ow * s + kw * d, c)),
            AffineMap(5, 0, (kw, c, f)),
            AffineMap(5, 0, (n, ow, f)),
        )


@irdl_op_definition
class Conv3DNcdhwFcdhwOp(ConvOperation, _Window):
    """O[n, f, d, h, w] += I[n, c, d*s0 + kd*d0, h*s1 + kh*d1, w*s2 + kw*d2] * K[f, c, kd, kh, kw]."""

    name = "linalg.conv_3d_ncdhw_fcdhw"
    def get_iterator_types(self):
        return _iters(5, 4)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        n, f, od, oh, ow, c, kd, kh, kw = _d(9)
        (s0, s1, s2), (d0, d1, d2) = self._sd()
        return (
            AffineMap(9, 0, (n, c, od * s0 + kd * d0, oh * s1 + kh * d1, ow * s2 + kw * d2)),
            AffineMap(9, 0, (f, c, kd, kh, kw)),
            AffineMap(9, 0, (n, f, od, oh, ow)),
        )


@irdl_op_definition
class DepthwiseConv2DNchwChwOp(ConvOperation, _Window):
    """O[n, c, h, w] += I[n, c, h*s0 + kh*d0, w*s1 + kw*d1] * K[c, kh, kw]."""

    name = "linalg.depthwise_conv_2d_nchw_chw"
    def get_iterator_types(self):
        return _iters(4, 2)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        n, c, oh, ow, kh, kw = _d(6)
        (s0, s1), (d0, d1) = self._sd()
        return (
            AffineMap(6, 0, (n, c, oh * s0 + kh * d0, ow * s1 + kw * d1)),
            AffineMap(6, 0, (c, kh, kw)),
            AffineMap(6, 0, (n, c, oh, ow)),
        )


@irdl_op_definition
class DepthwiseConv2DNhwcHwcOp(ConvOperation, _Window):
    """O[n, h, w, c] += I[n, h*s0 + kh*d0, w*s1 + kw*d1, c] * K[kh, kw, c]."""

    name = "linalg.depthwise_conv_2d_nhwc_hwc"
    def get_iterator_types(self):
        return _iters(4, 2)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        n, oh, ow, c, kh, kw = _d(6)
        (s0, s1), (d0, d1) = self._sd()
        return (
            AffineMap(6, 0, (n, oh * s0 + kh * d0, ow * s1 + kw * d1, c)),
            AffineMap(6, 0, (kh, kw, c)),
            AffineMap(6, 0, (n, oh, ow, c)),
        )


@irdl_op_definition
class QuantizedBatchMatmulOp(_Contraction):
    """C[b, m, n] += (A[b, m, k] - azp) * (B[b, k, n] - bzp), integer accumulation."""

    name = "linalg.quantized_batch_matmul"
    N_PAR: ClassVar[int] = 3
    indexing_maps = prop_def(
        ArrayAttr[AffineMapAttr],
        default_value=_default_maps(
            AffineMap.from_callable(lambda b, m, n, k: (b, m, k)),
            AffineMap.from_callable(lambda b, m, n, k: (b, k, n)),
            AffineMap(4, 0, ()),
            AffineMap(4, 0, ()),
            AffineMap.from_callable(lambda b, m, n, k: (b, m, n)),
        ),
    )

    @classmethod
    def get_hidden_region(cls, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
        return _qmac_region(inputs, outputs)


@irdl_op_definition
class Conv2DNchwFchwQOp(ConvOperation, _Window):
    """O[n, f, h, w] += (I[n, c, h*s0 + kh*d0, w*s1 + kw*d1] - izp) * (K[f, c, kh, kw] - kzp)."""

    name = "linalg.conv_2d_nchw_fchw_q"

    @classmethod
    def get_hidden_region(cls, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
        return _qmac_region(inputs, outputs)

    def get_iterator_types(self):
        return _iters(4, 3)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        n, f, oh, ow, c, kh, kw = _d(7)
        (s0, s1), (d0, d1) = self._sd()
        return (
            AffineMap(7, 0, (n, c, oh * s0 + kh * d0, ow * s1 + kw * d1)),
            AffineMap(7, 0, (f, c, kh, kw)),
            AffineMap(7, 0, ()),
            AffineMap(7, 0, ()),
            AffineMap(7, 0, (n, f, oh, ow)),
        )


@irdl_op_definition
class Conv2DNhwcHwcfQOp(ConvOperation, _Window):
    """O[n, h, w, f] += (I[n, h*s0 + kh*d0, w*s1 + kw*d1, c] - izp) * (K[kh, kw, c, f] - kzp)."""

    name = "linalg.conv_2d_nhwc_hwcf_q"

    @classmethod
    def get_hidden_region(cls, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
        return _qmac_region(inputs, outputs)

    def get_iterator_types(self):
        return _iters(4, 3)

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        n, oh, ow, f, kh, kw, c = _d(7)
        (s0, s1), (d0, d1) = self._sd()
        return (
            AffineMap(7, 0, (n, oh * s0 + kh * d0, ow * s1 + kw * d1, c)),
            AffineMap(7, 0, (kh, kw, c, f)),
            AffineMap(7, 0, ()),
            AffineMap(7, 0, ()),
            AffineMap(7, 0, (n, oh, ow, f)),
        )


def _pool_op(op_name: str, kind: str, layout: str):
    """Define ``linalg.pooling_<layout>_<kind>``; layout in nchw/nhwc/ncw/nwc/ncdhw/ndhwc."""
    spatial = len(layout) - 2
    channel_first = layout[1] == "c"
    n_loops = 2 + 2 * spatial

    def get_default_indexing_maps(self) -> Sequence[AffineMap]:
        dims = _d(n_loops)
        strides, dilations = self._sd()
        if channel_first:
            n, c, outs, ks = dims[0], dims[1], dims[2 : 2 + spatial], dims[2 + spatial :]
        else:
            n, outs, c, ks = dims[0], dims[1 : 1 + spatial], dims[1 + spatial], dims[2 + spatial :]
        win = tuple(o * s + k * d for o, k, s, d in zip(outs, ks, strides, dilations))
        if channel_first:
            inp, out = (n, c, *win), (n, c, *outs)
        else:
            inp, out = (n, *win, c), (n, *outs, c)
        return (
            AffineMap(n_loops, 0, inp),
            AffineMap(n_loops, 0, tuple(ks)),
            AffineMap(n_loops, 0, out),
        )

    region = _pool_region(kind)

    def get_hidden_region(cls, inputs, outputs):
        return region(inputs, outputs)

    def get_iterator_types(self):
        return _iters(2 + spatial, spatial)

    cls = type(
        "Pooling" + layout.capitalize() + kind.capitalize() + "Op",
        (PoolingOperation, _Window),
        {
            "name": op_name,
            "__doc__": f"{kind} pooling over the {spatial} spatial dims of a {layout.upper()} input.",
            "get_default_indexing_maps": get_default_indexing_maps,
            "get_hidden_region": classmethod(get_hidden_region),
            "get_iterator_types": get_iterator_types,
            "__module__": __name__,
        },
    )
    return irdl_op_definition(cls)


_POOLS = {}
for _layout in ("nchw", "nhwc", "ncw", "nwc", "ndhwc", "ncdhw"):
    for _kind in ("sum", "max", "min"):
        _n = f"linalg.pooling_{_layout}_{_kind}"
        if _n == "linalg.pooling_nchw_max":
            continue  # xDSL defines it (we fix its region below)
        _POOLS[_n] = _pool_op(_n, _kind, _layout)
        globals()[_POOLS[_n].__name__] = _POOLS[_n]



class PoolingNchwMaxOp(_ops.PoolingNchwMaxOp):
    """xDSL's ``linalg.pooling_nchw_max`` with the correct hidden region.

    xDSL 0.74 builds the pretty form's body as ``max(input, kernel)`` (the shape-only window operand)
    instead of upstream's ``max(out, input)``, so a parsed pretty-form max pool computes garbage. Not
    re-decorated (xDSL forbids redefining fields): a subclass, so ``isinstance`` with xDSL's class holds.
    """

    @classmethod
    def get_hidden_region(cls, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]) -> Region:
        return _pool_region("max")(inputs, outputs)


PoolingNchwSumOp = _POOLS["linalg.pooling_nchw_sum"]
PoolingNdhwcSumOp = _POOLS["linalg.pooling_ndhwc_sum"]

#: Our ops (not in xDSL 0.74), by name.
EXTRA_OPS = [
    BatchMatmulOp,
    MatvecOp,
    VecmatOp,
    BatchMatvecOp,
    DotOp,
    Conv1DNcwFcwOp,
    Conv1DNwcWcfOp,
    Conv3DNcdhwFcdhwOp,
    DepthwiseConv2DNchwChwOp,
    DepthwiseConv2DNhwcHwcOp,
    QuantizedBatchMatmulOp,
    Conv2DNchwFchwQOp,
    Conv2DNhwcHwcfQOp,
    *_POOLS.values(),
]

_REPLACED = {_ops.GenericOp: GenericOp, _ops.PoolingNchwMaxOp: PoolingNchwMaxOp}

LinalgExt = Dialect(
    "linalg",
    [_REPLACED.get(op, op) for op in _XdslLinalg.operations] + EXTRA_OPS,
    list(_XdslLinalg.attributes),
)


# --------------------------------------------------------------------------------------------------
# Parser fix: hex literals inside a float dense list are bit patterns, not integers
# --------------------------------------------------------------------------------------------------
def _install_hex_float_fix() -> None:
    """MLIR prints non-finite floats in ``dense<[...]>`` lists as hex bit patterns (``0xFF800000`` is
    -inf in f32: torch-mlir's causal masks). xDSL 0.74 reads them as the integer 4286578688.0. We patch
    ``AttrParser._TensorLiteralElement.to_type`` (once, idempotently) to reinterpret such a token's bits
    in the float type's width, as MLIR does."""
    import struct

    from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type
    from xdsl.parser.attribute_parser import AttrParser

    elem_cls = AttrParser._TensorLiteralElement
    if getattr(elem_cls.to_type, "_m100_hex_fix", False):
        return
    original = elem_cls.to_type

    def to_type(self, parser, type):
        if (
            isinstance(type, AnyFloat)
            and isinstance(self.value, int)
            and not isinstance(self.value, bool)
            and self.span.text.lower().startswith("0x")
        ):
            bits = self.value
            if isinstance(type, Float32Type):
                return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
            if isinstance(type, Float64Type):
                return struct.unpack("<d", struct.pack("<Q", bits & 0xFFFFFFFFFFFFFFFF))[0]
            if isinstance(type, Float16Type):
                return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]
            if isinstance(type, BFloat16Type):
                return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]
        return original(self, parser, type)

    to_type._m100_hex_fix = True  # type: ignore[attr-defined]
    elem_cls.to_type = to_type


def _install_dense_type_cache() -> None:
    """Speed: xDSL 0.74 rebuilds the constraint ``base(RankedStructure[...])`` on every dense literal
    (~10 ms each: a third of the parse time of an imported CNN). Build it once."""
    from xdsl.dialects.builtin import DYNAMIC_INDEX, ComplexType, IndexType, RankedStructure
    from xdsl.irdl import base
    from xdsl.parser.attribute_parser import AttrParser

    if getattr(AttrParser._parse_dense_literal_type, "_m100_cached", False):
        return
    constraint = base(RankedStructure[IntegerType | IndexType | AnyFloat | ComplexType])

    def _parse_dense_literal_type(self):
        type = self.expect(self.parse_optional_type, "Dense attribute must be typed!")
        if not constraint.verifies(type):
            self.raise_error(
                "Expected memref, vector or tensor type of integer, index, float, or complex type"
            )
        if any(dim == DYNAMIC_INDEX for dim in list(type.get_shape())):
            self.raise_error("Dense literal attribute should have a static shape.")
        return type

    _parse_dense_literal_type._m100_cached = True  # type: ignore[attr-defined]
    AttrParser._parse_dense_literal_type = _parse_dense_literal_type


def _install_pooling_max_fix() -> None:
    """Patch xDSL's own ``PoolingNchwMaxOp.get_hidden_region`` too, so that passes that *build* the op
    with xDSL's class (not only the parser) get the correct ``max(out, in)`` body."""
    if getattr(_ops.PoolingNchwMaxOp.get_hidden_region, "_m100_fixed", False):
        return

    def get_hidden_region(cls, inputs, outputs):
        return _pool_region("max")(inputs, outputs)

    get_hidden_region._m100_fixed = True  # type: ignore[attr-defined]
    _ops.PoolingNchwMaxOp.get_hidden_region = classmethod(get_hidden_region)


def _install_mixed_type_bodies() -> None:
    """xDSL 0.74 builds ``linalg.matmul``'s body as ``add(mul(a, b), out)`` without casts, so
    ``i8 x i8 -> i32`` or ``f16 x f16 -> f32`` does not verify ("'arith.addi' does not verify ...
    (i8, i32) -> i8"); its conv body casts integers only (f16 -> f32 trips an assert), and
    ``linalg.quantized_matmul`` extends to i32 whatever the output type. We patch the hidden-region
    builders of xDSL's ``MatmulOp``, ``ConvOperation`` and ``QuantizedMatmulOp`` (so passes that *build*
    them with xDSL's classes get the upstream body too) with upstream's ``cast_signed`` bodies."""
    if getattr(_ops.MatmulOp.get_hidden_region, "_m100_fixed", False):
        return

    def mac(cls, inputs, outputs):
        return _mac_region(inputs, outputs)

    def qmac(cls, inputs, outputs):
        return _qmac_region(inputs, outputs)

    mac._m100_fixed = True  # type: ignore[attr-defined]
    _ops.MatmulOp.get_hidden_region = classmethod(mac)
    ConvOperation.get_hidden_region = classmethod(mac)
    _ops.QuantizedMatmulOp.get_hidden_region = classmethod(qmac)


def install_parser_fixes() -> None:
    """Apply the xDSL 0.74 fixes above (idempotent; done when this module is imported).

    Import this module (or call this) BEFORE parsing MLIR text that may hold non-finite floats in a
    dense list: the lazy dialect registration of ``m100.context`` imports it only at the first
    ``linalg`` op, after the function's constants were parsed."""
    _install_hex_float_fix()
    _install_dense_type_cache()
    _install_pooling_max_fix()
    _install_mixed_type_bodies()


install_parser_fixes()
