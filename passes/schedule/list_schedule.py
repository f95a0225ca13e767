"""The plan builder's list scheduling: tasks on in-order resources, as the hardware runs them.

Each task the builder creates (:mod:`.build_segments`, :mod:`.build_transfers`, the op families in
:mod:`.kinds`) is scheduled as it is created (creation order == program order per in-order
resource): each TPB unit (TCU/CVU/DTDU/CSU) executes its queue in program order, each CCB DMA engine
its queue ordered by predicted start (a transfer takes the earliest gap of the engine that can
start it first, :mod:`.busy`). A task starts when its resource is free and its dependencies (data,
buffer slots, the barrier of the last segment that used the TPB) are done.

Also here: the per-TPB segment barriers and the weight prefetch across segments
(:meth:`ListScheduler._prefetch`: how far back a segment's weight transfers into a TPB may start,
within ``PREFETCH_HBSM_SHARE`` of its HBSM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .busy import BusyBlocks, RateProfile
from .dma_queue import DmaQueue
from .graph import ScheduleError, view_names
from .plan import Plan, PlanPiece, PlanTask
from .segment import SegmentCfg

if TYPE_CHECKING:
    from .timeline import Scheduler

# weight prefetch: a segment's weights may load while up to PREFETCH_DEPTH - 1 earlier segments
# still run on the TPB, if those segments' buffers (and the weights already prefetched during
# them) plus these weights stay within PREFETCH_HBSM_SHARE of the HBSM (the rest is slack for
# hbsm-allocate's packing of buffers with different lifetimes)
PREFETCH_DEPTH = 16
PREFETCH_HBSM_SHARE = 0.75
#: a DTDU broadcast whose start the DRB pushes (``RateProfile``: its rate does not fit beside
#: the broadcasts booked there) waits in the program for the broadcasts whose end gives it room
#: (``Plan.drb_wait``), plus the sync update's latency; off: the plan still waits, the program
#: does not, and the interpreter runs it beside them (docs/llm.md section 5, session 25 pfid)
DRB_WAITS = True
WEIGHT_BUFFERS = ("weight", "bias", "scale", "requant")  # TilePlan buffer roles of constants
#: run-time B operands the program wrote (an activation read from memory as a matmul's second
#: operand: the prefill heads' kT and v) prefetch across segments like constant weights
#: (:meth:`ListScheduler._pf_ok`): each head's loads then fill the DMA engines' gaps while the
#: head before it on the same TPBs computes, instead of waiting for its end (False: only
#: constant weights prefetch, A/B). The emitter asks the same (``emit_core._wbar``'s ``act``).
#: Off in session 25's CI (the 4-head W8A8 layer of test_act_prefetch computed y off by up to
#: 0.75, race checks clean); the cause was not the prefetch: the q / kT loads of views of RoPE's
#: late-stored results waited for no store (fixed in :meth:`_wrote`, session 26), and a DRB
#: broadcast's receiver that nothing on its TPB read was packed over a live buffer
#: (hbsm-allocate: an unread receiver now lives at its broadcast, session 26); on again
ACT_PREFETCH = True
#: the units of a TPB (:class:`.plan.Unit` but the CCB DMA engines) -> their slot in
#: :func:`res_key`, and how many there are
UNIT_SLOT = {"tcu": 0, "cvu": 1, "dtdu": 2, "csu": 3}
NU = len(UNIT_SLOT)


class BoundExceeded(Exception):
    """A build stopped early: a task ends at ``end`` >= the bound (so the makespan is >= it)."""

    def __init__(self, end: float):
        super().__init__(end)
        self.end = end


class ListScheduler:
    """The builder's state and its list scheduling (the task-building methods are in the
    subclasses' modules: :class:`.build_segments.PlanBuilder`)."""

    #: a search cost build (:class:`.build_segments.SearchBuilder`): the state only a later
    #: segment or the emitter reads (pieces' task lists, DTDU busy blocks, TPB touches) is not kept
    search_only = False
    #: the scheduler's :class:`.recipe.RecipeBook` in a whole-plan build that records and replays
    #: segments (:meth:`.timeline.Scheduler.build`); None: every segment built in full
    book = None
    #: the first segment whose build :attr:`book` records (:func:`.recipe.record_from`)
    rec_from = 0

    def __init__(self, s: Scheduler, tl: Plan):
        self.s = s
        self.cm = s.cm
        self.g = s.g
        self.tl = tl
        # the in-order resources' free time and last task, keyed by one int (:func:`res_key`: a
        # TPB unit ``tpb * NU + UNIT_SLOT[unit]``, CCB DMA engine ``e`` ``~e``), not the
        # ``(unit, TPB)`` tuple: :meth:`put` and ``SearchBuilder.task`` read and write them ~4
        # times a task (ResNet-50: ~0.47 M tasks a schedule), a tuple built and hashed each time
        self.free: dict[int, float] = {}
        self.last_on_res: dict[int, int] = {}
        self.written: dict[str, int] = {}  # tensor in memory -> its last-ending writer task
        self.n_written: dict[str, int] = {}  # tensor in memory -> how many stores wrote it
        # tensor -> ((r0, r1, c0, c1), store task) of the stores of a plain 2-D matmul result
        # (``boxed_store``): what a box read waits for (:meth:`_box_deps`)
        self.wboxes: dict[str, list[tuple[tuple[int, int, int, int], int]]] = {}
        self.seg_touch: dict[int, int] = {}  # TPB -> last-ending task touching it (this segment)
        self.barrier: dict[int, int] = {}  # TPB -> the previous segment's end there
        # TPB -> (segment, its end task there) of every segment that used it, oldest first
        self.bar_hist: dict[int, list[tuple[int, int]]] = {}
        # (TPB, segment) -> the end tasks bar_hist records for that segment there, oldest first
        # (what a prefetching weight transfer waits for, :meth:`_wbar`, without a scan of
        # bar_hist: ResNet-50 has ~100 segments per TPB); tuples, never changed in place, so a
        # checkpoint (:mod:`.resume`) copies the dict, not ~2 k lists
        self.bar_at: dict[tuple[int, int], tuple[int, ...]] = {}
        # (TPB, segment) -> HBSM bytes held during that segment: its plan's buffers + the weights
        # of later segments prefetched while it runs; keyed by ``segment * num_tpbs + TPB``
        # (:meth:`_use_key`, one int: :meth:`_prefetch` walks ~0.4 M of them a ResNet-50 schedule)
        self.hbsm_use: dict[int, int] = {}
        self.prefetch_depth = PREFETCH_DEPTH
        # (TPB, segment) -> its second-to-last compute there, of a one-stage lockstep segment
        # with a streamed weight (``build_segments._lockstep_segment``), and (segment, TPB) ->
        # that task: the first weight chunk of the segment into the TPB waits for it instead of
        # the last segment's end (``Scheduler.tail_prefetch``)
        self.tail_at: dict[tuple[int, int], int] = {}
        self.tail_pending: dict[tuple[int, int], int] = {}
        # busy time of each CCB DMA engine (:mod:`.busy`; with several transfers in flight,
        # ``dma_outstanding`` > 1, its queue: :mod:`.dma_queue`) and of each TPB's DTDU
        mc = self.cm.machine
        self.dma_busy = [BusyBlocks() if mc.dma_outstanding == 1 else
                         DmaQueue(mc.dma_outstanding, mc.dma_setup_cycles)
                         for _ in range(mc.ccb_dma_engines)]
        self.dma_sync_latency = self.cm.machine.remote_update_latency_inter
        self.dma_queued = mc.dma_outstanding > 1
        self.dma_fixed: dict[tuple[str, str], float] = {}  # (src, dst) -> CostModel.dma_latency
        self.bound = float("inf")
        self.n_groups = 0  # lockstep groups so far (PlanPiece.group)
        self.gcache: dict[tuple, int] = {}  # shared chunks of the current lockstep group
        # (TPB, segment) -> bytes of kept activations (:mod:`.keep`) held there
        self.kept_use: dict[tuple[int, int], int] = {}
        self.fill_gap = False  # the task being added is a copy from a kept activation
        # TPB -> busy blocks of its DTDU: what a copy from a kept activation (``fill_gap``) reads,
        # so kept only in a build with kept activations (``Plan.kept``; session 35: ResNet-50's
        # builds without any took 197 of its 435 checkpoints, 11 k copies of blocks never read;
        # :meth:`dtdu_from_tasks` makes them when a build with kept ones resumes from one)
        self.dtdu_busy: dict[int, BusyBlocks] = {}
        # whether this build has kept activations (``bool(Plan.kept)``), set once per build by
        # ``Scheduler.build`` (:meth:`set_kept`): :meth:`put` asks it for every DTDU task, and
        # while a segment is recorded ``Plan.kept`` is a logging view (:mod:`.recipe`) whose
        # ``bool`` enters the recipe's key -- a read of the builder's own, not of the segment's
        # generation (a replay runs ``put`` again, with the replaying build's answer), so it
        # kept a recording of a build without kept activations from being replayed in a build
        # with them (session 36: ResNet-50 860 -> 867 replays)
        self.kept_blocks = False
        # the DRB's bandwidth in use over time: every broadcast (DMA or DTDU) streams over it
        self.drb_use = RateProfile(self.cm.bpc(self.cm.machine.drb_bandwidth))
        # the end of each broadcast booked on the DRB -> its tasks (what :meth:`_drb_who` finds)
        self.drb_ends: dict[float, tuple[int, ...]] = {}
        # op -> its pieces built so far, and their row index (:meth:`_pieces_over`), and piece
        # compute task -> its readers in the segment being built (what a later piece on the
        # same output slot waits for, ``out_readers``: both are per segment; a copy from a kept
        # piece of an earlier segment is not recorded -- nothing reads that list any more -- so
        # a checkpoint copies one segment's lists, not every piece's so far)
        self.by_op: dict[str, list[PlanPiece]] = {}
        self.row_index: dict[str, list] = {}
        self.readers: dict[int, list[int]] = {}
        # (producer, tensor, rows, columns) -> (its piece count, the pieces over that box, their
        # overlap bytes): :meth:`.build_transfers.Transfers._over`, per segment
        self.ocache: dict[tuple, tuple] = {}
        from .kinds import FAMILIES, movement  # the op families (they import the emitter too)
        self.families = FAMILIES
        self.movement = movement
        # late stores (:meth:`.build_segments.PlanBuilder._late_ok`): the segment being built
        # (whose tasks ``seg_touch`` records), the paused pieces of the segment before whose
        # stores this one builds ``(items, per step)``, their output bytes held per TPB (counted
        # in this segment's HBSM use), and whether pieces pause before their store now
        self.seg_at = -1
        self.late: tuple[list, int] = ([], 0)
        self.late_bytes: dict[int, int] = {}
        self.late_pause = False
        # late stores read by later pipelines (``PlanBuilder._late_reads``): producer segment ->
        # (its paused pieces by index, {segment: the indices built at its end}, the tensor);
        # and the bytes they hold per (TPB, segment) until then (counted in its HBSM use)
        self.pend: dict[int, tuple[dict, dict, str]] = {}
        self.held_use: dict[tuple[int, int], int] = {}
    # ------------------------------------------------------------------ list scheduling
    def add(self, **kw) -> PlanTask:
        """Create a task from its fields (``PlanTask`` without ``id``) and schedule it (:meth:`put`)."""
        return self.put(PlanTask(id=len(self.tl.tasks), **kw))

    def task(self, kind: str, unit: str, tpb: int, op: str, tensor: str, nbytes: float,
             cycles: float, deps: list[int], segment: int = 0, band: int = 0, col: int = 0,
             dst_tpbs: tuple[int, ...] = (), src: str = "", dst: str = "", engine: int = -1,
             macs: int = 0, role: str = "") -> int:
        """Create a task from its fields after ``id`` (:data:`.plan.TASK_FIELDS`' order; the
        call sites pass them positionally: keywords cost ~2 us more per task), schedule it
        (:meth:`put`) and return its id: what the builder's call sites use, so that the search's
        flat builder (:class:`.build_segments.SearchBuilder`) can schedule the same task without
        creating it. (Named parameters, as ``SearchBuilder.task``'s, not ``*fields, **kw``: no
        tuple and dict packed per task.)"""
        return self.put(PlanTask(len(self.tl.tasks), kind, unit, tpb, op, tensor, nbytes, cycles,
                                 deps, segment, band, col, dst_tpbs, src, dst, engine, macs,
                                 role)).id

    def put(self, t: PlanTask) -> PlanTask:
        """List-schedule ``t``, created with ``id == len(self.tl.tasks)`` (the hot call sites
        create their ``PlanTask`` directly, with positional leading fields: a keyword dict per
        task for :meth:`add` cost ~2.5 us of ~800 k tasks on ResNet-18), and append it."""
        tasks = self.tl.tasks
        if t.id != len(tasks):
            raise ScheduleError(f"internal: task id {t.id} created at position {len(tasks)}")
        ready, pred = 0.0, -1
        is_dma = t.unit == "dma"
        # the sync update a CCB DMA sends when it ends reaches the counter its consumer waits on
        # after remote_update_latency_inter (the interpreter's ``_update_latency``: the CCB is
        # no TPB's cluster); sync-insert puts a DMA's wait on its producer's TPB (a local
        # update), and a DMA after a DMA of its own engine waits for nothing (queue order).
        # TPB -> TPB: the copies and broadcasts that carry data between TPBs charge it in
        # their own cycles (``CostModel.mesh_cycles``)
        lat = self.dma_sync_latency
        dma_deps: list[tuple[float, int, int]] = []  # (end, engine, id)
        for d in t.deps:
            p = tasks[d]
            e = p.end
            if p.unit == "dma":
                if is_dma:
                    dma_deps.append((e, p.engine, d))
                    continue
                e += lat
            if e > ready:
                ready, pred = e, d
        cycles = t.cycles
        if is_dma:
            start, cycles, t.engine, pred, res = (
                self._dma_queued if self.dma_queued else self._dma_place)(
                t.src, t.dst, t.nbytes, cycles, len(t.dst_tpbs), ready, pred, dma_deps, lat)
        else:
            res = t.tpb * NU + UNIT_SLOT[t.unit]  # (:func:`res_key`)
            start = ready
            free = self.free.get(res, 0.0)
            # a DTDU broadcast: its rate must be free on the DRB
            rate = t.nbytes / cycles if t.unit == "dtdu" and len(t.dst_tpbs) > 1 and cycles > 0 \
                else 0.0
            if self.fill_gap:
                if self.search_only:  # it would read the DTDU busy blocks a search build skips
                    raise ScheduleError("internal: a copy from a kept activation in a search "
                                        "build")
                # a copy from a kept activation (:mod:`.keep`): its sources were computed in an
                # earlier segment, so it takes the earliest idle gap of the sending DTDU (the
                # program is emitted in predicted-start order: the queue then holds it there),
                # not the end of the queue behind copies that wait for this segment's compute
                if not self.kept_blocks:  # (its blocks are kept only with kept activations)
                    raise ScheduleError("internal: a copy from a kept activation in a build "
                                        "without kept activations")
                blocks = self.dtdu_busy.get(t.tpb)
                if blocks is None:
                    blocks = self.dtdu_busy[t.tpb] = BusyBlocks()
                start, idx = blocks.earliest(ready, cycles)
                while rate:  # a gap of its DTDU where the DRB has room too
                    a = self.drb_use.earliest(start, cycles, rate)
                    if a <= start:
                        break
                    a = self._drb_wait(t, a, cycles, rate)
                    start, idx = blocks.earliest(a, cycles)
                self.drb_use.add(start, cycles, rate)
                blocks.insert(idx, start, start + cycles)
                if start > ready:
                    pred = self.last_on_res.get(res, pred)
                self.free[res] = max(free, start + cycles)
            else:
                if free > start:  # TPB units execute their queue in program order
                    start, pred = free, self.last_on_res.get(res, -1)
                if rate:  # a DTDU broadcast waits for room on the DRB
                    a = self.drb_use.earliest(start, cycles, rate)
                    if a > start:
                        a = self._drb_wait(t, a, cycles, rate)
                    start = a
                    self.drb_use.add(start, cycles, rate)
                self.free[res] = start + cycles
                if t.unit == "dtdu" and self.kept_blocks and not self.search_only:
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
        if len(t.dst_tpbs) > 1 and cycles > 0 and (is_dma or t.unit == "dtdu") and \
                not self.search_only:
            # its booking on the DRB ends with it (``_dma_place`` / ``_dma_queued`` / above)
            self.drb_ends[end] = self.drb_ends.get(end, ()) + (t.id,)
        tasks.append(t)
        if self.piece is not None and not self.search_only:
            self.piece.tasks.append(t.id)
        return t

    def resumed_dtdu(self) -> None:
        """After a resume (``Scheduler.build``, the build's own ``Plan.kept`` set): the DTDU
        busy blocks, kept only with kept activations (:attr:`dtdu_busy`, :attr:`kept_blocks` set
        by :meth:`set_kept` before) -- none without; with,
        the checkpoint's, or, when it has none (a checkpoint of a build without kept activations:
        a build with them that has DTDU tasks has blocks), the ones its tasks give."""
        if not self.kept_blocks:
            self.dtdu_busy = {}
        elif not self.dtdu_busy:
            self.dtdu_busy = self.dtdu_from_tasks()

    def set_kept(self) -> None:
        """:attr:`kept_blocks` from the build's own ``Plan.kept`` (``Scheduler.build``, once
        its kept activations are chosen, and again at a resume)."""
        self.kept_blocks = bool(self.tl.kept)

    def dtdu_from_tasks(self) -> dict[int, BusyBlocks]:
        """The DTDU busy blocks :meth:`put` would have made for the plan's tasks so far had
        they all been put in a build with kept activations, when none was a copy from a kept
        activation (``fill_gap``): each DTDU task's ``[start, end)`` appended in creation order
        (``end`` is ``start + cycles``, as ``put`` computes both). For a build with kept
        activations that resumes from a checkpoint of a build without (``Scheduler.build``): a
        checkpoint fits only when the kept activations of the segments it read are the same
        (``resume.Checkpoint.fits``), so its prefix has none and no such copy."""
        out: dict[int, BusyBlocks] = {}
        for t in self.tl.tasks:
            if t.unit == "dtdu":
                blocks = out.get(t.tpb)
                if blocks is None:
                    blocks = out[t.tpb] = BusyBlocks()
                blocks.append(t.start, t.end)
        return out

    def _drb_who(self, a: float, tpb: int) -> tuple[tuple[int, ...], float]:
        """The broadcasts booked on the DRB up to ``a`` (:attr:`drb_ends`) that a DTDU broadcast
        of ``tpb`` must wait for in the program to start there, and their sync updates' latency
        to it (the interpreter's ``_update_latency``: a CCB DMA's reaches a TPB after
        ``remote_update_latency_inter``, a TPB's one of its cluster after
        ``remote_update_latency`` and of another after ``_inter``). Its own DTDU's are left
        out: its queue orders them. (A CCB DMA broadcast the DRB delays does not wait in the
        program: its setup would no longer overlap the blocker -- decode W4A16 15.991 -> 16.006
        ms/token with those waits -- and it shares the DRB with a short DTDU broadcast.)"""
        mc = self.cm.machine
        tasks = self.tl.tasks
        who: list[int] = []
        lat = 0.0
        for w in self.drb_ends.get(a, ()):
            x = tasks[w]
            if x.unit == "dma":
                lw = self.dma_sync_latency
            elif x.tpb == tpb:
                continue
            else:
                lw = mc.remote_update_latency if mc.cluster_of(x.tpb) == mc.cluster_of(tpb) \
                    else mc.remote_update_latency_inter
            who.append(w)
            if lw > lat:
                lat = lw
        return tuple(who), lat

    def _drb_wait(self, t: PlanTask, a: float, cycles: float, rate: float) -> float:
        """The start of DTDU broadcast ``t`` (``cycles`` at ``rate`` on the DRB) that the DRB
        pushed to ``a``, the end of broadcasts booked before it: ``t`` waits for them in the
        program (``Plan.drb_wait``, :meth:`_drb_who`), so it starts their sync update's
        latency after ``a``, at the first time from there where the DRB has room (waiting then
        for the broadcasts that end there)."""
        while True:
            who, lat = self._drb_who(a, t.tpb)
            if not who:
                return a
            self.tl.drb_wait[t.id] = who  # (recorded with :data:`DRB_WAITS` off too: tests)
            if not DRB_WAITS:
                return a
            b = self.drb_use.earliest(a + lat, cycles, rate)
            if b <= a + lat:
                return b
            a = b

    def _dma_place(self, src: str, dst: str, nbytes: float, cycles: float, ndst: int,
                   ready: float, pred: int, dma_deps: list[tuple[float, int, int]], lat: float
                   ) -> tuple[float, float, int, int, int]:
        """Put a CCB DMA transfer (``src`` -> ``dst``, ``nbytes`` over ``cycles``, into ``ndst``
        TPBs: > 1 is a DRB broadcast) ready at ``ready`` (its non-DMA dependencies; ``pred`` the
        task that set it) whose DMA dependencies are ``dma_deps`` ``(end, engine, id)`` on the
        engine that can start it first (depth 1, :class:`.busy.BusyBlocks`: the compiler orders
        each engine's queue by predicted start, so a transfer fills the earliest idle gap) or,
        at depth ``dma_outstanding`` > 1 (:mod:`.dma_queue`), where its data ends first. A DRB
        broadcast also needs its rate free on the DRB. Returns (start, cycles from the start to
        its end, engine, critical predecessor, resource key: :func:`res_key`). Shared by
        :meth:`put` and the search's flat builder (:meth:`.build_segments.SearchBuilder.task`)."""
        if self.dma_queued:
            return self._dma_queued(src, dst, nbytes, cycles, ndst, ready, pred, dma_deps, lat)
        rate = nbytes / cycles if ndst > 1 and cycles > 0 else 0.0
        best = None
        base_ready, base_pred = ready, pred
        for e, blocks in enumerate(self.dma_busy):
            ready, pred = base_ready, base_pred
            for x_end, x_eng, x_id in dma_deps:
                x = x_end + (0 if x_eng == e else lat)
                if x > ready:
                    ready, pred = x, x_id
            st, idx = blocks.earliest(ready, cycles)
            while rate:
                a = self.drb_use.earliest(st, cycles, rate)
                if a <= st:
                    break
                st, idx = blocks.earliest(a, cycles)
            if best is None or st < best[0]:
                best = (st, e, idx, ready, pred)
        assert best is not None
        start, engine, idx, ready, pred = best
        self.dma_busy[engine].insert(idx, start, start + cycles)
        self.drb_use.add(start, cycles, rate)
        res = ~engine  # (:func:`res_key`)
        if start > ready:
            pred = self.last_on_res.get(res, pred)
        return start, cycles, engine, pred, res

    def _dma_queued(self, src: str, dst: str, nbytes: float, cycles: float, ndst: int,
                    ready: float, pred: int, dma_deps: list[tuple[float, int, int]], lat: float
                    ) -> tuple[float, float, int, int, int]:
        """:meth:`_dma_place` on engines of depth ``dma_outstanding`` > 1 (:mod:`.dma_queue`):
        the engine where the transfer's data ends first."""
        fixed = self.dma_fixed.get((src, dst))
        if fixed is None:
            fixed = self.dma_fixed[(src, dst)] = self.cm.dma_latency(src, dst)
        after = fixed - self.cm.machine.dma_setup_cycles  # the latency after the setup
        data = cycles - fixed
        if not data > 0.0:  # max(0.0, data)
            data = 0.0
        rate = nbytes / data if ndst > 1 and data > 0 else 0.0
        best = None
        S = self.cm.machine.dma_setup_cycles
        for e, q in enumerate(self.dma_busy):
            r, p = ready, pred
            for x_end, x_eng, x_id in dma_deps:
                x = x_end + (0 if x_eng == e else lat)
                if x > r:
                    r, p = x, x_id
            # no engine starts before ``r`` nor streams before ``r + S + after`` (``DmaQueue.
            # earliest`` computes its data start as ``lo + S + after`` with ``lo >= r``, in this
            # order, then only raises it): an engine whose bound can not beat the best so far
            # is not asked (an engine that can start the transfer at once ends the search;
            # test_schedule_shortcuts compares with every engine asked)
            if best is not None:
                lo = (r + S + after) + data
                if not (lo < best[0] + data or (lo == best[0] + data and r < best[1])):
                    continue
            s0, d0, k = q.earliest(r, after, data)
            # (session 32) the DRB only moves a transfer later: a push asks the queue again from
            # ``max(r, a - fixed)`` >= ``r``, and ``DmaQueue.earliest``'s setup and data starts
            # never fall as ``ready`` grows (every position's ``lo`` and data start grow with it,
            # fewer positions fit, later ones start later). So an engine whose unpushed answer
            # does not beat the best so far (the comparison below) is not asked about the DRB
            if rate and best is not None:
                de, be = d0 + data, best[0] + data
                if not (de < be or (de == be and s0 < best[1])):
                    continue
            while rate:
                a = self.drb_use.earliest(d0, data, rate)
                if a <= d0:
                    break
                s0, d0, k = q.earliest(max(r, a - fixed), after, data)
            if best is None:
                best = (d0, s0, e, k, r, p)
            else:  # ``(d0 + data, s0) < (best[0] + data, best[1])`` without the tuples
                de, be = d0 + data, best[0] + data
                if de < be or (de == be and s0 < best[1]):
                    best = (d0, s0, e, k, r, p)
        assert best is not None
        d0, start, engine, k, ready, pred = best
        end = d0 + data
        self.dma_busy[engine].insert(k, start, d0, end)
        if rate:  # (``RateProfile.add`` books nothing at rate 0)
            self.drb_use.add(d0, data, rate)
        res = ~engine  # (:func:`res_key`)
        if start > ready or d0 > start + fixed:
            pred = self.last_on_res.get(res, pred)
        return start, end - start, engine, pred, res

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
        if self._pf_ok(tensor, role):
            if role == "w" and self.tail_pending:  # the first chunk, in the last one's tail
                t = self.tail_pending.pop((self.piece.segment, tpb), None)
                if t is not None:  # (the transfer being built is the next task)
                    self.tl.tail_dma[(len(self.tl.tasks), tpb)] = t
                    return [t]
            w = self._pf_wait(self.piece.segment, tpb)
            if w is not None:
                return list(w)
        return self._bar(tpb)

    def _pf_wait(self, si: int, tpb: int) -> tuple[int, ...] | None:
        """The end tasks of the earlier segment that the prefetching weight transfers of segment
        ``si`` into ``tpb`` wait for (``Plan.prefetch``, :meth:`_prefetch`), None when they do
        not prefetch (one read for :mod:`.recipe`: which segment it is does not matter to the
        build, only its tasks)."""
        b = self.tl.prefetch.get((si, tpb))
        return None if b is None else self.bar_at.get((tpb, b), ())

    def _pf_ok(self, tensor: str, role: str) -> bool:
        """May a transfer of ``tensor`` into role ``role`` of the piece being built wait for a
        prefetch barrier (:meth:`_wbar`)? A constant weight or bias, or (:data:`ACT_PREFETCH`)
        a run-time B operand the program wrote (role ``w``, kind ``act``: ``_prefetch`` counts
        its buffer, the matmul's ``weight`` one, with the weights it holds; not a model input,
        e.g. decode's KV cache, whose GEMVs planned 16.003 -> 16.24 ms/token with it)."""
        if self.piece is None or role not in ("w", "bias"):
            return False
        kind = self.g.tensors[tensor].kind
        return kind == "weight" or (role == "w" and ACT_PREFETCH and kind == "act")

    def _prefetch(self, si: int, seg: SegmentCfg) -> None:
        """Per TPB of the segment, how far back its weight transfers may start: over the last
        segments that used the TPB, newest first, as long as each of them holds at most
        ``PREFETCH_HBSM_SHARE`` of the HBSM with this segment's weight buffers (resident weights,
        the two slots of a streamed one, biases) added -- those are then counted as held during
        it. The chosen barrier goes into the plan (``Plan.prefetch``), which the emitter reads.
        ``Scheduler.tail_prefetch``: where nothing is prefetched, a one-stage segment's first
        chunk of its streamed weight waits for the second-to-last compute of the last segment on
        the TPB when that is a lockstep contraction with a streamed weight (its last K step: the
        other slot of its streamed operands is free), not for its end (``Plan.tail_dma``). Its
        bytes are not checked against the share (the plan's count of kept tiles already puts
        the LLaMA2-7B prefill MLP over it); ``hbsm-allocate{strict}`` judges the packing."""
        cap = int(self.cm.machine.hbsm_bytes * self.s.prefetch_share)
        foot: dict[int, int] = {}
        wfoot: dict[int, int] = {}
        first = 0  # one chunk of a streamed weight (one-stage segments: ``tail_prefetch``)
        for st in seg.stages:
            plan = self.tl.plans[st.op]
            w = sum(b.nbytes for b in plan.buffers if b.role in WEIGHT_BUFFERS)
            if len(seg.stages) == 1 and not plan.weight_resident:
                first = sum(b.slot_bytes for b in plan.buffers if b.role == "weight")
            for x in st.tpbs:
                foot[x] = foot.get(x, 0) + plan.footprint
                wfoot[x] = wfoot.get(x, 0) + w
        use, kept_use, late_bytes = self.hbsm_use, self.kept_use, self.late_bytes
        held_use = self.held_use
        depth, isolated = self.prefetch_depth, self.isolated
        nt = self.cm.machine.num_tpbs  # (TPB, segment) -> its ``hbsm_use`` key (:meth:`_use_key`)
        for x, f in foot.items():
            use[si * nt + x] = f + kept_use.get((x, si), 0) + late_bytes.get(x, 0) + \
                held_use.get((x, si), 0)
            w = wfoot[x]
            if isolated or not w:
                continue
            hist = self.bar_hist.get(x)
            if not hist:
                continue
            n = len(hist)
            held = []  # the segments (newest first) that hold this segment's weights too
            d = 1  # wait for the end of the d-th last segment on x
            while d < depth and d <= n:
                k = hist[-d][0] * nt + x
                if use.get(k, 0) + w > cap:
                    break
                held.append(k)
                d += 1
            if d == 1:
                if first and self.s.tail_prefetch:  # its first chunk in the last one's tail
                    s1 = hist[-1][0]
                    tail = self.tail_at.get((x, s1))
                    if tail is not None:
                        self.tail_pending[(si, x)] = tail
                        k = s1 * nt + x
                        use[k] = use.get(k, 0) + first
                continue
            for k in held:
                use[k] = use.get(k, 0) + w
            self.tl.prefetch[(si, x)] = hist[-d][0] if d <= n else -1

    def _use_key(self, tpb: int, si: int) -> int:
        """The :attr:`hbsm_use` key of TPB ``tpb`` in segment ``si``: ``si * num_tpbs + tpb``, one
        per pair (``0 <= tpb < num_tpbs``), an int instead of the pair's tuple (session 34:
        :meth:`_prefetch`'s walk hashed ~0.4 M tuples a ResNet-50 schedule)."""
        return si * self.cm.machine.num_tpbs + tpb

    def _mem_deps(self, tensor: str) -> list[int]:
        return [self.written[tensor]] if tensor in self.written and not self.isolated else []

    def _box_deps(self, tensor: str, box: tuple[int, int, int, int]) -> list[int] | None:
        """The stores of ``tensor`` whose boxes overlap ``box`` when every store of it has a box
        (:func:`boxed_store`) and they cover ``box``; else None (wait for the whole tensor)."""
        if self.isolated:
            return []
        bs = self.wboxes.get(tensor)
        if not bs or len(bs) != self.n_written.get(tensor):
            return None
        return _overlapping(bs, box)

    def _wrote(self, tensor: str, tid: int) -> None:
        """Task ``tid`` stored (some of) ``tensor``: its last-ending writer, and its views'
        (their readers read its bytes), whether a view's own empty segment came before the
        store or after it -- a late store is built after the views in between: RoPE's, whose
        ``_late_wave`` passes over the views of q / k to the next projection, so the heads'
        q / kT loads waited for none of them (session 26, docs/llm.md section 5). The same for
        the concats ``tensor`` is a part of written in place (``graph.view_names``): a concat
        whose every part is written in place is an empty segment the late stores pass over too
        (session 27)."""
        self.n_written[tensor] = self.n_written.get(tensor, 0) + 1
        tasks, written = self.tl.tasks, self.written
        end = tasks[tid].end
        for t in (tensor,) + view_names(self.g, tensor):
            prev = written.get(t)
            if prev is None or tasks[prev].end <= end:
                written[t] = tid

    def _take_out_wait(self) -> list[int]:
        w, self.out_wait = self.out_wait, []
        return w + (self._bar(self.cur[0]) if self.cur else [])

    def _slot_deps(self) -> list[int]:
        h = self.hist.get(self.cur, []) if self.cur else []
        return [h[-2]] if len(h) >= 2 else []


def res_key(unit: str, tpb: int) -> int:
    """The :attr:`ListScheduler.free` / :attr:`~ListScheduler.last_on_res` key of an in-order
    resource: unit ``unit`` of TPB ``tpb`` (``tpb * NU + UNIT_SLOT[unit]`` >= 0: distinct for
    distinct pairs, ``0 <= UNIT_SLOT[unit] < NU``), or CCB DMA engine ``tpb`` (``unit ==
    "dma"``: ``~tpb`` < 0). One int instead of the ``(unit, TPB)`` tuple (session 35; the hot
    paths write the expression out). A unit that is none of these raises (KeyError)."""
    return ~tpb if unit == "dma" else tpb * NU + UNIT_SLOT[unit]


def boxed_store(g, op) -> bool:
    """Are ``op``'s stores boxes ``[r0, r1) x [c0, c1)`` of its plain 2-D result (a matmul's,
    not written into another layout, a view or columns of another tensor)? Then a reader of a
    box waits only for the stores that overlap it (``post_in`` of a matmul epilogue)."""
    t = op.outputs[0]
    return op.unit == "tcu.matmul" and len(g.tensors[t].shape) == 2 and t not in g.wmap and \
        t not in g.strided and t not in g.views


def _overlapping(bs: list, box: tuple[int, int, int, int]) -> list | None:
    """The writers (second items of ``bs``) whose boxes overlap ``box``, if those boxes cover
    it (their overlapping areas add up to its area: the stores of one tensor do not overlap);
    else None."""
    r0, r1, c0, c1 = box
    out, area = [], 0
    for (a0, a1, b0, b1), w in bs:
        h, wd = min(r1, a1) - max(r0, a0), min(c1, b1) - max(c0, b0)
        if h > 0 and wd > 0:
            out.append(w)
            area += h * wd
    return out if area == (r1 - r0) * (c1 - c0) else None
