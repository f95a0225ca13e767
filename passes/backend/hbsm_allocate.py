"""The ``hbsm-allocate`` pass: static HBSM offsets by liveness (plus DDR/SRAM offsets left open)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass

from m100.dialects.hbsm import AllocOp, BufferType, FifoOp, ViewOp
from m100.dialects.tpb import InstrOp, ProgramOp, StreamOp
from m100.dialects.tpb_program import programs
from m100.targets.m100.isa import Space
from m100.dialects.sync import machine_of
from m100.dialects.twu import int_attr

from .hbsm_pack import Buf, HbsmCheckError, HbsmOverflow, allocate, check_allocation


def _program_ops(prog: ProgramOp) -> list[Operation]:
    out: list[Operation] = []
    for op in prog.body.ops:
        if _kind(op) == _STREAM:
            out.extend(op.body.ops)
        else:
            out.append(op)
    return out


_OTHER, _INSTR, _BUF, _STREAM = 0, 1, 2, 3
_KINDS: dict[type, int] = {}
_MASKED: dict[type, bool] = {}  # instruction class -> it has a ``tpb_mask`` property
_UNIT: dict[type, str] = {}  # instruction class -> the name of its unit


def _kind(op: Operation) -> int:
    t = type(op)
    k = _KINDS.get(t)
    if k is None:
        k = _KINDS[t] = _INSTR if isinstance(op, InstrOp) else _BUF if isinstance(
            op, (AllocOp, FifoOp)) else _STREAM if isinstance(op, StreamOp) else _OTHER
    return k


def _unit(op: InstrOp) -> str:
    """The name of ``op``'s unit (found once per class)."""
    t = type(op)
    got = _UNIT.get(t)
    if got is None:
        got = _UNIT[t] = op.KIND.UNIT.name
    return got


def _root(v: SSAValue) -> Operation:
    o = v.owner
    while isinstance(o, ViewOp):
        o = o.source.owner
    return o  # type: ignore[return-value]


def _describe(op: Operation, pos: int, user: InstrOp | None, texts: dict[int, tuple],
              shapes: dict[int, str]) -> str:
    """The buffer's name in the packer (and in its messages; also its last sort key).
    ``shapes``: id of a buffer type -> its dims and element type printed (``dimsxelem``), kept
    by the caller while the types live; ``texts``: id of an element type -> (it, its printed
    form) (xDSL prints an attribute through a ``Printer``: ~30 us, once per buffer otherwise;
    keyed by identity -- an attribute's hash is a Python call -- and holding the attribute, so
    the id is not reused)."""
    r = _TUPLE_ITEM(op.results, 0)
    t: BufferType = r.type  # type: ignore[assignment]
    shape = shapes.get(id(t))
    if shape is None:
        et = t.element_type
        got = texts.get(id(et))
        if got is None:
            got = texts[id(et)] = (et, str(et))
        shape = shapes[id(t)] = "x".join(str(d) for d in t.dims) + "x" + got[1]
    who = f" ({user.name} {user.UNIT_KEY} {user.unit_index})" if user is not None else ""
    return f"%{r.name_hint or pos}<{shape}>{who}"


_TUPLE_ITEM = tuple.__getitem__  # (``SSAValues.__getitem__`` is a Python method)


def receiver_spans(bufs: list[Buf], groups: dict[int, list[str]], by_name: dict, user: dict
                   ) -> None:
    """The spans of the receivers of each DRB broadcast group (``bufs`` replaced in place): from
    the group's first named use on, in positions and predicted cycles."""
    idx = {b.name: i for i, b in enumerate(bufs)}
    for names in groups.values():
        # a receiver no instruction names (its TPB's compute reads the operand from a
        # buffer of its own: the heads' causal clip) is still written by the broadcast:
        # its span is the broadcast's instant, not its alloc's place (the head of the
        # program), which had let it -- and so the broadcast -- share bytes with buffers
        # live on its TPB then (the fuzzer's W8A8 attention chain with ACT_PREFETCH)
        used = [n for n in names if id(by_name[n]) in user] or names
        start = min(bufs[idx[n]].start for n in used)
        preds = [bufs[idx[n]].pred for n in used]
        pstart = min(p[0] for p in preds) if all(p is not None for p in preds) else None
        pend = max(p[1] for p in preds) if pstart is not None else None  # type: ignore
        for n in names:
            b = bufs[idx[n]]
            if id(by_name[n]) not in user:
                b = Buf(b.name, b.tpb, b.slot_bytes, b.slots, start, start + 1, b.unit,
                        b.last_unit, None if pstart is None else (pstart, pend))
            # its span starts at the broadcast, in positions and in predicted cycles (a
            # receiver's own first use is its compute; the broadcast writes it before)
            bufs[idx[n]] = Buf(b.name, b.tpb, b.slot_bytes, b.slots, start, b.end, b.unit,
                               b.last_unit, None if pstart is None else
                               (pstart, b.pred[1]))  # type: ignore[index]


def check_receivers(casts, live: dict[str, tuple[int, int, int, int]], bufs: list[Buf],
                    offsets: dict[str, int]) -> list[str]:
    """Independent check of the DRB broadcasts: each ``(position, TPB mask, name of its dst
    buffer)`` of ``casts`` writes the dst buffer's bytes at its offset on EVERY TPB of its mask
    (the instruction names one receiver's buffer only), so on no TPB of the mask may a buffer
    that is not one of the broadcast's receivers (``live``'s group id differs from the dst's)
    hold those bytes across the broadcast -- first used before it, last after it, by the
    program's own instruction positions (``live``: name -> (first, last, ``m100.bcast`` group
    id, or a negative one of its own, TPB); a buffer no instruction names is in no span). The receivers come from the mask and the
    spans from the program, not from the allocator's group spans (``Buf.start`` / ``end``): a
    receiver whose span the allocator got wrong (session 26: one nothing reads had its alloc's
    place as its whole life, so its offset sat on a live buffer) fails it, where
    :func:`.hbsm_pack.check_allocation`, given those spans, passes."""
    import numpy as np

    from m100.targets.m100.isa_base import tpbs_of
    size = {b.name: b.size for b in bufs}
    per: dict[int, list[str]] = {}
    for n, (_, _, _, x) in live.items():
        if n in offsets:
            per.setdefault(x, []).append(n)
    asks: dict[int, list[tuple[int, int, int, int, int]]] = {}  # TPB -> (pos, lo, hi, group, #)
    for i, (pos, mask, dn) in enumerate(casts):
        if dn in offsets and dn in live:
            o, g = offsets[dn], live[dn][2]
            for x in tpbs_of(mask):
                asks.setdefault(x, []).append((pos, o, o + size[dn], g, i))
    errs = []
    for x, q in sorted(asks.items()):
        names = per.get(x)
        if not names:
            continue
        f = np.array([live[n][0] for n in names], np.int64)
        la = np.array([live[n][1] for n in names], np.int64)
        gi = np.array([live[n][2] for n in names], np.int64)
        lo = np.array([offsets[n] for n in names], np.int64)
        hi = lo + np.array([size[n] for n in names], np.int64)
        qa = np.array(q, np.int64)
        for j in range(0, len(qa), 256):  # (blocks of asks x every buffer of the TPB)
            b = qa[j:j + 256]
            p, o, e, g = (b[:, c, None] for c in range(4))
            hit = (f < p) & (la > p) & (lo < e) & (hi > o) & (gi != g)
            for r, i in zip(*np.nonzero(hit)):
                pos, o1, e1, _, ci = b[r]
                errs.append(f"TPB {x}: the broadcast at instruction {pos} (mask "
                            f"{casts[ci][1]:#x}) writes [{o1}, {e1}) there, over {names[i]} "
                            f"[{lo[i]}, {hi[i]}) live across it (used at {f[i]} and {la[i]})")
    return errs


@dataclass(frozen=True)
class HbsmAllocate(ModulePass):
    """Assign every unallocated HBSM buffer an offset, per TPB, by liveness in program order.

    What: for each ``tpb.program``, every ``hbsm.alloc`` / ``hbsm.fifo`` without ``offset`` gets one:
    HBSM buffers are packed per TPB by interval packing over their live range (first to last
    instruction that uses them or a view of them, in body order), largest first, at bank-width
    aligned offsets, preferring bytes last used by the same unit (so reuse adds no cross-unit
    dependency); a FIFO's slots are one contiguous block; the receivers of one DRB broadcast
    (buffers with the same ``m100.bcast`` id) get one offset, free on all their TPBs from the
    broadcast on. DDR/CCB SRAM buffers without an offset are
    placed after the highest allocated byte of their space. An independent checker re-verifies the
    result (no two buffers live at once share a byte; everything inside the HBSM; no buffer live
    across a broadcast on a TPB of its mask shares the bytes it writes there:
    :func:`check_receivers`); a rejection is :class:`.hbsm_pack.HbsmCheckError`.
    Why: the scheduler emits one SSA buffer per mini-tensor; static offsets turn that into the
    double/multi-buffered HBSM use the partitioner sized (``passes/backend/hbsm_pack.py``).
    Pre: a placed ``tpb.program``. Post: every buffer has an offset. On overflow: one error naming
    the TPB, the peak instant (program position), the live buffers with sizes and what would fit.
    Options: ``report`` (print per-TPB peak bytes to stderr), ``strict`` (fail with
    ``HbsmOverflow`` instead of packing a TPB or broadcast by program order alone when keeping
    the planned concurrency apart does not fit: ``m100-pipeline`` then schedules again with a
    smaller prefetch share, whose program runs as planned), ``largest-first`` (a strict
    allocation also tries the joint packing largest first before it fails: ``m100 bench llm``'s
    W8A8 prefill layer, whose 100 % plan packs only so; ``hbsm_pack.allocate``).
    """

    name = "hbsm-allocate"

    report: bool = False
    strict: bool = False
    largest_first: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        progs = programs(op)
        if not progs:
            raise HbsmOverflow("hbsm-allocate: the module has no tpb.program")
        for p in progs:
            self._run(p)

    def _run(self, prog: ProgramOp) -> None:
        """The scan: per buffer root (by id), its first / last instruction position and user,
        its predicted span (``None`` once a use has no prediction: program order only); then
        :meth:`_pack`. Each op's class is tested once per class (``_kind``), each buffer
        value's root found once (``test_hbsm_scan_is_the_definition`` compares the scan with a
        plain walk of the program)."""
        m = machine_of(prog)
        ops = _program_ops(prog)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        user: dict[int, InstrOp] = {}
        last_user: dict[int, InstrOp] = {}
        pred: dict[int, tuple[int, int] | None] = {}
        pos_of: dict[int, int] = {}  # op -> index among the instruction ops (program position)
        kinds = [_kind(o) for o in ops]
        n = 0
        for o, k in zip(ops, kinds):
            pos_of[id(o)] = n
            if k == _INSTR:
                n += 1
        roots: dict[int, int] = {}  # id of a buffer value -> id of its root op
        casts: list[tuple[int, int, int]] = []  # DRB broadcasts: (position, TPB mask, dst root)
        for o, kd in zip(ops, kinds):
            if kd != _INSTR:
                continue
            pos = pos_of[id(o)]
            t = type(o)
            masked = _MASKED.get(t)
            if masked is None:  # (asked once per class: a missing attribute raises inside)
                masked = _MASKED[t] = hasattr(o, "tpb_mask")
            if masked:
                mk = o.tpb_mask
                if mk is not None and mk.value.data:
                    dst = o.slot_buffers().get("dst")
                    if dst is not None:
                        casts.append((pos, mk.value.data, id(_root(dst))))
            a = o.attributes
            ps, pe = a.get("pred_start"), a.get("pred_end")
            if ps is not None and pe is not None:
                s0, s1 = span = (ps.value.data, pe.value.data)
            else:
                span = None
            for b in o.bufs:
                k = roots.get(id(b))
                if k is None:
                    k = roots[id(b)] = id(_root(b))
                if k not in first:
                    first[k] = pos
                    user[k] = o
                    pred[k] = span  # (its first use: its span, or None)
                else:
                    cur = pred[k]
                    if span is None:
                        pred[k] = None  # a use without a prediction: program order only
                    elif cur is not None:  # the union of the spans (min, max)
                        c0, c1 = cur
                        if s0 < c0 or s1 > c1:
                            pred[k] = (s0 if s0 < c0 else c0, s1 if s1 > c1 else c1)
                last[k] = pos
                last_user[k] = o
        self._pack(prog, m, ops, pos_of, first, last, user, last_user, pred, kinds, casts)

    def _pack(self, prog, m, ops, pos_of, first, last, user, last_user, pred, kinds,
              casts=()) -> None:
        """The buffers from the scan's spans, packed; the offsets written back."""
        bufs: list[Buf] = []
        by_name: dict[str, Operation] = {}
        top = {Space.DDR: 0, Space.SRAM: 0}
        pending_mem: list[Operation] = []
        texts: dict[int, tuple] = {}
        shapes: dict[int, str] = {}
        for i, o in enumerate(ops):
            if kinds[i] != _BUF:
                continue
            pos = pos_of[id(o)]
            t: BufferType = _TUPLE_ITEM(o.results, 0).type  # type: ignore[assignment]
            # (``offset``: an optional property of alloc and fifo, read from the dict its
            # accessor reads)
            off = o.properties.get("offset")
            if t.space_enum is not Space.HBSM:
                if off is not None:
                    top[t.space_enum] = max(top[t.space_enum], off.value.data + t.total_bytes)
                else:
                    pending_mem.append(o)
                continue
            if off is not None:
                continue
            k = id(o)
            u = user.get(k)
            name = _describe(o, len(bufs), u, texts, shapes)
            by_name[name] = o
            if u is not None:
                lu = last_user[k]
                bufs.append(Buf(name, t.tpb_index, t.slot_bytes, t.num_slots, float(first[k]),
                                float(last[k] + 1), _unit(u), _unit(lu), pred[k]))
            else:  # no instruction names it: its alloc's place
                bufs.append(Buf(name, t.tpb_index, t.slot_bytes, t.num_slots, float(pos),
                                float(pos + 1), "", "", None))
        # DRB broadcast receivers (same m100.bcast id): one offset, live from the broadcast on
        groups: dict[int, list[str]] = {}
        for name, o in by_name.items():
            g = o.attributes.get("m100.bcast")
            if g is not None:
                groups.setdefault(g.value.data, []).append(name)  # type: ignore[union-attr]
        if groups:
            receiver_spans(bufs, groups, by_name, user)
        try:
            offs = allocate(bufs, m.hbsm_bytes, m.hbsm_bank_width,
                            [g for g in groups.values() if len(g) > 1], strict=self.strict,
                            largest_first=self.largest_first)
        except HbsmOverflow as e:
            msg = str(e).replace("at cycle", "at instruction")
            raise HbsmOverflow(msg) from None
        errs = check_allocation(bufs, offs, m.hbsm_bytes, m.hbsm_bank_width)
        if casts:
            live, name_of = {}, {}
            for b in bufs:
                o = by_name[b.name]
                k = id(o)
                name_of[k] = b.name
                if k in first:
                    g = o.attributes.get("m100.bcast")
                    # (a buffer of no group: a group of its own, a negative id)
                    live[b.name] = (first[k], last[k], -2 - len(live) if g is None else
                                    g.value.data, b.tpb)
            errs = errs + check_receivers(
                [(p, mk, name_of[d]) for p, mk, d in casts if d in name_of], live, bufs, offs)
        if errs:
            raise HbsmCheckError("hbsm-allocate: internal error, the checker rejects the "
                                 "allocation: " + "; ".join(errs[:3]))
        for name, off in offs.items():
            by_name[name].properties["offset"] = int_attr(off)  # = IntegerAttr(off, i64), shared
        for o in pending_mem:
            t = o.results[0].type  # type: ignore[assignment]
            sp = t.space_enum
            a = -(-top[sp] // m.mem_align) * m.mem_align
            o.properties["offset"] = int_attr(a)
            top[sp] = a + t.total_bytes
        if self.report:
            peak: dict[int, int] = {}
            for b in bufs:
                peak[b.tpb] = max(peak.get(b.tpb, 0), offs[b.name] + b.size)
            print("hbsm-allocate: highest HBSM byte per TPB: " + ", ".join(
                f"TPB{t}={v}" for t, v in sorted(peak.items())) + f" (of {m.hbsm_bytes})",
                file=sys.stderr)
