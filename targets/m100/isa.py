"""The TPB instruction set: plain Python objects, one frozen dataclass per instruction kind.

No xDSL here: the interpreter (``sim/``) runs programs made of these objects without ever seeing the
compiler. ``encoding.py`` turns them into bits, ``asm.py`` into text, ``program.py`` packs them into a
program file; ``docs/isa.md`` documents every field.

Core concepts
-------------
* :class:`Walk` -- one operand: a memory space (DDR, CCB SRAM, HBSM of TPB k), a base byte address, an
  element type and up to ``machine.twu_max_levels`` Tensor-Walker levels, outermost first. Each
  :class:`Level` is the paper's (Initial, Step, Final) triple, in *elements*: the level's Value counter
  starts at Initial, advances by Step when the level inside it reaches its Final, and wraps to Initial
  on the advance after it reached Final. The element offset of a beat is the sum of all Values; its byte
  address is ``base + offset * bits // 8`` (for packed ``i4``, offset counts nibbles, low nibble first).
  Model extension: a level with ``step == 0`` is a *repeat* level, contributing Initial for ``final``
  beats (the paper's TWU cannot express a stride-0 repeat; broadcasts need it).
  A walk produces the element sequence of a nested loop: its *shape* is the tuple of level counts.
* Units read operands as *logical tensors*: the walk's element sequence reshaped row-major to the
  logical shape the instruction names (``MatMul`` A is ``[m, k]`` ...), so walk levels and tensor rank
  are independent (contiguous dimensions fold into one level).
* :class:`Sync` -- the instruction's Synchronization Unit actions. ``blocks`` splits the instruction's
  outermost logical dimension into equal blocks (see each kind); a :class:`Monitor` holds block ``b``
  until ``counter >= expected + b * per_block`` (``per_block == 0``: only the start waits); an
  :class:`Update` adds ``amount`` to a counter on every TPB of ``tpb_mask`` at the end of the
  instruction (``Trigger.END``) or after each block (``Trigger.BLOCK``), once the writes are visible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .isa_base import *  # noqa: F403  (the foundations; re-exported as part of the ISA)
from .isa_base import IsaError, _need_elems  # (each check formats its message only when it fails)
from .isa_base import Act, CvuOp, DType, Epilogue, Instruction, RefKind, Routine, Space, Unit
from .isa_base import ROUTINE_ARITY, ROUTINE_OPERANDS, Stage, Sync, Walk, tpbs_of
from .machine import Machine


def _check_tcu_types(mn: str, a: DType, b: DType, acc_out: DType, ep: Epilogue,
                     accumulate: bool, acc_in: bool = False) -> None:
    if a.is_int:
        if not (a is DType.I8 and b in (DType.I8, DType.I4)):
            raise IsaError(f"{mn}: integer TCU operands must be i8 x i8 or i8 x i4, got "
                           f"{a.short} x {b.short}")
        if ep.requant is not None:
            if ep.dequant is not None:
                raise IsaError(f"{mn}: requant and dequant exclude each other")
            if acc_out is not DType.I8:
                raise IsaError(f"{mn}: a requantized result must be i8, not {acc_out.short}")
            if accumulate:
                raise IsaError(f"{mn}: accumulate needs the raw i32 result, not a requantized one")
        elif ep.dequant is not None:
            if acc_out not in (DType.F16, DType.BF16, DType.F32):
                raise IsaError(f"{mn}: a dequantized result must be f16/bf16/f32, not "
                               f"{acc_out.short}")
            if not (not accumulate or acc_in):
                raise IsaError(f"{mn}: accumulate onto a dequantized result needs "
                               "the i32 accumulator as 'acc'")
        else:
            if acc_out is not DType.I32:
                raise IsaError(f"{mn}: an integer result without requant must be i32")
        if ep.act not in (Act.NONE, Act.RELU, Act.CLAMP):
            raise IsaError(f"{mn}: integer epilogues support none/relu/clamp, not "
                           f"{ep.act.name.lower()}")
        if ep.bias is not None:
            if ep.bias.dtype is not DType.I32:
                raise IsaError(f"{mn}: an integer bias must be i32")
    else:
        if not ((b.is_float or b is DType.I4) and (a == b or b is DType.I4
                or {a, b} <= {DType.F16, DType.BF16})):
            raise IsaError(f"{mn}: float TCU operands must share a type (or use i4 weights), "
                           f"got {a.short} x {b.short}")
        if not acc_out.is_float:
            raise IsaError(f"{mn}: a float matmul writes a float result, not {acc_out.short}")
        if ep.requant is not None:
            raise IsaError(f"{mn}: requantization applies to integer matmuls only")
        if ep.dequant is not None:
            raise IsaError(f"{mn}: dequantization applies to integer matmuls only")
        if accumulate and not acc_in:
            if acc_out is not DType.F32:
                raise IsaError(f"{mn}: accumulate needs an f32 result")
        if ep.bias is not None:
            if ep.bias.dtype is not DType.F32:
                raise IsaError(f"{mn}: a float bias must be f32")


@dataclass(frozen=True)
class MatMul(Instruction):
    """TCU: ``C[m,n] (+)= A[m,k] @ B[k,n]``, then the epilogue. Blocks split ``m``.

    With ``accumulate`` the old C is added to the product *before* the epilogue (so a bias given on
    every K-chunk is added every time); integer accumulation wraps in int32. Float activations with
    i4 weights use the weights' integer values (scales are applied by a later op), unless the
    instruction carries ``scale``: then the TCU dequantizes the i4 weights on the fly, blockwise
    along K (the W4A16 form of ONNX ``DequantizeLinear(axis=0, block_size=block)``):
    ``B[k, n] = round_to_a(q[k, n] * scale[k // block, n])`` (the product exact in f32, one
    rounding to A's type), then the float product as usual. ``scale`` is ``[k / block, n]`` of A's
    type; ``block`` divides ``k``.

    ``acc`` (with ``accumulate``): the old accumulator is read from this f32 walk instead of C,
    so the last K chunk of a chain can add the f32 partial sum and round once to an f16/bf16 C (a
    K-split contraction with a narrow result); likewise an i32 walk for an integer chain whose
    last chunk dequantizes (``epilogue.dequant``) into a float C.

    ``post`` (integer matmuls with ``epilogue.dequant``): the TCU's non-linear pipeline goes on
    after the dequantization with CVU stages (:class:`Stage`, the CVU's semantics and roundings,
    at most ``machine.tcu_post_stages``, none on a machine where it is 0): input 0 is the dequantized f32 value ``f32(acc) *
    dequant[f]`` (not yet rounded), input 1 (when given) is ``post_in``, an ``[m, n]`` walk read
    block by block like C (converted to f32); the last stage's value is stored in C's type
    (rounded to nearest even; an integer C takes the result of a last ``FTOI`` stage, which must
    fit C's type). LLaMA's W8A8 MLP: gate's ``silu`` of its f16 result and up's ``silu(gate) *
    up`` with the int8 quantize, in the epilogues (docs/isa.md, TCU epilogue)."""
    UNIT: ClassVar[Unit] = Unit.TCU
    OPCODE: ClassVar[int] = 0x01
    MNEMONIC: ClassVar[str] = "tcu.matmul"
    WRITES: ClassVar[frozenset[str]] = frozenset({"c"})
    tpb: int
    a: Walk
    b: Walk
    c: Walk
    m: int
    n: int
    k: int
    accumulate: bool = False
    epilogue: Epilogue = Epilogue()
    sync: Sync = Sync()
    scale: Walk | None = None  # i4 weights dequantized on the fly: [k / block, n] of A's type
    block: int = 0
    acc: Walk | None = None  # the old accumulator (f32 [m, n]) when it is not C
    post: tuple[Stage, ...] = ()  # CVU stages after the dequantization (input 0: its value)
    post_in: Walk | None = None  # input 1 of ``post``: [m, n], read block by block

    def _check(self, machine: Machine) -> None:
        mn = self.MNEMONIC
        if not min(self.m, self.n, self.k) >= 1:
            raise IsaError(f"{mn}: m, n, k must be >= 1")
        if self.post or self.post_in is not None:
            _check_post(mn, self, machine)
        if self.scale is not None:
            if not (self.b.dtype is DType.I4 and self.a.dtype in (DType.F16, DType.BF16)):
                raise IsaError(f"{mn}: on-the-fly dequantization needs f16/bf16 activations and "
                               f"i4 weights, got {self.a.dtype.short} x {self.b.dtype.short}")
            if self.scale.dtype is not self.a.dtype:
                raise IsaError(f"{mn}: the dequantization scales must be {self.a.dtype.short}")
            if not (self.block >= 1 and self.k % self.block == 0):
                raise IsaError(f"{mn}: block ({self.block}) must be >= 1 and divide k ({self.k})")
            _need_elems("scale", self.scale, (self.k // self.block, self.n), mn)
            if not (self.scale.space is Space.HBSM and self.scale.tpb == self.tpb):
                raise IsaError(f"{mn}: operand 'scale' must be in the HBSM of TPB {self.tpb}")
        else:
            if self.block != 0:
                raise IsaError(f"{mn}: block without scale")
        if self.acc is not None:
            if not (self.accumulate and ((self.a.dtype.is_float and self.acc.dtype is DType.F32) or
                    (self.a.dtype.is_int and self.epilogue.dequant is not None
                    and self.acc.dtype is DType.I32))):
                raise IsaError(f"{mn}: 'acc' is the f32 accumulator of a float accumulate or the "
                               "i32 accumulator of a dequantized integer one")
            _need_elems("acc", self.acc, (self.m, self.n), mn)
            if not (self.acc.space is Space.HBSM and self.acc.tpb == self.tpb):
                raise IsaError(f"{mn}: operand 'acc' must be in the HBSM of TPB {self.tpb}")
        _need_elems("a", self.a, (self.m, self.k), mn)
        _need_elems("b", self.b, (self.k, self.n), mn)
        _need_elems("c", self.c, (self.m, self.n), mn)
        _check_tcu_types(mn, self.a.dtype, self.b.dtype, DType.F32 if self.post else self.c.dtype,
                         self.epilogue, self.accumulate, self.acc is not None)
        _check_epilogue_shapes(mn, self.epilogue, self.n)
        if self.m % self.sync.blocks != 0:
            raise IsaError(f"{mn}: blocks ({self.sync.blocks}) must divide m")
        for nm, w in (("a", self.a), ("b", self.b), ("c", self.c)):
            if not (w.space is Space.HBSM and w.tpb == self.tpb):
                raise IsaError(f"{mn}: operand '{nm}' must be in the HBSM of TPB {self.tpb}")


def _check_post(mn: str, i: "MatMul", machine: Machine) -> None:
    """The ``post`` stages of a matmul (:class:`MatMul`): after a dequantization, 1..
    ``tcu_post_stages`` stages (the machine's; 0: a TCU without them) reading input 0 (the value), input 1 (``post_in``) or earlier
    stages; an integer C needs a last ``FTOI``, a float C none."""
    if not i.post:
        raise IsaError(f"{mn}: 'post_in' without post stages")
    if not (i.a.dtype.is_int and i.epilogue.dequant is not None):
        raise IsaError(f"{mn}: post stages follow the dequantization of an integer matmul")
    if not machine.tcu_post_stages > 0:
        raise IsaError(f"{mn}: machine '{machine.name}' has no TCU post stages "
                       "(tcu_post_stages = 0)")
    if not len(i.post) <= machine.tcu_post_stages:
        raise IsaError(f"{mn}: 1..{machine.tcu_post_stages} post stages (tcu_post_stages), got "
                       f"{len(i.post)}")
    n_in = 1 if i.post_in is None else 2
    for si, st in enumerate(i.post):
        lo, hi = st.op.arity
        if not lo <= len(st.args) <= hi:
            raise IsaError(f"{mn}: post stage {si} ({st.op.name.lower()}) takes {lo}..{hi} args, "
                           f"got {len(st.args)}")
        if not int(st.op) < 64:  # reductions (64..) and fused idioms (96..) are not
            raise IsaError(f"{mn}: post stage {si} ({st.op.name.lower()}) is not elementwise")
        for r in st.args:
            if r.kind is RefKind.INPUT:
                if not 0 <= r.index < n_in:
                    raise IsaError(f"{mn}: post stage {si} reads input {r.index}, "
                                   "which does not exist")
            elif r.kind is RefKind.STAGE:
                if not 0 <= r.index < si:
                    raise IsaError(f"{mn}: post stage {si} reads stage {r.index}, "
                                   "which is not an earlier stage")
    last_ftoi = i.post[-1].op is CvuOp.FTOI
    if last_ftoi != i.c.dtype.is_int:
        raise IsaError(f"{mn}: an integer C needs a last ftoi post stage, a float C none "
                       f"(C is {i.c.dtype.short})")
    if i.post_in is not None:
        if i.post_in.dtype not in (DType.F16, DType.BF16, DType.F32):
            raise IsaError(f"{mn}: 'post_in' must be f16/bf16/f32, not {i.post_in.dtype.short}")
        _need_elems("post_in", i.post_in, (i.m, i.n), mn)
        if not (i.post_in.space is Space.HBSM and i.post_in.tpb == i.tpb):
            raise IsaError(f"{mn}: operand 'post_in' must be in the HBSM of TPB {i.tpb}")


def _check_epilogue_shapes(mn: str, ep: Epilogue, f: int) -> None:
    if ep.bias is not None:
        _need_elems("bias", ep.bias, (f,), mn)
    if ep.requant is not None:
        rq = ep.requant
        if not 0 <= rq.shift < 64:
            raise IsaError(f"{mn}: requant shift must be in [0, 63]")
        if not rq.qmin <= rq.qmax:
            raise IsaError(f"{mn}: requant qmin > qmax")
        if rq.per_channel is not None:
            if rq.per_channel.dtype is not DType.I32:
                raise IsaError(f"{mn}: per-channel requant params must be i32")
            _need_elems("requant.per_channel", rq.per_channel, (f, 2), mn)
    if ep.dequant is not None:
        if ep.dequant.dtype is not DType.F32:
            raise IsaError(f"{mn}: dequantization scales must be f32")
        _need_elems("dequant", ep.dequant, (f,), mn)
    if ep.act is Act.CLAMP:
        if not ep.clamp_lo <= ep.clamp_hi:
            raise IsaError(f"{mn}: clamp_lo > clamp_hi")


@dataclass(frozen=True)
class Conv2D(Instruction):
    """TCU: NHWC convolution. x ``[n,h,w,c]``, w ``[kh,kw,c/groups,f]``, y ``[n,oh,ow,f]``.

    Padding is applied by the TCU's input walker (zeros, or the zero point for int8 inputs is *not*
    applied: pad values are 0). Blocks split the ``n * oh`` output rows.
    """
    UNIT: ClassVar[Unit] = Unit.TCU
    OPCODE: ClassVar[int] = 0x02
    MNEMONIC: ClassVar[str] = "tcu.conv2d"
    WRITES: ClassVar[frozenset[str]] = frozenset({"y"})
    tpb: int
    x: Walk
    w: Walk
    y: Walk
    n: int
    h: int
    width: int
    c: int
    f: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    accumulate: bool = False
    epilogue: Epilogue = Epilogue()
    sync: Sync = Sync()

    @property
    def out_hw(self) -> tuple[int, int]:
        (sh, sw), (dh, dw) = self.stride, self.dilation
        pt, pl, pb, pr = self.pad
        oh = (self.h + pt + pb - dh * (self.kh - 1) - 1) // sh + 1
        ow = (self.width + pl + pr - dw * (self.kw - 1) - 1) // sw + 1
        return oh, ow

    def _check(self, machine: Machine) -> None:
        mn = self.MNEMONIC
        if not min(self.n, self.h, self.width, self.c, self.f, self.kh, self.kw) >= 1:
            raise IsaError(f"{mn}: every size must be >= 1")
        if not (min(self.stride + self.dilation) >= 1 and min(self.pad) >= 0):
            raise IsaError(f"{mn}: strides/dilations must be >= 1 and pads >= 0")
        if not (self.groups >= 1 and self.c % self.groups == 0 and self.f % self.groups == 0):
            raise IsaError(f"{mn}: groups ({self.groups}) must divide c ({self.c}) and f "
                           f"({self.f})")
        oh, ow = self.out_hw
        if not (oh >= 1 and ow >= 1):
            raise IsaError(f"{mn}: the window does not fit the padded input")
        _need_elems("x", self.x, (self.n, self.h, self.width, self.c), mn)
        _need_elems("w", self.w, (self.kh, self.kw, self.c // self.groups, self.f), mn)
        _need_elems("y", self.y, (self.n, oh, ow, self.f), mn)
        _check_tcu_types(mn, self.x.dtype, self.w.dtype, self.y.dtype, self.epilogue,
                         self.accumulate)
        _check_epilogue_shapes(mn, self.epilogue, self.f)
        if (self.n * oh) % self.sync.blocks != 0:
            raise IsaError(f"{mn}: blocks ({self.sync.blocks}) must divide n*oh ({self.n * oh})")
        for nm, w in (("x", self.x), ("w", self.w), ("y", self.y)):
            if not (w.space is Space.HBSM and w.tpb == self.tpb):
                raise IsaError(f"{mn}: operand '{nm}' must be in the HBSM of TPB {self.tpb}")


@dataclass(frozen=True)
class CvuPipeline(Instruction):
    """CVU: a pipeline of stages over logical tensors; the last stage's result is written.

    Input ``i`` is ``inputs[i]`` read as ``in_shapes[i]`` (compute in f32). Stage args refer to
    inputs, earlier stages or immediates; binary ops broadcast numpy-style; reductions keep dims.
    The last stage must produce ``out_shape``; it is converted to the output walk's type (round to
    nearest even, saturating for integers). Blocks split ``out_shape[0]``: each block evaluates the
    pipeline on the block's rows of every input of the same rank whose leading dimension equals
    ``out_shape[0]`` (other inputs are read whole), so a stage reducing along axis 0 reduces within
    the block. A last-stage result that broadcasts to ``out_shape`` is broadcast.
    """
    UNIT: ClassVar[Unit] = Unit.CVU
    OPCODE: ClassVar[int] = 0x10
    MNEMONIC: ClassVar[str] = "cvu.pipeline"
    WRITES: ClassVar[frozenset[str]] = frozenset({"output"})
    tpb: int
    inputs: tuple[Walk, ...]
    in_shapes: tuple[tuple[int, ...], ...]
    output: Walk
    out_shape: tuple[int, ...]
    stages: tuple[Stage, ...]
    sync: Sync = Sync()

    def _tuple_written(self, name: str, i: int) -> bool:
        return False

    def _check(self, machine: Machine) -> None:
        mn = self.MNEMONIC
        if len(self.inputs) != len(self.in_shapes):
            raise IsaError(f"{mn}: one shape per input walk")
        if not 1 <= len(self.stages) <= machine.cvu_max_stages:
            raise IsaError(f"{mn}: 1..{machine.cvu_max_stages} stages, got {len(self.stages)}")
        for s in self.in_shapes + (self.out_shape,):
            if not all(d >= 1 for d in s):
                raise IsaError(f"{mn}: shape {list(s)} has a dimension < 1")
        for i, (w, s) in enumerate(zip(self.inputs, self.in_shapes)):
            _need_elems(f"inputs[{i}]", w, s, mn)
        _need_elems("output", self.output, self.out_shape, mn)
        for si, st in enumerate(self.stages):
            lo, hi = st.op.arity
            if not lo <= len(st.args) <= hi:
                raise IsaError(f"{mn}: stage {si} ({st.op.name.lower()}) takes {lo}..{hi} args, "
                               f"got {len(st.args)}")
            for r in st.args:
                if r.kind is RefKind.INPUT:
                    if not 0 <= r.index < len(self.inputs):
                        raise IsaError(f"{mn}: stage {si} reads input "
                                       f"{r.index}, which does not exist")
                elif r.kind is RefKind.STAGE:
                    if not 0 <= r.index < si:
                        raise IsaError(f"{mn}: stage {si} reads stage {r.index}, "
                                       "which is not an earlier stage")
        if not (bool(self.out_shape) and self.out_shape[0] % self.sync.blocks == 0):
            raise IsaError(f"{mn}: blocks ({self.sync.blocks}) must divide out_shape[0]")
        for nm, w, _ in self.walks():
            if not (w.space is Space.HBSM and w.tpb == self.tpb):
                raise IsaError(f"{mn}: operand '{nm}' must be in the HBSM of TPB {self.tpb}")


@dataclass(frozen=True)
class Copy(Instruction):
    """DTDU: copy the src element sequence to dst (converting the type if they differ).

    dst may be in another TPB's HBSM (a remote write over the mesh). Blocks split the sequence.
    """
    UNIT: ClassVar[Unit] = Unit.DTDU
    OPCODE: ClassVar[int] = 0x20
    MNEMONIC: ClassVar[str] = "dtdu.copy"
    WRITES: ClassVar[frozenset[str]] = frozenset({"dst"})
    tpb: int
    src: Walk
    dst: Walk
    sync: Sync = Sync()

    def _check(self, machine: Machine) -> None:
        mn = self.MNEMONIC
        if self.src.num_elements != self.dst.num_elements:
            raise IsaError(f"{mn}: src walks {self.src.num_elements} elements, dst "
                           f"{self.dst.num_elements}")
        if not (self.src.space is Space.HBSM and self.src.tpb == self.tpb):
            raise IsaError(f"{mn}: src must be in the HBSM of TPB {self.tpb}")
        if self.dst.space is not Space.HBSM:
            raise IsaError(f"{mn}: dst must be in an HBSM")
        if self.src.num_elements % self.sync.blocks != 0:
            raise IsaError(f"{mn}: blocks ({self.sync.blocks}) must divide the element count")


@dataclass(frozen=True)
class Fill(Instruction):
    """DTDU: write ``value`` (converted to dst's type) at every beat of dst."""
    UNIT: ClassVar[Unit] = Unit.DTDU
    OPCODE: ClassVar[int] = 0x21
    MNEMONIC: ClassVar[str] = "dtdu.fill"
    WRITES: ClassVar[frozenset[str]] = frozenset({"dst"})
    tpb: int
    dst: Walk
    value: float
    sync: Sync = Sync()

    def _check(self, machine: Machine) -> None:
        if not (self.dst.space is Space.HBSM and self.dst.tpb == self.tpb):
            raise IsaError(f"{self.MNEMONIC}: dst must be in the HBSM of TPB {self.tpb}")
        if not math.isfinite(self.value):
            raise IsaError(f"{self.MNEMONIC}: fill value must be finite")
        if self.dst.num_elements % self.sync.blocks != 0:
            raise IsaError(f"{self.MNEMONIC}: blocks ({self.sync.blocks}) must divide the "
                           "element count")


@dataclass(frozen=True)
class Broadcast(Instruction):
    """DTDU: copy src into the HBSM of every TPB of ``tpb_mask`` at dst's addresses (dst.tpb
    is ignored and must equal the executing TPB)."""
    UNIT: ClassVar[Unit] = Unit.DTDU
    OPCODE: ClassVar[int] = 0x22
    MNEMONIC: ClassVar[str] = "dtdu.broadcast"
    WRITES: ClassVar[frozenset[str]] = frozenset({"dst"})
    tpb: int
    src: Walk
    dst: Walk
    tpb_mask: int
    sync: Sync = Sync()

    def _check(self, machine: Machine) -> None:
        mn = self.MNEMONIC
        if self.src.num_elements != self.dst.num_elements:
            raise IsaError(f"{mn}: src walks {self.src.num_elements} elements, dst "
                           f"{self.dst.num_elements}")
        if not (self.src.space is Space.HBSM and self.src.tpb == self.tpb
                and self.dst.space is Space.HBSM and self.dst.tpb == self.tpb):
            raise IsaError(f"{mn}: src and dst must be HBSM walks of TPB {self.tpb}")
        if not (0 < self.tpb_mask and not self.tpb_mask & ~machine.all_tpbs_mask):
            raise IsaError(f"{mn}: TPB mask {self.tpb_mask:#x} names no TPB or a missing TPB")
        if self.src.num_elements % self.sync.blocks != 0:
            raise IsaError(f"{mn}: blocks ({self.sync.blocks}) must divide the element count")


@dataclass(frozen=True)
class CsuCall(Instruction):
    """CSU: interrupt the cluster CPU to run routine ``routine`` (table in docs/isa.md)."""
    UNIT: ClassVar[Unit] = Unit.CSU
    OPCODE: ClassVar[int] = 0x30
    MNEMONIC: ClassVar[str] = "csu.call"
    WRITES: ClassVar[frozenset[str]] = frozenset({"operands"})
    tpb: int
    routine: Routine
    operands: tuple[Walk, ...]
    params: tuple[int, ...] = ()
    sync: Sync = Sync()

    def _tuple_written(self, name: str, i: int) -> bool:
        r = self.routine
        if r is Routine.GATHER:
            return i == 2
        if r is Routine.SCATTER:
            return i == 2
        if r is Routine.TOPK:
            return i in (1, 2)
        if r is Routine.ARGMAX:
            return i == 1
        return i == 1  # MEMCPY

    def _check(self, machine: Machine) -> None:
        mn = f"{self.MNEMONIC} {self.routine.name.lower()}"
        want = ROUTINE_OPERANDS[self.routine]
        if len(self.operands) != want:
            raise IsaError(f"{mn}: takes {want} operands, got {len(self.operands)}")
        lo, hi = ROUTINE_ARITY[self.routine]
        if not lo <= len(self.params) <= hi:
            raise IsaError(f"{mn}: takes {lo}..{hi} params, got {len(self.params)}")
        ops, p = self.operands, self.params
        if self.routine in (Routine.GATHER, Routine.SCATTER):
            v, d, n = p
            tab, idx = (ops[0], ops[1]) if self.routine is Routine.GATHER else (ops[2], ops[1])
            data = ops[2] if self.routine is Routine.GATHER else ops[0]
            _need_elems("table", tab, (v, d), mn)
            _need_elems("indices", idx, (n,), mn)
            _need_elems("rows", data, (n, d), mn)
            if idx.dtype is not DType.I32:
                raise IsaError(f"{mn}: indices must be i32")
        elif self.routine is Routine.TOPK:
            r, ln, k = p[:3]
            if not 1 <= k <= ln:
                raise IsaError(f"{mn}: k must be in [1, {ln}]")
            _need_elems("x", ops[0], (r, ln), mn)
            _need_elems("values", ops[1], (r, k), mn)
            _need_elems("indices", ops[2], (r, k), mn)
            if ops[2].dtype is not DType.I32:
                raise IsaError(f"{mn}: indices must be i32")
        elif self.routine is Routine.ARGMAX:
            r, ln = p[:2]
            _need_elems("x", ops[0], (r, ln), mn)
            _need_elems("out", ops[1], (r,), mn)
            if ops[1].dtype is not DType.I32:
                raise IsaError(f"{mn}: argmax output must be i32")
        else:
            if ops[0].num_elements != ops[1].num_elements:
                raise IsaError(f"{mn}: src and dst element counts differ")
        if self.sync.blocks != 1:
            raise IsaError(f"{mn}: CSU routines run as one block")


@dataclass(frozen=True)
class Dma(Instruction):
    """CCB DMA on engine ``engine``: copy src to dst between DDR, CCB SRAM and HBSM.

    With ``tpb_mask != 0`` dst must be an HBSM walk and is written into the HBSM of every TPB in the
    mask at the same addresses (a DRB broadcast); dst.tpb is then ignored (must be 0). Blocks split
    the element sequence. Monitors may name any TPB's counter.
    """
    UNIT: ClassVar[Unit] = Unit.DMA
    OPCODE: ClassVar[int] = 0x40
    MNEMONIC: ClassVar[str] = "ccb.dma"
    WRITES: ClassVar[frozenset[str]] = frozenset({"dst"})
    engine: int
    src: Walk
    dst: Walk
    tpb_mask: int = 0
    sync: Sync = Sync()

    @property
    def executor(self) -> tuple[Unit, int]:
        return (Unit.DMA, self.engine)

    def _check(self, machine: Machine) -> None:
        mn = self.MNEMONIC
        if self.src.num_elements != self.dst.num_elements:
            raise IsaError(f"{mn}: src walks {self.src.num_elements} elements, dst "
                           f"{self.dst.num_elements}")
        if self.src.dtype != self.dst.dtype:
            raise IsaError(f"{mn}: DMA does not convert types "
                           f"({self.src.dtype.short} -> {self.dst.dtype.short})")
        if self.tpb_mask:
            if not (self.dst.space is Space.HBSM and self.dst.tpb == 0):
                raise IsaError(f"{mn}: a broadcast DMA writes HBSM with dst tpb 0")
            if self.tpb_mask & ~machine.all_tpbs_mask:
                raise IsaError(f"{mn}: TPB mask {self.tpb_mask:#x} names a TPB the machine does "
                               "not have")
        if self.src.num_elements % self.sync.blocks != 0:
            raise IsaError(f"{mn}: blocks ({self.sync.blocks}) must divide the element count")

    def dst_tpbs(self) -> list[int]:
        return tpbs_of(self.tpb_mask) if self.tpb_mask else (
            [self.dst.tpb] if self.dst.space is Space.HBSM else [])


INSTRUCTION_KINDS: tuple[type[Instruction], ...] = (MatMul, Conv2D, CvuPipeline, Copy, Fill,
                                                    Broadcast, CsuCall, Dma)
BY_OPCODE: dict[int, type[Instruction]] = {k.OPCODE: k for k in INSTRUCTION_KINDS}
BY_MNEMONIC: dict[str, type[Instruction]] = {k.MNEMONIC: k for k in INSTRUCTION_KINDS}

__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "math", "np",
                                                                    "dataclass", "field", "fields",
                                                                    "IntEnum", "ClassVar")]
