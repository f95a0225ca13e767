"""The ``tpb`` instruction ops (one per ISA instruction kind) and ``#tpb.stage``.

See :mod:`m100.dialects.tpb` for the syntax and the two IR levels."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (I64, ArrayAttr, DenseArrayBase, FloatAttr, IntegerAttr,
                                   StringAttr, UnitAttr)
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition, opt_prop_def, prop_def
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from m100.targets.m100 import isa
from m100.targets.m100.isa import (ROUTINE_OPERANDS, Act, CvuOp, Epilogue, Instruction, Ref,
                                   RefKind, Requant, Routine, Stage, Walk)

from .fast_verify import fast_op_definition
from .twu import array_values, checked_params, format_float, i64_array, int_attr, parse_float_lit
from .tpb_base import InstrOp, _f, _fval, _ival


# ----------------------------------------------------------------------------------------------
# #tpb.stage (a CVU pipeline stage)
_BITS = struct.Struct("<d")
_STAGES: dict[tuple, "StageAttr"] = {}  # StageAttr.from_isa's shared attributes

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
        """The attribute of ``s``, one shared instance per stage (attributes are immutable; the
        key holds every float's bits, so ``-0.0`` / ``0.0`` and NaN payloads stay apart)."""
        key = (s.op, tuple((r.kind, r.index, _BITS.pack(float(r.imm))) for r in s.args), s.axis,
               type(s.axis), _BITS.pack(float(s.fparam)), tuple(s.iparams))
        a = _STAGES.get(key)
        if a is None:
            a = _STAGES[key] = StageAttr._from_isa(s)
        return a

    @staticmethod
    def _from_isa(s: Stage) -> StageAttr:
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
        return ["bias", "per_channel", "dequant"]

    def _epilogue(self, w: dict[str, Walk]) -> tuple[bool, Epilogue]:
        act = Act[self.act.data.upper()] if self.act is not None else Act.NONE
        rq = None
        if self.requant is not None:
            mul, sh, zp, lo, hi = array_values(self.requant)
            rq = Requant(mul, sh, zp, lo, hi, w.get("per_channel"))
        elif "per_channel" in w:
            raise ValueError("operand 'per_channel' needs a 'requant' parameter")
        return self.accumulate is not None, Epilogue(w.get("bias"), act, _fval(self.clamp_lo),
                                                     _fval(self.clamp_hi), rq, w.get("dequant"))

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
        if ep.dequant is not None:
            slots["dequant"] = (None, ep.dequant)
        return p

    def verify_(self) -> None:
        if self.act is not None and self.act.data.upper() not in Act.__members__:
            raise VerifyException(f"{self.describe()}: unknown activation '{self.act.data}' "
                                  f"(known: {', '.join(a.name.lower() for a in Act)})")
        if self.requant is not None and len(self.requant.get_values()) != 5:
            raise VerifyException(f"{self.describe()}: requant is [multiplier, shift, zero_point, "
                                  "qmin, qmax]")
        super().verify_()


@fast_op_definition
class MatmulOp(_TcuOp):
    """``tpb.matmul tpb T a(..) b(..) c(..) [bias(..)] [per_channel(..)] [dequant(..)] [scale(..)]
    [acc(..)] [post_in(..)] {m, n, k,
    [accumulate], [act, clamp_lo, clamp_hi, requant], [block], [post]}``: TCU ``C[m,n] (+)=
    A[m,k] @ B[k,n]`` + epilogue; with ``scale`` and ``block`` the i4 B is dequantized on the
    fly; ``post`` (``[#tpb.stage<..>, ..]``) continues a dequantized epilogue with CVU stages,
    ``post_in`` their second input (``isa.MatMul``)."""
    name = "tpb.matmul"
    m = prop_def(IntegerAttr[I64])
    n = prop_def(IntegerAttr[I64])
    k = prop_def(IntegerAttr[I64])
    block = opt_prop_def(IntegerAttr[I64])
    post = opt_prop_def(ArrayAttr[StageAttr])  # CVU stages after the dequantization
    KIND: ClassVar = isa.MatMul
    PARAMS: ClassVar = ("m", "n", "k") + _EPI + ("block", "post")

    def required_slots(self) -> list[str]:
        return ["a", "b", "c"]

    def optional_slots(self) -> list[str]:
        return ["bias", "per_channel", "dequant", "scale", "acc", "post_in"]

    def _build(self, w, sync):
        acc, ep = self._epilogue(w)
        post = tuple(s.to_isa() for s in self.post.data) if self.post is not None else ()
        return isa.MatMul(self.unit_index, w["a"], w["b"], w["c"], self.m.value.data,
                          self.n.value.data, self.k.value.data, acc, ep, sync, w.get("scale"),
                          _ival(self.block, 0), w.get("acc"), post, w.get("post_in"))

    @classmethod
    def from_instruction(cls, inst):
        slots = {"a": (None, inst.a), "b": (None, inst.b), "c": (None, inst.c)}
        p = {"m": int_attr(inst.m), "n": int_attr(inst.n), "k": int_attr(inst.k)}
        p.update(cls._epilogue_params(inst.accumulate, inst.epilogue, slots))
        if inst.scale is not None:
            slots["scale"] = (None, inst.scale)
            p["block"] = int_attr(inst.block)
        if inst.acc is not None:
            slots["acc"] = (None, inst.acc)
        if inst.post:
            p["post"] = ArrayAttr([StageAttr.from_isa(s) for s in inst.post])
        if inst.post_in is not None:
            slots["post_in"] = (None, inst.post_in)
        return cls(inst.tpb, slots, (), inst.sync, p)


@fast_op_definition
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
@fast_op_definition
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
@fast_op_definition
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


@fast_op_definition
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


@fast_op_definition
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


@fast_op_definition
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


@fast_op_definition
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
