"""Resuming a whole-plan build after a prefix of segments it shares with an earlier build.

The placement's last steps (:func:`.refine.unchunk`, :func:`.refine.weights_once`) try one
change at a time on a whole plan: the trial differs from the plan it would replace in one segment
``si`` and is rebuilt from scratch to compare makespans (ResNet-18 224: 18 whole-plan builds, a
third of the scheduler's search). The builder (:class:`.build_segments.PlanBuilder`) walks the
segments in order and a segment's tasks depend only on the segments before it (and on the
activations kept in HBSM, :mod:`.keep`, chosen from the whole list up front), so the state after
segments ``[0, si)`` is the same in both builds. A :class:`Checkpoint` is a copy of that state
taken while the earlier plan was built (``Scheduler.build(..., checkpoints=...)``); the trial's
build (``Scheduler.build(..., base=plan)``) starts from a copy of the latest checkpoint whose
segments are the trial's first ones, built with the same kept activations, and builds only the
rest (ResNet-18 224: unchunk 0.72 -> 0.2 CPU-s, weights_once 2.2 -> 1.0).

Exactness: the resumed builder holds equal state (the copy rules below copy every mutable
container of the builder and of the plan and share only objects no later segment changes: tasks
and pieces of finished segments, tile plans), so it creates the same tasks with the same times;
a checkpoint keeps the containers that only grow after it -- the plan's task, piece, span and
buffer lists and its prefetch / DRB-wait / tail-wait dicts (:class:`PlanMark`), the builder's
``by_op`` / ``bar_hist`` lists and ``drb_ends`` (:func:`snap_state`) -- as the live container
and its length (session 34: ResNet-50 takes 435 checkpoints a schedule and restores 58; those of
the builds that stop at their bound are never read), and a restore makes the copy the eager
checkpoint made (``test_resume_snap``);
``Plan.to_json`` of a resumed build equals the full build's (``test_resume``). A build with a
``bound`` uses a checkpoint only if every task of its prefix ends before the bound (a full build
would stop inside the prefix otherwise). The kept activations (``Plan.kept``, the builder's
``kept_use``) are the resumed build's own, not the checkpoint's: they agree on the prefix
(:meth:`Checkpoint.fits`) and may differ after it (a keeping plan resumed from the plan without,
a trial that moves a kept output to other TPBs). A build given a ``base`` also considers the
checkpoints of the latest whole-plan build in its own keep mode (``Scheduler.recent``): a
checkpoint that fits is the build's state there whichever plan it was taken in (``pipe_starts``
tries each trial in every keep mode; the base holds checkpoints of its own mode only). The task count (``Scheduler.tasks_built``, the search
budget) counts the prefix's tasks as a full build does. A builder attribute without a copy rule
is an internal error (a new attribute must be given one), never a silently shared container.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter, itemgetter

from .busy import BusyBlocks
from .graph import ScheduleError
from .plan import Plan

# builder attributes that are not per-build state (the scheduler and its caches, the plan itself,
# the op family modules)
_NOT_STATE = frozenset(("s", "cm", "g", "tl", "families", "movement", "book", "rec_from"))
# immutable values or containers the builder replaces but never changes in place (``kept_use``:
# :func:`.keep.choose_kept`'s, read only; a resumed build puts its own in, ``Scheduler.build``)
_SAME = frozenset(("bound", "n_groups", "fill_gap", "prefetch_depth", "dma_sync_latency",
                   "dma_queued", "isolated", "piece",
                   "cur", "stage", "seg_at", "late_pause", "reach", "kept_use", "kept_blocks"))
# dicts/sets of immutable values
_FLAT = frozenset(("tail_at", "tail_pending", "drb_ends", "free", "last_on_res", "written", "n_written",
                   "seg_touch", "barrier", "bar_at", "hbsm_use", "gcache", "wcache",
                   "acache", "seg_ops", "outside", "dma_fixed", "ocache", "late_bytes",
                   "held_use"))
# dicts of lists of immutable values
_LISTS = frozenset(("bar_hist", "by_op", "hist", "wboxes"))
# of those, the ones a checkpoint keeps as (list, length) instead of a copy (:func:`snap_state`):
# the builder only appends to their lists (``PlanBuilder.segment``'s ``bar_hist``, the pieces
# of ``by_op``) or replaces a list by a new one (a replay's ``by_op``, :mod:`.recipe`), never
# changes or removes an item, so a list's first ``n`` items stay the checkpoint's
_GROWN = ("bar_hist", "by_op")
# flat dicts a checkpoint keeps as (the dict, its length): the builder only adds keys to them
# after a checkpoint -- ``bar_at``'s (TPB, segment) keys of the segments that end after it:
# ``PlanBuilder.segment`` of segment ``j`` adds ``(x, s)`` with ``s`` >= ``j - 1``, never one
# of a segment built before (a task's segment is never after the one being built)
_PREFIX = ("bar_at",)
_SNAPPED = frozenset(_GROWN + _PREFIX + ("drb_ends",))
_LAST = itemgetter(-1)
_END = attrgetter("end")
_INDEX = attrgetter("index")
_RULED = _NOT_STATE | _SAME | _FLAT | _LISTS | frozenset(
    ("dma_busy", "dtdu_busy", "drb_use", "row_index", "readers", "out_readers", "out_wait",
     "late", "pend"))


def copy_busy(b):
    if not isinstance(b, BusyBlocks):  # a DmaQueue
        return b.copy()
    c = BusyBlocks()
    c.s = [list(x) for x in b.s]
    c.e = [list(x) for x in b.e]
    c.gap = list(b.gap)
    c.last = list(b.last)
    c.stale = list(b.stale)
    return c


def copy_state(d: dict, skip: frozenset = frozenset()) -> dict:
    """A copy of a builder's ``__dict__`` at a segment boundary (see the module doc); the
    attributes in ``skip`` left out (:func:`snap_state` keeps them its own way)."""
    unknown = set(d) - _RULED
    if unknown:
        raise ScheduleError(f"internal: resume.copy_state has no copy rule for the builder "
                            f"attribute(s) {', '.join(sorted(unknown))}")
    if d.get("piece") is not None:
        raise ScheduleError("internal: a builder checkpoint inside a piece")
    if d.get("late", ((),))[0]:  # paused pieces (generators) can not be copied: no checkpoint there
        raise ScheduleError("internal: a builder checkpoint with late stores pending")
    if d.get("pend"):
        raise ScheduleError("internal: a builder checkpoint with late read stores pending")
    out = {k: d[k] for k in _SAME if k in d}
    for k in _FLAT:
        if k in d and k not in skip:
            out[k] = d[k].copy()
    for k in _LISTS:
        if k in d and k not in skip:
            out[k] = {a: list(v) for a, v in d[k].items()}
    out["dma_busy"] = [copy_busy(b) for b in d["dma_busy"]]
    out["dtdu_busy"] = {x: copy_busy(b) for x, b in d["dtdu_busy"].items()}
    out["drb_use"] = d["drb_use"].copy()
    if "late" in d:
        out["late"] = ([], 0)
    if "pend" in d:
        out["pend"] = {}
    out["row_index"] = _copy_index(d["row_index"], d["by_op"])
    # a piece's readers list is also in ``out_readers`` (the output slots of its op on its TPB):
    # the copies keep that sharing
    memo: dict[int, list] = {}
    readers = {}
    for tid, v in d["readers"].items():
        readers[tid] = memo[id(v)] = list(v)
    out["readers"] = readers
    if "out_readers" in d:
        out["out_readers"] = {k: [memo.get(id(r)) or list(r) for r in back]
                              for k, back in d["out_readers"].items()}
    if "out_wait" in d:
        out["out_wait"] = list(d["out_wait"])
    return out


def _copy_index(ri: dict, by_op: dict) -> dict:
    """A copy of the builder's ``row_index`` (op -> ``[pieces indexed, bucket rows, buckets]``,
    ``Transfers._pieces_over``). The index of an op whose pieces are all indexed is final until
    the op gets more pieces, which only a build of its own segment adds: it becomes a tuple in
    ``ri`` too and both share it (``_pieces_over`` copies a tuple before it extends it); the
    others are copied (ResNet-50: ~1.7 k bucket lists per checkpoint were copied)."""
    out = {}
    for op, ix in ri.items():
        if type(ix) is list:
            n, w, buckets = ix
            qs = by_op.get(op)
            if qs is not None and n == len(qs):
                ix = ri[op] = (n, w, buckets)
            else:
                ix = [n, w, {bk: list(v) for bk, v in buckets.items()}]
        out[op] = ix
    return out


def snap_state(d: dict, ntasks: int) -> dict:
    """:func:`copy_state` of a builder's ``__dict__`` for a checkpoint, with its growing history
    shared instead of copied (a checkpoint is taken far more often than restored: ResNet-50 435
    takes, 58 restores; those of a build that stops at its bound are never read):
    :data:`_GROWN`'s lists as (list, length), ``drb_ends`` as (the dict, ``ntasks``: its tasks
    so far, its length). :func:`unsnap_state` makes the copy from them, as :func:`copy_state` would have
    made it here. Only the builder of this state may still change them, and only as these
    rules say: the checkpoint is taken between segments, and the state then only grows.
    ``drb_ends`` (a broadcast's end -> its task ids, ``ListScheduler.put``) gets a new key or
    the id of a new task (``>= ntasks``, ids in creation order) added to a key's tuple."""
    out = copy_state(d, _SNAPPED)
    for k in _GROWN:
        if k in d:
            out[k] = ("grown", {a: (x, len(x)) for a, x in d[k].items()})
    for k in _PREFIX:
        if k in d:
            out[k] = ("prefix", d[k], len(d[k]))
    if "drb_ends" in d:
        ends = d["drb_ends"]
        out["drb_ends"] = ("ends", ends, ntasks, len(ends))
    return out


def unsnap_state(snap: dict) -> dict:
    """A builder state to resume from (:func:`copy_state`'s copy) of a :func:`snap_state`."""
    d = dict(snap)
    for k in _GROWN:
        if k in snap:
            d[k] = {a: x[:n] for a, (x, n) in snap[k][1].items()}
    for k in _PREFIX:
        if k in snap:
            _, x, n = snap[k]
            d[k] = _first(x, n)
    if "drb_ends" in snap:
        # (its first ``nk`` keys are the checkpoint's, their tuples' ids below ``n`` too; a
        # later broadcast rarely ends at one of their ends: none of ResNet-50's 105 k restored)
        _, ends, n, nk = snap["drb_ends"]
        d["drb_ends"] = _first(ends, nk) if max(map(_LAST, islice(ends.values(), nk)),
                                                default=-1) < n else \
            {e: (w if w[-1] < n else w[:bisect_left(w, n)]) for e, w in islice(ends.items(), nk)}
    out = copy_state(d, _SNAPPED)  # (``row_index`` reads the pieces of ``by_op``)
    for k in _SNAPPED:
        if k in d:
            out[k] = d[k]
    return out


def copy_plan(tl: Plan, segs: list) -> Plan:
    """A plan holding ``tl``'s tasks, pieces, buffers ... so far, for the segments ``segs``."""
    return Plan(tasks=list(tl.tasks), tail_dma=dict(tl.tail_dma), drb_wait=dict(tl.drb_wait),
                pieces=list(tl.pieces),
                buf_segs=list(tl.buf_segs),
                plans=dict(tl.plans), segments=list(segs), seg_spans=list(tl.seg_spans),
                prefetch=dict(tl.prefetch), kept=set(tl.kept), kept_bcast=tl.kept_bcast,
                late=dict(tl.late), late_reads=dict(tl.late_reads), carry=set(tl.carry))


class PlanMark:
    """A plan's containers at a checkpoint, kept without copies where the plan only grows:
    its task, piece, span and buffer lists as (the list, its length), its ``prefetch``,
    ``drb_wait`` and ``tail_dma`` dicts as (the dict, how many keys it had: the build only adds
    keys -- a segment's ``(segment, TPB)`` prefetch, a new task's DRB waits and tail wait --,
    never one it added before); the other containers copied as :func:`copy_plan` copies them.
    :meth:`plan` makes the plan :func:`copy_plan` would have made at the checkpoint. (It holds
    the containers, not the plan: the plan holds its checkpoints, and a cycle would outlive a
    stopped build while the compile's collector is off.)"""

    __slots__ = ("grown", "small")

    def __init__(self, tl: Plan, segs: list):
        self.grown = tuple((x, len(x)) for x in (
            tl.tasks, tl.pieces, tl.buf_segs, tl.seg_spans, tl.prefetch, tl.drb_wait,
            tl.tail_dma))
        self.small = (dict(tl.plans), set(tl.kept), tl.kept_bcast, dict(tl.late),
                      dict(tl.late_reads), set(tl.carry), list(segs))

    def plan(self, segs: list) -> Plan:
        (ts, nt), (pc, npc), (bs, nb), (ss, ns), (pf, npf), (dw, nw), (td, ntd) = self.grown
        plans, kept, bcast, late, late_reads, carry, _ = self.small
        return Plan(tasks=ts[:nt], tail_dma=_first(td, ntd), drb_wait=_first(dw, nw),
                    pieces=pc[:npc], buf_segs=bs[:nb], plans=dict(plans), segments=list(segs),
                    seg_spans=ss[:ns], prefetch=_first(pf, npf), kept=set(kept),
                    kept_bcast=bcast, late=dict(late), late_reads=dict(late_reads),
                    carry=set(carry))


def _first(d: dict, n: int) -> dict:
    """The first ``n`` items of ``d`` (insertion order) as a new dict: a copy without the keys
    after the ``n``-th when most are kept (~30 % faster than the items one by one)."""
    m = len(d)
    if n >= m:
        return d.copy()
    if 2 * n < m:
        return dict(islice(d.items(), n))
    out = d.copy()
    for k in list(islice(d, n, None)):
        del out[k]
    return out


@dataclass
class Checkpoint:
    """The builder's state after the first ``index`` segments of a build (module doc)."""
    index: int
    segs: tuple  # the SegmentCfgs the prefix's build read: up to ``reach``
    kept: frozenset  # the kept activations (Plan.kept) produced by these segments
    # the kept bytes per (TPB, segment) of the build (``PlanBuilder.kept_use``, never changed in
    # place: :func:`.keep.choose_kept`'s); :meth:`fits` compares its segments up to ``reach``
    # (:meth:`use`: made when first compared -- 116 of ResNet-50's 435 checkpoints get there)
    kept_use: dict
    mark: PlanMark  # the plan's containers so far
    state: dict  # the builder's attributes (snap_state)
    max_end: float  # the latest end of a task so far
    # the furthest segment the prefix's build looked at (>= index - 1; ``len(segs)`` when it
    # looked past the last: the length is compared too), ``PlanBuilder.reach``
    reach: int = -1

    @staticmethod
    def take(bld, index: int, segs: list, max_end: float | None = None) -> "Checkpoint":
        """``max_end``: the latest end of the plan's tasks, when the caller kept it (a build
        taking many checkpoints scans each task once: :class:`EndScan`)."""
        tl = bld.tl
        reach = max(bld.reach, index - 1)
        read = tuple(segs[:reach + 1])
        if max_end is None:
            max_end = max(map(_END, tl.tasks), default=0.0)
        return Checkpoint(index, read, _kept_in(read, tl.kept),
                          bld.kept_use, PlanMark(tl, segs),
                          snap_state(bld.__dict__, len(tl.tasks)), max_end, reach)

    @property
    def plan(self) -> Plan:
        """The plan's containers at the checkpoint (made once, when asked: tests)."""
        p = self.__dict__.get("_plan")
        if p is None:
            p = self.__dict__["_plan"] = self.mark.plan(self.mark.small[-1])
        return p

    def fits(self, segs: list, kept: set, kept_use: dict, bound: float) -> bool:
        """May a build of ``segs`` (with these kept activations and ``bound``) start here? The
        first segments build alike when the segments they read are the same and keep the same
        of their outputs with the same bytes (the builder reads ``Plan.kept`` for the ops of
        the segment it builds, their producers and the later segments its late stores look at,
        ``kept_use`` for those segments): compared up to :attr:`reach`, not only the prefix (a
        late-store decision of the prefix's last segment reads the next one: session 30's
        ``later_points`` resumed a trial that changed it from the prefix before it, 35 637
        cycles where the full build gives 35 779; ``test_resume_reach``)."""
        n = self.reach + 1
        return self.index <= len(segs) and tuple(segs[:n]) == self.segs and \
            self.max_end < bound and _kept_in(self.segs, kept) == self.kept and \
            (kept_use is self.kept_use or _use_in(n, kept_use) == self.use())

    def use(self) -> dict:
        """The kept bytes per (TPB, segment) of the segments up to :attr:`reach`."""
        u = self.__dict__.get("_use")
        if u is None:
            u = self.__dict__["_use"] = _use_in(self.reach + 1, self.kept_use)
        return u

    def restore(self, bld, segs: list) -> None:
        """Put a copy of this state into the fresh builder ``bld`` (its plan becomes a copy of
        the checkpoint's, for ``segs``)."""
        bound = bld.bound
        tl = self.mark.plan(segs)
        bld.__dict__.update(unsnap_state(self.state))
        bld.bound = bound
        bld.tl = tl


class EndScan:
    """The latest end of a growing task list (``max(t.end for t in tasks)``, 0.0 when there is
    none), each task read once: the tasks before ``n`` were scanned, their latest end is ``m``."""

    __slots__ = ("n", "m")

    def __init__(self, n: int = 0, m: float = float("-inf")):
        self.n, self.m = n, m

    def of(self, tasks: list) -> float:
        if len(tasks) > self.n:
            m = max(map(_END, tasks[self.n:]))
            if m > self.m:
                self.m = m
            self.n = len(tasks)
        return self.m if self.n else 0.0


def _kept_in(segs: tuple, kept: set) -> frozenset:
    return frozenset(st.op for seg in segs for st in seg.stages if st.op in kept)


def _use_in(index: int, kept_use: dict) -> dict:
    return {k: v for k, v in kept_use.items() if k[1] < index}


def best_checkpoint(base: Plan | None, segs: list, kept: set, kept_use: dict,
                    bound: float, limit: int | None = None) -> Checkpoint | None:
    """The checkpoint of ``base`` with the longest prefix a build of ``segs`` may start from
    (``limit``: at most that many segments; a base of the other broadcast mode,
    ``keep.first_bcast_read``)."""
    if base is None:
        return None
    # the latest first: the first that fits is the answer (``fits`` costs a prefix comparison)
    for cp in sorted(base.checkpoints.values(), key=_INDEX, reverse=True):
        if (limit is None or cp.index <= limit) and cp.fits(segs, kept, kept_use, bound):
            return cp
    return None


__all__ = ["Checkpoint", "PlanMark", "best_checkpoint", "copy_state", "copy_plan", "copy_busy",
           "snap_state", "unsnap_state"]
