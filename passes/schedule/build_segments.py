"""The plan builder: a placement's segments walked in the wave order, one task per instruction.

Per segment: its stages' tile plans, the weight prefetch barriers, the wave order (band ``b`` of a
stage after the producer bands its rows need, :meth:`PlanBuilder._lags`), or the lockstep groups of
a one-stage contraction whose K is chunked or whose second operand streams; per piece, the op
family's unit instructions (:mod:`.kinds`) with their operand transfers (:mod:`.build_transfers`),
the K-split reductions and the stores of outputs needed outside the segment; then the HBSM buffer
lifetimes of the segment. Tasks are list-scheduled as they are created (:mod:`.list_schedule`).
"""

from __future__ import annotations

from . import causal, recipe
from .build_transfers import Transfers
from .graph import Op, ScheduleError, dtype_bytes
from .keep import kept_bytes
from .list_schedule import NU, UNIT_SLOT, BoundExceeded, boxed_store
from .partition import TilePlan
from .plan import STORE_LATER, PlanPiece, Unit, op_family
from .segment import (SegmentCfg, StageCfg, act_resident_ok, input_window,
                      ksplit_bias, ksplit_ok, ksplit_stages, lockstep, lockstep_groups, memory_of,
                      reads_whole, reduce_pieces, row_tile, stage_rows)


#: late stores (:meth:`PlanBuilder._late_ok`): the output stores of a lockstep contraction's last
#: group built after the next lockstep contraction's first steps (False: at its own end, A/B)
LATE_STORES = True
#: late stores of a one-stage vector segment built piece by piece (RoPE between the prefill
#: projections: :meth:`PlanBuilder._late_wave`); False: its stores at its own end (A/B)
LATE_WAVE_STORES = True
#: late stores read by later pipelines (:meth:`PlanBuilder._late_reads`): the output stores of a
#: lockstep contraction whose later readers take column views of it (the prefill heads' PV reads
#: of the V projection) built just before the segment that first reads each store's box, the
#: rest at the end of the first round of segments on distinct TPBs (False: at its own end, A/B)
LATE_READ_STORES = True
#: late read stores past the first round (:meth:`PlanBuilder._late_reads`): each store just before
#: its first reader however many segments on the same TPBs come before it (False: the rest at the
#: end of the first round of segments on distinct TPBs, A/B)
LATE_READ_ROUNDS = True
#: the output stores of a lockstep group of an integer (``i8`` activation) contraction are built
#: after the next group's steps, an equal share after each of its first this-many steps (the
#: group's pieces pause at ``STORE_LATER``, ``_run``'s ``carry``), instead of at each piece's
#: end: the next group's streamed weight chunks go first on the DMA engines (LLaMA2-7B W8A8
#: prefill's down: its first column tile's 56 stores, 4.2 MB, ~40 k cycles of both engines, held
#: the second column tile's K chunks and left every TCU idle 11 - 30 k; issue 13, session 26).
#: Whole plans only (``Plan.carry``); 1: off
CARRY_STEPS = 4
#: what ``next(gen, _DONE)`` gives for a piece's generator that is done (its pauses yield None or
#: :data:`.plan.STORE_LATER`)
_DONE = object()


def carry_share(n: int, spread: bool) -> int:
    """How many of ``n`` carried pieces resume their stores after each step of the next group:
    all after the first, or in a segment of ``Plan.carry`` an equal share of
    :data:`CARRY_STEPS` steps."""
    return -(-n // CARRY_STEPS) if spread else n


def empty_segment(g, ops: dict, seg: SegmentCfg) -> bool:
    """A data-movement segment that moves nothing (a view; every part written in place by its
    producer): no task, no instruction."""
    if seg.kind != "dma" or len(seg.stages) != 1:
        return False
    op = ops[seg.stages[0].op]
    if op.name in g.view_ops:
        return True
    srcs = op.inputs if len(op.inputs) > 1 else op.inputs[:1]
    placed = g.in_place.get(op.name, ())
    return all(i in placed for i in range(len(srcs)))


def derived(g, tensors) -> set[str]:
    """``tensors`` and every tensor whose bytes are theirs (views, strided parts and roots,
    tensors written into another's layout, column and strided views), transitively."""
    out = set(tensors)
    maps = (g.views, g.strided, g.wmap, g.cviews, g.rmap)
    while True:
        n = len(out)
        for m in maps:
            for t, v in m.items():
                if t in out or v[0] in out:
                    out.add(t)
                    out.add(v[0])
        for o in g.ops:
            if o.name in g.view_ops and out.intersection(o.inputs):
                out.update(o.outputs)
        if len(out) == n:
            return out


class PlanBuilder(Transfers):
    """Builds the plan's tasks in program order, one per instruction, and list-schedules each task
    as it is created (creation order == program order per in-order resource)."""

    #: the furthest index of the plan's segment list the build has looked at so far (the late
    #: stores decide by later segments: :meth:`_late_ok`, :meth:`_late_reads`,
    #: :meth:`_late_wave_next`; ``len(segments)`` when one looked past the last): the state
    #: after a prefix depends on the segments up to it, their kept activations and bytes
    #: (:meth:`.resume.Checkpoint.fits` compares up to it; a replay sets it as its recording
    #: did, :mod:`.recipe`). A class default: set on the instance at the first read.
    reach = -1

    def _reach(self, j: int) -> None:
        if j > self.reach:
            self.reach = j

    def _kept_bcast(self) -> bool:
        """``Plan.kept_bcast`` as the generation reads it (a recording logs it: :mod:`.recipe`)."""
        return self.tl.kept_bcast

    # ------------------------------------------------------------------ segments
    def segment(self, si: int, seg: SegmentCfg, isolated: bool) -> None:
        self.isolated = isolated
        self.piece: PlanPiece | None = None
        # per TPB the end of the last segment that used it (its HBSM is reused)
        self.barrier.update(self.seg_touch)
        for x, tid in self.seg_touch.items():
            # (a late store of the segment before that one counts as that one's: the emitter's)
            s = max(self.tl.tasks[tid].segment, self.seg_at)
            self.bar_hist.setdefault(x, []).append((s, tid))
            # a tuple (a new one per end): a checkpoint shares the dict's values
            self.bar_at[(x, s)] = self.bar_at.get((x, s), ()) + (tid,)
        self.seg_touch = {}
        self.seg_at = si
        if self.late[0] and not (seg.kind != "dma" and len(seg.stages) == 1) and \
                not empty_segment(self.g, self.s.ops, seg):
            raise ScheduleError(f"internal: late stores into segment {si}, not one stage")
        start = len(self.tl.tasks)
        pieces: list[PlanPiece] = []
        self.tl.pieces.append(pieces)
        if seg.kind == "dma" and self.s.ops[seg.stages[0].op].unit.startswith("csu."):
            from .kinds import csu
            csu.plan_segment(self, si, seg, pieces)
        elif seg.kind == "dma":
            self.movement.plan_segment(self, si, seg, pieces)
        else:
            self._compute_set_up(si, seg)
            book = self.book
            if book is None or self.late[0] or self.pend:
                self._compute_segment(si, seg, pieces)
            else:  # replayed from a recipe, or recorded (:mod:`.recipe`)
                hit = book.find(self, si, seg)
                if hit is not None:
                    if recipe.CHECK:
                        recipe.check_replay(self, si, seg, pieces, *hit)
                    else:
                        book.replay(self, si, pieces, *hit)
                elif si < self.rec_from:  # no later build is expected to replay it
                    self._compute_segment(si, seg, pieces)
                else:
                    rec = book.start(self)
                    try:
                        self._compute_segment(si, seg, pieces)
                    finally:
                        book.stop(self, rec)
                    book.finish(self, si, seg, pieces, rec)
        if self.pend:
            self._late_reads_end(si)
        if self.search_only:  # its plan is the tasks' ends (:class:`SearchBuilder`)
            return
        seg_tasks = self.tl.tasks[start:]
        span = (min((t.start for t in seg_tasks), default=0.0),
                max((t.end for t in seg_tasks), default=0.0))
        if not seg_tasks:  # a view: the instant its root is written
            w = self.written.get(self.s.ops[seg.stages[0].op].outputs[0])
            span = (self.tl.tasks[w].end,) * 2 if w is not None else span
        self.tl.seg_spans.append(span)
        if isolated or seg.kind == "dma":
            return
        # HBSM buffers: every TPB of a stage holds the plan's buffers for the segment's span there
        # (``Plan.buffers``, made from this record when asked: only tests read them)
        self.tl.buf_segs.append((start, len(self.tl.tasks), seg,
                                 tuple(self.tl.plans[st.op] for st in seg.stages), span))

    def _compute_set_up(self, si: int, seg: SegmentCfg) -> None:
        """A compute segment's state before its pieces: its ops, the per-segment scratch, its
        stages' tile plans and the weight prefetch (what a replay, :mod:`.recipe`, does too)."""
        g, s = self.g, self.s
        self.seg_ops = set(seg.ops)
        self.outside = self._outside_consumers(self.seg_ops)
        self.hist: dict[tuple[int, str], list[int]] = {}  # (tpb, op) -> compute task ids
        self.out_readers: dict[tuple[int, str], list[list[int]]] = {}
        self.readers = {}  # per segment, as out_readers (``ListScheduler.readers``)
        self.wcache: dict[tuple, int] = {}
        self.acache: dict[tuple, int] = {}  # (op, tensor, tpb, rows) -> broadcast/load task
        self.ocache = {}  # producer pieces over a box (:meth:`_over`)
        for st in seg.stages:
            op = s.ops[st.op]
            if st.act_resident and (len(seg.stages) > 1 or st.ks > 1 or st.bands != st.gr or
                                    not act_resident_ok(g, op)):
                raise ScheduleError(f"internal: op '{op.name}' can not keep its activation "
                                    "resident")
            self.tl.plans[st.op] = s.stage_plan(seg, st)
            if st.ks > 1 and (len(seg.stages) > 1 or not ksplit_ok(g, op) or
                              ksplit_stages(op, st.ks) > self.cm.machine.cvu_max_stages):
                raise ScheduleError(f"internal: op '{op.name}' can not be split along K "
                                    f"into {st.ks} parts")
        self._prefetch(si, seg)

    def _compute_segment(self, si: int, seg: SegmentCfg, pieces: list[PlanPiece]) -> None:
        """A compute segment's pieces (after :meth:`_compute_set_up`)."""
        g, s = self.g, self.s
        clip = causal.clips(s, seg, self.tl.plans)  # a causal chain's masked half (causal.py)
        lag = self._lags(seg)
        if len(seg.stages) == 1 and lockstep(self.tl.plans[seg.stages[0].op],
                                             s.ops[seg.stages[0].op]):
            self._lockstep_segment(si, seg.stages[0], pieces)
            self._check_kept(seg)
            return
        order = causal.band_order(seg, clip)
        wave_late = self._late_wave_next(si, seg)
        parked: list = []
        n_waves = max(st.bands + lag[st.op] for st in seg.stages)
        for w in range(n_waves):  # the wave order: band b of a stage after the producer bands
            for st in seg.stages:
                b = w - lag[st.op]
                if not 0 <= b < st.bands:
                    continue
                op = s.ops[st.op]
                tplan = self.tl.plans[st.op]
                cz = clip.get(op.name)
                rb = b if order is None else order[b]  # the band whose rows band b computes
                last = stage_rows(st, s.geo(op).rows, rb)[1] if cz is not None else 0
                for j, tpb, a, e, cc, ce in s.band_boxes(st, op, tplan, rb):
                    if order is not None:  # band b's TPB, computing band order[b]'s rows
                        tpb = st.tpbs[st.row_of(b) * st.gc + j]
                    if cz is None:
                        p = PlanPiece(op.name, b, j, tpb, a, e, cc, ce, segment=si)
                    else:
                        p = causal.piece(s, op, cz, b, j, tpb, a, e, cc, ce, si, last)
                        if p is None:  # every column of the box is masked
                            continue
                    self.late_pause = wave_late is not None
                    item = self._run_one(p, st, op, tplan)
                    self.late_pause = False
                    if item is not None:
                        parked.append(item)
                    pieces.append(p)
                    self.by_op.setdefault(op.name, []).append(p)
        self._check_kept(seg)
        if parked:
            self._late_wave(si, seg, wave_late, parked)

    def _check_kept(self, seg: SegmentCfg) -> None:
        """The kept outputs of this segment hold exactly the bytes :mod:`.keep` budgeted."""
        for st in seg.stages:
            if st.op not in self.tl.kept:
                continue
            got: dict[int, int] = {}
            for p in self.by_op.get(st.op, ()):
                nb = p.out_dims[0] * p.out_dims[1] * p.out_dims[2] * \
                    dtype_bytes(self.g.out(self.s.ops[st.op]).dtype)
                got[p.tpb] = got.get(p.tpb, 0) + self.cm.align(nb)
            want = kept_bytes(self.s, seg, st, self.s.ops[st.op], self.tl.plans[st.op])
            if got != want:
                raise ScheduleError(f"internal: kept output of '{st.op}': {got} B per TPB, "
                                    f"budgeted {want}")

    def _lockstep_segment(self, si: int, st: StageCfg, pieces: list[PlanPiece]) -> None:
        """A one-stage contraction whose K is chunked or whose second operand streams: the pieces
        of one round (the bands computed at the same time, one per TPB row), one row tile index
        and one column tile index of every column part form a group, built K chunk by K chunk
        round robin (:meth:`_run`), so that each activation chunk is one DRB broadcast to the
        column parts of its row tile and each weight / B chunk one broadcast to the rows of its
        column part (instead of one DMA per TPB)."""
        op = self.s.ops[st.op]
        tplan = self.tl.plans[st.op]
        self.stage = st
        carry: list = []  # pieces whose store waits for the next group's first step
        groups = lockstep_groups(self.g, op, st, tplan, self.s.geo(op),
                                 row_tile(self.cm, self.g, op))
        late_in, self.late = self.late, ([], 0)
        held = self._late_ok(si, st, op, groups[-1]) if groups else None
        reads = self._late_reads(si, st, op, groups[-1]) if groups and held is None else None
        # whole plans only (the search's isolated builds cost the segment as before)
        spread = CARRY_STEPS > 1 and st.ks == 1 and not self.isolated and len(groups) > 1 \
            and self.g.tensors[op.inputs[0]].dtype == "i8"
        if spread:
            self.tl.carry.add(si)
        for gi, grp in enumerate(groups):
            for p in grp:
                p.segment = si
                p.group = self.n_groups
            self.n_groups += 1
            self.gcache = {}
            self.late_pause = ((held is not None or reads is not None) and
                               gi == len(groups) - 1) or (spread and gi < len(groups) - 1)
            carry = self._run(grp, st, op, tplan, carry, late_in if gi == 0 else None)
            self.late_pause = False
            pieces.extend(grp)
            if st.ks > 1:  # the partial sums of each output tile meet on its part-0 TPB
                tiles: dict[tuple, list[PlanPiece]] = {}  # output tile -> its K parts' pieces
                for p in grp:
                    tiles.setdefault((p.band, p.col, p.r0, p.c0), []).append(p)
                for red in reduce_pieces(grp, si):
                    self.piece = red
                    self._reduce(op, red, tiles.get((red.band, red.col, red.r0, red.c0), []))
                    self.piece = None
                    pieces.append(red)
                    self.by_op.setdefault(op.name, []).append(red)
            else:
                self.by_op.setdefault(op.name, []).extend(grp)
        self.late_bytes = {}
        if self.s.tail_prefetch and not tplan.weight_resident and st.ks == 1 and \
                not self.isolated:
            # per TPB its second-to-last compute: after it the other slot of each streamed
            # operand is free, what the next segment's first weight chunk may take
            # (``ListScheduler._prefetch``)
            for x in st.tpbs:
                h = self.hist.get((x, op.name), ())
                if len(h) >= 2:
                    self.tail_at[(x, si)] = h[-2]
        if held is not None:  # the last group's stores: during the next segment's first steps
            per = self._late_per(si, len(carry))
            self.tl.late[si] = per
            self.late, self.late_bytes = (carry, per), held
        elif reads is not None:  # each store just before its first reader (:meth:`_late_reads`)
            base = len(pieces) - len(groups[-1])  # (no K split: no reduction pieces)
            at = {id(p): i for i, p in enumerate(pieces)}
            reads = {j: [base + i for i in ix] for j, ix in reads.items()}
            self.tl.late_reads[si] = reads
            self.pend[si] = ({at[id(it[0])]: it for it in carry}, reads, op.outputs[0])
        else:
            self._resume(carry)

    def _late_ok(self, si: int, st: StageCfg, op: Op, last: list[PlanPiece]
                 ) -> dict[int, int] | None:
        """May the output stores of segment ``si``'s last lockstep group ``last`` be built after
        the next segment's first steps (late stores)? Then the next segment's transfers and
        compute on a TPB wait for this segment's last compute there (its barrier), not for the
        stores, and the stores fill the DMA engines' gaps while it computes (the engines stream
        its weight chunks no faster than its TCUs take them). Yes when :data:`LATE_STORES` is on,
        the build is a whole plan, every piece of ``last`` stores its output (not kept, no K
        split), the next segment is one lockstep contraction (its K-chunk steps) that reads
        nothing this one writes (directly or through a view), and on every TPB of it its
        footprint plus the stored tiles held there fit the HBSM share the prefetch may fill.
        Returns the bytes held per TPB, or None."""
        segs = self.tl.segments
        if not LATE_STORES or self.isolated or st.ks > 1 or st.op in self.tl.kept or \
                op.outputs[0] not in self.outside:
            return None
        self._reach(si + 1)  # (the next segment, or past the end the length)
        if si + 1 >= len(segs):
            return None
        nxt = segs[si + 1]
        if nxt.kind == "dma" or len(nxt.stages) != 1 or nxt.stages[0].ks > 1:
            return None
        nst = nxt.stages[0]
        nop = self.s.ops[nst.op]
        nplan = self.s.stage_plan(nxt, nst)
        if not lockstep(nplan, nop) or nst.op in self.tl.kept or \
                derived(self.g, op.outputs) & set(nop.inputs):
            return None
        ob = dtype_bytes(self.g.out(op).dtype)
        per_row = self.s.geo(op).row_elems
        held: dict[int, int] = {}
        for p in last:
            held[p.tpb] = held.get(p.tpb, 0) + \
                self.cm.align((p.r1 - p.r0) * per_row * (p.c1 - p.c0) * ob)
        cap = int(self.cm.machine.hbsm_bytes * self.s.prefetch_share)
        for x in nst.tpbs:
            if nplan.footprint + self.kept_use.get((x, si + 1), 0) + held.get(x, 0) > cap:
                return None
        return held

    def _late_reads(self, si: int, st: StageCfg, op: Op, last: list[PlanPiece]
                    ) -> dict[int, list[int]] | None:
        """Late stores read by later pipelines (:data:`LATE_READ_STORES`): may the output stores
        of segment ``si``'s last lockstep group ``last`` be built later, each just before the
        first segment that reads its box, and the rest at the end of the run of segments
        looked at? The prefill heads read the V projection through column views (one head's
        columns each), one head a segment on its own window of TPBs: with every store at the
        projection's end the first heads' q / kT loads queue behind 8 MB of stores with every
        TCU idle; with the stores no first-round head reads at the end of that round (session
        23, :data:`LATE_READ_ROUNDS` off), round 2's loads queued behind those. Yes when the
        build is a whole plan, every piece of ``last`` stores a box of its plain 2-D output
        (``boxed_store``), the segments after read it only through column views (a segment
        reading it otherwise, a data-movement segment -- or, with :data:`LATE_READ_ROUNDS`
        off, one on a TPB of an earlier segment since -- ends the run: the rest are built
        before it), and on every TPB of every segment of the run its footprint, its kept tiles
        and the tiles still held there fit the HBSM share (counted in its HBSM use); and some
        segment of the run reads a store through a column view (else nothing changes). Returns {segment j: the indices
        in the group's pieces of the stores built at the end of j} (``si`` itself: at its own
        end), or None when nothing would move."""
        g, segs = self.g, self.tl.segments
        if not (LATE_STORES and LATE_READ_STORES) or self.isolated or st.ks > 1 or \
                st.op in self.tl.kept or op.outputs[0] not in self.outside or \
                not boxed_store(g, op) or not last:
            return None
        root = op.outputs[0]
        eb = dtype_bytes(g.tensors[root].dtype)
        rows = g.tensors[root].shape[0]
        near = derived(g, [root])
        cap = int(self.cm.machine.hbsm_bytes * self.s.prefetch_share)
        left = set(range(len(last)))
        out: dict[int, list[int]] = {}
        held: dict[int, int] = {}  # TPB -> bytes of its stores not built yet
        for i, p in enumerate(last):
            held[p.tpb] = held.get(p.tpb, 0) + self.cm.align((p.r1 - p.r0) * (p.c1 - p.c0) * eb)
        seen: set[int] = set()
        read = False  # a segment of the round reads some of the stores through a column view
        prev = si  # the segment at whose end the stores a segment reads are built
        use: dict[tuple[int, int], int] = {}
        for j in range(si + 1, len(segs)):
            self._reach(j)
            seg = segs[j]
            if empty_segment(g, self.s.ops, seg):
                continue
            if seg.kind == "dma":
                break
            boxes = []
            whole = False
            for s2 in seg.stages:
                o2 = self.s.ops[s2.op]
                for t in o2.inputs + ((o2.attrs["post_in"],) if o2.attrs.get("post_in") else ()):
                    if t not in near:
                        continue
                    cv = g.cviews.get(t)
                    if cv is None or cv[0] != root:
                        whole = True
                        break
                    c0 = cv[1] // eb
                    boxes.append((0, rows, c0, c0 + g.tensors[t].shape[-1]))
            tpbs = {x for s2 in seg.stages for x in s2.tpbs}
            if whole or (tpbs & seen and not LATE_READ_ROUNDS):
                break
            need = sorted(i for i in left if any(
                min(b[1], last[i].r1) > max(b[0], last[i].r0) and
                min(b[3], last[i].c1) > max(b[2], last[i].c0) for b in boxes))
            if need:
                read = True
                out.setdefault(prev, []).extend(need)
                left.difference_update(need)
                for i in need:
                    p = last[i]
                    held[p.tpb] -= self.cm.align((p.r1 - p.r0) * (p.c1 - p.c0) * eb)
            foot: dict[int, int] = {}
            for s2 in seg.stages:
                f = self.s.stage_plan(seg, s2).footprint
                for x in s2.tpbs:
                    foot[x] = foot.get(x, 0) + f
            if any(f + self.kept_use.get((x, j), 0) + held.get(x, 0) > cap
                   for x, f in foot.items()):
                break
            for x in tpbs:
                if held.get(x):
                    use[(x, j)] = held[x]
            seen |= tpbs
            prev = j
        else:  # (every later segment looked at: the length too)
            self._reach(len(segs))
        if left:  # the rest at the end of the round (after each round's segment on its TPB:
            # 2 646 309 / 2 701 623 cycles on the 7B layer instead of 2 632 168 / 2 678 049)
            out.setdefault(prev, []).extend(sorted(left))
        if list(out) == [si] or not read:  # (nothing read through column views: as before)
            return None
        self.held_use.update(use)
        return out

    def _late_reads_end(self, j: int) -> None:
        """Build the late stores (:meth:`_late_reads`) due at the end of segment ``j`` (the
        views of their tensor wait for them: :meth:`.list_schedule.ListScheduler._wrote`)."""
        for si in list(self.pend):
            items, reads, _ = self.pend[si]
            ix = reads.get(j)
            if not ix:
                continue
            self._resume([items.pop(i) for i in ix])
            if not items:
                del self.pend[si]

    def _late_wave_next(self, si: int, seg: SegmentCfg) -> int | None:
        """The index of the segment whose first steps may take the stores of ``seg``, a
        one-stage segment built piece by piece (:data:`LATE_WAVE_STORES`): a whole-plan build,
        its output stored (not kept), the next segment that moves anything one lockstep
        contraction (no K split) that reads nothing ``seg`` writes; else None."""
        segs = self.tl.segments
        if not (LATE_STORES and LATE_WAVE_STORES) or self.isolated or len(seg.stages) != 1:
            return None
        st = seg.stages[0]
        op = self.s.ops[st.op]
        if st.ks > 1 or st.op in self.tl.kept or len(op.outputs) != 1 or \
                op.outputs[0] not in self.outside or op_family(op.unit) != "cvu":
            return None
        ni = si + 1
        while ni < len(segs) and empty_segment(self.g, self.s.ops, segs[ni]):
            ni += 1
        self._reach(ni)
        if ni >= len(segs):
            return None
        nxt = segs[ni]
        if nxt.kind == "dma" or len(nxt.stages) != 1 or nxt.stages[0].ks > 1:
            return None
        nop = self.s.ops[nxt.stages[0].op]
        if not lockstep(self.s.stage_plan(nxt, nxt.stages[0]), nop) or \
                derived(self.g, op.outputs) & set(nop.inputs):
            return None
        return ni

    def _late_wave(self, si: int, seg: SegmentCfg, ni: int, parked: list) -> None:
        """The stores of ``parked`` (the pieces of ``seg``, paused before their store) during
        segment ``ni``'s first steps where its footprint, its kept tiles and the stored tiles
        held there fit the HBSM share; else now."""
        st = seg.stages[0]
        op = self.s.ops[st.op]
        ob = dtype_bytes(self.g.out(op).dtype)
        held: dict[int, int] = {}
        for p, _, _ in parked:
            d = p.out_dims
            held[p.tpb] = held.get(p.tpb, 0) + self.cm.align(d[0] * d[1] * d[2] * ob)
        nxt = self.tl.segments[ni]
        nst = nxt.stages[0]
        nplan = self.s.stage_plan(nxt, nst)
        cap = int(self.cm.machine.hbsm_bytes * self.s.prefetch_share)
        if any(nplan.footprint + self.kept_use.get((x, ni), 0) + held.get(x, 0) > cap
               for x in nst.tpbs):
            self._resume(parked)
            return
        steps = max(1, -(-nplan.k // max(1, nplan.tk)))
        per = max(1, -(-len(parked) // steps))
        self.tl.late[si] = per
        self.late, self.late_bytes = (parked, per), held

    def _late_per(self, si: int, n: int) -> int:
        """How many of ``n`` late stores of segment ``si`` follow each K-chunk step of the next
        segment's first group: spread evenly over its steps."""
        nxt = self.tl.segments[si + 1]
        nplan = self.s.stage_plan(nxt, nxt.stages[0])
        steps = max(1, -(-nplan.k // max(1, nplan.tk)))
        return max(1, -(-n // steps))

    def _reduce(self, op: Op, red: PlanPiece, parts: list[PlanPiece]) -> None:
        """The K-split reduction of one output tile on its part-0 TPB: DTDU copies of the other
        parts' partial sums, the bias, one CVU add chain (+ bias, activation), the store.
        ``parts``: the group's pieces of that tile (its K parts), in group order."""
        g, cm = self.g, self.cm
        root = red.tpb
        key = f"{op.name}/reduce"
        self.cur = (root, key)
        back = self.out_readers.setdefault((root, key), [])
        self.out_wait = list(back[-2]) if len(back) >= 2 else []
        parts = sorted(parts, key=lambda p: p.kpart)
        rows, E, cols = parts[0].out_dims
        nb = float(rows * E * cols * 4)
        deps = [parts[0].compute]
        for p in parts[1:]:
            c = self.task("copy", "dtdu", p.tpb, op.name, op.outputs[0], nb,
                          cm.mesh_cycles(nb, p.tpb, root),
                          [p.compute] + self._slot_deps() + self._bar(root), red.segment,
                          red.band, red.col, (root,), "hbsm", "hbsm", -1, 0,
                          "partial")  # positional: :data:`.plan.TASK_FIELDS`
            self.readers[p.compute].append(c)
            self._touch(root, c)
            self._touch(p.tpb, c)
            deps.append(c)
        bias = ksplit_bias(op)
        if bias is not None:
            bb = cols * dtype_bytes(g.tensors[bias].dtype)
            deps.append(self._weight(self.stage, op, bias, root, red.c0, red.c1, red.col, None,
                                     bb, True, role="bias"))
        ob = dtype_bytes(g.out(op).dtype)
        stages = ksplit_stages(op, len(parts))
        cyc = cm.cvu_cycles(nb, rows * E * cols * ob, 1, stages,
                            nb * len(parts) + (cols * 4 if bias is not None else 0))
        t = self.task("compute", Unit.CVU.value, root, op.name, op.outputs[0], 0.0, cyc,
                      deps + self._take_out_wait(), red.segment, red.band, red.col)
        self.readers[parts[0].compute].append(t)
        self.hist.setdefault(self.cur, []).append(t)
        self._touch(root, t)
        red.compute = t
        red.out_dims = (rows, E, cols)
        readers: list[int] = []
        self.readers[t] = readers
        back.append(readers)
        if op.outputs[0] in self.outside:
            red.store = True
            nbo = float(rows * E * cols * ob)
            loc = memory_of(cm, g, op.outputs[0])
            o = self.task("dma-out", "dma", -1, op.name, op.outputs[0], nbo,
                          cm.dma_cycles(nbo, "hbsm", dst=loc), [t], red.segment, red.band,
                          red.col, (root,), "hbsm", loc, -1, 0, "out")
            self._wrote(op.outputs[0], o)
            readers.append(o)
            self._touch(root, o)
        self.cur = None

    def _run(self, group: list[PlanPiece], st: StageCfg, op: Op, tplan: TilePlan,
             carry: list | None = None, late: tuple[list, int] | None = None) -> list:
        """Build the tasks of ``group`` (pieces on distinct TPBs): K chunk by K chunk, round
        robin, each piece with its own context (TPB/op, the output slot it waits for). The
        pieces of ``carry`` (the group before, paused at :data:`STORE_LATER`) create their
        stores after this group's first step; those of ``late`` (the segment before's last
        group, :meth:`_late_ok`) ``late[1]`` after each step; returns this group's paused
        pieces."""
        live = []
        for p in group:
            live.append([p, self._piece(p.segment, st, op, p, tplan), None])
        parked: list = []
        items, per = late if late is not None else ([], 0)
        cper = carry_share(len(carry), group[0].segment in self.tl.carry) if carry else 0
        while live:
            nxt = []
            for item in live:  # :meth:`_step` written out (~170 k steps on ResNet-50)
                p, gen, ctx = item
                self.piece = p
                if ctx is not None:
                    self.cur, self.out_wait = ctx
                r = next(gen, _DONE)  # (a sentinel, not a StopIteration per piece)
                self.piece = None
                if r is _DONE:
                    item[1] = None
                    continue
                item[2] = (self.cur, self.out_wait)
                if r is STORE_LATER:
                    parked.append(item)
                else:
                    nxt.append(item)
            if carry:
                self._resume(carry[:cper])
                carry = carry[cper:]
            if items:
                self._resume(items[:per])
                items = items[per:]
            live = nxt
        if carry:
            self._resume(carry)
        if items:
            self._resume(items)
        return parked

    def _run_one(self, p: PlanPiece, st: StageCfg, op: Op, tplan: TilePlan) -> None:
        """:meth:`_run` of a group of one piece and no carry (the wave order's pieces), without
        its per-step bookkeeping: nothing runs between the steps of a lone piece, so its context
        needs no saving and restoring. Like :meth:`_run`, a piece that pauses at
        :data:`STORE_LATER` is left there (``_run``'s caller here drops the paused pieces)."""
        gen = self._piece(p.segment, st, op, p, tplan)
        self.piece = p
        for r in gen:
            if r is STORE_LATER:
                self.piece = None
                return [p, gen, (self.cur, self.out_wait)]
        self.piece = None
        return None

    def _step(self, item: list):
        """Advance one piece's generator to its next pause (``item[1]`` = None once done)."""
        p, gen, ctx = item
        self.piece = p
        if ctx is not None:
            self.cur, self.out_wait = ctx
        r = next(gen, _DONE)
        self.piece = None
        if r is _DONE:
            item[1] = None
            return None
        item[2] = (self.cur, self.out_wait)
        return r

    def _resume(self, items: list) -> None:
        """Finish pieces paused at :data:`STORE_LATER` (their stores), in order."""
        for item in items:
            while item[1] is not None:
                self._step(item)

    # ------------------------------------------------------------------ one piece
    def _piece(self, si: int, st: StageCfg, op: Op, p: PlanPiece, tplan: TilePlan):
        """The tasks of one instruction tile, in the order the emitter creates its instructions
        (a generator: it pauses after each K chunk of a lockstep group)."""
        g, cm = self.g, self.cm
        tpb = p.tpb
        self.cur = (tpb, op.name)
        back = self.out_readers.setdefault((tpb, op.name), [])
        self.out_wait = list(back[-2]) if len(back) >= 2 else []
        facts = self.s.piece_facts.get(op.name)
        if facts is None or facts[0] is not op:
            facts = self.s.piece_facts[op.name] = _piece_facts(cm, g, op)
        _, family, ob, unit, loc, boxed = facts
        computes: list[int] = []
        band, col, out0, task = p.band, p.col, op.outputs[0], self.task

        search_only = self.search_only

        def compute(deps: list[int], cyc: float, macs: int) -> int:
            # :meth:`_take_out_wait` written out (deps + out_wait + the barrier of cur's TPB)
            deps = deps + self.out_wait
            self.out_wait = []
            cur, barrier = self.cur, self.barrier
            if cur and cur[0] in barrier:
                deps.append(barrier[cur[0]])
            # positional fields (:data:`.plan.TASK_FIELDS`): keywords cost ~2 us more per task
            t = task("compute", unit, tpb, op.name, out0, 0.0, cyc, deps, si, band, col, (), "",
                     "", -1, macs)
            self.hist.setdefault((tpb, op.name), []).append(t)
            if not search_only:  # a search build touches nothing (:class:`SearchBuilder`)
                self._touch(tpb, t)
            computes.append(t)
            return t

        steps = self.families[family].plan_piece(self, si, st, op, p, tplan, compute)
        if steps is not None:
            yield from steps
        p.compute = computes[-1]
        readers: list[int] = []
        self.readers[p.compute] = readers
        back.append(readers)
        if op.outputs[0] in self.outside and p.kparts == 1:
            # outputs needed outside the segment go to memory (SRAM or DDR); a K part's partial
            # sum goes to its reduction (:meth:`_reduce`) instead
            if tplan.act_resident or self.late_pause:
                self.cur = None
                yield STORE_LATER
            p.store = True
            nb = float(p.out_dims[0] * p.out_dims[1] * p.out_dims[2] * ob)
            o = task("dma-out", "dma", -1, op.name, out0, nb, cm.dma_cycles(nb, "hbsm", dst=loc),
                     [p.compute], si, p.band, p.col, (tpb,), "hbsm", loc, -1, 0, "out")
            self._wrote(out0, o)
            if boxed and not search_only:  # (read only where not isolated: ``_box_deps``)
                self.wboxes.setdefault(out0, []).append(((p.r0, p.r1, p.c0, p.c1), o))
            readers.append(o)
            self._touch(tpb, o)
        self.cur = None

    def _lags(self, seg: SegmentCfg) -> dict[str, int]:
        """Wave offset of each stage: band b of a stage is emitted in wave b + lag, after every
        producer band its row window needs (halo rows of the next band included). A pair's
        ``max(qmax - b)`` over the consumer's bands depends only on the two ops, the input and
        the two stages' bands and work cuts (:meth:`_lag_pair`): kept per scheduler
        (``Scheduler.lag_pairs``), as the candidates of a search repeat their stage pairs."""
        s = self.s
        lag: dict[str, int] = {}
        by_op = {st.op: st for st in seg.stages}
        pairs = s.lag_pairs
        for st in seg.stages:
            op = s.ops[st.op]
            need = 0
            for tname in op.inputs:
                prod = s.producers.get(tname)
                if prod is None or prod.name not in by_op or prod.name not in lag:
                    continue
                pst = by_op[prod.name]
                key = (st.op, tname, prod.name, st.bands, st.wcut, pst.bands, pst.wcut)
                hit = pairs.get(key)
                if hit is None or hit[0] is not op or hit[1] is not prod:
                    hit = pairs[key] = (op, prod, self._lag_pair(st, op, tname, prod, pst))
                if hit[2] is not None:
                    need = max(need, lag[prod.name] + hit[2])
            lag[st.op] = need
        return lag

    def _lag_pair(self, st: StageCfg, op: Op, tname: str, prod: Op, pst: StageCfg
                  ) -> int | None:
        """The largest ``qmax - b`` over the bands ``b`` of ``st`` (``op``) that have rows:
        ``qmax`` the last band of ``pst`` (``prod``, which makes ``op``'s input ``tname``) that
        band ``b``'s row window reads; None when no band has rows."""
        g, s = self.g, self.s
        rows, prows = s.geo(op).rows, s.geo(prod).rows
        whole = reads_whole(op, tname)
        out = None
        for b in range(st.bands):
            lo, hi = stage_rows(st, rows, b)
            if hi <= lo:
                continue
            win = None if whole else input_window(g, op, tname, lo, hi)
            if win is None:
                qmax = pst.bands - 1
            else:
                qmax = s.band_of(pst, prows, max(win[1], win[0] + 1) - 1)
            if out is None or qmax - b > out:
                out = qmax - b
        return out

    def _outside_consumers(self, seg_ops: set[str]) -> set[str]:
        out = set()
        cons = self.s.consumers
        for name in seg_ops:
            op = self.s.ops[name]
            if name in self.tl.kept:  # read from the producer pieces' HBSM (:mod:`.keep`)
                continue
            for t in op.outputs:
                users = cons.get(t, [])
                if self.g.tensors[t].kind == "output" or not users or \
                        any(u.name not in seg_ops or reads_whole(u, t) for u in users):
                    out.add(t)
        return out


def _piece_facts(cm, g, op: Op) -> tuple:
    """What :meth:`PlanBuilder._piece` reads of ``op`` alone (``Scheduler.piece_facts``):
    ``(op, family, output bytes per element, unit, where its output lives, boxed_store)``."""
    return (op, op_family(op.unit), dtype_bytes(g.out(op).dtype), Unit.of_op(op.unit).value,
            memory_of(cm, g, op.outputs[0]), boxed_store(g, op))


#: the TCU tail's answers (:class:`SearchBuilder`) are ``(end + left) / TAIL_SCALE``: ``left`` is a
#: difference of float sums taken in other orders (:func:`.search_floor.tpb_busy`'s and the
#: build's), so the floor is kept a little below what it proves
TAIL_SCALE = 1.0 + 1e-9


class SearchBuilder(PlanBuilder):
    """The flat builder of the search's cost builds (:meth:`.timeline.Scheduler.cost_build`: one
    segment, isolated, only its task ends read -- :meth:`.search.Search.cost`,
    :mod:`.shared_costs`). The same tasks, list-scheduled the same way, but no ``PlanTask`` is
    created: :meth:`task` keeps each task's end and CCB DMA engine in two flat lists (what a
    later task's dependencies read) and the per-resource state the scheduling needs. Nor does it
    keep the state nothing of such a build reads: each piece's task list (the emitter's), the
    DTDU busy blocks (read only by copies from kept activations, which an isolated build has
    none of), the last task touching each TPB (the barrier of the next segment, which a
    one-segment build has not), the critical predecessors and the segment's span.

    The TCU tail (session 30): :meth:`.timeline.Scheduler.cost_build` hands over ``tail_left``
    (TPB -> the TCU cycles of the ops ``tail_ops`` the build puts on it,
    :func:`.search_floor.tpb_busy`: exactly its TCU tasks of those ops). A TPB's TCU runs its
    tasks one after the other, so after a TCU task of those ops ending at ``end``, with ``left``
    of those cycles not yet placed on its TPB, the makespan is at least ``end + left``. The
    build's answer for the task (:meth:`answers`) is ``max(end, (end + left) / TAIL_SCALE)``
    (the scale covers the rounding of the two sums), and a bounded build stops at the first
    task whose answer reaches the bound (:class:`.list_schedule.BoundExceeded` with that
    answer, the task not counted), where it stopped at the first task *ending* at the bound
    before -- earlier for 359 of ResNet-50's 1 267 stopped cost builds (45 k of their 186 k
    tasks). The answers of every build are a function of the build alone, not of its bound, so
    :mod:`.shared_costs` answers a bound from another build's answers exactly as a build with
    that bound would (the same value and task count). Each answer is <= the makespan, and the
    largest is the makespan."""

    search_only = True
    tail_left: dict[int, float] | None = None
    tail_ops: set[str] = frozenset()  # type: ignore[assignment]

    def __init__(self, s, tl) -> None:
        super().__init__(s, tl)
        self.ends: list[float] = []  # per task (its id), its end
        self.engs: list[int] = []  # per task, its CCB DMA engine (-1: not a DMA)
        self.raised: dict[int, float] = {}  # task -> its answer where that is above its end

    def answers(self) -> list[float]:
        """Per task built, its end, or the TCU tail's floor of the makespan where that is larger
        (class doc)."""
        if not self.raised:
            return self.ends
        out = list(self.ends)
        for i, a in self.raised.items():
            out[i] = a
        return out

    def task(self, kind: str, unit: str, tpb: int, op: str, tensor: str, nbytes: float,
             cycles: float, deps: list[int], segment: int = 0, band: int = 0, col: int = 0,
             dst_tpbs: tuple[int, ...] = (), src: str = "", dst: str = "", engine: int = -1,
             macs: int = 0, role: str = "") -> int:
        """:meth:`.list_schedule.ListScheduler.put` of the task these fields describe (the same
        start and end), on the flat lists; returns its id."""
        ends, engs = self.ends, self.engs
        lat = self.dma_sync_latency
        ready = 0.0
        if unit == "dma":
            dma_deps = []  # (end, engine, id): a DMA after a DMA waits by its engine
            for d in deps:
                e = engs[d]
                if e >= 0:
                    dma_deps.append((ends[d], e, d))
                elif ends[d] > ready:
                    ready = ends[d]
            start, cycles, eng, _, _ = (self._dma_queued if self.dma_queued else self._dma_place)(
                src, dst, nbytes, cycles, len(dst_tpbs), ready, -1, dma_deps, lat)
        else:
            for d in deps:
                e = ends[d]
                if engs[d] >= 0:  # a CCB DMA's sync update (``put``)
                    e += lat
                if e > ready:
                    ready = e
            if self.fill_gap:  # it would read the DTDU busy blocks a search build skips
                raise ScheduleError("internal: a copy from a kept activation in a search build")
            res = tpb * NU + UNIT_SLOT[unit]  # (``list_schedule.res_key``)
            free = self.free.get(res, 0.0)
            start = free if free > ready else ready  # in program order on its unit
            # a DTDU broadcast waits for room on the DRB
            rate = nbytes / cycles if unit == "dtdu" and len(dst_tpbs) > 1 and cycles > 0 \
                else 0.0
            if rate:
                start = self.drb_use.earliest(start, cycles, rate)
                self.drb_use.add(start, cycles, rate)
            self.free[res] = start + cycles
            eng = -1
        end = start + cycles
        if unit == "tcu" and self.tail_left is not None and op in self.tail_ops:
            left = self.tail_left.get(tpb)
            if left is not None:  # the TCU tail (class doc)
                left -= cycles
                self.tail_left[tpb] = left
                a = (end + left) / TAIL_SCALE
                if a > end:
                    if a >= self.bound:
                        raise BoundExceeded(a)
                    self.raised[len(ends)] = a
        if end >= self.bound:
            raise BoundExceeded(end)
        ends.append(end)
        engs.append(eng)
        return len(ends) - 1

    def put(self, t):
        raise ScheduleError("internal: a search build creates no PlanTask (SearchBuilder.task)")

    def _wrote(self, tensor: str, tid: int) -> None:
        """Nothing: a store's writer is read only by the loads of a later task that is not
        isolated (``_mem_deps``, ``_load``, ``_box_deps``: an isolated build's inputs are ready
        at 0) and by a whole plan's segment span."""

    def _touch(self, tpb: int, tid: int) -> None:
        pass

    def _prefetch(self, si: int, seg: SegmentCfg) -> None:
        """Nothing: in an isolated build no weight transfer waits for a prefetch barrier
        (``ListScheduler._prefetch`` records none there), and the HBSM use it records per
        (TPB, segment) is read only by the prefetch of a later segment, which a one-segment
        build has not."""
