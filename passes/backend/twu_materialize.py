"""The ``twu-materialize`` pass: affine operand accesses -> Tensor Walker levels (``#twu.walk``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from m100.dialects.hbsm import AllocOp, BufferType, FifoOp, ViewOp
from m100.dialects.sync import JoinOp, machine_of
from m100.dialects.tpb import BroadcastOp, CopyOp, DmaOp, InstrOp, StreamOp
from m100.dialects.tpb_program import class_test, programs
from m100.dialects.twu import AccessAttr, WalkAttr, array_values, dict_attr
from m100.errors import M100Error
from m100.targets.m100.isa import Walk

from .twu_synth import Access, synthesize


class TwuError(M100Error, ValueError):
    """An access that can not become TWU walks (message names the op and operand)."""


_IS_VIEW = class_test(ViewOp)
_IS_ROOT = class_test((AllocOp, FifoOp))
_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}  # dims -> row-major element strides


def _resolve(v: SSAValue) -> tuple[Operation, list[int], int]:
    """(root alloc/fifo, element offset per root dim, slot or -1) of a buffer value through views."""
    o = v.owner
    offs: list[int] | None = None
    slot = -1
    while _IS_VIEW(o):
        vo = list(array_values(o.offsets))
        offs = vo if offs is None else [a + b for a, b in zip(vo, offs)]
        if o.slot is not None:
            slot = o.slot.value.data
        o = o.source.owner
    t: BufferType = o.results[0].type  # type: ignore[assignment]
    if offs is None:
        offs = [0] * len(t.dims)
    return o, offs, slot


def _buffer_part(buf: SSAValue) -> tuple[BufferType, tuple[int, ...], list[int], int, int]:
    """(root buffer type, its row-major element strides, the view's element offset per root dim,
    the view's first element (row-major index of those offsets), root base byte offset) of a
    buffer value: the part of :func:`operand_access` that does not depend on the access."""
    root = buf.owner
    if _IS_ROOT(root):  # the value is the root itself (no views; most values):
        # _resolve's answer is (root, zeros, -1), so the first element is 0 and no slot is added
        rt: BufferType = root.results[0].type  # type: ignore[assignment]
        off = root.offset
        if off is None:
            raise TwuError(f"buffer {rt} has no offset (run hbsm-allocate first)")
        dims = rt.dims
        strides = _STRIDES.get(dims)
        if strides is None:
            strides = _STRIDES[dims] = tuple(math.prod(dims[i + 1:]) for i in range(len(dims)))
        return rt, strides, [0] * len(dims), 0, off.value.data
    root, offs, slot = _resolve(buf)
    rt = root.results[0].type  # type: ignore[assignment]
    if not _IS_ROOT(root) or root.offset is None:
        raise TwuError(f"buffer {rt} has no offset (run hbsm-allocate first)")
    dims = rt.dims
    strides = _STRIDES.get(dims)
    if strides is None:
        strides = _STRIDES[dims] = tuple(math.prod(dims[i + 1:]) for i in range(len(dims)))
    first = sum(o * st for o, st in zip(offs, strides))
    byte_base = root.offset.value.data + (max(slot, 0) * rt.slot_bytes)
    return rt, strides, offs, first, byte_base


def operand_access(buf: SSAValue, acc: AccessAttr | None, views: dict | None = None,
                   flats: dict | None = None) -> tuple[list[int], Access, BufferType, int]:
    """(iteration bounds, flat element Access, root buffer type, root base byte offset).

    ``views``: the caller's memo of :func:`_buffer_part` per buffer value (a function of the
    value's views and alloc; twu-materialize changes neither, and operands share values), keyed
    by the value's identity (its ``__hash__`` is a Python call) with the value kept in the entry,
    so the identity is not reused while the memo lives.
    ``flats``: the caller's memo of the bounds and flat Access of an access on a buffer part:
    a function of the access (immutable; kept in the entry, so its id is not reused while the
    memo lives), the root's row-major strides and the view's first element alone -- buffers of
    one shape and view share it (the 7B prefill layer: ~85 000 (value, access) pairs)."""
    bounds, flat, rt, byte_base = _operand_access(buf, acc, views, flats)
    return list(bounds), flat, rt, byte_base


def _operand_access(buf: SSAValue, acc: AccessAttr | None, views: dict | None,
                    flats: dict | None) -> tuple[tuple[int, ...], Access, BufferType, int]:
    """:func:`operand_access` with the bounds as a tuple (the pass's synthesis key)."""
    part = views.get(id(buf)) if views is not None else None
    if part is None:
        part = _buffer_part(buf)
        if views is not None:
            views[id(buf)] = (part, buf)
    else:
        part = part[0]
    rt, strides, offs, first, byte_base = part
    if acc is None:
        bounds = tuple(buf.type.dims)  # type: ignore[attr-defined]
        rank = len(strides)
        if bounds and len(bounds) != rank:
            raise TwuError(f"access of rank {len(bounds)} on a buffer of rank {rank}")
        # the identity access: one loop per dim, at the dim's stride
        return bounds, Access(strides if bounds else (), first if bounds else 0), rt, byte_base
    if flats is None:
        bounds, flat = _flat_access(acc, strides, first)
        return tuple(bounds), flat, rt, byte_base
    key = (id(acc), strides, first)
    got = flats.get(key)
    if got is None:
        bounds, flat = _flat_access(acc, strides, first)
        got = flats[key] = (acc, tuple(bounds), flat)
    return got[1], got[2], rt, byte_base


def _flat_access(acc: AccessAttr, strides: tuple[int, ...],
                 first: int) -> tuple[list[int], Access]:
    """(iteration bounds, flat element Access) of ``acc`` on a view whose first element is
    ``first`` in a root of row-major ``strides``."""
    rank = len(strides)
    if not acc.is_pure_affine():
        raise TwuError(f"access {acc} uses mod/floordiv; only pure affine accesses map to "
                       "TWU levels")
    bounds = list(acc.shape)
    c0, coeffs = acc.coefficients()
    if not c0:  # no map results: nothing addressed through the buffer's dims
        return bounds, Access(tuple(0 for _ in bounds), 0)
    if len(c0) != rank:
        raise TwuError(f"access of rank {len(c0)} on a buffer of rank {rank}")
    # the map composed with the row-major layout: loop d's stride is sum_r coeff[d][r] * stride[r]
    flat = tuple(sum(x * st for x, st in zip(coeffs[d], strides)) for d in range(len(bounds)))
    base = first + sum(c * st for c, st in zip(c0, strides))
    return bounds, Access(flat, base)


_OTHER, _INSTR, _DMA, _COPY, _BCAST, _STREAM = range(6)
_KINDS: dict[type, int] = {}
_WALKS: dict[type, bool] = {}


def _kind(op: Operation) -> int:
    """The class of an op as the pass asks it (``isinstance`` against xDSL's ABC-based classes,
    once per class): a stream, an instruction (a DMA, a DTDU copy, a DTDU broadcast, another),
    or anything else."""
    t = type(op)
    k = _KINDS.get(t)
    if k is None:
        k = _KINDS[t] = (_STREAM if isinstance(op, StreamOp) else _DMA if isinstance(op, DmaOp)
                         else _BCAST if isinstance(op, BroadcastOp) else _COPY if isinstance(
                             op, CopyOp) else _INSTR if isinstance(op, InstrOp) else _OTHER)
    return k


def _is_walk(acc) -> bool:
    """``isinstance(acc, WalkAttr)``, once per class."""
    t = type(acc)
    w = _WALKS.get(t)
    if w is None:
        w = _WALKS[t] = isinstance(acc, WalkAttr)
    return w


@dataclass(frozen=True)
class TwuMaterialize(ModulePass):
    """Turn every operand's affine access into Tensor Walker levels within the machine's budget.

    What: for each instruction op of each ``tpb.program``, every operand slot that has a buffer
    (allocated: run ``hbsm-allocate`` first) and an ``#twu.access`` (or none: the whole buffer,
    row-major) gets a ``#twu.walk``: the access's affine map composed with the buffer's row-major
    layout (views add their offsets, a slot its slot offset) gives one stride per loop; count-1
    loops vanish, contiguous loops fold into one level, adjacent repeat (stride-0) loops fold,
    the constant goes into the first level's Initial (``passes/backend/twu_synth.py``). When a
    DMA or DTDU copy needs more levels than ``twu_max_levels`` it is split into several
    instructions along its outermost loops (its token becomes a ``sync.join`` of theirs); a unit
    instruction (TCU/CVU) that would need a split is an error naming the op and operand.
    Why: the TWU is the only address generator; walks are what the ISA encodes.
    Pre: buffers allocated. Post: every buffer operand has a ``#twu.walk``.
    Options: none.
    """

    name = "twu-materialize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for prog in programs(op):
            m = machine_of(prog)
            ops: list[InstrOp] = []
            for o in prog.body.ops:
                k = _kind(o)
                if k == _STREAM:
                    ops.extend(x for x in o.body.ops if _kind(x) not in (_OTHER, _STREAM))
                elif k != _OTHER:
                    ops.append(o)
            # (ids of a buffer value and an access) -> [operand_access, its one-operand synthesis,
            # {TPB: its walk attribute}, the access, the value]: a function of the value's views /
            # alloc (which this pass does not change) and of the access (immutable); operands
            # share both (a buffer read by several instructions, one access attribute for many
            # operands). Keyed by identity (an access's hash walks its affine map: ~1/7 of the
            # stage on the 7B prefill layer; a value's is a Python call) and both are kept in
            # the entry, so neither id is reused while the memo lives; an equal access of
            # another identity has an entry of its own (the same values).
            memo: dict[tuple, list] = {}
            views: dict = {}  # id(buffer value) -> (operand_access's part of it, the value)
            flats: dict = {}  # (access, strides, first element) -> bounds, flat Access
            # (bounds, flat access) -> its one-operand synthesis: a function of those alone
            # (ResNet-50: 32 459 (value, access) pairs, 1 350 distinct loop nests)
            synth: dict[tuple, list] = {}
            # ((id of a synthesis, space, element type), TPB, base) -> its walk attribute: the
            # walk is a function of those (levels, space and element type, TPB, base), and pairs
            # share it (the 7B prefill layer: ~85 000 pairs, ~42 000 distinct walks; ResNet-50:
            # 25 638 -- keyed by the root buffer type's identity instead, 28 499 objects). The
            # synthesis is kept by ``synth`` while this dict lives.
            walks: dict[tuple, WalkAttr] = {}
            # (id of a synthesis, space, element type) -> the first walk made of it: every other
            # walk of that loop nest, space and type is that one at another TPB and base
            # (``WalkAttr.at``: ResNet-50 26 030 walks of ~1 500 shapes)
            shapes: dict[tuple, WalkAttr] = {}
            for o in ops:
                self._materialize(o, m.twu_max_levels, memo, views, flats, synth, walks, shapes)

    def _materialize(self, op: InstrOp, max_levels: int, memo: dict[tuple, list],
                     views: dict, flats: dict, synth: dict[tuple, list],
                     walks: dict[tuple, WalkAttr], shapes: dict[tuple, WalkAttr]) -> None:
        # the slots read from the properties dict and the operand tuple (``slot_buffers`` /
        # ``slot_accesses`` are descriptor calls and two dicts per op); a name given twice keeps
        # its first position and its last buffer, as ``slot_buffers``' dict does
        p = op.properties
        accs = p["walks"].data
        bufs = {n.data: b for n, b in zip(p["buf_slots"].data, op.bufs)}
        todo = {}
        for name, buf in bufs.items():
            acc = accs.get(name)
            if acc is not None and _is_walk(acc):
                continue
            key = (id(buf), id(acc))
            got = memo.get(key)
            if got is None:
                try:
                    part = _operand_access(buf, acc, views, flats)
                except TwuError as e:
                    raise TwuError(f"twu-materialize: {op.describe()}: operand '{name}': "
                                   f"{e}") from None
                rt = part[2]
                # [operand_access, its synthesis, {TPB: walk}, the access, the value, the walk's
                # TPB unless the op's kind and slot say otherwise (the root's: its space and
                # TPB are the value's alone)]
                got = memo[key] = [part, None, {}, acc, buf,
                                   rt.tpb_index if rt.space.data == "hbsm" else -1]
            todo[name] = got
        if not todo:
            return
        split = False
        for got in todo.values():
            pieces = got[1]
            if pieces is None:
                bounds, flat = got[0][0], got[0][1]
                key = (bounds, flat)
                pieces = synth.get(key)
                if pieces is None:
                    pieces = synth[key] = synthesize(bounds, [flat], max_levels)
                got[1] = pieces
            split |= len(pieces) > 1
        k = _kind(op)
        bcast = k == _DMA and op.tpb_mask is not None and op.tpb_mask.value.data != 0

        if not split:
            new = dict(accs)
            # the destination's TPB when the op's kind names it (tpb_of), else None
            dst_tpb = 0 if bcast else op.unit_index if k == _BCAST else None
            for name, got in todo.items():
                part, pieces, made = got[0], got[1], got[2]
                t = got[5]
                if t < 0:
                    t = 0
                elif dst_tpb is not None and name == "dst":
                    t = dst_tpb
                w = made.get(t)  # the walk of this (buffer value, access) on TPB t, once
                if w is None:
                    rt, base = part[2], part[3]
                    gk = (id(pieces), rt.space_enum, rt.dtype)
                    wk = (gk, t, base)
                    w = walks.get(wk)
                    if w is None:
                        g = shapes.get(gk)
                        if g is None:
                            w = shapes[gk] = WalkAttr.from_isa(Walk(
                                rt.space_enum, t, base, rt.dtype, pieces[0].levels[0]))
                        elif g.tpb.value.data == t and g.base.value.data == base:
                            w = g
                        else:
                            w = g.at(t, base)
                        walks[wk] = w
                    made[t] = w
                new[name] = w
            op.properties["walks"] = dict_attr(new)
            return

        def tpb_of(name: str, rt: BufferType) -> int:
            if rt.space.data != "hbsm" or (bcast and name == "dst"):  # (space_enum is not HBSM)
                return 0  # memory walks, and a DRB broadcast's destination, name TPB 0
            if k == _BCAST and name == "dst":
                return op.unit_index  # a DTDU broadcast's destination names its own TPB (ISA)
            return rt.tpb_index

        pieces_of = {name: got[1] for name, got in todo.items()}
        todo = {name: got[0] for name, got in todo.items()}
        if k not in (_DMA, _COPY) or len(todo) != 2 or \
                len({tuple(v[0]) for v in todo.values()}) != 1:
            worst = max(todo, key=lambda n: len(pieces_of[n]))
            raise TwuError(f"twu-materialize: {op.describe()}: operand '{worst}' needs more than "
                           f"{max_levels} TWU levels and this instruction can not be split "
                           "(give the operand a simpler layout)")
        # split a copy/DMA along its outer loops: both operands over the same iteration space
        names = list(todo)
        bounds = todo[names[0]][0]
        pieces = synthesize(bounds, [todo[n][1] for n in names], max_levels)
        toks = []
        for p in pieces:
            new = dict(accs)
            for j, n in enumerate(names):
                _, _, rt, base = todo[n]
                new[n] = WalkAttr.from_isa(Walk(rt.space_enum, tpb_of(n, rt), base, rt.dtype,
                                                p.levels[j]))
            clone = op.clone()
            clone.properties["walks"] = dict_attr(new)
            Rewriter.insert_op(clone, InsertPoint.before(op))
            toks.append(clone.done)
        join = JoinOp(toks)
        Rewriter.insert_op(join, InsertPoint.before(op))
        op.done.replace_all_uses_with(join.results[0])
        op.detach()
        op.erase()
