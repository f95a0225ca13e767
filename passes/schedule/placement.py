"""Placement in space and time: choose segments, TPB groups, splits and mini-tensor counts.

The search (deterministic for a given seed):

1. **Segmentation** of the ops (topological order) into segments that run one after another.
   ``data-parallel``: one op per segment on all TPBs. ``pipeline``: maximal chains of up to
   ``max_stages`` connected ops become pipelines (paper Fig. 14: OP1..OPn on different TPBs, mini-
   tensors streaming through them). ``single``: one op per segment on one TPB. ``auto``: dynamic
   programming over all segmentations (segments of up to ``max_stages`` ops), each candidate segment
   costed by its best configuration, so data-parallel and pipelined segments mix per subgraph.
2. **Configuration of a segment** by greedy construction + local search (hill climbing over a fixed
   number of moves: a data-parallel op's neighbours enumerated in a fixed order, first improvement,
   :meth:`.search.Search._dp_climb`; a pipeline's moves drawn from a seeded RNG): a data-parallel op starts
   on all TPBs with the column split
   that keeps TCU-friendly widths; a pipeline gets TPBs in proportion to each stage's work, in
   contiguous TPB ranges (so neighbouring stages share a cluster and their DTDU traffic stays
   intra-cluster), light vector stages may share the TPBs of the stage before them (different units
   of one TPB). Moves: shift TPBs between stages, toggle co-location, change the column split, double
   or halve the number of mini-tensors, halve/double the TPB count of a data-parallel op.
3. Every candidate is costed by building its tasks and list-scheduling them (``timeline.py``): the
   same model that gives the final prediction, so the search optimises what is reported.
4. **Search budget** (``SEARCH_TASKS``): the work of the search is the number of tasks its builds
   create (a build's cost is linear in it). Once the search of ``auto`` has built that many, it
   stops exploring: the candidate pipelines of the DP are costed by their greedy start only, the
   chosen ones are not refined, a data-parallel op gets its systematic candidates (starts, K
   chunks, K splits, resident activations) but no random moves, the smaller TPB pools are not
   tried. ResNet-18 224 builds 0.49 M tasks (so the models of the test suite keep their
   plans); a LLaMA2-7B W8A8 prefill layer built 2 M at 32 tokens for a 3.4 k-instruction program
   (a task costs ~30 us of CPU: the 128-token layer took 1225 s wall), ~30x that at 1024 tokens.
   Session 30: no measured graph reaches the budget any more (the most ``Scheduler.tasks_built``
   held whenever the search asked ``Search.spent()``: ResNet-18 224 0.41 M, ResNet-50 1.15 M, the
   1024-token W8A8 prefill layer's two forms 1.21 M / 1.43 M -- shared costs and recipes count
   what a build would create, a floor that answers counts nothing), so their plans do
   not depend on it; it stays the guard for graphs larger than these.

Modules: the search (steps 1-4) is :class:`.search.Search`; the refinements of the whole plan
after it are in :mod:`.refine` (and the modules named there); this module is the driver
(:func:`schedule`: the TPB pools, the search on each, the refinements in order) and
:class:`Placement`, what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from m100.targets.m100.machine import Machine

from .background import background
from .cost import CostModel
from .gemv_chunks import finer_gemv_chunks
from .gemv_runs import unchunk_gemv_runs
from .graph import OpGraph, ScheduleError
from .ksplit_refine import whole_parts
from .narrow_vectors import narrow_vector_ops
from .pipe_starts import pipe_starts
from .plan import Plan
from .refine import (keep_activations, kept_copies, spread_segments, trial_points, unchunk,
                     weights_once, widen_gemvs)
from .search import STRATEGIES, Search
from .segment import SegmentCfg
from .side_by_side import side_by_side
from .sibling_tiling import sibling_tilings
from .timeline import Scheduler
from .widen_shared import widen_shared_gemvs
from .wshare import share_gemv_chunks

#: tasks the search may build before it stops exploring (see the module doc, item 4)
SEARCH_TASKS_DEFAULT = 4_000_000
SEARCH_TASKS = SEARCH_TASKS_DEFAULT
#: a smaller TPB pool is not searched when its TCU floor (:func:`tcu_bound`) reaches this share
#: of the best whole plan so far (:func:`_pools`; a search cut, not a bound: docs/speed-log.md,
#: session 31, ppool); 1.0: only when the floor reaches the plan itself (a sound skip)
POOL_SKIP = 0.7


@dataclass
class Placement:
    strategy: str
    segments: list[SegmentCfg]
    timeline: Plan  # the list-scheduled plan (what the emitter emits)
    machine: Machine
    tpbs: tuple[int, ...]
    evaluations: int = 0
    graph: OpGraph | None = field(default=None, repr=False, compare=False)  # what was placed


def available_tpbs(machine: Machine, tpbs: int = 0, clusters: int = 0) -> tuple[int, ...]:
    """The TPBs the schedule may use: the first ``clusters`` clusters, at most ``tpbs`` TPBs."""
    n = machine.num_tpbs
    if clusters:
        if clusters > machine.clusters:
            raise ScheduleError(f"clusters={clusters} but machine '{machine.name}' has "
                                f"{machine.clusters}")
        n = min(n, clusters * machine.tpbs_per_cluster)
    if tpbs:
        if tpbs > machine.num_tpbs:
            raise ScheduleError(f"tpbs={tpbs} but machine '{machine.name}' has {machine.num_tpbs}")
        n = min(n, tpbs)
    return tuple(range(n))


def schedule(g: OpGraph, machine: Machine, tpbs: int = 0, clusters: int = 0,
             strategy: str = "auto", seed: int = 0, max_stages: int = 4,
             iters: int = 24, prefetch_share: float | None = None,
             tail_prefetch: bool = False) -> Placement:
    """Place ``g`` on ``machine``; returns the chosen segments and their predicted timeline.
    ``prefetch_share``: the HBSM share weight prefetch and kept activations may fill (default
    ``list_schedule.PREFETCH_HBSM_SHARE``); ``tail_prefetch``: ``Scheduler.tail_prefetch``."""
    if strategy not in STRATEGIES:
        raise ScheduleError(f"unknown strategy '{strategy}' (known: {', '.join(STRATEGIES)})")
    if not g.ops:
        raise ScheduleError("the graph has no op to schedule")
    pool = available_tpbs(machine, tpbs, clusters)
    best: tuple[float, list[SegmentCfg], Plan, Scheduler] | None = None
    evals = 0
    first: Search | None = None
    cm = CostModel(machine)
    for sub in _pools(pool, strategy):
        if best is not None and tcu_bound(cm, g, len(sub)) >= POOL_SKIP * best[0]:
            continue  # its TCUs alone need (nearly: :data:`POOL_SKIP`) as long as the best plan
        if first is not None and first.spent():
            break  # the search budget is used up
        s = Search(g, machine, sub, seed=seed, max_stages=max_stages, iters=iters,
                   prefetch_share=prefetch_share)
        if first is None:
            first = s
            s.sched.tail_prefetch = tail_prefetch
        else:  # segment costs do not depend on the pool: share them and the tilings
            s.sched, s.cache, s.errors, s.shared = first.sched, first.cache, first.errors, \
                first.shared
        s.fuse_tcu = strategy == "auto"
        if strategy == "auto":  # the DP costs candidate pipelines by their greedy start only
            s.pipe_iters = 4
            s.budget = SEARCH_TASKS
        segs = s.run(strategy)
        tl = s.sched.build(segs, checkpoints=trial_points(segs))
        if strategy == "auto":
            base = segs
            for narrow in (False, True):
                spread = spread_segments(base, sub, s.ops, narrow)
                if spread != base:
                    tl2 = s.sched.build(spread, checkpoints=trial_points(spread))
                    if tl2.makespan < tl.makespan:
                        segs, tl = spread, tl2
        evals += s.evaluations
        if best is None or tl.makespan < best[0]:
            best = (tl.makespan, segs, tl, s)
    assert best is not None
    search = best[3]
    segs, tl = unchunk(search.sched, best[1], best[2])
    tl, keep = keep_activations(search.sched, segs, tl)
    segs, tl = weights_once(search, segs, tl, keep)
    segs, tl = widen_gemvs(search, segs, tl, keep, pool)
    segs, tl = unchunk_gemv_runs(search, segs, tl, keep)
    segs, tl = narrow_vector_ops(search, segs, tl, keep)
    segs, tl = share_gemv_chunks(search, segs, tl, keep)
    segs, tl = widen_shared_gemvs(search, segs, tl, keep, pool)
    segs, tl = finer_gemv_chunks(search, segs, tl, keep)
    segs, tl = side_by_side(search, segs, tl, keep, pool)  # per-head chains on TPB windows
    segs, tl = sibling_tilings(search, segs, tl, keep)  # gate / up: each other's tiling
    segs, tl = whole_parts(search, segs, tl, keep)
    segs, tl, keep = pipe_starts(search, segs, tl, keep)  # vector pipelines at their greedy start
    segs, tl = background(search, segs, tl, keep)  # unread output transposes last, in chunks
    tl, keep = kept_copies(search.sched, segs, tl, keep)
    tl.checkpoints = {}  # only the trials above resume from them
    search.sched.recent.clear()
    return Placement(strategy, segs, tl, machine, pool, evals, graph=g)


def tcu_bound(cm: CostModel, g: OpGraph, n_tpbs: int) -> float:
    """A lower bound of the makespan of any plan of ``g`` on ``n_tpbs`` TPBs: every MAC of a
    contraction is done by a TCU at no more than its peak rate for the operand type
    (``CostModel.tcu_cycles`` pads to whole tiles and adds latency: never less), so some TPB's
    TCU is busy at least the total over ``n_tpbs``. Grouped convs are left out (their column
    parts may hold partial groups). The search skips a smaller pool whose bound already reaches
    the best plan (ResNet-18 224: 14 TPBs need >= 1.0 M cycles, 56 TPBs reach 0.90 M)."""
    total = 0.0
    for op in g.ops:
        if op.unit not in ("tcu.matmul", "tcu.conv2d") or op.attrs.get("groups", 1) != 1:
            continue
        acts = g.act_inputs(op)
        dt = acts[0].dtype if acts else g.out(op).dtype
        total += cm.op_macs(g, op) / cm.peak_macs_per_cycle(dt)
    return total / max(1, n_tpbs)


def _pools(pool: tuple[int, ...], strategy: str) -> list[tuple[int, ...]]:
    """The TPB pools the search runs on: all available TPBs, then (but for ``single``) the first
    half and quarter of them. The search costs each segment in isolation and sums; on the whole
    plan (segments waiting for each other, inputs written by the segment before) the same search
    on fewer TPBs can win (ResNet-18 64x64: 56 TPBs predicted 823 864 cycles, 14 TPBs 799 548),
    and a smaller pool is a schedule the search could have chosen: the best whole plan is kept.
    :func:`schedule` does not search a smaller pool whose :func:`tcu_bound` is >= :data:`POOL_SKIP`
    (0.7) of the best plan so far. That is a cut, not a bound (session 31: no sound bound found;
    the TCU and DMA floors along a dependency path reach 1.04 M of the 1.55 M cycles ResNet-50's
    28-TPB pool would have to beat). Picked on ResNet-50 (0.74, its pool's plan 1.31x the kept
    one), ResNet-18 224 (0.89 / 1.42x) and small graphs whose winners were at <= 0.60 (a conv
    chain 14x14x64 on 14 TPBs); checked on 60 other graph x machine runs (120 smaller pools:
    fuzz graphs, the LLaMA test graphs, conv chains and MLPs of other shapes and batches,
    ResNet-18 32-224, at 56 and 28 TPBs): the 25 winners at <= 0.35, every pool at >= 0.65
    lost by >= 18 % (docs/speed-log.md, session 31, ppool). It spares ResNet-50
    ~1.45 CPU-s of ``schedule``'s 10.1 and ResNet-18 ~0.76 of 4.1; the 7B layers' smaller pools
    were skipped by the bound already."""
    out = [pool]
    n = len(pool)
    if strategy != "single" and n >= 16:
        out += [pool[:n // 2], pool[:n // 4]]
    return out


__all__ = ["Placement", "STRATEGIES", "available_tpbs", "schedule", "Search", "tcu_bound",
           "keep_activations", "kept_copies", "unchunk", "weights_once", "widen_gemvs"]
