"""Segment costs shared between structurally equal candidates (the search's second cache).

The search (:class:`.search.Search`) costs each candidate segment by building it in isolation
(``Scheduler.build([seg], isolated=True, bound=...)``). Many candidates are the same configuration
of a *different* op of the same shape: the repeated blocks of a CNN stage (ResNet-18 224: 1664
configurations costed, 505 of them build exactly the tasks of another one -- conv5, conv6, conv9
... on the same TPBs). An isolated build reads the graph only through the segment's ops and the
tensors they name: each op's unit, attributes, epilogue, inputs and outputs; each tensor's shape,
dtype and kind; whether its producer is a stage of the segment (which one) or outside; whether it
has readers outside the segment; and the graph's layout tables where they name these ops and
tensors (session 29): a tensor's entries in ``views`` / ``strided`` / ``wmap`` / ``cviews`` /
``rmap`` (the root they name, a tensor of the key with its own entries) and ``wroots`` (its
scattered strides) -- where the bytes live (``segment.memory_of``) and whether a store is a box of
a plain result (``list_schedule.boxed_store``); an op's ``view_ops`` / ``in_place`` / ``chunks`` /
``causal`` entries (the chain's ops as stages of the segment). The views' offsets and element
strides are not in it: only the emitter and whole-plan builds read them. :func:`segment_key` is
exactly that, with op and tensor names replaced by their position in the segment (``Op`` and
``Tensor`` fields are read generically, so a field added later enters the key; a name is never
part of it -- it only names tasks and errors). Equal keys: equal task streams, so equal makespans
and equal early stops. (Before session 29 the tables were left out: on the 7B W8A8 prefill layer
the V projection, whose output root is scattered into DDR, was costed from the K projection's
builds, output in SRAM -- 24 candidates per form 0.03-7 % off; the final plans happened to be the
same. ``test_a_root_scattered_into_ddr_is_keyed_apart``.)

:class:`SharedCosts` keeps, per key, the running maximum of the task ends of the longest build so
far (all of it, or up to the task that met the build's bound). For a new bound it answers what a
build would: the first task whose end reaches the bound (``BoundExceeded`` with that end, that
many tasks built), else the makespan of a complete build -- or nothing (then the caller builds)
when the stored build stopped below the new bound. The search counts the tasks it would have
built (``Scheduler.tasks_built``, its budget), so its course is the same as building every
candidate; only builds that fail (``ScheduleError``: the error names the op) are not shared.
``test_shared_costs`` checks the key against full builds of every candidate of real searches.

Carried across searches (:func:`carried`): the key holds every input of an isolated build but the
machine, so inside ``with carried():`` every :class:`SharedCosts` made for the same machine shares
one table. ``m100-pipeline`` schedules a model again with a smaller prefetch share when
hbsm-allocate can not pack the first program (ResNet-50 224); isolated builds never read the
share (no prefetch, no kept activations), so the second search answers its candidates from the
first one's builds -- and still counts the tasks they would have created, so it takes the same
course as a search from scratch (``test_carried_search_gives_the_same_program``). Across the models
of ``driver.compile_least`` too (session 29: the two ``o_quant`` forms of ``m100 bench llm``'s
W8A8 prefill layer, one graph but for the attention output's quantize): the key holds every input
of an isolated build, the graph's layout tables included, so the second form answers the
segments it shares with the first from the first's builds (``test_compile_least``).
"""

from __future__ import annotations

from bisect import bisect_left
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields
from itertools import accumulate

from .graph import Op, OpGraph, Tensor
from .segment import SegmentCfg, StageCfg

_OP_FIELDS = tuple(f.name for f in fields(Op) if f.name not in ("name", "loc"))
_TENSOR_FIELDS = tuple(f.name for f in fields(Tensor) if f.name != "name")
_STAGE_FIELDS = tuple(f.name for f in fields(StageCfg) if f.name != "op")


def segment_key(g: OpGraph, ops: dict[str, Op], producers: dict[str, Op],
                consumers: dict[str, list[Op]], seg: SegmentCfg) -> tuple | None:
    """The structure of ``seg`` an isolated build reads (module doc), or None when an attribute
    is not hashable (the candidate is then not shared)."""
    stage_of = {st.op: i for i, st in enumerate(seg.stages)}
    local: dict[str, int] = {}
    tensors: list = []

    def tid(name: str) -> int:
        i = local.get(name)
        if i is None:
            i = local[name] = len(local)
            tensors.append(None)  # (its layout may name other tensors: they follow it)
            t = g.tensors[name]
            prod = producers.get(name)
            if prod is not None and prod.name in stage_of:  # made here: is it read outside?
                users = consumers.get(name, ())
                src = (stage_of[prod.name], prod.outputs.index(name), bool(users),
                       any(u.name not in stage_of for u in users))
            else:
                src = None if prod is None else -1
            tensors[i] = (tuple(getattr(t, f) for f in _TENSOR_FIELDS), src, layout(name))
        return i

    def layout(name: str) -> tuple:
        """A tensor's entries in the graph's layout tables as an isolated build reads them
        (session 29): the root each names (a tensor of the key, with its own entries: where
        the bytes live, ``segment.memory_of``, follows them to a root whose kind, size and
        scattered strides decide SRAM or DDR; a view's readers wait for its root's writers)
        and the scattered strides (``wroots``, ``segment.bank_bound``) -- not the offsets and
        element strides of the views, which only the emitter and whole-plan builds read
        (``PlanBuilder._late_reads``): the heads' views of one root share their costs."""
        out = []
        for tab in _LAYOUT_TABLES:
            v = getattr(g, tab).get(name)
            if v is not None:
                out.append((tab, tid(v[0])))
        w = g.wroots.get(name)
        if w is not None:
            out.append(("wroots", w))
        return tuple(out)

    def canon(v):
        if isinstance(v, str):
            return ("tensor", tid(v)) if v in g.tensors else v
        if isinstance(v, (tuple, list)):
            return (type(v).__name__,) + tuple(canon(x) for x in v)
        if isinstance(v, dict):
            return ("dict",) + tuple(sorted((k, canon(x)) for k, x in v.items()))
        return v

    stages = []
    try:
        for st in seg.stages:
            op = ops[st.op]
            stages.append((tuple(getattr(st, f) for f in _STAGE_FIELDS),
                           tuple(canon(getattr(op, f)) for f in _OP_FIELDS),
                           _op_layout(g, op.name, stage_of)))
    finally:
        canon = tid = layout = None  # noqa: F841 -- their cells: the cycle freed by reference counts (_NO_CYCLE)
    key = (seg.kind, tuple(stages), tuple(tensors))
    try:
        hash(key)
    except TypeError:
        return None
    return key


#: the graph's tables keyed by a tensor whose entry is (root tensor, ...) (``OpGraph``)
_LAYOUT_TABLES = ("views", "strided", "wmap", "cviews", "rmap")


def _op_layout(g: OpGraph, name: str, stage_of: dict[str, int]) -> tuple:
    """The graph's entries of an op: a view op, its inputs written in place, its chunks, its
    causal chain (role, k, the chain's ops as stages of the segment, -1 outside)."""
    cz = g.causal.get(name)
    return (name in g.view_ops, tuple(sorted(g.in_place.get(name, ()))), g.chunks.get(name),
            None if cz is None else (cz[0], cz[1], tuple(stage_of.get(x, -1) for x in cz[2])))


def op_key(g: OpGraph, op: Op) -> tuple | None:
    """The structure of ``op`` alone: its fields but the name and location, every tensor it
    names replaced by its position among them and its shape, dtype and kind (as in
    :func:`segment_key`), or None when an attribute is not hashable. What the tiler
    (:func:`.partition.tile_piece`) and the cost model read of an op and its graph is a function
    of it: two ops with equal keys get equal tilings but for the op name
    (``Scheduler.tile``)."""
    local: dict[str, int] = {}
    tensors: list[tuple] = []

    def canon(v):
        if isinstance(v, str):
            if v not in g.tensors:
                return v
            i = local.get(v)
            if i is None:
                i = local[v] = len(local)
                t = g.tensors[v]
                tensors.append(tuple(getattr(t, f) for f in _TENSOR_FIELDS))
            return ("tensor", i)
        if isinstance(v, (tuple, list)):
            return (type(v).__name__,) + tuple(canon(x) for x in v)
        if isinstance(v, dict):
            return ("dict",) + tuple(sorted((k, canon(x)) for k, x in v.items()))
        return v

    try:
        key = (tuple(canon(getattr(op, f)) for f in _OP_FIELDS), tuple(tensors))
    finally:
        canon = None  # noqa: F841 -- its own cell: the cycle freed by reference counts (_NO_CYCLE)
    try:
        hash(key)
    except TypeError:
        return None
    return key


# machine -> the runs table of every SharedCosts for it, while :func:`carried` is active
_CARRIED: ContextVar[dict | None] = ContextVar("m100_carried_costs", default=None)


@contextmanager
def carried():
    """Inside: searches for the same machine share their isolated builds (module doc). Nested
    inside another ``carried()`` (``driver.compile_least`` around ``m100-pipeline``'s): the
    outer one's tables."""
    if _CARRIED.get() is not None:
        yield
        return
    token = _CARRIED.set({})
    try:
        yield
    finally:
        _CARRIED.reset(token)


class SharedCosts:
    """Per segment key: the prefix maxima of the task ends of its longest build (module doc).
    ``machine``: the machine the builds are costed for (the tables of :func:`carried` are per
    machine; None: never carried)."""

    def __init__(self, g: OpGraph, producers: dict[str, Op], ops: dict[str, Op],
                 machine=None):
        self.g = g
        self.producers = producers
        self.consumers = g.consumers()
        self.ops = ops
        self.keys: dict[SegmentCfg, tuple | None] = {}
        # key -> (prefix maxima of the ends, complete): complete = every task of the build
        self.runs: dict[tuple, tuple[list[float], bool]] = {}
        tables = _CARRIED.get()
        if tables is not None and machine is not None:
            self.runs = tables.setdefault(machine, self.runs)
        self.hits = 0

    def key(self, seg: SegmentCfg) -> tuple | None:
        k = self.keys.get(seg, False)
        if k is False:
            k = self.keys[seg] = segment_key(self.g, self.ops, self.producers, self.consumers,
                                             seg)
        return k

    def lookup(self, seg: SegmentCfg, bound: float) -> tuple[float, bool, int] | None:
        """(cost, exact, tasks a build would create) of a build of ``seg`` with ``bound``, or
        None (unknown: build it)."""
        k = self.key(seg)
        run = self.runs.get(k) if k is not None else None
        if run is None:
            return None
        pm, complete = run
        i = bisect_left(pm, bound)  # the first task whose end reaches the bound
        if i < len(pm):
            self.hits += 1
            return pm[i], False, i
        if complete:
            self.hits += 1
            return (pm[-1] if pm else 0.0), True, len(pm)
        return None

    def store(self, seg: SegmentCfg, ends: list[float], complete: bool) -> None:
        """The task ends of a build of ``seg``, in creation order (stopped: + the end of the task
        that met the bound, not built)."""
        k = self.key(seg)
        if k is None:
            return
        old = self.runs.get(k)
        if old is None or (complete and not old[1]) or (not old[1] and len(ends) > len(old[0])):
            self.runs[k] = (list(accumulate(ends, max)), complete)


__all__ = ["op_key", "segment_key", "SharedCosts", "carried"]
