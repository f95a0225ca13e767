"""Placement in space and time: choose segments, TPB groups, splits and mini-tensor counts.

The search (deterministic for a given seed):

1. **Segmentation** of the ops (topological order) into segments that run one after another.
   ``data-parallel``: one op per segment on all TPBs. ``pipeline``: maximal chains of up to
   ``max_stages`` connected ops become pipelines (paper Fig. 14: OP1..OPn on different TPBs, mini-
   tensors streaming through them). ``single``: one op per segment on one TPB. ``auto``: dynamic
   programming over all segmentations (segments of up to ``max_stages`` ops), each candidate segment
   costed by its best configuration, so data-parallel and pipelined segments mix per subgraph.
2. **Configuration of a segment** by greedy construction + local search (hill climbing with a seeded
   RNG over a fixed number of moves): a data-parallel op starts on all TPBs with the column split
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
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from m100.targets.m100.machine import Machine

from .cost import CostModel, ceil_div
from .gemv_runs import int4_gemvs_by_weight, unchunk_gemv_runs, widened_stages
from .narrow_vectors import narrow_vector_ops
from .gemv_chunks import finer_gemv_chunks
from .wshare import share_gemv_chunks
from .widen_shared import widen_shared_gemvs
from .graph import Op, OpGraph, ScheduleError, geometry
from .ksplit_refine import whole_parts
from .partition import col_splits
from .plan import Plan
from .side_by_side import side_by_side
from .segment import (SegmentCfg, StageCfg, act_resident_ok, ksplit_ok, ksplit_stages,
                      streamable)
from .shared_costs import SharedCosts
from .timeline import BoundExceeded, Scheduler

INF = float("inf")

DMA_UNITS = ("dtdu.copy", "dtdu.fill")  # data movement done memory -> memory by CCB DMA
# CSU routines (gather, arg-max) also run memory -> memory, as a segment of their own
MEM_UNITS = DMA_UNITS + ("csu.gather", "csu.argmax", "csu.topk")

STRATEGIES = ("auto", "data-parallel", "pipeline", "single")
#: tasks the search may build before it stops exploring (see the module doc, item 4)
SEARCH_TASKS_DEFAULT = 4_000_000
SEARCH_TASKS = SEARCH_TASKS_DEFAULT


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


class Search:
    def __init__(self, g: OpGraph, machine: Machine, tpbs: tuple[int, ...], seed: int = 0,
                 max_stages: int = 4, iters: int = 24, prefetch_share: float | None = None):
        self.g = g
        self.cm = CostModel(machine)
        self.sched = Scheduler(self.cm, g, prefetch_share)
        self.tpbs = tpbs
        self.seed = seed
        self.max_stages = max_stages
        self.iters = iters
        # cost of each segment costed so far: (cycles, exact); not exact: the build stopped at a
        # bound, the makespan is >= cycles (a candidate that could not beat the best it was
        # compared with)
        self.cache: dict[SegmentCfg, tuple[float, bool]] = {}
        self.errors: dict[str, ScheduleError] = {}  # first reason an op could not be placed
        self.evaluations = 0
        self.ops = {o.name: o for o in g.ops}
        self.fuse_tcu = False  # may a TCU stage share the TPBs of the stage before it (auto only)
        self.pipe_iters = 0  # local-search moves per candidate pipeline inside the auto DP
        self.budget = float("inf")  # tasks the search may build (:data:`SEARCH_TASKS`, auto)
        # costs shared between structurally equal segments (:mod:`.shared_costs`)
        self.shared = SharedCosts(g, self.sched.producers, self.sched.ops, machine)

    # ------------------------------------------------------------------ costing
    def spent(self) -> bool:
        """The search budget is used up (module doc, item 4)."""
        return self.sched.tasks_built >= self.budget

    def cost(self, seg: SegmentCfg, bound: float = INF) -> float:
        """The predicted cycles of ``seg`` alone, or, when that is >= ``bound``, some value
        >= ``bound`` (the build stops once a task ends at ``bound``): callers that only ask
        ``cost(cand, best) < best`` get the same answer as from the exact cost, for less."""
        hit = self.cache.get(seg)
        if hit is not None and (hit[1] or hit[0] >= bound):
            return hit[0]
        if hit is None:
            self.evaluations += 1
        shared = self.shared.lookup(seg, bound)  # a structurally equal segment's build
        if shared is not None:
            c, exact, n = shared
            self.sched.tasks_built += n  # the tasks the build would have created
            self.cache[seg] = (c, exact)
            return c
        exact = True
        try:
            tl = self.sched.build([seg], isolated=True, bound=bound)
            c = tl.makespan
            self.shared.store(seg, [t.end for t in tl.tasks], True)
        except BoundExceeded as b:
            c, exact = b.end, False
            self.shared.store(seg, [t.end for t in b.plan.tasks] + [b.end], False)
        except ScheduleError as e:
            c = INF
            if len(seg.stages) == 1:
                self.errors.setdefault(seg.stages[0].op, e)
        self.cache[seg] = (c, exact)
        return c

    # ------------------------------------------------------------------ data-parallel op
    def _bands_for(self, op: Op, gr: int, mult: int) -> int:
        rows = geometry(self.g, op).rows
        return max(1, min(rows, gr * mult))

    def _dp_cfg(self, op: Op, k: int, gc: int, mult: int, first: int = 0,
                chunked: bool = False, ks: int = 1) -> SegmentCfg | None:
        tp = self.tpbs[first:first + k]
        if len(tp) < k or k % (gc * ks):
            return None
        gr = k // (gc * ks)
        rows = geometry(self.g, op).rows
        if gr > rows or gr < 1:
            return None
        return SegmentCfg((StageCfg(op.name, tp, gc, self._bands_for(op, gr, mult),
                                    chunked=chunked, ks=ks),), "data-parallel")

    def _ksplit_cfgs(self, op: Op, kmax: int) -> list[SegmentCfg]:
        """Configurations that split ``op``'s reduction over 2..4 TPBs (``StageCfg.ks``): tried
        when its output has fewer natural TCU tiles than there are TPBs (small M x N: the late
        layers of a CNN, GEMVs), where rows x columns alone leave TPBs idle or tiles half empty."""
        if not ksplit_ok(self.g, op):
            return []
        geo = geometry(self.g, op)
        mc = self.cm.machine
        tiles = ceil_div(geo.rows * geo.row_elems, mc.tcu_tile_m) * ceil_div(geo.cols,
                                                                              mc.tcu_tile_n)
        if tiles >= kmax:
            return []
        out = []
        for ks in (2, 3, 4):
            kk = kmax // ks
            if kk < 1:
                continue
            for gc in col_splits(self.cm, self.g, op, kk):
                gr = min(kk // gc, geo.rows)
                cfg = self._dp_cfg(op, gr * gc * ks, gc, 1, ks=ks)
                if cfg is not None and cfg not in out:
                    out.append(cfg)
        return out

    def _act_resident_cfgs(self, op: Op, kmax: int) -> list[SegmentCfg]:
        """One-round configurations of a matmul that keep each band's rows whole in the HBSM
        while B streams past in column tiles (``StageCfg.act_resident``, the tile width: 1, 2
        or 4 TCU column tiles): A is read once and B once per TPB row, where the usual row x
        column tiles read A once per column tile and B once per row tile (int8 4096^3: 134 ->
        101 MB of DMA). Bands are whole TCU row tiles."""
        if not act_resident_ok(self.g, op):
            return []
        geo = geometry(self.g, op)
        mc = self.cm.machine
        units = ceil_div(geo.rows, ceil_div(mc.tcu_tile_m, geo.row_elems))
        out = []
        for gc in col_splits(self.cm, self.g, op, kmax):
            gr = kmax // gc
            if gr > units:
                continue  # every band at least one row tile
            for tc in (mc.tcu_tile_n, 2 * mc.tcu_tile_n, 4 * mc.tcu_tile_n):
                if 2 * tc > geo.cols // gc:
                    break  # at least two column tiles to stream
                out.append(SegmentCfg((StageCfg(op.name, self.tpbs[:gr * gc], gc, gr,
                                                act_resident=tc),), "data-parallel"))
        return out

    @staticmethod
    def _k_candidates(kmax: int) -> list[int]:
        """TPB counts tried for one op: all, halvings, and powers of two (regular splits)."""
        ks = {kmax}
        k = kmax
        while k > 1:
            k //= 2
            ks.add(k)
        p = 1
        while p <= kmax:
            ks.add(p)
            p *= 2
        return sorted(ks)

    def best_data_parallel(self, op: Op, max_k: int | None = None) -> tuple[SegmentCfg, float]:
        rng = random.Random(f"{self.seed}:{op.name}")
        geo = geometry(self.g, op)
        kmax = min(max_k or len(self.tpbs), len(self.tpbs))
        # greedy start: as many TPBs as rows x column splits allow
        starts = []
        for kk in self._k_candidates(kmax):
            if 2 * kk < kmax:
                continue
            for gc in col_splits(self.cm, self.g, op, kk):
                gr = kk // gc
                k = min(gr, geo.rows) * gc
                cfg = self._dp_cfg(op, k, gc, 1)
                if cfg is not None and cfg not in starts:
                    starts.append(cfg)
        if not starts:
            cfg = self._dp_cfg(op, min(kmax, geo.rows), 1, 1) or self._dp_cfg(op, 1, 1, 1)
            starts = [cfg]
        if "w4" in op.attrs:  # int4 weights stream: every start also with its K in chunks
            starts += [replace(c, stages=(replace(c.stages[0], chunked=True),)) for c in starts]
        best, best_c = starts[0], self.cost(starts[0])
        for cfg in starts[1:]:  # the first cheapest start
            c = self.cost(cfg, best_c)
            if c < best_c:
                best, best_c = cfg, c
        tcu = op.unit in ("tcu.matmul", "tcu.conv2d")
        if tcu:  # the best start with its K in chunks (the weight streams under the compute)
            st = best.stages[0]
            cand = replace(best, stages=(replace(st, chunked=not st.chunked),))
            c = self.cost(cand, best_c)
            if c < best_c:
                best, best_c = cand, c
            kbest = None
            for cand in self._ksplit_cfgs(op, kmax):  # the reduction over several TPBs
                c = self.cost(cand, best_c)
                if c < best_c:
                    best, best_c = cand, c
                    kbest = cand
            if kbest is not None:  # the same with finer chunks (a shorter tail)
                cand = replace(kbest, stages=(replace(kbest.stages[0], chunked=True),))
                c = self.cost(cand, best_c)
                if c < best_c:
                    best, best_c = cand, c
        for _ in range(0 if self.spent() else self.iters // 2):  # local search (module doc 4)
            st = best.stages[0]
            k, gc, ch, kp = len(st.tpbs), st.gc, st.chunked, st.ks
            mult = max(1, st.bands // st.gr)
            move = rng.choice(("k-", "k+", "b+", "b-", "gc", "ch") if tcu else
                              ("k-", "k+", "b+", "b-", "gc"))
            if move in ("k-", "k+"):
                ks = sorted({x for x in self._k_candidates(kmax)})
                i = ks.index(k) if k in ks else 0
                i = max(0, i - 1) if move == "k-" else min(len(ks) - 1, i + 1)
                k2 = ks[i]
                gcs = col_splits(self.cm, self.g, op, k2)
                pick = [x for x in gcs if x <= gc] or [1]
                cand = self._dp_cfg(op, k2, max(pick) if rng.random() < 0.5 else rng.choice(gcs),
                                    mult, chunked=ch)
            elif move == "b+":
                cand = self._dp_cfg(op, k, gc, mult * 2, chunked=ch, ks=kp)
            elif move == "b-":
                cand = self._dp_cfg(op, k, gc, max(1, mult // 2), chunked=ch, ks=kp)
            elif move == "ch":
                if kp > 1:
                    continue
                cand = self._dp_cfg(op, k, gc, mult, chunked=not ch)
            else:
                gcs = col_splits(self.cm, self.g, op, k // kp)
                cand = self._dp_cfg(op, k, rng.choice(gcs), mult, chunked=ch, ks=kp)
            if cand is None:
                continue
            c = self.cost(cand, best_c)
            if c < best_c:
                best, best_c = cand, c
        if tcu:  # after the local search (which never moves from one of these): the band rows
            # kept whole, B streamed past them
            for cand in self._act_resident_cfgs(op, kmax):
                c = self.cost(cand, best_c)
                if c < best_c:
                    best, best_c = cand, c
        if best_c == float("inf"):
            raise self.errors.get(op.name) or ScheduleError(f"op '{op.name}' could not be placed")
        return best, best_c

    # ------------------------------------------------------------------ pipelines
    def _work(self, op: Op) -> float:
        geo = geometry(self.g, op)
        return self.cm.piece_cycles(self.g, op, geo.rows, geo.cols)

    def _pipe_cfg(self, ops: list[Op], alloc: list[int], coloc: list[bool], gcs: list[int],
                  bands: int) -> SegmentCfg | None:
        stages = []
        pos = 0
        prev: tuple[int, ...] = ()
        for i, op in enumerate(ops):
            if coloc[i] and prev:
                tp = prev
            else:
                if alloc[i] < 1 or pos + alloc[i] > len(self.tpbs):
                    return None
                tp = self.tpbs[pos:pos + alloc[i]]
                pos += alloc[i]
            gc = gcs[i] if len(tp) % gcs[i] == 0 else 1
            rows = geometry(self.g, op).rows
            stages.append(StageCfg(op.name, tuple(tp), gc, max(1, min(rows, bands))))
            prev = tuple(tp)
        return SegmentCfg(tuple(stages), "pipeline")

    def best_pipeline(self, ops: list[Op], iters: int | None = None) -> tuple[SegmentCfg, float]:
        rng = random.Random(f"{self.seed}:" + ",".join(o.name for o in ops))
        n = len(ops)
        T = len(self.tpbs)
        work = [max(1.0, self._work(o)) for o in ops]
        coloc = [False] * n
        for i in range(1, n):  # light non-TCU stages ride on the previous stage's TPBs
            if not ops[i].unit.startswith("tcu") and ops[i - 1].unit.startswith("tcu") and \
                    work[i] < 0.25 * work[i - 1]:
                coloc[i] = True
        own = [i for i in range(n) if not coloc[i]]
        if len(own) > T:
            raise ScheduleError(f"a pipeline of {len(own)} stages needs more than {T} TPBs")
        tot = sum(work[i] for i in own)
        alloc = [0] * n
        for i in own:
            alloc[i] = max(1, int(T * work[i] / tot))
        while sum(alloc) > T:
            j = max(own, key=lambda i: alloc[i])
            alloc[j] -= 1
        while sum(alloc) < T:
            j = max(own, key=lambda i: work[i] / alloc[i])
            alloc[j] += 1
        gcs = [1] * n
        min_rows = max(geometry(self.g, o).rows for o in ops)  # per-stage caps in _pipe_cfg
        bands = max(1, min(min_rows, max(alloc) * 2))
        best = self._pipe_cfg(ops, alloc, coloc, gcs, bands)
        if best is None:
            raise ScheduleError("internal: no initial pipeline")
        best_state = (alloc, coloc, gcs, bands)
        best_c = self.cost(best)
        for _ in range(self.iters if iters is None else iters):
            alloc, coloc, gcs, bands = (list(best_state[0]), list(best_state[1]),
                                        list(best_state[2]), best_state[3])
            move = rng.choice(("shift", "shift", "shift", "coloc", "bands+", "bands-", "gc"))
            if move == "shift":
                own = [i for i in range(n) if not coloc[i]]
                if len(own) < 2:
                    continue
                a, b = rng.sample(own, 2)
                d = max(1, alloc[a] // rng.choice((2, 4, 8)))
                if alloc[a] - d < 1:
                    continue
                alloc[a] -= d
                alloc[b] += d
            elif move == "coloc":
                i = rng.randrange(1, n) if n > 1 else 0
                if i == 0 or (ops[i].unit.startswith("tcu") and not self.fuse_tcu):
                    continue
                coloc[i] = not coloc[i]
                own = [x for x in range(n) if not coloc[x]]
                if coloc[i]:
                    alloc[own[-1] if own[-1] < i else own[0]] += alloc[i]
                    alloc[i] = 0
                else:
                    donor = max(own, key=lambda x: alloc[x] if x != i else -1)
                    if alloc[donor] < 2:
                        continue
                    alloc[i] = 1
                    alloc[donor] -= 1
            elif move == "bands+":
                bands = min(min_rows, bands * 2)
            elif move == "bands-":
                bands = max(1, bands // 2)
            else:
                i = rng.randrange(n)
                k = alloc[i] if not coloc[i] else 1
                opts = col_splits(self.cm, self.g, ops[i], max(1, k))
                gcs[i] = rng.choice(opts)
            cand = self._pipe_cfg(ops, alloc, coloc, gcs, bands)
            if cand is None:
                continue
            c = self.cost(cand, best_c)
            if c < best_c:
                best, best_c, best_state = cand, c, (alloc, coloc, gcs, bands)
        return best, best_c

    # ------------------------------------------------------------------ segmentation
    def connected(self, ops: list[Op]) -> bool:
        """Every op after the first streams an activation produced inside the run (and no op of the
        run is a memory-to-memory data movement)."""
        if any(o.unit in MEM_UNITS for o in ops):
            return False
        made = set(ops[0].outputs)
        for o in ops[1:]:
            if not any(t in made and streamable(self.g, o, t) for t in o.inputs):
                return False
            made.update(o.outputs)
        return True

    def segment_best(self, ops: list[Op], iters: int | None = None) -> tuple[SegmentCfg, float]:
        if len(ops) == 1 and ops[0].unit in MEM_UNITS:
            cfg = SegmentCfg((StageCfg(ops[0].name, (self.tpbs[0],)),), "dma")
            return cfg, self.cost(cfg)
        if len(ops) == 1:
            return self.best_data_parallel(ops[0])
        return self.best_pipeline(ops, iters)

    def run(self, strategy: str) -> list[SegmentCfg]:
        ops = self.g.ops
        if strategy == "single":
            return [self.segment_best([op])[0] if op.unit in MEM_UNITS else
                    self.best_data_parallel(op, max_k=1)[0] for op in ops]
        if strategy == "data-parallel":
            return [self.segment_best([op])[0] for op in ops]
        if strategy == "pipeline":
            segs = []
            i = 0
            while i < len(ops):
                j = i + 1
                while j < len(ops) and j - i < min(self.max_stages, len(self.tpbs)) and \
                        self.connected(ops[i:j + 1]):
                    j += 1
                segs.append(self.segment_best(list(ops[i:j]))[0])
                i = j
            return segs
        if strategy != "auto":
            raise ScheduleError(f"unknown strategy '{strategy}' (known: {', '.join(STRATEGIES)})")
        n = len(ops)
        best: list[tuple[float, int, SegmentCfg | None]] = [(0.0, -1, None)] + \
            [(float("inf"), -1, None)] * n
        for e in range(1, n + 1):
            for s in range(max(0, e - self.max_stages), e):
                run = list(ops[s:e])
                if len(run) > 1 and not self.connected(run):
                    continue
                if best[s][0] == float("inf"):
                    continue
                try:
                    # candidate pipelines are costed with a short search; the chosen ones are
                    # refined below with the full local search
                    cfg, c = self.segment_best(
                        run, (0 if self.spent() else self.pipe_iters) if len(run) > 1 else None)
                except ScheduleError:
                    if len(run) == 1:
                        raise
                    continue
                if best[s][0] + c < best[e][0]:
                    best[e] = (best[s][0] + c, s, cfg)
        segs = []
        e = n
        while e > 0:
            _, s, cfg = best[e]
            if cfg is None:
                raise ScheduleError("no schedule found for the graph")
            segs.append(cfg)
            e = s
        segs = segs[::-1]
        out = []
        for cfg in segs:
            if len(cfg.stages) > 1 and not self.spent():
                run = [self.ops[st.op] for st in cfg.stages]
                better, c = self.best_pipeline(run)
                cfg = better if c <= self.cost(cfg) else cfg
            out.append(cfg)
        return out


def schedule(g: OpGraph, machine: Machine, tpbs: int = 0, clusters: int = 0,
             strategy: str = "auto", seed: int = 0, max_stages: int = 4,
             iters: int = 24, prefetch_share: float | None = None) -> Placement:
    """Place ``g`` on ``machine``; returns the chosen segments and their predicted timeline.
    ``prefetch_share``: the HBSM share weight prefetch and kept activations may fill (default
    ``list_schedule.PREFETCH_HBSM_SHARE``)."""
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
        if best is not None and tcu_bound(cm, g, len(sub)) >= best[0]:
            continue  # its TCUs alone need longer than the best plan: it can not win
        if first is not None and first.spent():
            break  # the search budget is used up
        s = Search(g, machine, sub, seed=seed, max_stages=max_stages, iters=iters,
                   prefetch_share=prefetch_share)
        if first is None:
            first = s
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
    segs, tl = whole_parts(search, segs, tl, keep)
    tl, keep = kept_copies(search.sched, segs, tl, keep)
    tl.checkpoints = {}  # only the trials above resume from them
    return Placement(strategy, segs, tl, machine, pool, evals, graph=g)


def _unchunk_at(seg: SegmentCfg) -> bool:
    """:func:`unchunk` tries this segment: a chunked one-stage K split."""
    return seg.kind != "dma" and len(seg.stages) == 1 and seg.stages[0].chunked and \
        seg.stages[0].ks >= 2


def _weights_at(seg: SegmentCfg) -> bool:
    """:func:`weights_once` tries this segment: a one-stage K split on several TPB rows."""
    if seg.kind == "dma" or len(seg.stages) != 1:
        return False
    st = seg.stages[0]
    return st.ks >= 2 and st.gr >= 2 and not st.act_resident


def trial_points(segs: list[SegmentCfg], after: int = -1) -> set[int]:
    """The segments after ``after`` that :func:`unchunk` and :func:`weights_once` may change: a
    whole-plan build keeps a checkpoint before each, so that a trial that changes one rebuilds
    only from there (:mod:`.resume`)."""
    return {si for si, seg in enumerate(segs) if si > after and (_unchunk_at(seg) or
                                                                 _weights_at(seg))}


def keep_activations(sched: Scheduler, segs: list[SegmentCfg], tl: Plan) -> tuple[Plan, str]:
    """The plan of ``segs`` with activations kept in the producer TPBs' HBSM between segments
    (:mod:`.keep`) where the whole plan is shorter: tried for the tensors whose later readers
    are one-stage segments, then for all eligible ones; else ``tl`` (nothing kept). The search
    itself costs segments in isolation and compares plans without keeping. Returns the plan and
    its keep mode (``Scheduler.build``'s ``keep``)."""
    mode_of = ""
    for mode in ("one-stage", "all"):
        try:
            # resumed from the latest checkpoint before the first segment whose kept bytes differ
            tl2 = sched.build(segs, bound=tl.makespan, keep=mode, base=tl,
                              checkpoints=trial_points(segs))
        except BoundExceeded:
            continue
        if tl2.makespan < tl.makespan and tl2.kept:
            tl, mode_of = tl2, mode
    return tl, mode_of


def kept_copies(sched: Scheduler, segs: list[SegmentCfg], tl: Plan, keep: str
                ) -> tuple[Plan, str]:
    """The plan with the K chunks of kept activations that several column parts of a lockstep
    conv read moved by one mesh copy per reader (``keep`` + ``"+copies"``) instead of one DTDU
    broadcast per producer piece (``Plan.kept_bcast``), if that is shorter: the broadcasts take
    one DTDU's time instead of one per reader, but they share the DRB with the CCB DMA engines'
    weight broadcasts (``list_schedule``: ``RateProfile``). Tried once, on the final segments
    (the refinements before it choose with broadcasts)."""
    if not keep or not tl.kept:
        return tl, keep
    tl2 = sched.shorter(segs, tl, keep + "+copies")
    return (tl2, keep + "+copies") if tl2 is not None else (tl, keep)


#: weights_once: K parts per stage tried (a K split holds 1 / (gc * ks) of the weight per TPB)
MAX_KPARTS = 8
#: weights_once: whole-plan builds at most (each ~0.3 CPU-s on ResNet-18 224)
MAX_WEIGHT_TRIALS = 20
#: weights_once: candidates tried again after a later change was kept (one build each)
MAX_WEIGHT_RETRIES = 20


def weights_once(s: Search, segs: list[SegmentCfg], tl: Plan, keep: str
                 ) -> tuple[list[SegmentCfg], Plan]:
    """Fewer TPB rows for the K-split segments, so that each weight is held by fewer TPBs.

    A stage of ``gr`` TPB rows broadcasts each weight chunk of a column part to all ``gr`` rows
    (one DDR read, but ``gr`` copies in HBSM). The DDR traffic is the same, but the HBSM bytes
    the weights take are not: the weight prefetch across segments (``list_schedule.
    ListScheduler._prefetch``) stops where the HBSM share is full, and on ResNet-18 224 the layer-3/4 weights
    (gr 7 / 2: 2.4 MB per TPB against a 1.5 MB share) kept the CCB DMA engines idle while the
    TCU-bound early layers ran, then bound the late layers. With fewer rows and more K parts
    on the same TPBs (``gr * gc * ks`` unchanged) a TPB holds a smaller slice of the weight, so
    more of it loads early. The search costs segments in isolation, where this never shows (the
    inputs and weights are ready at cycle 0); here, per one-stage K-split segment with ``gr`` >
    1, largest weights first, the configuration of each smaller row count that is cheapest in
    isolation (K parts <= :data:`MAX_KPARTS`, whole chunks) replaces it in the whole plan, kept
    when the makespan drops (at most :data:`MAX_WEIGHT_TRIALS` builds; none once the search
    budget is spent: those graphs are the ones whose builds are expensive)."""
    if s.spent():
        return segs, tl
    g = s.g
    order = sorted((-sum(t.nbytes for t in g.weights(s.ops[seg.stages[0].op])), si)
                   for si, seg in enumerate(segs) if _weights_at(seg))
    trials = 0
    version = 0  # plan changes kept so far
    lost: list[tuple[int, int, SegmentCfg, SegmentCfg]] = []  # (version, si, seg, cand)
    for pos, (_w, si) in enumerate(order):
        if trials >= MAX_WEIGHT_TRIALS:
            break
        # checkpoints for the segments tried later (only those after this one: a trial that is
        # kept has the ones before it from the plan it replaces)
        later = {sj for _, sj in order[pos + 1:] if sj > si}
        seg = segs[si]
        st = seg.stages[0]
        op = s.ops[st.op]
        n = len(st.tpbs)
        rows = geometry(g, op).rows
        by_gr: dict[int, tuple[float, SegmentCfg]] = {}
        for ks in range(2, MAX_KPARTS + 1):
            # the parts' sum (+ bias, ReLU) is one CVU pipeline: at most cvu_max_stages stages
            if n % ks or ksplit_stages(op, ks) > s.cm.machine.cvu_max_stages:
                continue
            for gc in col_splits(s.cm, g, op, n // ks):
                gr = n // (ks * gc)
                if gr >= st.gr or gr > rows:
                    continue
                cand = replace(seg, stages=(replace(st, gc=gc, ks=ks, bands=gr, chunked=False),))
                c = s.cost(cand)
                if gr not in by_gr or c < by_gr[gr][0]:
                    by_gr[gr] = (c, cand)
        for gr in sorted(by_gr, reverse=True):
            if trials >= MAX_WEIGHT_TRIALS:
                break
            if by_gr[gr][0] == INF:
                continue
            trials += 1
            trial = segs[:si] + [by_gr[gr][1]] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep, base=tl, checkpoints=later)
            if tl2 is not None:
                segs, tl = trial, tl2
                version += 1
            else:
                lost.append((version, si, seg, by_gr[gr][1]))
    # a candidate that lost against the plan before a later change was kept may win now
    # (ResNet-18 224: conv36 on 1 x 8 x 7 loses before conv37 and conv31 move there, then wins);
    # retried, in the order they lost, until none of those compared with an older plan is left
    # (at most MAX_WEIGHT_RETRIES builds)
    retries = 0
    while retries < MAX_WEIGHT_RETRIES:
        stale = [x for x in lost if x[0] < version and segs[x[1]] is x[2]]
        if not stale:
            break
        lost = [x for x in lost if x[0] == version]
        for _v, si, seg, cand in stale:
            if retries >= MAX_WEIGHT_RETRIES:
                break
            if segs[si] is not seg:
                continue  # another row count of this segment was kept
            retries += 1
            trial = segs[:si] + [cand] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep, base=tl,
                                  checkpoints={x[1] for x in stale if x[1] > si})
            if tl2 is not None:
                segs, tl = trial, tl2
                version += 1
            else:
                lost.append((version, si, seg, cand))
    return segs, tl


#: widen_gemvs: whole-plan builds at most
MAX_WIDEN_TRIALS = 12
#: widen_gemvs: column splits tried per GEMV (the fewest TCU tiles per TPB first)
WIDEN_SPLITS = 2


def widen_gemvs(s: Search, segs: list[SegmentCfg], tl: Plan, keep: str, pool: tuple[int, ...]
                ) -> tuple[list[SegmentCfg], Plan]:
    """Int4-weight GEMVs (W4A16 decode) on more TPBs of the whole pool.

    A GEMV pads its one row to the TCU row granule (``tcu_row_granule``, 8 rows): a TPB
    dequantizes and multiplies ~64 int4 weights a cycle (~16 when it padded to the 32-row tile),
    so the compute of a GEMV's last weight chunk is a tail after its stream, and the down
    projection's is the decode layer's tail. The search costs segments in
    isolation and a smaller TPB pool can win the whole plan: LLaMA2-7B decode ran on 28 of the
    56 TPBs, the down projection (N = 4096) at 147 columns a TPB = 3 TCU column tiles. Here,
    per one-stage int4 GEMV, largest weight first, the column splits of the whole pool with
    fewer TCU tiles per TPB (at most :data:`WIDEN_SPLITS`, on the first and on the last TPBs of
    the pool: the last ones are those a smaller-pool plan leaves free, where the weight can
    prefetch early) replace it in the whole plan, kept when the makespan drops (at most
    :data:`MAX_WIDEN_TRIALS` builds; none once the search budget is spent). LLaMA2-7B W4A16
    decode: the down projection on 56 TPBs (74 columns, 2 tiles), 882 k -> 871 k predicted
    cycles a layer. (Splitting its K over TPBs as well, with f32 partial sums rounded once by
    the reduction, was tried: 877 k; the layer is bound by its DMA engines, which stream the
    down projection's weights after the gate/up ones whatever TPBs receive them.)"""
    if s.spent():
        return segs, tl
    trials = 0
    for si in int4_gemvs_by_weight(s, segs):
        for cand in widened_stages(s, segs[si], pool, WIDEN_SPLITS):
            if trials >= MAX_WIDEN_TRIALS:
                return segs, tl
            trials += 1
            trial = segs[:si] + [cand] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep)
            if tl2 is not None:
                segs, tl = trial, tl2
    return segs, tl


def unchunk(sched: Scheduler, segs: list[SegmentCfg], tl: Plan) -> tuple[list[SegmentCfg], Plan]:
    """The search costs each segment in isolation, where a contraction whose weight streams in
    more, smaller K chunks (``StageCfg.chunked``) starts computing sooner. In the whole program
    the weights are prefetched across segments (``list_schedule.ListScheduler._prefetch``) and arrive early
    anyway, while every extra transfer still pays a DMA latency on an engine the late layers are
    bound by. Per chunked one-stage K-split segment (``ks`` > 1: there the finer chunking
    multiplies the transfers of every K part), in order, the whole plan is rebuilt with the
    coarser chunking; the change is kept when the makespan is shorter (ResNet-18 224: 630k ->
    601k predicted cycles, 1.3 CPU-s; trying every chunked segment found nothing more there nor on
    ResNet-50, whose 18 CPU-s it took)."""
    for si, seg in enumerate(segs):
        if not _unchunk_at(seg):
            continue
        trial = segs[:si] + [replace(seg, stages=(replace(seg.stages[0], chunked=False),))] \
            + segs[si + 1:]
        try:
            tl2 = sched.build(trial, bound=tl.makespan, base=tl,
                              checkpoints=trial_points(trial, si))
        except BoundExceeded:
            continue
        if tl2.makespan < tl.makespan:
            segs, tl = trial, tl2
    return segs, tl


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


#: spread_segments moves runs of at least this many small contractions
RUN = 8


def spread_segments(segs: list[SegmentCfg], pool: tuple[int, ...],
                    ops: dict[str, Op], narrow: bool = False) -> list[SegmentCfg]:
    """The same segments with each small data-parallel contraction (at most a quarter of the pool)
    of a run of at least :data:`RUN` of them moved to the next free window of TPBs, round robin,
    instead of the first TPBs of the pool. The search costs
    segments in isolation, so it places every one at the start of the pool; a run of independent
    small ops (the per-head attention GEMVs of an LLM decode step: 32 ops of 1-4 TPBs each) then
    queues on the same TCUs one after the other although most TPBs are idle. Side by side they
    overlap. Tensors between segments go through memory, so where a segment runs changes no data
    path; :func:`schedule` keeps this plan only if its whole timeline is shorter.

    ``narrow``: each moved contraction runs on one TPB with its K in chunks: alone it is
    slower, but side by side the run is bound by the DMA engines, where every transfer costs its
    setup and DDR latency (LLaMA2-7B decode: a head's 256 KB K cache in 2 DMAs instead of 8 of
    32 KB; whole, 1 DMA of 3.3 k cycles does not fit between the heads' result stores the other
    in-order engine holds ~3.2 k cycles apart, so one engine idled: 1.009 M -> 0.937 M cycles a
    layer)."""
    n = len(pool)

    def small(cfg: SegmentCfg) -> bool:
        return cfg.kind == "data-parallel" and len(cfg.stages) == 1 and \
            ops[cfg.stages[0].op].unit == "tcu.matmul" and len(cfg.stages[0].tpbs) <= n // 4

    # only runs of at least RUN small contractions (DMA segments between them do not break a run)
    move: set[int] = set()
    run: list[int] = []
    for i, cfg in enumerate(segs + [None]):  # type: ignore[operator]
        if cfg is not None and small(cfg):
            run.append(i)
        elif cfg is None or cfg.kind != "dma":
            if len(run) >= RUN:
                move |= set(run)
            run = []
    cursor = 0
    out = []
    for i, cfg in enumerate(segs):
        if i in move:
            st = cfg.stages[0]
            k = len(st.tpbs)
            if narrow:
                k = 1
                st = replace(st, gc=1, bands=1, chunked=True, ks=1)
            if cursor + k > n:
                cursor = 0
            cfg = replace(cfg, stages=(replace(st, tpbs=tuple(pool[cursor:cursor + k])),))
            cursor += k
        out.append(cfg)
    return out


def _pools(pool: tuple[int, ...], strategy: str) -> list[tuple[int, ...]]:
    """The TPB pools the search runs on: all available TPBs, then (but for ``single``) the first
    half and quarter of them. The search costs each segment in isolation and sums; on the whole
    plan (segments waiting for each other, inputs written by the segment before) the same search
    on fewer TPBs can win (ResNet-18 64x64: 56 TPBs predicted 823 864 cycles, 14 TPBs 799 548),
    and a smaller pool is a schedule the search could have chosen: the best whole plan is kept."""
    out = [pool]
    n = len(pool)
    if strategy != "single" and n >= 16:
        out += [pool[:n // 2], pool[:n // 4]]
    return out


__all__ = ["Placement", "STRATEGIES", "available_tpbs", "schedule", "Search", "tcu_bound",
           "keep_activations", "kept_copies", "unchunk", "weights_once", "widen_gemvs"]
_ = (replace, ceil_div)
