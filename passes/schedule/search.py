"""The search of the placement: segments and their configurations, each candidate costed alone.

:class:`Search` is steps 1-4 of :mod:`.placement`'s module doc: the segmentation of the ops
(dynamic programming for ``auto``), the configuration of one segment (greedy start + local search:
TPB counts, column splits, K chunks and K splits, resident activations; pipelines: TPBs per stage,
co-location, bands) and the costing of every candidate by building it in isolation
(:meth:`Search.cost`: memoized per configuration, shared between structurally equal segments by
:mod:`.shared_costs`, stopped at a bound, charged to the search budget). :func:`.placement.schedule`
runs it per TPB pool; the whole-plan refinements after it are in :mod:`.refine`.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from m100.targets.m100.machine import Machine

from .cost import CostModel, ceil_div
from .graph import Op, OpGraph, ScheduleError, geometry
from .partition import col_splits
from .search_dma_floor import dma_floor
from .search_floor import busy_floor, tcu_floor
from .segment import SegmentCfg, StageCfg, act_resident_ok, ksplit_ok, streamable
from .shared_costs import SharedCosts
from .timeline import BoundExceeded, Scheduler

INF = float("inf")

DMA_UNITS = ("dtdu.copy", "dtdu.fill")  # data movement done memory -> memory by CCB DMA
# CSU routines (gather, arg-max) also run memory -> memory, as a segment of their own
MEM_UNITS = DMA_UNITS + ("csu.gather", "csu.argmax", "csu.topk")

STRATEGIES = ("auto", "data-parallel", "pipeline", "single")
# a causal attention chain's pipeline bands cut by work (``StageCfg.wcut``); False: equal rows
WORK_BANDS = True


def work_cut(g: OpGraph, machine: Machine, names: set[str], op: str,
             bands: int) -> tuple[int, int, int]:
    """``StageCfg.wcut`` of ``op`` in a pipeline of the ops ``names``: its bands cut by work
    (:data:`WORK_BANDS`) when it belongs to a causal chain whose softmax and PV are both among
    ``names`` (the pieces can then be clipped: ``causal.py``), or is another op of such a
    pipeline with the chain's rows (the same cuts), and the bands are no more than its row
    tiles; else ()."""
    if not WORK_BANDS:
        return ()
    cz = g.causal.get(op)
    if cz is None:  # an op after a causal chain in the pipeline (the W8A8 heads' quantize of
        # their output): the chain's cuts where it has the chain's rows, so that band b of every
        # stage covers the same rows (``causal.band_order`` deals them all alike)
        cz = next((c for x in names if (c := g.causal.get(x)) is not None and c[2][2] in names
                   and c[2][1] in names), None)
        if cz is None or geometry(g, next(o for o in g.ops if o.name == op)).rows != \
                geometry(g, next(o for o in g.ops if o.name == cz[2][1])).rows:
            return ()
    _qk, sm, pv = cz[2]
    if sm not in names or pv not in names:
        return ()
    geo = geometry(g, next(o for o in g.ops if o.name == sm))
    align = machine.tcu_tile_m
    if bands > -(-geo.rows // align):
        return ()
    return (geo.cols, cz[1], align)


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
        self.floored = 0  # bounded costs answered by :func:`.search_floor.tcu_floor`
        self.busy_floored = 0  # ... and by :func:`.search_floor.busy_floor`
        self.dma_floored = 0  # ... and by :func:`.search_dma_floor.dma_floor`
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
        if bound < INF:  # a lower bound that reaches the bound answers without a build
            floor = tcu_floor(self.cm, self.g, self.ops, seg)
            if floor >= bound:
                self.floored += 1
                self.cache[seg] = (floor, False)
                return floor
            # the exact TCU cycles of the busiest TPB (before the shared costs, so that a search
            # answers the same candidates from floors with or without them: the same task count)
            fl = self._floors(seg)
            floor = fl[0]
            if floor is None:
                floor = fl[0] = busy_floor(self.sched, seg)
            if floor >= bound:
                self.busy_floored += 1
                self.cache[seg] = (floor, False)
                return floor
            # the data phases of its activation loads and stores on the CCB DMA engines
            floor = fl[1]
            if floor is None:
                floor = fl[1] = dma_floor(self.sched, seg)
            if floor >= bound:
                self.dma_floored += 1
                self.cache[seg] = (floor, False)
                return floor
        shared = self.shared.lookup(seg, bound)  # a structurally equal segment's build
        if shared is not None:
            c, exact, n = shared
            self.sched.tasks_built += n  # the tasks the build would have created
            self.cache[seg] = (c, exact)
            return c
        exact = True
        try:
            ends = self.sched.cost_build(seg, bound)
            c = max(ends, default=0.0)  # the makespan
            self.shared.store(seg, ends, True)
        except BoundExceeded as b:
            c, exact = b.end, False
            self.shared.store(seg, b.ends + [b.end], False)
        except ScheduleError as e:
            c = INF
            if len(seg.stages) == 1:
                self.errors.setdefault(seg.stages[0].op, e)
        self.cache[seg] = (c, exact)
        return c

    def _floors(self, seg: SegmentCfg) -> list:
        """``[busy_floor, dma_floor]`` of ``seg`` (None: not computed yet), shared between the
        one-stage segments of the same structure (``test_floor_share``): both floors read such
        a segment only through its kind, its stage's configuration, the op's own structure
        (``shared_costs.op_key``) and where its tensors live (``memory_of``) -- none of its
        inputs is made in the segment and its output is stored, which is what
        ``segment_key``'s tensor sources would add -- all kept per op (``Scheduler.op_shape``).
        Not shared: an op of a causal chain (which ``OpGraph.causal`` names, not the key) and
        pipelines (their ``segment_key``, ~0.1 ms each, cost more than their floors saved on
        ResNet-18). The memo lives on the scheduler, shared by the searches of the TPB pools
        as their tilings are."""
        sched = self.sched
        memo = sched.__dict__.setdefault("_seg_floors", {})
        key = None
        if not any(st.op in self.g.causal for st in seg.stages):
            if len(seg.stages) == 1:
                st = seg.stages[0]
                k = sched.op_shape(self.ops[st.op])
                if k is not None:
                    key = (seg.kind, replace(st, op=""), k)
        if key is None:
            return [None, None]
        fl = memo.get(key)
        if fl is None:
            fl = memo[key] = [None, None]
        return fl

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
        best, best_c = self._first_cheapest(starts)
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
        best, best_c = self._dp_climb(op, best, best_c, kmax, tcu)  # local search (module doc 4)
        if tcu:  # after the local search (which never moves from one of these): the band rows
            # kept whole, B streamed past them
            for cand in self._act_resident_cfgs(op, kmax):
                c = self.cost(cand, best_c)
                if c < best_c:
                    best, best_c = cand, c
        if best_c == float("inf"):
            raise self.errors.get(op.name) or ScheduleError(f"op '{op.name}' could not be placed")
        return best, best_c

    def _first_cheapest(self, cands: list[SegmentCfg]) -> tuple[SegmentCfg, float]:
        """The first of the cheapest of ``cands`` (in their order) and its cost. They are costed
        in the order of their floors (:meth:`_floor`), so that the bound
        the others are built against is low early and their bounded builds stop sooner
        (ResNet-50's search 284 k -> 266 k tasks, ResNet-18 110 k -> 104 k); the answer is the
        in-order scan's: a candidate before the best so far wins on a tie (bound
        ``nextafter(best_c)``: a cost <= ``best_c`` comes back exact), one after it only when
        cheaper (bound ``best_c``), as the scan decided (``test_first_cheapest_is_the_in_order_
        scan``)."""
        n = len(cands)
        order = sorted(range(n), key=lambda i: (self._floor(cands[i]), i))
        bi, bc = -1, INF
        for i in order:
            if bi < 0:
                bi, bc = i, self.cost(cands[i])
            elif i < bi:
                c = self.cost(cands[i], math.nextafter(bc, INF))
                if c <= bc:
                    bi, bc = i, c
            else:
                c = self.cost(cands[i], bc)
                if c < bc:
                    bi, bc = i, c
        return cands[bi], bc

    def _floor(self, seg: SegmentCfg) -> float:
        """The largest of the floors :meth:`cost` asks of ``seg`` (kept as it keeps them)."""
        fl = self._floors(seg)
        if fl[0] is None:
            fl[0] = busy_floor(self.sched, seg)
        if fl[1] is None:
            fl[1] = dma_floor(self.sched, seg)
        return max(tcu_floor(self.cm, self.g, self.ops, seg), fl[0], fl[1])

    def _dp_neighbours(self, op: Op, best: SegmentCfg, kmax: int, tcu: bool) -> list:
        """The configurations one move of the data-parallel local search reaches from ``best``,
        in a fixed order, the moves on the same TPBs first: double / halve the bands, K in
        chunks or not, each other column split; then the next smaller / larger TPB count (each
        column split, the one closest below the current first)."""
        st = best.stages[0]
        k, gc, ch, kp = len(st.tpbs), st.gc, st.chunked, st.ks
        mult = max(1, st.bands // st.gr)
        out = [self._dp_cfg(op, k, gc, mult * 2, chunked=ch, ks=kp),
               self._dp_cfg(op, k, gc, max(1, mult // 2), chunked=ch, ks=kp)]
        if tcu and kp == 1:
            out.append(self._dp_cfg(op, k, gc, mult, chunked=not ch))
        for g2 in col_splits(self.cm, self.g, op, k // kp):
            if g2 != gc:
                out.append(self._dp_cfg(op, k, g2, mult, chunked=ch, ks=kp))
        ks = sorted(self._k_candidates(kmax))
        i = ks.index(k) if k in ks else 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(ks) and j != i:
                gcs = col_splits(self.cm, self.g, op, ks[j])
                first = max([x for x in gcs if x <= gc] or [1])
                for g2 in [first] + [x for x in gcs if x != first]:
                    out.append(self._dp_cfg(op, ks[j], g2, mult, chunked=ch))
        return out

    def _dp_climb(self, op: Op, best: SegmentCfg, best_c: float, kmax: int,
                  tcu: bool) -> tuple[SegmentCfg, float]:
        """The data-parallel local search: hill climbing over :meth:`_dp_neighbours` (first
        improvement), at most ``iters // 2`` candidates costed; a candidate that did not beat
        the best once never does (the best only gets cheaper), so none is costed twice. (Until
        session 30 the moves drawn from an op-name-seeded RNG were kept behind a switch,
        ``DP_MOVES = "draw"``; some tests pin them to reach a plan: ``test/unit/schedule/
        dp_draws.py``.)"""
        left = 0 if self.spent() else self.iters // 2
        seen = {best}
        while left > 0:
            for cand in self._dp_neighbours(op, best, kmax, tcu):
                if cand is None or cand in seen:
                    continue
                seen.add(cand)
                left -= 1
                c = self.cost(cand, best_c)
                if c < best_c:
                    best, best_c = cand, c
                    break
                if left <= 0:
                    break
            else:
                break  # a local optimum
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
            nb = max(1, min(rows, bands))
            stages.append(StageCfg(op.name, tuple(tp), gc, nb, wcut=self._wcut(ops, op, nb)))
            prev = tuple(tp)
        return SegmentCfg(tuple(stages), "pipeline")

    def _wcut(self, ops: list[Op], op: Op, bands: int) -> tuple[int, int, int]:
        return work_cut(self.g, self.cm.machine, {o.name for o in ops}, op.name, bands)

    def _pipe_start(self, ops: list[Op]) -> tuple[tuple, int]:
        """The greedy start of a pipeline of ``ops``: its state ``(alloc, coloc, gcs, bands)``
        (TPBs in proportion to each stage's work, light vector stages on the TPBs of the TCU
        stage before them) and the bands' cap (the most rows of a stage)."""
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
        return (alloc, coloc, gcs, bands), min_rows

    def _pipe_move(self, ops: list[Op], rng: random.Random, state: tuple,
                   min_rows: int) -> tuple[SegmentCfg, tuple] | None:
        """One local-search move of a pipeline from ``state`` (a random one of: shift TPBs
        between two stages, toggle a stage's co-location, double / halve the bands, change a
        stage's column split): the candidate and its state, or None when the move does not
        apply. The draws from ``rng`` depend on ``state`` only."""
        n = len(ops)
        alloc, coloc, gcs, bands = list(state[0]), list(state[1]), list(state[2]), state[3]
        move = rng.choice(("shift", "shift", "shift", "coloc", "bands+", "bands-", "gc"))
        if move == "shift":
            own = [i for i in range(n) if not coloc[i]]
            if len(own) < 2:
                return None
            a, b = rng.sample(own, 2)
            d = max(1, alloc[a] // rng.choice((2, 4, 8)))
            if alloc[a] - d < 1:
                return None
            alloc[a] -= d
            alloc[b] += d
        elif move == "coloc":
            i = rng.randrange(1, n) if n > 1 else 0
            if i == 0 or (ops[i].unit.startswith("tcu") and not self.fuse_tcu):
                return None
            coloc[i] = not coloc[i]
            own = [x for x in range(n) if not coloc[x]]
            if coloc[i]:
                alloc[own[-1] if own[-1] < i else own[0]] += alloc[i]
                alloc[i] = 0
            else:
                donor = max(own, key=lambda x: alloc[x] if x != i else -1)
                if alloc[donor] < 2:
                    return None
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
            return None
        return cand, (alloc, coloc, gcs, bands)

    def best_pipeline(self, ops: list[Op], iters: int | None = None,
                      bound: float = INF) -> tuple[SegmentCfg, float]:
        """The best pipeline of ``ops`` the local search finds from the greedy start (``iters``
        moves, default ``self.iters``) and its cost. ``bound``: the caller only asks whether that
        cost is < ``bound`` (the DP of :meth:`run`); when the search can not find a pipeline
        below it, some configuration and a cost >= ``bound`` may be returned instead, found
        with bounded builds (:meth:`_pipe_above`); otherwise the result is the unbounded one."""
        rng = random.Random(f"{self.seed}:" + ",".join(o.name for o in ops))
        state, min_rows = self._pipe_start(ops)
        best = self._pipe_cfg(ops, *state)
        if best is None:
            raise ScheduleError("internal: no initial pipeline")
        n_iters = self.iters if iters is None else iters
        if bound < INF:
            c0 = self.cost(best, bound)
            if c0 >= bound:
                rs = rng.getstate()
                if self._pipe_above(ops, rng, state, min_rows, n_iters, bound):
                    return best, c0
                rng.setstate(rs)  # the unbounded course below draws from the start
        best_state = state
        best_c = self.cost(best)
        for _ in range(n_iters):
            mv = self._pipe_move(ops, rng, best_state, min_rows)
            if mv is None:
                continue
            cand, st = mv
            c = self.cost(cand, best_c)
            if c < best_c:
                best, best_c, best_state = cand, c, st
        return best, best_c

    def _pipe_above(self, ops: list[Op], rng: random.Random, state: tuple, min_rows: int,
                    left: int, bound: float) -> bool:
        """True when every course the local search of :meth:`best_pipeline` can take from
        ``state`` (drawing from ``rng``, ``left`` moves to go, the best so far costing >=
        ``bound``) only meets candidates costing >= ``bound``: then its result costs >= ``bound``
        too. A move to a candidate is kept iff it is cheaper than the best so far, which, both
        being >= ``bound``, the bounded costs do not tell: both courses are followed (at most
        2^left candidates, each a build that stops at ``bound``; most pipelines the DP tries
        cost several times what it has already, so these builds stop early). ``rng`` is left
        advanced by the draws either way; a caller that draws from it afterwards restores its
        state (the kept courses below, :meth:`best_pipeline`'s unbounded course).

        Two courses are not followed separately, as they are the same course (session 30): the
        kept one after the last move (no moves left: it meets no candidate), and the kept one
        whose state is the state it leaves (a move that changes nothing, e.g. bands at their
        cap): it draws the same moves from the same ``rng`` state as this loop does after it,
        so it costs the same candidates with the same bound in the same order -- the builds,
        their task counts (``Scheduler.tasks_built``, the search budget) and the answer are
        those of following both (``test_pipe_above``). The kept courses share one ``rng``,
        its state saved before and restored after each (``random.Random()`` seeds itself from
        the OS: ~45 us, ~5 000 times on ResNet-50)."""
        for i in range(left):
            mv = self._pipe_move(ops, rng, state, min_rows)
            if mv is None:
                continue
            cand, st = mv
            if self.cost(cand, bound) < bound:
                return False
            if i == left - 1 or st == state:
                continue  # (the kept course: none, or the one this loop goes on with)
            # kept: the course from the candidate; not kept: this loop goes on from ``state``
            rs = rng.getstate()
            if not self._pipe_above(ops, rng, st, min_rows, left - i - 1, bound):
                return False
            rng.setstate(rs)
        return True

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

    def segment_best(self, ops: list[Op], iters: int | None = None,
                     bound: float = INF) -> tuple[SegmentCfg, float]:
        """The best configuration of the segment of ``ops`` and its cost. ``bound`` (pipelines
        only): the caller asks only whether the cost is < ``bound`` (:meth:`best_pipeline`)."""
        if len(ops) == 1 and ops[0].unit in MEM_UNITS:
            cfg = SegmentCfg((StageCfg(ops[0].name, (self.tpbs[0],)),), "dma")
            return cfg, self.cost(cfg)
        if len(ops) == 1:
            return self.best_data_parallel(ops[0])
        return self.best_pipeline(ops, iters, bound)

    def _dp_table(self, ops: list[Op]) -> list[tuple[float, int, SegmentCfg | None]]:
        """The dynamic programming of ``auto`` (module doc of :mod:`.placement`, item 1): per
        end ``e``, ``(total, s, cfg)`` of the cheapest segmentation of ``ops[:e]`` whose last
        segment is ``ops[s:e]`` configured as ``cfg`` -- of equal totals the one whose last
        segment starts first (the smallest ``s``, as when the runs were tried from the
        longest)."""
        n = len(ops)
        best: list[tuple[float, int, SegmentCfg | None]] = [(0.0, -1, None)] + \
            [(float("inf"), -1, None)] * n
        won: dict[tuple, int] = {}  # an end op's structure -> the length of the run that won
        for e in range(1, n + 1):
            key = self.sched.op_shape(ops[e - 1])
            for s in self._dp_starts(e, won.get(key) if key is not None else None):
                run = list(ops[s:e])
                if len(run) > 1 and not self.connected(run):
                    continue
                if best[s][0] == INF:
                    continue
                # a cost >= bound can not give a total <= best[e] (the margin covers rounding)
                bound = INF if best[e][0] == INF else \
                    best[e][0] - best[s][0] + 1e-6 * max(1.0, best[e][0])
                try:
                    # candidate pipelines are costed with a short search; the chosen ones are
                    # refined by :meth:`run` with the full local search
                    cfg, c = self.segment_best(
                        run, (0 if self.spent() else self.pipe_iters) if len(run) > 1 else None,
                        bound)
                except ScheduleError:
                    if len(run) == 1:
                        raise
                    continue
                tot = best[s][0] + c
                if tot < best[e][0] or (tot == best[e][0] < INF and s < best[e][1]):
                    best[e] = (tot, s, cfg)
            if key is not None and best[e][2] is not None:
                won[key] = e - best[e][1]
        return best

    def _dp_starts(self, e: int, won: int | None) -> list[int]:
        """The starts ``s`` of the runs ``ops[s:e]`` :meth:`_dp_table` tries for end ``e``, in
        the order it tries them: the last op alone first (its cost bounds the pipelines ending
        with it, which are then costed only as far as needed to tell that they can not beat
        it: :meth:`best_pipeline`'s ``bound``), then the run of length ``won`` -- the one that
        won at the last end whose op had the same structure (``Scheduler.op_shape``: the
        repeated blocks of a CNN, the heads of an attention layer), so that the runs after it
        are bounded by the likely winner -- then the others from the shortest. Any order gives
        the same table while the search budget is not spent (:meth:`spent`,
        ``placement.SEARCH_TASKS``: 4 M tasks; ResNet-50 builds ~262 k, the 7B prefill heads
        form ~696 k): a run's cost below its bound is exact and one at or above it can not
        win (:meth:`best_pipeline`), and the table keeps the smallest ``s`` of equal totals
        whatever the order (``test_dp_order_is_the_longest_first_table``). A graph that spends
        the budget inside the table gets its later pipelines costed without the local search
        whichever order ran, from a different point (this order builds fewer tasks). Measured (session
        32): the 7B W8A8 prefill layer's heads form 772 k -> 696 k search tasks, its concat
        form 566 k -> 532 k, ResNet-50 266 k -> 262 k, ResNet-18 unchanged."""
        lo = max(0, e - self.max_stages)
        out = list(range(e - 1, lo - 1, -1))
        if won is not None and won > 1 and e - won >= lo:
            out.remove(e - won)
            out.insert(1, e - won)
        return out

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
        best = self._dp_table(ops)
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


__all__ = ["INF", "MEM_UNITS", "STRATEGIES", "Search"]
