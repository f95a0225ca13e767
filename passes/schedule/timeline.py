"""Space-time timeline: a placement (segments of stages on TPB groups) -> the plan (:mod:`.plan`).

A *segment* is a run of ops executed together: each op is a *stage* on a group of TPBs (``gr`` rows x
``gc`` column parts); the stage's output rows are cut into ``bands`` mini-tensors, band ``b`` column
``j`` runs on ``tpbs[row_of(b) * gc + j]`` (round-robin, or contiguous blocks of bands for pipelines). Stages of one segment stream mini-tensors to each other
(TPB -> TPB DTDU copies of the producer band rows the consumer band needs, halo rows included); a
one-stage segment is a data-parallel op. Segments run one after the other (their inputs come from CCB
SRAM or DDR, written by the segment that produced them).

The builder (:mod:`.build_segments`, its operand transfers in :mod:`.build_transfers`, its list
scheduling in :mod:`.list_schedule`) walks each segment in the wave order (computed here, once) and creates one task per
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
its HBSM for the weight buffers of its plan (:meth:`.list_schedule.ListScheduler._prefetch`); the DMA engines then
fill the idle gaps of TCU-bound segments with the next segments' weights.
"""


from __future__ import annotations

import bisect
from dataclasses import replace

from .build_segments import PlanBuilder, SearchBuilder
from .cost import CostModel, ceil_div
from .graph import Op, OpGraph, ScheduleError, geometry
from .keep import choose_kept, first_bcast_read
from . import list_schedule, recipe
from .list_schedule import BoundExceeded, res_key
from .partition import TilePlan, tile_piece
from .plan import Plan, PlanTask, image_parts, image_rows
from .resume import Checkpoint, EndScan, best_checkpoint
from .segment import (SegmentCfg, StageCfg, band_rows, memory_of, row_tile, stage_rows,
                      tile_band_rows)
from .search_floor import tpb_busy
from .shared_costs import op_key

__all__ = ["Scheduler", "BoundExceeded", "critical_path"]

#: the tiler counts a one-stage contraction's activation reloads (a K-chunked activation loaded
#: again per column tile) with its weight DMAs (``partition.tile_piece``'s ``astreams``)
ACT_RELOADS = True
#: a one-round one-stage segment's pieces hold their once-filled buffers (the activation of a
#: one-row-tile whole-K piece, the output and ``post_in`` of a one-tile piece) in one HBSM slot
#: (``partition.tile_piece``'s ``once``)
ONE_SLOT = True
#: a pipeline's matmul fed by a stage of its segment counts its activation slots as row tiles of
#: all of K, as the emitter copies them (``partition.tile_piece``'s ``act_whole``; False: one K
#: chunk each, which made programs the plan said fit overflow the HBSM, session 25)
STREAMED_ACT_WHOLE = True


class Scheduler:
    """Builds tasks for segments and list-schedules them on in-order resources."""

    def __init__(self, cm: CostModel, g: OpGraph, prefetch_share: float | None = None):
        self.cm = cm
        self.g = g
        # the HBSM share weight prefetch and kept activations may fill (``list_schedule.
        # PREFETCH_HBSM_SHARE`` unless given; the pipeline retries a smaller one when
        # hbsm-allocate can not pack the program: ``m100_pipeline.PREFETCH_SHARES``)
        self.prefetch_share = list_schedule.PREFETCH_HBSM_SHARE if prefetch_share is None \
            else prefetch_share
        # a segment's first streamed weight chunk loaded in the last segment's last K step
        # (``ListScheduler._prefetch``; ``m100-schedule{tail-prefetch}``, off by default)
        self.tail_prefetch = False
        self.ops = {o.name: o for o in g.ops}
        self.producers = g.producers()
        self.consumers = g.consumers()  # every build reads it per segment (the graph is fixed)
        self._tile_cache: dict[tuple, TilePlan] = {}
        # (id of a segment, id of its stage) -> (the segment, the stage, :meth:`stage_plan`)
        self._splans: dict[tuple[int, int], tuple] = {}
        # the same tilings by the structure of the op (:func:`.shared_costs.op_key`): the
        # repeated blocks of a CNN tile alike (ResNet-50 224: 4401 tilings, 2522 structures)
        self._tile_shared: dict[tuple, TilePlan] = {}
        self._op_keys: dict[str, tuple | None] = {}
        self._shapes: dict[str, tuple | None] = {}  # :meth:`op_shape`
        self.tasks_built = 0  # tasks created by every build so far (the search's work)
        self._geo: dict[str, object] = {}
        self._bands: dict[tuple, list[int]] = {}
        # (op, input, r0, c0, rows, cols) -> bytes of a CVU piece's input box (``kinds.cvu``)
        self.box_bytes: dict[tuple, float] = {}
        self._boxes: dict[tuple, tuple] = {}  # :meth:`band_boxes`
        # (op, r0, rows, dilation) -> :func:`.plan.conv_window` (``kinds.tcu``)
        self.windows: dict[tuple, tuple] = {}
        # op name -> what ``kinds.tcu.plan_piece`` reads of the op alone (``tcu._op_facts``)
        self.tcu_facts: dict[str, tuple] = {}
        # op name -> what ``PlanBuilder._piece`` reads of the op alone (``_piece_facts``)
        self.piece_facts: dict[str, tuple] = {}
        # (consumer, input, producer, their bands and work cuts) -> (consumer op, producer op,
        # the largest ``qmax - b`` over the consumer's bands or None): ``PlanBuilder._lags``
        self.lag_pairs: dict[tuple, tuple] = {}
        # (stage, alone in its segment, id of its TilePlan) -> (the TilePlan, :func:`.keep.
        # kept_bytes`): choose_kept asks per candidate tensor of every whole-plan build with keep
        self.kept_memo: dict[tuple, tuple] = {}
        # keep mode (``build``'s ``keep``) -> the latest whole-plan build in that mode that
        # completed with checkpoints: a build resumed from a ``base`` may start from its
        # checkpoints too (:meth:`build`); :func:`.placement.schedule` clears it at its end
        self.recent: dict[str, Plan] = {}
        # the recipes of the whole-plan builds' segments (:mod:`.recipe`), made at the first
        self.recipes: recipe.RecipeBook | None = None

    def op_shape(self, op: Op) -> tuple | None:
        """(:func:`.shared_costs.op_key` of ``op``, where the tensors it names live --
        ``memory_of`` of its inputs, outputs and epilogue operand), or None when the key is
        not hashable; kept per op (the search's floor memo asks it per candidate)."""
        r = self._shapes.get(op.name, False)
        if r is False:
            ok = self._op_keys.get(op.name, False)
            if ok is False:
                ok = self._op_keys[op.name] = op_key(self.g, op)
            post = op.attrs.get("post_in")
            r = self._shapes[op.name] = None if ok is None else (ok, tuple(
                memory_of(self.cm, self.g, t)
                for t in op.inputs + op.outputs + ((post,) if post else ())))
        return r

    def geo(self, op: Op):
        r = self._geo.get(op.name)
        if r is None:
            r = self._geo[op.name] = geometry(self.g, op)
        return r

    def band_of(self, st: StageCfg, rows: int, r: int) -> int:
        """The band of stage ``st`` (its bands over ``rows``: :func:`.segment.stage_rows`) that
        holds row ``r``."""
        key = (rows, st.bands, st.wcut)
        starts = self._bands.get(key)
        if starts is None:
            starts = self._bands[key] = [stage_rows(st, rows, q)[0] for q in range(st.bands)]
        return max(0, bisect.bisect_right(starts, r) - 1)

    # ------------------------------------------------------------------ tiles
    def tile(self, op: Op, rows: int, cols: int, budget: int, chunked: bool = False,
             kparts: int = 1, act_resident: int = 0, whole: bool = False,
             wshare: int = 1, wstreams: int = 0, kfine: int = 1, astreams: int = 0,
             once: bool = False, act_whole: bool = False) -> TilePlan:
        key = (op.name, rows, cols, budget, chunked, kparts, act_resident, whole, wshare, wstreams,
               kfine, astreams, once, act_whole)
        p = self._tile_cache.get(key)
        if p is None:
            ok = self._op_keys.get(op.name, False)
            if ok is False:
                ok = self._op_keys[op.name] = op_key(self.g, op)
            # an op of the same structure (:func:`.shared_costs.op_key`) already tiled with these
            # arguments gives its tiling (an op without a key is tiled itself)
            skey = None if ok is None else (ok,) + key[1:]
            q = self._tile_shared.get(skey) if skey is not None else None
            if q is not None:  # an op of the same structure: its tiling, renamed
                p = replace(q, op=op.name)
            else:
                p = tile_piece(self.cm, self.g, op, rows, cols, budget, chunked, kparts,
                               act_resident, whole, wshare, wstreams, kfine=kfine,
                               astreams=astreams, once=once, act_whole=act_whole)
                if skey is not None:
                    self._tile_shared[skey] = p
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
        """The tiling of a stage's pieces (band rows x column part, the stage's HBSM budget).
        Kept per (segment, stage) object (``_splans``: the search asks it of a candidate's
        stages for its two floors and again for its build; the whole-plan builds per segment
        of every trial): both are frozen, and :meth:`tile` answers a key with the same plan
        object every time (its cache is never cleared), so a kept answer is the one a new call
        gives. The entry holds the two objects, so their ids are not reused while it lives."""
        key = (id(seg), id(st))
        hit = self._splans.get(key)
        if hit is not None and hit[0] is seg and hit[1] is st:
            return hit[2]
        p = self._stage_plan(seg, st)
        self._splans[key] = (seg, st, p)
        return p

    def _stage_plan(self, seg: SegmentCfg, st: StageCfg) -> TilePlan:
        op = self.ops[st.op]
        geo = self.geo(op)
        rows_b = ceil_div(geo.rows, max(1, st.bands))
        if st.wcut:  # bands cut by work: the largest band's rows
            rows_b = max(e - a for a, e in (stage_rows(st, geo.rows, b) for b in range(st.bands)))
        elif st.act_resident:
            rows_b = max(e - a for a, e in (tile_band_rows(geo.rows, st.bands, b,
                                                           row_tile(self.cm, self.g, op))
                                            for b in range(st.bands)))
        cols_b = ceil_div(geo.cols, st.gc)
        # distinct weight streams: a one-stage segment broadcasts each column part's (K part's)
        # chunks to its TPB rows; a pipeline stage's TPBs each load their own
        one = len(seg.stages) == 1
        streams = st.gc * st.ks if one else len(st.tpbs)
        # a one-stage segment's activation: one broadcast per TPB row (and K part) to its column
        # parts; a one-round one (a piece per TPB) fills its once-per-piece buffers once
        # (``partition.tile_piece``'s ``astreams`` / ``once``; :data:`ACT_RELOADS`)
        # (matmuls: counting a conv's input-channel chunks made ResNet-18 32 +3.1 % longer)
        astreams = st.gr * st.ks if one and ACT_RELOADS and op.unit == "tcu.matmul" else 0
        once = one and ONE_SLOT and st.bands <= st.gr
        # a pipeline's matmul fed by a stage of its segment copies the producer rows whole
        # (``kinds.tcu``: a streamed input), whatever its K chunk
        prod = self.producers.get(op.inputs[0]) if op.inputs else None
        whole_act = STREAMED_ACT_WHOLE and not one and op.unit == "tcu.matmul" and \
            prod is not None and prod.name in seg.ops
        return self.tile(op, rows_b, cols_b, self.stage_budget(seg, st), st.chunked, st.ks,
                         st.act_resident, st.whole, st.wshare, streams, st.kfine, astreams, once,
                         whole_act)

    def band_boxes(self, st: StageCfg, op: Op, tplan: TilePlan, b: int) -> tuple:
        """The pieces of band ``b`` of a stage built piece by piece, in build order: (column part,
        TPB, rows [a, e), columns [cc, ce)) -- row tiles outer, column parts inner: a row tile's
        input is broadcast to the TPBs of all column parts at once and each holds it only while
        it is used. Memoized per scheduler (a function of the stage, its tile sizes and ``b``:
        the search builds the same stages in many candidates)."""
        key = (st, tplan.tr, tplan.tc, b)
        r = self._boxes.get(key)
        if r is None:
            r = self._boxes[key] = tuple(self._band_boxes(st, op, tplan, b))
        return r

    def _band_boxes(self, st: StageCfg, op: Op, tplan: TilePlan, b: int):
        geo = self.geo(op)
        lo, hi = stage_rows(st, geo.rows, b)
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
    def _tail(self, segs: list[SegmentCfg], first: int) -> list[dict[int, float]] | None:
        """Per segment ``si >= first``: TPB -> the TCU cycles of ``segs[si:]`` on it that
        :func:`.search_floor.tpb_busy` counts. A TPB's TCU runs its tasks one after the other in
        program order (``ListScheduler.put``: never in an earlier gap) and the segments' tasks
        are created in segment order, so once the first ``si`` segments are built, the last
        TCU task on TPB ``x`` ends at or after ``free[res_key("tcu", x)] + left[si][x]``: the
        makespan is at least that. None when a segment does not tile (the build raises then)."""
        out: list[dict[int, float]] = []
        acc: dict[int, float] = {}
        for si in range(len(segs) - 1, first - 1, -1):
            busy = tpb_busy(self, segs[si])
            if busy is None:
                return None
            if busy:
                acc = dict(acc)
                for x, c in busy.items():
                    acc[x] = acc.get(x, 0.0) + c
            out.append(acc)
        out.reverse()
        return out

    def shorter(self, trial: list[SegmentCfg], tl: Plan, keep: str = "", **kw) -> Plan | None:
        """The plan of ``trial`` if it is shorter than ``tl``, else None (a build bounded by
        ``tl``'s makespan; an infeasible trial is None too). ``kw``: more :meth:`build` options
        (``base``, ``checkpoints``). The whole-plan refinements try their changes with it."""
        try:
            tl2 = self.build(trial, bound=tl.makespan, keep=keep, ref=tl, **kw)
        except (BoundExceeded, ScheduleError):
            return None
        return tl2 if tl2.makespan < tl.makespan else None

    def cost_build(self, seg: SegmentCfg, bound: float = float("inf")) -> list[float]:
        """The task ends, in creation order, of ``seg`` built alone (inputs ready at cycle 0) by
        the search's flat builder (:class:`.build_segments.SearchBuilder`): the ends of
        ``build([seg], isolated=True, bound=bound)``'s tasks, without the plan. ``bound``: as
        :meth:`build`'s; the :class:`BoundExceeded` carries the ends before the stop (``ends``).
        An end is raised to the TCU tail's floor of the makespan where that is larger (session
        30, :class:`.build_segments.SearchBuilder`: what is known of the makespan at the task),
        and a bounded build stops at the first task whose answer reaches the bound; the largest
        answer is the makespan."""
        st = SearchBuilder(self, Plan(segments=[seg]))
        st.bound = bound
        names: set[str] = set()
        busy = tpb_busy(self, seg, names)
        if busy and names:
            st.tail_left, st.tail_ops = busy, names  # (a fresh dict: tpb_busy's sum)
        try:
            st.segment(0, seg, True)
        except BoundExceeded as e:
            e.ends = st.answers()
            raise
        finally:
            self.tasks_built += len(st.ends)
        return st.answers()

    def build(self, segs: list[SegmentCfg], isolated: bool = False,
              bound: float = float("inf"), keep: str = "", base: Plan | None = None,
              checkpoints: set[int] | frozenset[int] = frozenset(), tail: bool = False,
              ref: Plan | None = None) -> Plan:
        """The plan of ``segs`` (tasks list-scheduled in order). ``isolated``: inputs are ready at
        cycle 0 (search). ``bound``: stop with :class:`BoundExceeded` as soon as a task ends at or
        after it (the makespan, the latest end, can then only be >= ``bound``: the search asks
        whether a candidate beats its best, and most do not). ``keep``: which activations stay
        in HBSM between segments (:func:`.keep.choose_kept`: ``""`` none, ``"one-stage"``,
        ``"all"``, ``"all-mm"`` (also read by lockstep matmuls); a ``+copies`` suffix: kept K chunks go by one mesh copy per reader instead of
        one DTDU broadcast per producer piece, ``Plan.kept_bcast``). ``checkpoints``: segment indices before which the builder's state is kept
        in the plan (``Plan.checkpoints``); ``base``: an earlier plan whose checkpoints this
        build may start from, building only the segments after the prefix they share
        (:mod:`.resume`; the same plan as a full build). ``tail``: with a ``bound``, stop (:class:`BoundExceeded`) before a segment as soon as
        some TPB's TCU, free at ``f``, has work of the segments left that ends at or after the
        bound (:func:`_tail`): the same answer as building on, but fewer tasks are built and
        counted in :attr:`tasks_built` -- for the callers after which the search budget is not
        read (``pipe_starts``). ``ref``: the plan a trial would replace (:meth:`shorter`'s; default
        ``base``): which segments the build records for later builds (:func:`.recipe.record_from`;
        the plan does not depend on it)."""
        tl = Plan(segments=list(segs))
        mode = keep
        keep, _, how = keep.partition("+")
        tl.kept_bcast = how != "copies"
        st = PlanBuilder(self, tl)
        st.bound = bound
        if keep and not isolated:  # activations kept in HBSM between segments (:mod:`.keep`)
            tl.kept, st.kept_use = choose_kept(
                self, segs, int(self.cm.machine.hbsm_bytes * self.prefetch_share),
                keep == "one-stage", keep == "all-mm")
            st.set_kept()
        first = 0
        ends = EndScan()  # the latest task end so far, for the checkpoints
        # a build resumed from ``base`` may also start from the latest plan built in its own
        # keep mode (:attr:`recent`): any checkpoint that fits the build is its state there
        # (:mod:`.resume`), whichever plan it was taken in (a trial in another keep mode than
        # ``base``'s: ``pipe_starts``)
        # (a plan of the other broadcast mode: its checkpoints up to the first segment that may
        # read the mode, :func:`.keep.first_bcast_read`)
        cp = src = None
        if not isolated and base is not None:
            for b in (base, self.recent.get(mode)):
                if b is None:
                    continue
                limit = len(segs) if b.kept_bcast == tl.kept_bcast else \
                    first_bcast_read(self, segs, tl.kept)
                c = best_checkpoint(b, segs, tl.kept, st.kept_use, bound, limit)
                if c is not None and (cp is None or c.index > cp.index):
                    cp, src = c, b
        if cp is not None:
            kept, kept_use, bcast = tl.kept, st.kept_use, tl.kept_bcast
            cp.restore(st, segs)
            tl, first = st.tl, cp.index
            # this build's kept activations and broadcast mode, not the base's: they agree on
            # the prefix (``Checkpoint.fits``), the segments after it are built with this build's
            tl.kept, st.kept_use, tl.kept_bcast = kept, kept_use, bcast
            st.set_kept()
            st.resumed_dtdu()  # (kept only with kept activations)
            if tl.tasks:
                ends = EndScan(len(tl.tasks), cp.max_end)
            # the base's checkpoints up to the resumed one are this build's too (same prefix)
            tl.checkpoints = {i: c for i, c in src.checkpoints.items() if i <= first}
        if not isolated:  # segments recorded and replayed (:mod:`.recipe`)
            if self.recipes is None:
                self.recipes = recipe.RecipeBook()
            st.book = self.recipes
            st.rec_from = recipe.record_from(segs, tl, base if ref is None else ref,
                                             checkpoints)
        left = self._tail(segs, first) if tail and bound < float("inf") and not isolated \
            else None
        try:
            for si in range(first, len(segs)):
                # (also before the segment before a requested one when that one may look at
                # it: a checkpoint fits a trial that changes segment i only if its prefix did
                # not look at i -- ``resume.Checkpoint.reach`` -- and only a one-stage segment
                # without a K split looks ahead, ``build_segments``' late stores)
                if (si in checkpoints or si + 1 in checkpoints and _looks_ahead(segs[si])) \
                        and si not in tl.checkpoints and not st.late[0] and not st.pend:
                    tl.checkpoints[si] = Checkpoint.take(st, si, segs, ends.of(tl.tasks))
                if left is not None:
                    free = st.free
                    lb = max((free.get(res_key("tcu", x), 0.0) + c
                              for x, c in left[si - first].items()), default=0.0)
                    if lb >= bound:
                        raise BoundExceeded(lb)
                st.segment(si, segs[si], isolated)
        except BoundExceeded as e:
            e.plan = tl  # the tasks built before the stop (.shared_costs reads their ends)
            raise
        finally:
            self.tasks_built += len(tl.tasks)
        if tl.checkpoints and not isolated:
            self.recent[mode] = tl
        return tl


def _looks_ahead(seg: SegmentCfg) -> bool:
    """May the build of ``seg`` look at the segments after it (``PlanBuilder._late_ok`` /
    ``_late_reads`` / ``_late_wave_next``: each only for one stage without a K split)? A
    superset; speed only (which checkpoints :meth:`Scheduler.build` takes)."""
    return seg.kind != "dma" and len(seg.stages) == 1 and seg.stages[0].ks <= 1


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
