"""A pipeline's local search (:class:`PipelineSearch`, the pipeline half of :class:`.search.Search`).

A pipeline of the ops ``ops`` (a connected run the DP of ``Search.run`` tries, or one it chose)
starts greedy (:meth:`PipelineSearch._pipe_start`: TPBs in proportion to each stage's work,
light vector stages on the TPBs of the TCU stage before them) and climbs: its neighbours --
co-location toggled, bands doubled / halved, TPBs shifted between two stages, another column
split -- are enumerated in a fixed order (:meth:`PipelineSearch._pipe_neighbours`), the first
cheaper one is taken, at most ``iters`` candidates are costed and none twice (session 26; they
were drawn from an RNG seeded by the ops' names before, and ResNet-18's plan moved by up to
+8.8 % with the seed). The answer is then a function of the run's structure, so it is memoized
per structure (:data:`PIPE_MEMO`, :meth:`PipelineSearch._pipe_key`): a repeated block of a CNN
is answered from the first one's search, and charged the tasks that search built (the search
budget, ``placement.SEARCH_TASKS``). The DP's bounded calls prove "no pipeline below the
bound" by following every course the climb could take (:meth:`PipelineSearch._pipe_above`).
"""

from __future__ import annotations

from .graph import Op, ScheduleError, geometry
from .partition import col_splits
from .segment import SegmentCfg

INF = float("inf")

#: :meth:`PipelineSearch.best_pipeline`'s answers kept per structure (:meth:`PipelineSearch.
#: _pipe_key`): a repeated block's search answered from the first one's; False: each searched
#: (the tests' A/B: the same placement either way)
PIPE_MEMO = True


class PipelineSearch:
    """Mixed into :class:`.search.Search`, whose ``g``, ``cm``, ``tpbs``, ``sched``, ``shared``,
    ``iters``, ``fuse_tcu``, :meth:`cost` and :meth:`_pipe_cfg` it uses."""

    def _work(self, op: Op) -> float:
        w = self._works.get(op.name)
        if w is None:
            geo = geometry(self.g, op)
            w = self._works[op.name] = self.cm.piece_cycles(self.g, op, geo.rows, geo.cols)
        return w


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

    def _pipe_neighbours(self, ops: list[Op], state: tuple, min_rows: int):
        """The pipelines one move of the local search reaches from ``state``, as ``(candidate,
        its state)``, generated lazily in a fixed order: each stage's co-location toggled
        (a light stage onto the TPBs of the stage before it, or off them), double / halve the
        bands, TPBs shifted between two stages of their own TPBs -- the ordered pairs from the
        one with the most work per TPB to receive and the least to give first, a half, a
        quarter, an eighth of the donor's TPBs each --, each other column split of each stage.
        A move that does not apply is left out; so is a candidate met before in the list."""
        n = len(ops)
        alloc, coloc, gcs, bands = state
        seen: set = set()

        def made(al, co, gc, b):
            cand = self._pipe_cfg(ops, al, co, gc, b)
            if cand is None or cand in seen:
                return None
            seen.add(cand)
            return cand, (al, co, gc, b)

        for i in range(1, n):
            if ops[i].unit.startswith("tcu") and not self.fuse_tcu:
                continue
            al, co = list(alloc), list(coloc)
            co[i] = not co[i]
            ow = [x for x in range(n) if not co[x]]
            if co[i]:
                al[ow[-1] if ow[-1] < i else ow[0]] += al[i]
                al[i] = 0
            else:
                donor = max(ow, key=lambda x: al[x] if x != i else -1)
                if al[donor] < 2:
                    continue
                al[i] = 1
                al[donor] -= 1
            if (mv := made(al, co, gcs, bands)) is not None:
                yield mv
        for b in (min(min_rows, bands * 2), max(1, bands // 2)):
            if b != bands and (mv := made(alloc, coloc, gcs, b)) is not None:
                yield mv
        own = [i for i in range(n) if not coloc[i]]
        load = {}
        for i in own:  # the work on stage i's TPBs (its own and its co-located stages') per TPB
            j, w = i + 1, self._work(ops[i])
            while j < n and coloc[j]:
                w += self._work(ops[j])
                j += 1
            load[i] = max(1.0, w) / max(1, alloc[i])
        for a, b in sorted(((a, b) for a in own for b in own if a != b),
                           key=lambda p: (-load[p[1]] / load[p[0]], p)):
            for q in (2, 4, 8):
                d = max(1, alloc[a] // q)
                if alloc[a] - d < 1:
                    continue
                al = list(alloc)
                al[a] -= d
                al[b] += d
                if (mv := made(al, coloc, gcs, bands)) is not None:
                    yield mv
        for i in range(n):
            for x in col_splits(self.cm, self.g, ops[i], max(1, alloc[i] if not coloc[i] else 1)):
                if x != gcs[i]:
                    gc = list(gcs)
                    gc[i] = x
                    if (mv := made(alloc, coloc, gc, bands)) is not None:
                        yield mv

    def _pipe_climb(self, ops: list[Op], state: tuple, best: SegmentCfg, best_c: float,
                    min_rows: int, left: int) -> tuple[SegmentCfg, float, tuple]:
        """Hill climbing over :meth:`_pipe_neighbours` from ``best`` (its ``state``), first
        improvement, at most ``left`` candidates costed; a candidate that did not beat the best
        once never does (the best only gets cheaper), so none is costed twice. Returns the
        best, its cost and its state."""
        seen = {best}
        while left > 0:
            for cand, st in self._pipe_neighbours(ops, state, min_rows):
                if cand in seen:
                    continue
                seen.add(cand)
                left -= 1
                c = self.cost(cand, best_c)
                if c < best_c:
                    best, best_c, state = cand, c, st
                    break
                if left <= 0:
                    break
            else:
                break  # a local optimum
        return best, best_c, state

    def best_pipeline(self, ops: list[Op], iters: int | None = None,
                      bound: float = INF) -> tuple[SegmentCfg, float]:
        """The best pipeline of ``ops`` the local search finds from the greedy start (at most
        ``iters`` candidates, default ``self.iters``: :meth:`_pipe_climb`) and its cost.
        ``bound``: the caller only asks whether that cost is < ``bound`` (the DP of :meth:`run`);
        when the search can not find a pipeline below it, some configuration and a cost >=
        ``bound`` may be returned instead, found with bounded builds (:meth:`_pipe_above`);
        otherwise the result is the unbounded one."""
        state, min_rows = self._pipe_start(ops)
        best = self._pipe_cfg(ops, *state)
        if best is None:
            raise ScheduleError("internal: no initial pipeline")
        n_iters = self.iters if iters is None else iters
        key = self._pipe_key(ops, best, n_iters)
        memo = self.sched.__dict__.setdefault("_pipe_memo", {})
        got = memo.get(key) if key is not None else None
        if got is not None:
            if got.get("climb") is not None:  # the climb's result: below any bound it is
                st, c, n = got["climb"]  # the answer, above one the DP does not take it
                self.sched.tasks_built += n
                return self._pipe_cfg(ops, *st), c
            b0, c0, n = got["above"]
            if bound <= b0:  # every course meets only candidates >= b0 >= bound
                self.sched.tasks_built += n
                return best, c0
        n0 = self.sched.tasks_built
        if bound < INF:
            c0 = self.cost(best, bound)
            if c0 >= bound and self._pipe_above(ops, state, {best}, min_rows, n_iters, bound):
                if key is not None:
                    memo.setdefault(key, {})["above"] = (bound, c0, self.sched.tasks_built - n0)
                return best, c0
        best, best_c, state = self._pipe_climb(ops, state, best, self.cost(best), min_rows,
                                               n_iters)
        if key is not None:
            memo.setdefault(key, {})["climb"] = (state, best_c, self.sched.tasks_built - n0)
        return best, best_c

    def _pipe_key(self, ops: list[Op], start: SegmentCfg, iters: int) -> tuple | None:
        """The memo key of :meth:`best_pipeline` (:data:`PIPE_MEMO`): what its course reads --
        the structure of the greedy start ``start`` as an isolated build reads it
        (``shared_costs.segment_key``: the ops but their names, their tensors, the start's
        stages on their TPBs, which name the pool), the candidates it may cost and whether a
        TCU stage may be co-located. None (not memoized): the switch is off, the key is
        unhashable, or an op belongs to a causal chain (``OpGraph.causal``, keyed by names:
        its bands are cut by work, :func:`work_cut`)."""
        if not PIPE_MEMO or any(o.name in self.g.causal for o in ops):
            return None
        k = self.shared.key(start)
        return None if k is None else (k, iters, self.fuse_tcu)

    def _pipe_above(self, ops: list[Op], state: tuple, seen: set, min_rows: int, left: int,
                    bound: float) -> bool:
        """True when every course :meth:`_pipe_climb` can take from ``state`` (the candidates
        in ``seen`` already costed, ``left`` to go, the best so far costing >= ``bound``) only
        meets candidates costing >= ``bound``: then its result costs >= ``bound`` too. A
        candidate is kept iff it is cheaper than the best so far, which, both being >=
        ``bound``, the bounded costs do not tell: both courses are followed (kept: the climb
        goes on from the candidate's neighbours; not kept: from the next neighbour of
        ``state``); at most 2^left - 1 candidates, each a build that stops at ``bound`` (most
        pipelines the DP tries cost several times what it has already, so these builds stop
        early)."""
        seen = set(seen)
        for cand, st in self._pipe_neighbours(ops, state, min_rows):
            if left <= 0:
                break
            if cand in seen:
                continue
            seen.add(cand)
            left -= 1
            if self.cost(cand, bound) < bound:
                return False
            if not self._pipe_above(ops, st, seen, min_rows, left, bound):
                return False
        return True



__all__ = ["PIPE_MEMO", "PipelineSearch"]
