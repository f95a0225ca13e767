"""Per-segment recipes: a compute segment's build recorded once and replayed in later whole-plan builds.

The whole-plan refinements (:mod:`.refine`, ``pipe_starts`` ...) rebuild the same segment
configurations after each trial point (ResNet-50: ~1 500 segment builds in 61 whole-plan builds,
~70 % of them a configuration already built at the same index before the same later segments).
A segment's *generation* -- which tasks it creates, with which fields and dependencies, which
pieces -- reads the builder's state; only the list scheduling (:meth:`.list_schedule.
ListScheduler.put`: the times, the DMA engines, the DRB) and the choices among tasks by their
ends (``_touch``: the next segment's barrier, ``_wrote``: the last-ending writer) read the times.
So a recording of the generation (a :class:`Recipe`) is the same build wherever the state it
read is the same up to the numbering of the earlier tasks:

* every read of the cross-segment state the generation makes goes through a :class:`RecDict`
  (the builder's ``barrier``, ``written``, ``n_written``, ``wboxes``, ``by_op``, ``bar_at``,
  ``kept_use`` and the plan's ``prefetch``, swapped in while a segment is recorded) which logs the first access of
  each key: a read with its value (the key), or a write (later reads of that key read the
  segment's own work: deterministic, except ``written``, whose value is a choice by the times:
  such a segment is not recorded); ``tail_pending`` (a handful of entries) is keyed whole;
* the rest of what the generation reads is the segment configuration, the later segments
  (late stores decide by the next ones: the plan's segment list is a :class:`RecList` while a
  segment is recorded, which logs the segments read by index and the length if read; the key
  holds them by identity -- until session 29 it held the whole suffix ``segs[si:]``, so a trial
  that changed a later segment replayed none of the segments before it), the kept activations
  and their broadcast mode as the generation asked about them (``Plan.kept`` is a
  :class:`RecSet` while a segment is recorded: each op asked about with the answer, whether any
  is kept; ``Plan.kept_bcast`` is read through ``PlanBuilder._kept_bcast``, logged -- until
  session 35 the key held the whole set and mode, so no build of another keep mode replayed),
  the scheduler's caches (functions of the configuration) -- all in the key;
* a replay maps the recorded external task ids to the ids the reads give now (an injective map:
  equal values read equal, distinct distinct) and creates the recorded tasks in order through
  ``put`` (the same list scheduling as a full build), then the recorded ``_touch`` and
  ``_wrote`` calls in their order (their choices compare task ends, which are final once the
  tasks are created), the pieces, ``by_op``, ``wboxes``, ``tail_at``, ``tail_dma`` ...

A recording is refused (the segment is always built in full) when a task depends on an earlier
task no logged read gave (a read the proxies do not see), when it reads ``written`` after writing
it, or when it leaves late stores pending (paused generators: ``late``, ``pend``).
Which builds record is a choice of speed alone (:func:`record_from`: most recordings of a trial
that is not kept are never replayed). ``test_recipe.py``: every whole-plan build of the schedule
of the seven compile_same models (and fuzz graphs) with recipes is the same plan
(``Plan.to_json``) as without, and with :data:`CHECK` every replayed segment is also built in
full and compared, task by task.
"""

from __future__ import annotations

from dataclasses import fields

from itertools import islice

from .graph import view_names
from .plan import PlanPiece, PlanTask

#: every replay is checked against a full build of the segment (tests: ``test_recipe.py``)
CHECK = False
#: recipes kept per (segment index, configuration)
MAX_VARIANTS = 4

_W = object()  # a key's first access was a write
_MISSING = object()
_TAINT = object()  # log key: a time-dependent value of the segment's own was read
_LEN = object()  # log key of :class:`RecList`: the length of the segment list was read
_ANY = object()  # log key of :class:`RecSet`: whether any activation is kept was read
_BCAST = object()  # kept-activation log key: ``Plan.kept_bcast`` was read

#: the builder's dicts whose reads are logged (``plan.prefetch`` too: "prefetch")
PROXIED = ("barrier", "written", "n_written", "wboxes", "by_op", "kept_use")
_PIECE_FIELDS = tuple(f.name for f in fields(PlanPiece))
_P_COMPUTE, _P_TASKS, _P_GROUP = (_PIECE_FIELDS.index(f) for f in ("compute", "tasks", "group"))
_BY_OP, _WBOXES = PROXIED.index("by_op"), PROXIED.index("wboxes")


class RecDict:
    """A builder dict seen through a log while a segment is recorded: the first access of each
    key is logged (see the module doc); ``time``: reading a key after writing it taints the
    recording (``written``). Only the accesses the generation makes are defined (another kind
    of access is an AttributeError or TypeError, never an unlogged read)."""

    __slots__ = ("d", "log", "time")

    def __init__(self, d: dict, log: dict, time: bool = False):
        self.d, self.log, self.time = d, log, time

    def _read(self, k):
        log = self.log
        e = log.get(k, _MISSING)
        if e is _MISSING:
            log[k] = self.d.get(k, _MISSING)
        elif e is _W and self.time:
            log[_TAINT] = True

    def __getitem__(self, k):
        self._read(k)
        return self.d[k]

    def get(self, k, default=None):
        self._read(k)
        return self.d.get(k, default)

    def __contains__(self, k):
        self._read(k)
        return k in self.d

    def __setitem__(self, k, v):
        if k not in self.log:
            self.log[k] = _W
        self.d[k] = v

    def __iter__(self):
        raise TypeError("internal: iteration over a logged builder dict (recipe.RecDict)")

    def __len__(self):
        raise TypeError("internal: len() of a logged builder dict (recipe.RecDict)")

    def setdefault(self, k, v=None):
        d = self.d
        if k not in self.log:
            self.log[k] = d[k] if k in d else _W
        return d.setdefault(k, v)


class RecList:
    """The plan's segment list seen through a log while a segment is recorded: the segments its
    generation looks at (the late stores decide by the next ones, :meth:`.build_segments.
    PlanBuilder._late_ok` ...) by index, and the length if it is read (an index out of range
    reads it too). Only indexing by an int and ``len`` are defined (iteration, slices: a
    TypeError, never an unlogged read)."""

    __slots__ = ("l", "log")

    def __init__(self, lst: list, log: dict):
        self.l, self.log = lst, log

    def __getitem__(self, j):
        if type(j) is not int:
            raise TypeError("internal: a segment list read by a slice (recipe.RecList)")
        lst = self.l
        if not 0 <= j < len(lst):
            self.log.setdefault(_LEN, len(lst))
            return lst[j]  # (an index from the end, or the IndexError)
        s = lst[j]
        self.log.setdefault(j, s)
        return s

    def __len__(self):
        n = len(self.l)
        self.log.setdefault(_LEN, n)
        return n

    def __iter__(self):
        raise TypeError("internal: iteration over the logged segment list (recipe.RecList)")


class RecSet:
    """The plan's kept activations (``Plan.kept``, op names) seen through a log while a segment is
    recorded: each op asked about (``in``) with the answer, and whether any is kept (``bool``,
    :data:`_ANY`). The recipe's key holds these answers, not the whole set (until session 35 it
    held the set and ``Plan.kept_bcast``: the builds of other keep modes replayed nothing). Only
    ``in`` and ``bool`` are defined (iteration, ``len``, set operations: an error, never an
    unlogged read)."""

    __slots__ = ("s", "log")

    def __init__(self, kept, log: dict):
        self.s, self.log = kept, log

    def __contains__(self, k) -> bool:
        v = k in self.s
        self.log.setdefault(k, v)
        return v

    def __bool__(self) -> bool:
        v = bool(self.s)
        self.log.setdefault(_ANY, v)
        return v

    def __iter__(self):
        raise TypeError("internal: iteration over the logged kept activations (recipe.RecSet)")

    def __len__(self):
        raise TypeError("internal: len() of the logged kept activations (recipe.RecSet)")

    def __eq__(self, other):
        raise TypeError("internal: the logged kept activations compared (recipe.RecSet)")

    __hash__ = None  # type: ignore[assignment]


class _Unread:
    """``Plan.kept_bcast`` while a segment is recorded: the generation reads it through
    ``PlanBuilder._kept_bcast`` (logged); any other read is an error, never an unlogged one."""

    __slots__ = ()

    def __bool__(self):
        raise TypeError("internal: Plan.kept_bcast read past PlanBuilder._kept_bcast while a "
                        "segment is recorded (recipe)")

    __eq__ = __bool__  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]


_UNREAD = _Unread()


def _same_kept(seen: tuple, tl) -> bool:
    """Does ``tl`` answer the kept-activation reads a recording logged (:class:`RecSet`,
    ``PlanBuilder._kept_bcast``) as they were answered then?"""
    kept = tl.kept
    for k, v in seen:
        if k is _ANY:
            if bool(kept) != v:
                return False
        elif k is _BCAST:
            if tl.kept_bcast != v:
                return False
        elif (k in kept) != v:
            return False
    return True


def _swap(bld, logs: list | None) -> None:
    """Put the builder's logged dicts behind :class:`RecDict`\\ s with the logs ``logs`` (in
    :data:`PROXIED` order, then the plan's ``prefetch``), or back (None)."""
    d = bld.__dict__
    if logs is None:
        for name in PROXIED:
            d[name] = d[name].d
        return
    for name, log in zip(PROXIED, logs):
        d[name] = RecDict(d[name], log, name == "written")


def _piece_key(p: PlanPiece) -> tuple:
    """What a later segment may read of a finished piece of an earlier one, its task ids
    apart (``compute``); ``tasks`` and ``group`` only the emitter reads."""
    return (p.op, p.band, p.col, p.tpb, p.r0, p.r1, p.c0, p.c1, p.segment, p.out_dims,
            p.store, p.a_share, p.b_share, p.w_share, p.w_cols, p.kpart, p.kparts, p.reduce,
            p.cfull, p.kx, p.kfirst)


def _ids(name: str, v) -> tuple[object, list[int]]:
    """(the id-free part, the task ids) of a logged value ``v`` of dict ``name``."""
    if v is _MISSING:
        return _MISSING, []
    if name in ("barrier", "written"):
        return None, [v]
    if name == "wbar":
        return (None, []) if v is None else (len(v), list(v))
    if name == "wboxes":
        return tuple(b for b, _ in v), [w for _, w in v]
    if name == "by_op":
        return tuple(_piece_key(p) for p in v), [p.compute for p in v]
    return v, []  # n_written, kept_use, prefetch: plain values


def record_from(segs: list, tl, base, checkpoints) -> int:
    """The first index of ``segs`` whose segments a whole-plan build records (:meth:`.timeline.
    Scheduler.build`; ``tl``: its plan, with its kept activations chosen). A recording is
    replayed only by a later build of the same configuration at the same index (with the same
    answers to the kept-activation reads it made, and the same state read): a trial (a build
    with a ``base`` or a reference plan, the plan it would replace) whose kept activations differ
    from the base's records nothing -- if it is not kept, mostly builds of its own keep mode
    would replay it; else it records the segments after the last one that differs from the
    base's (counted from the end; the changed ones are new configurations that only a kept trial
    leaves in the plan; the ones before were built by the builds before it). A build without a
    base records from its first checkpoint: the later trials resume there, the segments before
    it are built again only by builds from scratch. Only the speed depends on it: a segment not
    recorded is built in full (ResNet-50: 125 recordings instead of session 28's 605, of which
    102 were ever replayed; 87 of the 125 are). Session 35 measured recording those trials too
    (the key holds the kept-activation answers, so other modes' builds may replay them):
    ResNet-50 replays 843 -> 936 and 93 fewer segments built in full, but 96 more recordings,
    whose logging views cost more calls than the replays saved (28.93 M -> 29.16 M calls a
    schedule; with this rule 28.87 M): not kept."""
    if base is None:
        return min(checkpoints, default=0)
    if base.kept != tl.kept or base.kept_bcast != tl.kept_bcast:
        return len(segs)
    old = base.segments
    k = 0
    for a, b in zip(reversed(segs), reversed(old)):
        if a is not b:
            break
        k += 1
    return len(segs) - k


class Recipe:
    __slots__ = ("suffix", "kept", "reads", "ones", "wbars", "tail", "ext", "tasks", "touch",
                 "wrote",
                 "pieces", "by_op", "wboxes", "tail_at", "tail_dma", "carry", "groups",
                 "late_bytes", "reach")


class RecipeBook:
    """The recipes of one scheduler's whole-plan builds, by (segment index, configuration)."""

    def __init__(self):
        self.book: dict[tuple, list[Recipe]] = {}
        self.replayed = 0
        self.recorded = 0
        self.refused = 0

    # ------------------------------------------------------------------ recording
    def start(self, bld) -> dict:
        """Start logging the generation of the segment being built (after its set-up)."""
        logs = [{} for _ in range(len(PROXIED) + 1)]
        rec = dict(logs=logs, start=len(bld.tl.tasks), groups_at=bld.n_groups, fill=[],
                   touch=[], wrote=[], tail=dict(bld.tail_pending),
                   tail_dma=len(bld.tl.tail_dma), tail_at=len(bld.tail_at),
                   held=len(bld.held_use), carry=bld.seg_at in bld.tl.carry,
                   reach=bld.reach)
        put, touch, wrote, pf_wait = bld.put, bld._touch, bld._wrote, bld._pf_wait
        tl = bld.tl
        kl = rec["kept_log"] = {}
        bcast = rec["bcast"] = tl.kept_bcast
        rec["kept_set"] = tl.kept
        pl = logs[-1]
        written, n_written = bld.written, bld.n_written  # (the plain dicts)
        wl, nl = logs[PROXIED.index("written")], logs[PROXIED.index("n_written")]
        fill = rec["fill"]

        def rec_put(t):
            fill.append(bld.fill_gap)
            return put(t)

        def rec_touch(tpb, tid):
            rec["touch"].append((tpb, tid))
            touch(tpb, tid)

        def rec_wrote(tensor, tid):
            # (its own reads are the times' choice, not the generation's: not logged)
            rec["wrote"].append((tensor, tid))
            for t in (tensor,) + view_names(bld.g, tensor):
                wl.setdefault(t, _W)
            nl.setdefault(tensor, _W)
            pw, pn = bld.written, bld.n_written
            bld.written, bld.n_written = written, n_written
            try:
                wrote(tensor, tid)
            finally:
                bld.written, bld.n_written = pw, pn

        def rec_pf_wait(si, tpb):
            v = pf_wait(si, tpb)
            pl.setdefault((si, tpb), v)
            return v

        def rec_kept_bcast():
            kl.setdefault(_BCAST, bcast)
            return bcast

        _swap(bld, logs)
        tl.kept, tl.kept_bcast = RecSet(tl.kept, kl), _UNREAD
        bld._kept_bcast = rec_kept_bcast
        rec["segs"] = {}
        bld.tl.segments = RecList(bld.tl.segments, rec["segs"])
        bld.put, bld._touch, bld._wrote, bld._pf_wait = rec_put, rec_touch, rec_wrote, \
            rec_pf_wait
        return rec

    def stop(self, bld, rec: dict) -> None:
        """Stop logging (also after a build stopped inside the segment)."""
        _swap(bld, None)
        tl = bld.tl
        if type(tl.segments) is RecList:
            tl.segments = tl.segments.l
        tl.kept, tl.kept_bcast = rec["kept_set"], rec["bcast"]
        for a in ("put", "_touch", "_wrote", "_pf_wait", "_kept_bcast"):
            bld.__dict__.pop(a, None)

    def finish(self, bld, si: int, seg, pieces: list, rec: dict) -> None:
        """Keep the recording of segment ``si`` just built: what it created and read, as it is
        (encoded at its first use, :func:`_compile`: most recordings are never replayed)."""
        tl = bld.tl
        if bld.late[0] or bld.pend or len(bld.held_use) != rec["held"] or si in tl.late or \
                si in tl.late_reads:
            self.refused += 1
            return
        S = rec["start"]
        logs = rec["logs"]
        by_op, wboxes = bld.by_op, bld.wboxes
        raw = dict(rec, si=si, tasks=tl.tasks[S:], pieces=list(pieces),
                   by_op={k: list(by_op[k]) for k, v in logs[_BY_OP].items() if v is _W},
                   wboxes={k: list(wboxes[k]) for k, v in logs[_WBOXES].items() if v is _W},
                   tail_at=_added(bld.tail_at, rec["tail_at"]),
                   tail_dma=_added(tl.tail_dma, rec["tail_dma"]),
                   carry=(si in tl.carry) and not rec["carry"], groups=bld.n_groups - rec["groups_at"],
                   late_bytes=dict(bld.late_bytes), suffix=tuple(rec["segs"].items()),
                   kept=tuple(rec["kept_log"].items()),
                   # the furthest segment it looked at, if past the builder's before (the
                   # suffix holds that segment, or the length: the same in a replay)
                   reach=bld.reach if bld.reach > rec["reach"] else -1)
        self.recorded += 1
        lst = self.book.setdefault((si, id(seg)), [])
        if len(lst) >= MAX_VARIANTS:
            lst.pop(0)
        lst.append(raw)

    # ------------------------------------------------------------------ replay
    def find(self, bld, si: int, seg) -> tuple[Recipe, list[int]] | None:
        """A recipe of ``segs[si]`` whose key holds in ``bld``'s state now (after the
        segment's set-up: its tile plans and prefetch), with the recipe's external task ids
        mapped to this build's."""
        lst = self.book.get((si, id(seg)))
        if not lst:
            return None
        tl = bld.tl
        segs = tl.segments
        for i in range(len(lst) - 1, -1, -1):
            r = lst[i]
            raw = type(r) is dict
            if not _same_segments(r["suffix"] if raw else r.suffix, segs):
                continue
            if not _same_kept(r["kept"] if raw else r.kept, tl):
                continue
            if raw:
                r = lst[i] = _compile(r)
                if r is None:
                    self.refused += 1
                    del lst[i]
                    continue
            m = _match(bld, r)
            if m is not None:
                return r, m
        return None

    def replay(self, bld, si: int, pieces: list, r: Recipe, ext: list[int]) -> None:
        """Create segment ``si``'s tasks and state as the recording did (module doc)."""
        tl = bld.tl
        S = len(tl.tasks)
        bld.piece = None
        put = bld.put
        tasks = tl.tasks
        tab = ext + list(range(S, S + len(r.tasks)))  # a dependency's index -> its id
        for (kind, unit, tpb, op, tensor, nb, cyc, deps, seg, band, col, dst, src, dstm, macs,
             role, fill) in r.tasks:
            bld.fill_gap = fill
            put(PlanTask(len(tasks), kind, unit, tpb, op, tensor, nb, cyc,
                         [tab[d] for d in deps], seg, band, col, dst, src, dstm, -1, macs, role))
        bld.fill_gap = False

        for x, t in r.touch:
            bld._touch(x, tab[t])
        for x, t in r.wrote:
            bld._wrote(x, tab[t])
        g0 = bld.n_groups
        for d in r.pieces:
            d = list(d)
            c = d[_P_COMPUTE]
            d[_P_COMPUTE] = -1 if c is None else tab[c]
            d[_P_TASKS] = [tab[x] for x in d[_P_TASKS]]
            x = d[_P_GROUP]
            d[_P_GROUP] = -1 if x is None else g0 + x
            pieces.append(PlanPiece(*d))
        bld.n_groups = g0 + r.groups
        for k, idx in r.by_op.items():
            bld.by_op[k] = [pieces[i] for i in idx]
        for k, v in r.wboxes.items():
            bld.wboxes[k] = [(b, tab[w]) for b, w in v]
        for k, v in r.tail_at:
            bld.tail_at[k] = tab[v]
        for k in r.tail:
            bld.tail_pending.pop(k, None)
        for k, x, v in r.tail_dma:
            tl.tail_dma[(S + k, x)] = tab[v]
        if r.carry:
            tl.carry.add(si)
        bld.late_bytes = dict(r.late_bytes)
        if r.reach > bld.reach:  # (:attr:`.build_segments.PlanBuilder.reach`)
            bld.reach = r.reach
        self.replayed += 1


def _compile(raw: dict) -> Recipe | None:
    """A recording (:meth:`RecipeBook.finish`) encoded for replays: every task id as an index
    into the replay's id table -- the external ids its reads gave (``ext``), then the segment's
    own tasks --, so a replay maps each with one list read (``tab``); the pieces as their
    fields in order; None when it can not be replayed (module doc)."""
    S, si = raw["start"], raw["si"]
    reads = []
    ext: dict[int, int] = {}  # external task id -> its index in the recipe's ``ext``
    for name, log in zip(PROXIED + ("wbar",), raw["logs"]):
        if _TAINT in log:
            return None
        for k, v in log.items():
            if v is _W:
                continue
            # (a list read, by_op / wboxes, is taken as it is at the end: a list of an earlier
            # segment's that this one appended to holds ids of its own: refused below)
            form, ids = _ids(name, v)
            for i in ids:
                if i >= S:  # a value of the segment's own (time-dependent)
                    return None
                ext.setdefault(i, len(ext))
            reads.append((name, k, form, ids))
    tail = raw["tail"]
    for k, v in tail.items():
        ext.setdefault(v, len(ext))

    ne = len(ext)

    def enc(d: int) -> int:
        """A task id as its index into the replay's id table (:meth:`RecipeBook.replay`: the
        external ids in ``ext`` order, then the segment's own tasks)."""
        if d >= S:
            return ne + d - S
        i = ext.get(d)
        if i is None:
            raise _Unseen(d)
        return i
    tasks = raw["tasks"]
    if len(tasks) != len(raw["fill"]):
        return None
    try:
        tt = [(t.kind, t.unit, t.tpb, t.op, t.tensor, t.nbytes, t.cycles,
               [enc(d) for d in t.deps], t.segment, t.band, t.col, t.dst_tpbs, t.src, t.dst,
               t.macs, t.role, f) for t, f in zip(tasks, raw["fill"])]
        touch = [(x, enc(t)) for x, t in raw["touch"]]
        wrote = [(x, enc(t)) for x, t in raw["wrote"]]
        g0 = raw["groups_at"]
        pieces = raw["pieces"]
        at = {id(p): i for i, p in enumerate(pieces)}
        pt = []
        for p in pieces:  # PlanPiece's fields in order (positional at the replay)
            d = [getattr(p, f) for f in _PIECE_FIELDS]
            d[_P_COMPUTE] = enc(d[_P_COMPUTE]) if d[_P_COMPUTE] >= 0 else None
            d[_P_TASKS] = [enc(x) for x in d[_P_TASKS]]
            if d[_P_GROUP] >= 0:
                if d[_P_GROUP] < g0:
                    return None
                d[_P_GROUP] -= g0
            else:
                d[_P_GROUP] = None
            pt.append(tuple(d))
        by_op = {}
        for k, lst in raw["by_op"].items():
            idx = [at.get(id(p)) for p in lst]
            if None in idx:
                return None
            by_op[k] = idx
        wboxes = {k: [(b, enc(w)) for b, w in v] for k, v in raw["wboxes"].items()}
        # (both only gain keys of this segment: its (TPB, si), its tasks' ids)
        tail_at = [(k, enc(v)) for k, v in raw["tail_at"]]
        tail_dma = [(k[0] - S, k[1], enc(v)) for k, v in raw["tail_dma"]]
        if any(k[1] != si for k, _ in tail_at) or any(k < 0 for k, _, _ in tail_dma):
            return None
    except _Unseen:
        return None
    r = Recipe()
    r.suffix, r.kept = raw["suffix"], raw["kept"]
    r.reads, r.ones, r.wbars = _split_reads(reads)
    r.tail, r.ext = tail, list(ext)
    r.tasks, r.touch, r.wrote, r.pieces = tt, touch, wrote, pt
    r.by_op, r.wboxes = by_op, wboxes
    r.tail_at, r.tail_dma = tail_at, tail_dma
    r.carry, r.groups, r.late_bytes = raw["carry"], raw["groups"], raw["late_bytes"]
    r.reach = raw["reach"]
    return r


def _split_reads(reads: list) -> tuple[list, list, list]:
    """A recipe's logged reads as :func:`_match` reads them: (the others, as logged; per dict of
    single task ids -- ``barrier``, ``written`` -- its name and its ``(key, the id or _MISSING)``
    pairs; the ``wbar`` reads as ``((segment, TPB), None or the ids)``). Session 36: ResNet-50's
    ~960 matches a schedule read ~36 k ``barrier`` and ~30 k ``wbar`` values; each went through
    :func:`_ids` and :func:`_bind` calls (~3 us a read)."""
    rest, wbars = [], []
    ones: dict[str, list] = {}
    for name, k, form, ids in reads:
        if name in ("barrier", "written"):
            ones.setdefault(name, []).append((k, ids[0] if ids else _MISSING))
        elif name == "wbar":
            wbars.append((k, None if form is None else tuple(ids)))
        else:
            rest.append((name, k, form, ids))
    return rest, list(ones.items()), wbars


def _same_segments(seen: tuple, segs: list) -> bool:
    """Does ``segs`` have the segments (by identity) and the length a recording read
    (:class:`RecList`)?"""
    n = len(segs)
    for j, s in seen:
        if j is _LEN:
            if s != n:
                return False
        elif j >= n or segs[j] is not s:
            return False
    return True


def _added(d: dict, n: int) -> list:
    """The items of ``d`` inserted after its first ``n``."""
    return list(islice(reversed(d.items()), len(d) - n))[::-1]


class _Unseen(Exception):
    pass


_why: list = []


def _bind(amap: dict, used: dict, a: int, b: int) -> bool:
    """Map the recipe's task ``a`` to this build's ``b``, keeping the map injective; False when
    ``a`` is mapped elsewhere or ``b`` is another's image."""
    x = amap.get(a)
    if x is None:
        if used.get(b, a) != a:
            return False
        amap[a] = b
        used[b] = a
        return True
    return x == b


def _match(bld, r: Recipe) -> list[int] | None:
    """The recipe's external ids mapped to ``bld``'s (``r.ext`` order), if every logged read
    gives the same value now up to an injective renumbering of task ids; else None."""
    amap: dict[int, int] = {}
    used: dict[int, int] = {}
    d = bld.__dict__
    # (the map is built pair by pair: whether the pairs form an injective map, and the map, do
    # not depend on the order they come in, so the reads are grouped by kind)
    for name, pairs in r.ones:  # one task id or none (``_ids``' barrier / written)
        get = d[name].get
        for k, a in pairs:
            b = get(k, _MISSING)
            if b is _MISSING or a is _MISSING:
                if a is not b:
                    return None
                continue
            x = amap.get(a)  # (:func:`_bind` written out)
            if x is None:
                if used.get(b, a) != a:
                    return None
                amap[a] = b
                used[b] = a
            elif x != b:
                return None
    pf_wait = bld._pf_wait
    for k, want in r.wbars:  # None, or the end tasks (``_ids``' wbar)
        v = pf_wait(*k)
        if v is None or want is None:
            if v is not want:
                return None
            continue
        if len(v) != len(want):
            return None
        for a, b in zip(want, v):
            x = amap.get(a)
            if x is None:
                if used.get(b, a) != a:
                    return None
                amap[a] = b
                used[b] = a
            elif x != b:
                return None
    for name, k, form, ids in r.reads:
        v = bld._pf_wait(*k) if name == "wbar" else d[name].get(k, _MISSING)
        f2, ids2 = _ids(name, v)
        if f2 != form or len(ids2) != len(ids):
            return None
        for a, b in zip(ids, ids2):
            if not _bind(amap, used, a, b):
                return None
    tp = bld.tail_pending
    if len(tp) != len(r.tail):
        return None
    for k, a in r.tail.items():
        b = tp.get(k)
        if b is None or not _bind(amap, used, a, b):
            return None
    try:
        return [amap[a] for a in r.ext]
    except KeyError:
        return None


__all__ = ["CHECK", "RecDict", "RecipeBook", "check_replay"]


def check_replay(bld, si: int, seg, pieces: list, r: Recipe, ext: list[int]) -> None:
    """:data:`CHECK`: replay segment ``si``, build it in full from a copy of the state before,
    and require the same tasks (fields, dependencies, times, engines), pieces and builder
    state the later segments read; an AssertionError names the first difference."""
    from .build_segments import PlanBuilder
    from .resume import copy_plan, copy_state
    state = copy_state(bld.__dict__)
    plan = copy_plan(bld.tl, bld.tl.segments)
    plan.pieces[-1] = []
    S = len(bld.tl.tasks)
    other = PlanBuilder(bld.s, plan)
    other.__dict__.update(state)
    other.tl = plan
    other.bound = bld.bound
    err = None
    try:
        other._compute_segment(si, seg, plan.pieces[-1])
    except Exception as e:  # (the replay must raise the same)
        err = e
    try:
        bld.book.replay(bld, si, pieces, r, ext)
    except Exception as e:
        assert err is not None and type(e) is type(err) and \
            getattr(e, "end", None) == getattr(err, "end", None), \
            f"recipe: segment {si}: the replay raised {e!r}, the full build {err!r}"
        raise
    assert err is None, f"recipe: segment {si}: the full build raised {err!r}, the replay not"
    a, b = bld.tl, other.tl
    assert len(a.tasks) == len(b.tasks), f"recipe: segment {si}: task count"
    for x, y in zip(a.tasks[S:], b.tasks[S:]):
        assert x.to_dict() == y.to_dict() and x.crit_pred == y.crit_pred, \
            f"recipe: segment {si}: task {x.id}: {x.to_dict()} != {y.to_dict()}"
    assert [p.to_dict() for p in pieces] == [p.to_dict() for p in b.pieces[-1]], \
        f"recipe: segment {si}: pieces"
    for p, q in zip(pieces, b.pieces[-1]):
        assert _piece_key(p) == _piece_key(q) and p.compute == q.compute, \
            f"recipe: segment {si}: piece {p.to_dict()}"
    for name in ("written", "n_written", "seg_touch", "tail_at", "tail_pending", "free",
                 "last_on_res", "drb_ends", "late_bytes", "n_groups", "hbsm_use", "held_use",
                 "barrier", "bar_at", "kept_use", "reach"):
        x, y = getattr(bld, name), getattr(other, name)
        assert (dict(x) if isinstance(x, dict) else x) == (dict(y) if isinstance(y, dict) else y), \
            f"recipe: segment {si}: {name}"
    for name in ("wboxes", "by_op"):
        x, y = bld.__dict__[name], other.__dict__[name]
        assert set(x) == set(y), f"recipe: segment {si}: {name} keys"
        for k in x:
            u, v = x[k], y[k]
            if name == "by_op":
                u, v = [(p.to_dict(), _piece_key(p)) for p in u], [(p.to_dict(), _piece_key(p))
                                                                   for p in v]
            assert u == v, f"recipe: segment {si}: {name}[{k}]"
    for name in ("tail_dma", "drb_wait", "carry", "prefetch", "late", "late_reads", "plans"):
        x, y = getattr(a, name), getattr(b, name)
        assert (dict(x) if isinstance(x, dict) else x) == (dict(y) if isinstance(y, dict) else y), \
            f"recipe: segment {si}: plan.{name}"
    x, y = bld.dma_busy, other.dma_busy
    for u, v in zip(x, y):
        assert vars(u) if not hasattr(u, "__slots__") else True
    assert bld.drb_use.__dict__ == other.drb_use.__dict__ if hasattr(bld.drb_use, "__dict__") \
        else True, f"recipe: segment {si}: drb_use"
