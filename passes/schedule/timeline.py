"""Space-time timeline: a placement (segments of stages on TPB groups) -> the plan (:mod:`.plan`).

A *segment* is a run of ops executed together: each op is a *stage* on a group of TPBs (``gr`` rows x
``gc`` column parts); the stage's output rows are cut into ``bands`` mini-tensors, band ``b`` column
``j`` runs on ``tpbs[row_of(b) * gc + j]`` (round-robin, or contiguous blocks of bands for pipelines). Stages of one segment stream mini-tensors to each other
(TPB -> TPB DTDU copies of the producer band rows the consumer band needs, halo rows included); a
one-stage segment is a data-parallel op. Segments run one after the other (their inputs come from CCB
SRAM or DDR, written by the segment that produced them).

The builder walks each segment in the wave order (computed here, once) and creates one task per
instruction the emitter will create, in the same order: the shared operand transfers here (loads,
shared row tiles / DRB broadcasts, resident weights, DTDU copies, stores), the unit instructions of
a piece in its op family's module (:mod:`.kinds`). Tasks go to in-order resources exactly like the
hardware: each TPB unit (TCU/CVU/DTDU/CSU) executes its queue in program order, each CCB DMA
engine its queue ordered by predicted start (a transfer takes the earliest gap of the engine that
can start it first). A task starts when its resource is free and its dependencies (data, buffer
slots: a double-buffered slot is refilled only after the instruction two back has finished, the
last segment that used the TPB) are done. This list schedule is the scheduler's prediction:
start/end cycles per task, per op, the makespan and the critical path.

Weight prefetch across segments: a segment's constant weight transfers into a TPB wait for the end
of an earlier segment there instead of the last one when the segments in between leave room in
its HBSM for the weight buffers of its plan (:meth:`_Builder._prefetch`); the DMA engines then
fill the idle gaps of TCU-bound segments with the next segments' weights.
"""

from __future__ import annotations

import bisect

from .busy import BusyBlocks
from .cost import CostModel, ceil_div
from .graph import Op, OpGraph, ScheduleError, dtype_bytes, geometry
from .keep import choose_kept, kept_bytes
from .partition import TilePlan, tile_piece
from .plan import (STORE_LATER, BufferUse, Plan, PlanPiece, PlanTask, Unit, image_parts,
                   image_rows, op_family)
from .segment import (SegmentCfg, StageCfg, act_resident_ok, band_rows, input_window,
                      ksplit_bias, ksplit_ok, ksplit_stages, lockstep, lockstep_groups, memory_of,
                      reads_whole, reduce_pieces, row_tile, tile_band_rows)

# weight prefetch: a segment's weights may load while up to PREFETCH_DEPTH - 1 earlier segments
# still run on the TPB, if those segments' buffers (and the weights already prefetched during
# them) plus these weights stay within PREFETCH_HBSM_SHARE of the HBSM (the rest is slack for
# hbsm-allocate's packing of buffers with different lifetimes)
PREFETCH_DEPTH = 16
PREFETCH_HBSM_SHARE = 0.75
WEIGHT_BUFFERS = ("weight", "bias", "scale", "requant")  # TilePlan buffer roles of constants


class Scheduler:
    """Builds tasks for segments and list-schedules them on in-order resources."""

    def __init__(self, cm: CostModel, g: OpGraph):
        self.cm = cm
        self.g = g
        self.ops = {o.name: o for o in g.ops}
        self.producers = g.producers()
        self._tile_cache: dict[tuple, TilePlan] = {}
        self.tasks_built = 0  # tasks created by every build so far (the search's work)
        self._geo: dict[str, object] = {}
        self._bands: dict[tuple[int, int], list[int]] = {}

    def geo(self, op: Op):
        r = self._geo.get(op.name)
        if r is None:
            r = self._geo[op.name] = geometry(self.g, op)
        return r

    def band_of(self, rows: int, bands: int, r: int) -> int:
        """The band (of ``bands`` over ``rows``) that holds row ``r``."""
        starts = self._bands.get((rows, bands))
        if starts is None:
            starts = self._bands[(rows, bands)] = [band_rows(rows, bands, q)[0] for q in range(bands)]
        return max(0, bisect.bisect_right(starts, r) - 1)

    # ------------------------------------------------------------------ tiles
    def tile(self, op: Op, rows: int, cols: int, budget: int, chunked: bool = False,
             kparts: int = 1, act_resident: int = 0) -> TilePlan:
        key = (op.name, rows, cols, budget, chunked, kparts, act_resident)
        p = self._tile_cache.get(key)
        if p is None:
            p = tile_piece(self.cm, self.g, op, rows, cols, budget, chunked, kparts,
                           act_resident)
            self._tile_cache[key] = p
        return p

    def stage_budget(self, seg: SegmentCfg, st: StageCfg) -> int:
        share = {}
        for s in seg.stages:
            for t in s.tpbs:
                share[t] = share.get(t, 0) + 1
        n = max(share[t] for t in st.tpbs)
        bw = self.cm.machine.hbsm_bank_width
        return (self.cm.machine.hbsm_bytes // n) // bw * bw

    def stage_plan(self, seg: SegmentCfg, st: StageCfg) -> TilePlan:
        """The tiling of a stage's pieces (band rows x column part, the stage's HBSM budget)."""
        op = self.ops[st.op]
        geo = self.geo(op)
        rows_b = ceil_div(geo.rows, max(1, st.bands))
        if st.act_resident:
            rows_b = max(e - a for a, e in (tile_band_rows(geo.rows, st.bands, b,
                                                           row_tile(self.cm, self.g, op))
                                            for b in range(st.bands)))
        cols_b = ceil_div(geo.cols, st.gc)
        return self.tile(op, rows_b, cols_b, self.stage_budget(seg, st), st.chunked, st.ks,
                         st.act_resident)

    def band_boxes(self, st: StageCfg, op: Op, tplan: TilePlan, b: int):
        """The pieces of band ``b`` of a stage built piece by piece, in build order: (column part,
        TPB, rows [a, e), columns [cc, ce)) -- row tiles outer, column parts inner: a row tile's
        input is broadcast to the TPBs of all column parts at once and each holds it only while
        it is used."""
        geo = self.geo(op)
        lo, hi = band_rows(geo.rows, st.bands, b)
        if hi <= lo:
            return
        per = image_rows(self.g, op)
        tr, tc = max(1, tplan.tr), max(1, tplan.tc)
        for (a0, e0) in image_parts(lo, hi, max(1, per)):
            for a in range(a0, e0, tr):
                e = min(e0, a + tr)
                for j in range(st.gc):
                    tpb = st.tpbs[st.row_of(b) * st.gc + j]
                    c0, c1 = band_rows(geo.cols, st.gc, j)
                    for cc in range(c0, c1, tc):
                        yield j, tpb, a, e, cc, min(c1, cc + tc)

    # ------------------------------------------------------------------ task building
    def build(self, segs: list[SegmentCfg], isolated: bool = False,
              bound: float = float("inf"), keep: str = "") -> Plan:
        """The plan of ``segs`` (tasks list-scheduled in order). ``isolated``: inputs are ready at
        cycle 0 (search). ``bound``: stop with :class:`BoundExceeded` as soon as a task ends at or
        after it (the makespan, the latest end, can then only be >= ``bound``: the search asks
        whether a candidate beats its best, and most do not). ``keep``: which activations stay
        in HBSM between segments (:func:`.keep.choose_kept`: ``""`` none, ``"one-stage"``,
        ``"all"``)."""
        tl = Plan(segments=list(segs))
        st = _Builder(self, tl)
        st.bound = bound
        if keep and not isolated:  # activations kept in HBSM between segments (:mod:`.keep`)
            tl.kept, st.kept_use = choose_kept(
                self, segs, int(self.cm.machine.hbsm_bytes * PREFETCH_HBSM_SHARE),
                keep == "one-stage")
        try:
            for si, seg in enumerate(segs):
                st.segment(si, seg, isolated)
        finally:
            self.tasks_built += len(tl.tasks)
        return tl


class BoundExceeded(Exception):
    """A build stopped early: a task ends at ``end`` >= the bound (so the makespan is >= it)."""

    def __init__(self, end: float):
        super().__init__(end)
        self.end = end


class _Builder:
    """Builds the plan's tasks in program order, one per instruction, and list-schedules each task
    as it is created (creation order == program order per in-order resource)."""

    def __init__(self, s: Scheduler, tl: Plan):
        self.s = s
        self.cm = s.cm
        self.g = s.g
        self.tl = tl
        self.free: dict[tuple[str, int], float] = {}
        self.last_on_res: dict[tuple[str, int], int] = {}
        self.written: dict[str, int] = {}  # tensor in memory -> its last-ending writer task
        self.seg_touch: dict[int, int] = {}  # TPB -> last-ending task touching it (this segment)
        self.barrier: dict[int, int] = {}  # TPB -> the previous segment's end there
        # TPB -> (segment, its end task there) of every segment that used it, oldest first
        self.bar_hist: dict[int, list[tuple[int, int]]] = {}
        # (TPB, segment) -> HBSM bytes held during that segment: its plan's buffers + the weights
        # of later segments prefetched while it runs
        self.hbsm_use: dict[tuple[int, int], int] = {}
        self.prefetch_depth = PREFETCH_DEPTH
        # busy time of each CCB DMA engine and of each TPB's DTDU (:mod:`.busy`)
        self.dma_busy = [BusyBlocks() for _ in range(self.cm.machine.ccb_dma_engines)]
        self.bound = float("inf")
        self.n_groups = 0  # lockstep groups so far (PlanPiece.group)
        self.gcache: dict[tuple, int] = {}  # shared chunks of the current lockstep group
        # (TPB, segment) -> bytes of kept activations (:mod:`.keep`) held there
        self.kept_use: dict[tuple[int, int], int] = {}
        self.fill_gap = False  # the task being added is a copy from a kept activation
        self.dtdu_busy: dict[int, BusyBlocks] = {}  # TPB -> busy blocks of its DTDU
        # op -> its pieces built so far, and their row index (:meth:`_pieces_over`), and piece
        # compute task -> its readers: of every segment (kept outputs are read by later ones)
        self.by_op: dict[str, list[PlanPiece]] = {}
        self.row_index: dict[str, list] = {}
        self.readers: dict[int, list[int]] = {}
        from .kinds import FAMILIES, movement  # the op families (they import the emitter too)
        self.families = FAMILIES
        self.movement = movement

    # ------------------------------------------------------------------ list scheduling
    def add(self, **kw) -> PlanTask:
        tasks = self.tl.tasks
        t = PlanTask(id=len(tasks), **kw)
        ready, pred = 0.0, -1
        for d in t.deps:
            e = tasks[d].end
            if e > ready:
                ready, pred = e, d
        cycles = t.cycles
        if t.unit == "dma":
            # CCB DMA engines: the compiler orders each engine's queue by predicted start, so a
            # transfer fills the earliest idle gap of the engine that can start it first
            best = None
            for e, blocks in enumerate(self.dma_busy):
                st, idx = blocks.earliest(ready, cycles)
                if best is None or st < best[0]:
                    best = (st, e, idx)
            assert best is not None
            start, t.engine, idx = best
            self.dma_busy[t.engine].insert(idx, start, start + cycles)
            res = ("dma", t.engine)
            if start > ready:
                pred = self.last_on_res.get(res, pred)
        else:
            res = (t.unit, t.tpb)
            start = ready
            free = self.free.get(res, 0.0)
            if self.fill_gap:
                # a copy from a kept activation (:mod:`.keep`): its sources were computed in an
                # earlier segment, so it takes the earliest idle gap of the sending DTDU (the
                # program is emitted in predicted-start order: the queue then holds it there),
                # not the end of the queue behind copies that wait for this segment's compute
                blocks = self.dtdu_busy.get(t.tpb)
                if blocks is None:
                    blocks = self.dtdu_busy[t.tpb] = BusyBlocks()
                start, idx = blocks.earliest(ready, cycles)
                blocks.insert(idx, start, start + cycles)
                if start > ready:
                    pred = self.last_on_res.get(res, pred)
                self.free[res] = max(free, start + cycles)
            else:
                if free > start:  # TPB units execute their queue in program order
                    start, pred = free, self.last_on_res.get(res, -1)
                self.free[res] = start + cycles
                if t.unit == "dtdu":
                    blocks = self.dtdu_busy.get(t.tpb)
                    if blocks is None:
                        blocks = self.dtdu_busy[t.tpb] = BusyBlocks()
                    blocks.append(start, start + cycles)
        t.start = start
        t.end = end = start + cycles
        if end >= self.bound:
            raise BoundExceeded(end)
        t.crit_pred = pred
        self.last_on_res[res] = t.id
        tasks.append(t)
        if self.piece is not None:
            self.piece.tasks.append(t.id)
        return t

    def _touch(self, tpb: int, tid: int) -> None:
        prev = self.seg_touch.get(tpb)
        if prev is None or self.tl.tasks[prev].end <= self.tl.tasks[tid].end:
            self.seg_touch[tpb] = tid

    def _bar(self, tpb: int) -> list[int]:
        return [self.barrier[tpb]] if tpb in self.barrier else []

    def _wbar(self, tpb: int, tensor: str, role: str) -> list[int]:
        """The barrier of a transfer into ``tpb``: a constant weight (or bias) of a segment that
        prefetches there waits for the end of the earlier segment :meth:`_prefetch` chose, any
        other transfer for the end of the last segment that used the TPB."""
        if role in ("w", "bias") and self.piece is not None and \
                self.g.tensors[tensor].kind == "weight":
            b = self.tl.prefetch.get((self.piece.segment, tpb))
            if b is not None:
                return [tid for s, tid in self.bar_hist.get(tpb, ()) if s == b]
        return self._bar(tpb)

    def _prefetch(self, si: int, seg: SegmentCfg) -> None:
        """Per TPB of the segment, how far back its weight transfers may start: over the last
        segments that used the TPB, newest first, as long as each of them holds at most
        ``PREFETCH_HBSM_SHARE`` of the HBSM with this segment's weight buffers (resident weights,
        the two slots of a streamed one, biases) added -- those are then counted as held during
        it. The chosen barrier goes into the plan (``Plan.prefetch``), which the emitter reads."""
        cap = int(self.cm.machine.hbsm_bytes * PREFETCH_HBSM_SHARE)
        foot: dict[int, int] = {}
        wfoot: dict[int, int] = {}
        for st in seg.stages:
            plan = self.tl.plans[st.op]
            w = sum(b.nbytes for b in plan.buffers if b.role in WEIGHT_BUFFERS)
            for x in st.tpbs:
                foot[x] = foot.get(x, 0) + plan.footprint
                wfoot[x] = wfoot.get(x, 0) + w
        for x, f in foot.items():
            self.hbsm_use[(x, si)] = f + self.kept_use.get((x, si), 0)
            w = wfoot[x]
            if self.isolated or not w:
                continue
            hist = self.bar_hist.get(x, [])
            d = 1  # wait for the end of the d-th last segment on x
            while d < self.prefetch_depth and d <= len(hist) and \
                    self.hbsm_use.get((x, hist[-d][0]), 0) + w <= cap:
                d += 1
            if d == 1:
                continue
            for s, _ in hist[-(d - 1):]:
                self.hbsm_use[(x, s)] = self.hbsm_use.get((x, s), 0) + w
            self.tl.prefetch[(si, x)] = hist[-d][0] if d <= len(hist) else -1

    def _mem_deps(self, tensor: str) -> list[int]:
        return [self.written[tensor]] if tensor in self.written and not self.isolated else []

    def _wrote(self, tensor: str, tid: int) -> None:
        prev = self.written.get(tensor)
        if prev is None or self.tl.tasks[prev].end <= self.tl.tasks[tid].end:
            self.written[tensor] = tid

    # ------------------------------------------------------------------ segments
    def segment(self, si: int, seg: SegmentCfg, isolated: bool) -> None:
        self.isolated = isolated
        self.piece: PlanPiece | None = None
        # per TPB the end of the last segment that used it (its HBSM is reused)
        self.barrier.update(self.seg_touch)
        for x, tid in self.seg_touch.items():
            self.bar_hist.setdefault(x, []).append((self.tl.tasks[tid].segment, tid))
        self.seg_touch = {}
        start = len(self.tl.tasks)
        pieces: list[PlanPiece] = []
        self.tl.pieces.append(pieces)
        if seg.kind == "dma" and self.s.ops[seg.stages[0].op].unit.startswith("csu."):
            from .kinds import csu
            csu.plan_segment(self, si, seg, pieces)
        elif seg.kind == "dma":
            self.movement.plan_segment(self, si, seg, pieces)
        else:
            self._compute_segment(si, seg, pieces)
        seg_tasks = self.tl.tasks[start:]
        span = (min((t.start for t in seg_tasks), default=0.0),
                max((t.end for t in seg_tasks), default=0.0))
        self.tl.seg_spans.append(span)
        if isolated or seg.kind == "dma":
            return
        # HBSM buffers: every TPB of a stage holds the plan's buffers for the segment's span there
        life: dict[int, list[float]] = {}
        for t in seg_tasks:
            for tp in ((t.tpb,) if t.tpb >= 0 else ()) + t.dst_tpbs:
                lf = life.setdefault(tp, [t.start, t.end])
                lf[0] = min(lf[0], t.start)
                lf[1] = max(lf[1], t.end)
        for st in seg.stages:
            plan = self.tl.plans[st.op]
            for tp in st.tpbs:
                a, e = life.get(tp, span)
                for buf in plan.buffers:
                    self.tl.buffers.append(BufferUse(tp, f"{st.op}.{buf.role}", st.op, buf.role,
                                                     buf.slot_bytes, buf.slots, buf.unit, a, e))

    def _compute_segment(self, si: int, seg: SegmentCfg, pieces: list[PlanPiece]) -> None:
        g, s = self.g, self.s
        self.seg_ops = set(seg.ops)
        self.outside = self._outside_consumers(self.seg_ops)
        self.hist: dict[tuple[int, str], list[int]] = {}  # (tpb, op) -> compute task ids
        self.out_readers: dict[tuple[int, str], list[list[int]]] = {}
        self.wcache: dict[tuple, int] = {}
        self.acache: dict[tuple, int] = {}  # (op, tensor, tpb, rows) -> broadcast/load task
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
        lag = self._lags(seg)
        if len(seg.stages) == 1 and lockstep(self.tl.plans[seg.stages[0].op],
                                             s.ops[seg.stages[0].op]):
            self._lockstep_segment(si, seg.stages[0], pieces)
            self._check_kept(seg)
            return
        n_waves = max(st.bands + lag[st.op] for st in seg.stages)
        for w in range(n_waves):  # the wave order: band b of a stage after the producer bands
            for st in seg.stages:
                b = w - lag[st.op]
                if not 0 <= b < st.bands:
                    continue
                op = s.ops[st.op]
                tplan = self.tl.plans[st.op]
                for j, tpb, a, e, cc, ce in s.band_boxes(st, op, tplan, b):
                    p = PlanPiece(op.name, b, j, tpb, a, e, cc, ce, segment=si)
                    self._run([p], st, op, tplan)
                    pieces.append(p)
                    self.by_op.setdefault(op.name, []).append(p)
        self._check_kept(seg)

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
        for grp in lockstep_groups(self.g, op, st, tplan, self.s.geo(op),
                                   row_tile(self.cm, self.g, op)):
            for p in grp:
                p.segment = si
                p.group = self.n_groups
            self.n_groups += 1
            self.gcache = {}
            carry = self._run(grp, st, op, tplan, carry)
            pieces.extend(grp)
            if st.ks > 1:  # the partial sums of each output tile meet on its part-0 TPB
                for red in reduce_pieces(grp, si):
                    self.piece = red
                    self._reduce(op, red, grp)
                    self.piece = None
                    pieces.append(red)
                    self.by_op.setdefault(op.name, []).append(red)
            else:
                self.by_op.setdefault(op.name, []).extend(grp)
        self._resume(carry)

    def _reduce(self, op: Op, red: PlanPiece, grp: list[PlanPiece]) -> None:
        """The K-split reduction of one output tile on its part-0 TPB: DTDU copies of the other
        parts' partial sums, the bias, one CVU add chain (+ bias, activation), the store."""
        g, cm = self.g, self.cm
        root = red.tpb
        key = f"{op.name}/reduce"
        self.cur = (root, key)
        back = self.out_readers.setdefault((root, key), [])
        self.out_wait = list(back[-2]) if len(back) >= 2 else []
        parts = [p for p in grp if (p.band, p.col, p.r0, p.c0) == (red.band, red.col, red.r0,
                                                                   red.c0)]
        parts.sort(key=lambda p: p.kpart)
        rows, E, cols = parts[0].out_dims
        nb = float(rows * E * cols * 4)
        deps = [parts[0].compute]
        for p in parts[1:]:
            c = self.add(kind="copy", unit="dtdu", tpb=p.tpb, op=op.name, tensor=op.outputs[0],
                         nbytes=nb, cycles=cm.mesh_cycles(nb, p.tpb, root),
                         deps=[p.compute] + self._slot_deps() + self._bar(root),
                         segment=red.segment, band=red.band, col=red.col, dst_tpbs=(root,),
                         src="hbsm", dst="hbsm", role="partial")
            self.readers[p.compute].append(c.id)
            self._touch(root, c.id)
            self._touch(p.tpb, c.id)
            deps.append(c.id)
        bias = ksplit_bias(op)
        if bias is not None:
            bb = cols * dtype_bytes(g.tensors[bias].dtype)
            deps.append(self._weight(self.stage, op, bias, root, red.c0, red.c1, red.col, None,
                                     bb, True, role="bias"))
        ob = dtype_bytes(g.out(op).dtype)
        stages = ksplit_stages(op, len(parts))
        cyc = cm.cvu_cycles(nb, rows * E * cols * ob, 1, stages,
                            nb * len(parts) + (cols * 4 if bias is not None else 0))
        t = self.add(kind="compute", unit=Unit.CVU.value, tpb=root, op=op.name,
                     tensor=op.outputs[0], nbytes=0.0, cycles=cyc,
                     deps=deps + self._take_out_wait(), segment=red.segment, band=red.band,
                     col=red.col)
        self.readers[parts[0].compute].append(t.id)
        self.hist.setdefault(self.cur, []).append(t.id)
        self._touch(root, t.id)
        red.compute = t.id
        red.out_dims = (rows, E, cols)
        readers: list[int] = []
        self.readers[t.id] = readers
        back.append(readers)
        if op.outputs[0] in self.outside:
            red.store = True
            nbo = float(rows * E * cols * ob)
            loc = memory_of(cm, g, op.outputs[0])
            o = self.add(kind="dma-out", unit="dma", tpb=-1, op=op.name, tensor=op.outputs[0],
                         nbytes=nbo, cycles=cm.dma_cycles(nbo, "hbsm", dst=loc), deps=[t.id],
                         segment=red.segment, band=red.band, col=red.col, dst_tpbs=(root,),
                         src="hbsm", dst=loc, role="out")
            self._wrote(op.outputs[0], o.id)
            readers.append(o.id)
            self._touch(root, o.id)
        self.cur = None

    def _run(self, group: list[PlanPiece], st: StageCfg, op: Op, tplan: TilePlan,
             carry: list | None = None) -> list:
        """Build the tasks of ``group`` (pieces on distinct TPBs): K chunk by K chunk, round
        robin, each piece with its own context (TPB/op, the output slot it waits for). The
        pieces of ``carry`` (the group before, paused at :data:`STORE_LATER`) create their
        stores after this group's first step; returns this group's paused pieces."""
        live = []
        for p in group:
            live.append([p, self._piece(p.segment, st, op, p, tplan), None])
        parked: list = []
        while live:
            nxt = []
            for item in live:
                if self._step(item) is STORE_LATER:
                    parked.append(item)
                elif item[1] is not None:
                    nxt.append(item)
            if carry:
                self._resume(carry)
                carry = None
            live = nxt
        if carry:
            self._resume(carry)
        return parked

    def _step(self, item: list):
        """Advance one piece's generator to its next pause (``item[1]`` = None once done)."""
        p, gen, ctx = item
        self.piece = p
        if ctx is not None:
            self.cur, self.out_wait = ctx
        try:
            r = next(gen)
            item[2] = (self.cur, self.out_wait)
        except StopIteration:
            item[1] = r = None
        self.piece = None
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
        family = op_family(op.unit)
        out_t = g.out(op)
        ob = dtype_bytes(out_t.dtype)
        computes: list[int] = []
        kw = dict(segment=si, band=p.band, col=p.col)

        unit = Unit.of_op(op.unit).value

        def compute(deps: list[int], cyc: float, macs: int) -> int:
            t = self.add(kind="compute", unit=unit, tpb=tpb, op=op.name,
                         tensor=op.outputs[0], nbytes=0.0, cycles=cyc,
                         deps=deps + self._take_out_wait(), macs=macs, **kw)
            self.hist.setdefault((tpb, op.name), []).append(t.id)
            self._touch(tpb, t.id)
            computes.append(t.id)
            return t.id

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
            if tplan.act_resident:
                self.cur = None
                yield STORE_LATER
            p.store = True
            nb = float(p.out_dims[0] * p.out_dims[1] * p.out_dims[2] * ob)
            loc = memory_of(cm, g, op.outputs[0])
            o = self.add(kind="dma-out", unit="dma", tpb=-1, op=op.name, tensor=op.outputs[0],
                         nbytes=nb, cycles=cm.dma_cycles(nb, "hbsm", dst=loc), deps=[p.compute],
                         segment=si,
                         band=p.band, col=p.col, dst_tpbs=(tpb,), src="hbsm", dst=loc, role="out")
            self._wrote(op.outputs[0], o.id)
            readers.append(o.id)
            self._touch(tpb, o.id)
        self.cur = None

    def _take_out_wait(self) -> list[int]:
        w, self.out_wait = self.out_wait, []
        return w + (self._bar(self.cur[0]) if self.cur else [])

    def _slot_deps(self) -> list[int]:
        h = self.hist.get(self.cur, []) if self.cur else []
        return [h[-2]] if len(h) >= 2 else []

    def _streamed(self, tensor: str) -> bool:
        prod = self.s.producers.get(tensor)
        return prod is not None and prod.name in self.by_op and (
            prod.name in self.seg_ops or prod.name in self.tl.kept)

    def _load(self, op: Op, tensor: str, tpb: int, nbytes: float, role: str,
              slot: bool = True) -> PlanTask:
        """A DMA from memory into a fresh HBSM buffer of ``tpb``."""
        src = "ddr" if self.g.tensors[tensor].kind == "weight" else memory_of(self.cm, self.g, tensor)
        deps = self._mem_deps(tensor) + self._wbar(tpb, tensor, role) + \
            (self._slot_deps() if slot else [])
        return self.add(kind="dma-in", unit="dma", tpb=-1, op=op.name, tensor=tensor,
                        nbytes=nbytes, cycles=self.cm.dma_cycles(nbytes, src), deps=deps,
                        segment=self.piece.segment, band=self.piece.band, col=self.piece.col,
                        dst_tpbs=(tpb,), src=src, dst="hbsm", role=role)

    def _shared_chunk(self, op: Op, tensor: str, key: tuple, tpbs: tuple[int, ...], tpb: int,
                      nbytes: float, role: str) -> int:
        """One K chunk of a lockstep group that several of its TPBs read (``tpbs``): one DRB
        broadcast into a fresh buffer of each, made by the first piece that needs it (the others
        of the group read it); a chunk only ``tpb`` reads is one load."""
        k = (op.name, tensor, key, tpb)
        if k not in self.gcache:
            if len(tpbs) > 1:
                t = self._broadcast(op, tensor, tpbs, nbytes, role)
            else:
                t = self._load(op, tensor, tpb, nbytes, role)
            for x in tpbs or (tpb,):
                self.gcache[(op.name, tensor, key, x)] = t.id
        return self.gcache[k]

    def _broadcast(self, op: Op, tensor: str, tpbs: tuple[int, ...], nbytes: float,
                   role: str = "act") -> PlanTask:
        """One DRB broadcast of an input tile into a fresh buffer of every TPB of ``tpbs``; it
        waits for the slot it refills on each of them (double buffering)."""
        src = memory_of(self.cm, self.g, tensor)
        deps = self._mem_deps(tensor)
        for x in tpbs:
            h = self.hist.get((x, op.name), [])
            deps += self._wbar(x, tensor, role) + ([h[-2]] if len(h) >= 2 else [])
        return self.add(kind="dma-in", unit="dma", tpb=-1, op=op.name, tensor=tensor,
                        nbytes=nbytes, cycles=self.cm.dma_cycles(nbytes, src, broadcast=True),
                        deps=deps, segment=self.piece.segment, band=self.piece.band, col=-1,
                        dst_tpbs=tpbs,
                        src=src, dst="hbsm", role=role)

    def _weight(self, st: StageCfg, op: Op, tensor: str, tpb: int, c0: int, c1: int, j: int,
                k0: int | None, nbytes: float, resident: bool, role: str = "w") -> int:
        """Columns [c0, c1) of a weight or runtime B operand (K chunk at ``k0``) in the HBSM of
        ``tpb``: resident ones are loaded once per TPB -- by one DRB broadcast to every TPB of the column part
        that computes a band -- streamed ones per instruction."""
        key = (op.name, tpb, c0, c1, tensor, k0)
        if key in self.wcache:
            return self.wcache[key]
        if resident and st.gr > 1:
            rows = sorted({st.row_of(b) for b in range(st.bands)})
            tpbs = tuple(st.tpbs[r * st.gc + j] for r in rows)
            if tpb in tpbs and len(tpbs) > 1:
                deps = self._mem_deps(tensor) + [d for t in tpbs
                                                 for d in self._wbar(t, tensor, role)]
                src = "ddr" if self.g.tensors[tensor].kind == "weight" else \
                    memory_of(self.cm, self.g, tensor)
                t = self.add(kind="dma-in", unit="dma", tpb=-1, op=op.name, tensor=tensor,
                             nbytes=nbytes,
                             cycles=self.cm.dma_cycles(nbytes, src, broadcast=True), deps=deps,
                             segment=self.piece.segment, band=self.piece.band, col=j,
                             dst_tpbs=tpbs, src=src, dst="hbsm", role=role)
                for x in tpbs:
                    self.wcache[(op.name, x, c0, c1, tensor, k0)] = t.id
                return t.id
        t = self._load(op, tensor, tpb, nbytes, role, slot=not resident)
        if resident:
            self.wcache[key] = t.id
        return t.id

    def _act_in(self, si: int, op: Op, tensor: str, rows: tuple[int, int],
                bshape: tuple[int, int, int], cols: tuple[int, int] | None, tpb: int,
                nbytes: float, row_tpbs: tuple[int, ...] = ()) -> list[int]:
        """Rows [rows) of ``tensor`` on ``tpb``: copies from the producer pieces of this segment
        (read in place when one piece on this TPB has exactly that box), or one load. With
        ``row_tpbs`` (a whole-K row tile, the same for every column part and column tile) the load
        is shared: one DRB broadcast to ``row_tpbs`` (or one load) that all those pieces read."""
        prod = self.s.producers.get(tensor)
        if not (prod is not None and prod.name in self.by_op and (
                prod.name in self.seg_ops or prod.name in self.tl.kept)):
            if not row_tpbs:
                return [self._load(op, tensor, tpb, nbytes, "act").id]
            key = (op.name, tensor, tpb, rows)
            if key not in self.acache:
                if len(row_tpbs) > 1:
                    t = self._broadcast(op, tensor, row_tpbs, nbytes)
                else:
                    t = self._load(op, tensor, tpb, nbytes, "act")
                for x in row_tpbs:
                    self.acache[(op.name, tensor, x, rows)] = t.id
            return [self.acache[key]]
        a0, a1 = rows
        k0, k1 = cols if cols is not None else (0, bshape[-1])
        over = [q for q in self._pieces_over(prod.name, a0, a1)
                if max(a0, q.r0) < min(a1, q.r1) and max(k0, q.c0) < min(k1, q.c1)]
        if len(over) == 1 and over[0].tpb == tpb and (over[0].r0, over[0].r1) == (a0, a1) and \
                (over[0].c0, over[0].c1) == (k0, k1) and over[0].out_dims == tuple(bshape):
            return [over[0].compute]  # same TPB, same box: read in place
        dt = dtype_bytes(self.g.tensors[tensor].dtype)
        out = []
        self.fill_gap = prod.name not in self.seg_ops
        for q in over:
            a, e = max(a0, q.r0), min(a1, q.r1)
            qc0, qc1 = max(k0, q.c0), min(k1, q.c1)
            nb = float((e - a) * q.out_dims[1] * (qc1 - qc0) * dt)
            c = self.add(kind="copy", unit="dtdu", tpb=q.tpb, op=prod.name, tensor=tensor,
                         nbytes=nb, cycles=self.cm.mesh_cycles(nb, q.tpb, tpb),
                         deps=[q.compute] + self._slot_deps() + self._bar(tpb), segment=si,
                         band=self.piece.band, col=q.col, dst_tpbs=(tpb,), src="hbsm",
                         dst="hbsm", role="act")
            self.readers[q.compute].append(c.id)
            self._touch(tpb, c.id)
            self._touch(q.tpb, c.id)
            out.append(c.id)
        self.fill_gap = False
        if not out:
            raise ScheduleError(f"internal: no producer piece of '{tensor}' covers rows {rows}")
        return out

    def _pieces_over(self, op: str, a0: int, a1: int) -> list[PlanPiece]:
        """The pieces of ``op`` built so far (``by_op``) that may overlap rows [a0, a1), in build
        order: a row-bucket index over ``by_op[op]``, extended with the pieces added since the
        last call (a superset: the caller tests the exact overlap)."""
        qs = self.by_op[op]
        ix = self.row_index.get(op)
        if ix is None:
            ix = self.row_index[op] = [0, max(1, qs[0].r1 - qs[0].r0), {}]
        n, w, buckets = ix
        for i in range(n, len(qs)):
            q = qs[i]
            for bk in range(q.r0 // w, max(q.r0, q.r1 - 1) // w + 1):
                buckets.setdefault(bk, []).append(i)
        ix[0] = len(qs)
        found: set[int] = set()
        for bk in range(a0 // w, max(a0, a1 - 1) // w + 1):
            found.update(buckets.get(bk, ()))
        return [qs[i] for i in sorted(found)]

    def _lags(self, seg: SegmentCfg) -> dict[str, int]:
        """Wave offset of each stage: band b of a stage is emitted in wave b + lag, after every
        producer band its row window needs (halo rows of the next band included)."""
        g, s = self.g, self.s
        lag: dict[str, int] = {}
        by_op = {st.op: st for st in seg.stages}
        for st in seg.stages:
            op = s.ops[st.op]
            geo = s.geo(op)
            need = 0
            for tname in op.inputs:
                prod = s.producers.get(tname)
                if prod is None or prod.name not in by_op or prod.name not in lag:
                    continue
                pst = by_op[prod.name]
                pgeo = s.geo(prod)
                for b in range(st.bands):
                    lo, hi = band_rows(geo.rows, st.bands, b)
                    if hi <= lo:
                        continue
                    win = None if reads_whole(op, tname) else input_window(g, op, tname, lo, hi)
                    if win is None:
                        qmax = pst.bands - 1
                    else:
                        qmax = s.band_of(pgeo.rows, pst.bands, max(win[1], win[0] + 1) - 1)
                    need = max(need, lag[prod.name] + qmax - b)
            lag[st.op] = need
        return lag

    def _outside_consumers(self, seg_ops: set[str]) -> set[str]:
        out = set()
        cons = self.g.consumers()
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



def critical_path(tl: Plan) -> list[PlanTask]:
    """The chain of tasks that fixed the makespan (each task's start was set by the previous)."""
    if not tl.tasks:
        return []
    t = max(tl.tasks, key=lambda x: x.end)
    path = [t]
    while t.crit_pred >= 0:
        t = tl.tasks[t.crit_pred]
        path.append(t)
    return path[::-1]
