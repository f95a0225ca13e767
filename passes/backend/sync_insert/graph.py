"""Stage 2c of sync insertion: the block-level happens-before graph (:class:`HbGraph`).

Given a set of sync edges (the needs of :mod:`.hazards` and the explicit orderings), what
happens-before what. Nothing here decides counters.

Happens-before nodes: ``S(i, b)`` (block ``b`` of ``i`` may start: its monitors held) and
``E(i, b)`` (block ``b``'s writes are visible and its reads are done). Hardware edges, free of
charge: ``S(i,b) -> E(i,b)``, ``S(i,b) -> S(i,b+1)``, ``E(i,b) -> E(i,b+1)`` and program order
``E(i, last) -> S(i', 0)`` for consecutive instructions ``i, i'`` of one executor. Sync edges
``E(i, k) -> S(j, b)`` all point forward in the global order, so node id
``base[i] + 2*b (+1 for E)`` is a topological order and reachability is one forward sweep of
vector clocks (``networkx.transitive_reduction`` is O(V*E); the tests cross-check against it).
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import chain

import numpy as np

from m100.targets.m100 import isa


class HbGraph:
    """Block-level happens-before graph over instructions in global order (see module doc).

    Reachability is kept as vector clocks: the E-nodes of one executor form a chain (its blocks
    and program order), so the E-nodes that happen-before a node are, per executor, a prefix of
    that chain, summarised by one integer (the rank of the latest). ``clock[v, x]`` is that rank
    for executor ``x`` (including ``v`` itself when ``v`` is an E-node); a sweep in node order
    computes it, and an edge added under computed clocks raises only the rows it changes
    (:meth:`_raise`; every edge points forward). Queries ask whether an E-node happens-before a node, which is all the stages need.
    """

    def __init__(self, insts: list[isa.Instruction], blocks: list[int]):
        self.insts = insts
        self.n = len(insts)
        self.blocks = list(blocks)
        self.base = np.zeros(self.n + 1, dtype=np.int64)
        self.base[1:] = np.cumsum([2 * b for b in blocks])
        self.num_nodes = int(self.base[-1])
        self._node_inst = np.repeat(np.arange(self.n), [2 * b for b in blocks]).tolist()
        self._base = self.base.tolist()
        self.execs = [inst.executor for inst in insts]
        xs = sorted(set(self.execs))
        self.xid = {e: n for n, e in enumerate(xs)}
        # program-order predecessor (previous instruction of the same executor), E-node ranks
        self.po_prev: list[int] = []
        self.rank0: list[int] = []  # rank of E(i, 0) in its executor's chain (1-based)
        last: dict = {}
        count: dict = {}
        for i, e in enumerate(self.execs):
            self.po_prev.append(last.get(e, -1))
            last[e] = i
            self.rank0.append(count.get(e, 0) + 1)
            count[e] = count.get(e, 0) + self.blocks[i]
        # ranks fit the narrowest integer that holds the longest chain (half the memory of int32
        # for up to 32 767 blocks per executor: the 1024-token LLaMA prefill layer's clocks are
        # 280k nodes x 170 executors)
        self.clock_dtype = np.int16 if max(count.values(), default=0) < 2**15 else np.int32
        self.sync_preds: dict[int, set[int]] = {}  # S-node -> set of E-nodes (sync edges)
        self._clock: np.ndarray | None = None
        self._dirty = 0  # first node whose clock is stale
        self._xidl: list[int] | None = None  # clock column of each instruction's executor
        self._succ: dict[int, list[int]] | None = None  # E-node -> S-nodes (sync), on demand
        self._po_next: list[int] | None = None  # next instruction of the same executor

    def S(self, i: int, b: int) -> int:
        return self._base[i] + 2 * b

    def E(self, i: int, b: int) -> int:
        return self._base[i] + 2 * b + 1

    def locate(self, v: int) -> tuple[int, int, bool]:
        """(instruction, block, is E-node) of node ``v``."""
        i = self._node_inst[v]
        b, is_e = divmod(v - self._base[i], 2)
        return i, b, bool(is_e)

    def node_name(self, v: int) -> str:
        i, b, e = self.locate(v)
        return f"{'SE'[e]}({i},{b})"

    def add_sync(self, i: int, k: int, j: int, b: int) -> None:
        u, v = self.E(i, k), self.S(j, b)
        if u >= v:
            raise ValueError(f"sync edge {self.node_name(u)} -> {self.node_name(v)} points "
                             "backward in the global order")
        got = self.sync_preds.setdefault(v, set())
        if u in got:
            return
        got.add(u)
        if self._succ is not None:
            self._succ.setdefault(u, []).append(v)
        if self._clock is not None and v < self._dirty:
            self._raise(u, v)

    def add_need(self, i: int, j: int, need: np.ndarray) -> None:
        """The block edges ``E(i, need[b]) -> S(j, b)`` of one need (``add_sync`` for each)."""
        u0, v0 = self._base[i] + 1, self._base[j]
        if u0 >= v0:
            raise ValueError(f"need {i} -> {j} points backward in the global order")
        if self._clock is not None:  # clocks to keep: edge by edge
            for b, k in enumerate(need.tolist()):
                if k >= 0:
                    self.add_sync(i, k, j, b)
            return
        preds = self.sync_preds
        for b, k in enumerate(need.tolist()):
            if k >= 0:
                v = v0 + 2 * b
                got = preds.get(v)
                if got is None:
                    preds[v] = {u0 + 2 * k}
                elif u0 + 2 * k in got:
                    continue
                else:
                    got.add(u0 + 2 * k)
                if self._succ is not None:
                    self._succ.setdefault(u0 + 2 * k, []).append(v)

    def add_needs(self, needs: dict) -> None:
        """:meth:`add_need` for every need of ``needs`` (``{(i, j): hazard}``) at once: the block
        edges as arrays (one concatenation of the need vectors), grouped by S-node into the
        same ``sync_preds`` sets, without a Python loop over each need's blocks."""
        if not needs:
            return
        n = len(needs)
        ij = np.fromiter(chain.from_iterable(needs), dtype=np.int64, count=2 * n)
        i, j = ij[0::2], ij[1::2]
        vecs = [h.need for h in needs.values()]
        lens = np.fromiter(map(len, vecs), dtype=np.int64, count=n)
        k = np.concatenate(vecs).astype(np.int64, copy=False)
        ir, jr = np.repeat(i, lens), np.repeat(j, lens)
        b = np.arange(k.size, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
        u0, v0 = self.base[ir] + 1, self.base[jr]
        back = np.flatnonzero(u0 >= v0)
        if back.size:
            raise ValueError(f"need {int(ir[back[0]])} -> {int(jr[back[0]])} points backward "
                             "in the global order")
        on = k >= 0
        u, v = (u0 + 2 * k)[on], (v0 + 2 * b)[on]
        if self._clock is not None:  # clocks to keep: edge by edge
            for uu, vv in zip(u.tolist(), v.tolist()):
                ii = self._node_inst[uu]
                jj = self._node_inst[vv]
                self.add_sync(ii, (uu - self._base[ii]) >> 1, jj, (vv - self._base[jj]) >> 1)
            return
        preds = self.sync_preds
        succ = self._succ
        for uu, vv in zip(u.tolist(), v.tolist()):
            got = preds.get(vv)
            if got is None:
                preds[vv] = {uu}
            elif uu in got:
                continue
            else:
                got.add(uu)
            if succ is not None:
                succ.setdefault(uu, []).append(vv)

    def _raise(self, u: int, v: int) -> None:
        """The clocks after the sync edge ``u -> v`` was added, below ``_dirty`` (the rows at and
        after it are stale and the lazy sweep of :meth:`clock` computes them from their
        predecessors anyway): instead of sweeping again from ``v``, only the rows the edge
        raises are updated, in node order (a heap), from the changed rows to their successors.

        Why it is the sweep's answer: a row is the maximum over its predecessors' rows (an
        E-node also holds its own rank, which no predecessor reaches). Adding ``u`` to ``v``'s
        predecessors makes ``v``'s row ``max(old, row(u))`` (``u < v``: unchanged by the edge).
        Rows only grow, so a node whose predecessors changed gets ``max(old, new rows of the
        changed predecessors)`` -- the maximum over all its predecessors' new rows -- and a node
        none of whose predecessors changed keeps its row. Every predecessor has a smaller id,
        so the heap hands out each node after all its changed predecessors. On the 1024-token
        LLaMA prefill layer the 15 serializing edges of counter allocation change 8 to 1 150
        of 125 784 rows each; the sweeps from each edge's head went over ~280 000.
        ``test_propagated_clocks_are_the_sweeps`` compares with a fresh sweep."""
        c = self._clock
        lim = self._dirty
        cv, cu = c[v], c[u]
        if not (cu > cv).any():
            return
        np.maximum(cv, cu, out=cv)
        if self._succ is None:
            succ: dict[int, list[int]] = {}
            for w, us in self.sync_preds.items():
                for x in us:
                    succ.setdefault(x, []).append(w)
            self._succ = succ
        if self._po_next is None:
            nxt = [-1] * self.n
            for i, p in enumerate(self.po_prev):
                if p >= 0:
                    nxt[p] = i
            self._po_next = nxt
        succ, nxt, base, blocks, inst = (self._succ, self._po_next, self._base, self.blocks,
                                         self._node_inst)
        heap = [v]
        queued = {v}
        while heap:
            p = heappop(heap)
            rp = c[p]
            i = inst[p]
            d = p - base[i]
            if d & 1:  # E(i, b): E(i, b+1), or the executor's next instruction's S(., 0)
                ws = [p + 2] if (d >> 1) + 1 < blocks[i] else (
                    [base[nxt[i]]] if nxt[i] >= 0 else [])
                ws.extend(succ.get(p, ()))
            else:  # S(i, b): E(i, b) and S(i, b+1)
                ws = [p + 1, p + 2] if (d >> 1) + 1 < blocks[i] else [p + 1]
            for w in ws:
                if w >= lim:
                    continue
                cw = c[w]
                if (rp > cw).any():
                    np.maximum(cw, rp, out=cw)
                    if w not in queued:
                        queued.add(w)
                        heappush(heap, w)

    def fork(self) -> HbGraph:
        """A copy of this graph (its sync edges and its clocks) that changes on its own."""
        g = HbGraph.__new__(HbGraph)
        g.__dict__.update(self.__dict__)
        g.sync_preds = {v: set(us) for v, us in self.sync_preds.items()}
        g._succ = None
        if self._clock is not None:
            g._clock = self._clock.copy()
        return g

    def hw_preds(self, v: int) -> list[int]:
        """Free (hardware) predecessors of node ``v``."""
        i, b, is_e = self.locate(v)
        if is_e:
            return [self.S(i, b)] + ([self.E(i, b - 1)] if b else [])
        if b:
            return [self.S(i, b - 1)]
        p = self.po_prev[i]
        return [self.E(p, self.blocks[p] - 1)] if p >= 0 else []

    def preds(self, v: int) -> list[int]:
        return self.hw_preds(v) + sorted(self.sync_preds.get(v, ()))

    def clock(self, upto: int | None = None) -> np.ndarray:
        """``clock[v, x]``: rank of the latest E-node of executor ``x`` at or before ``v``.

        With ``upto``, only the rows up to node ``upto`` (its instruction's) are brought up to
        date: allocation alternates queries and new edges that point ever further forward
        (``allocate._serialize``), and a sweep to the end after each edge was quadratic."""
        if self._clock is None:
            self._clock = np.zeros((self.num_nodes, len(self.xid)), dtype=self.clock_dtype)
            self._dirty = 0
        if self._dirty >= (self.num_nodes if upto is None else upto + 1):
            return self._clock
        last = self.n - 1 if upto is None else self._node_inst[upto]
        c = self._clock
        base = self._base
        if self._xidl is None:
            self._xidl = [self.xid[e] for e in self.execs]
        xid = self._xidl
        i = int(np.searchsorted(self.base, self._dirty, side="right")) - 1
        for i in range(i, last + 1):
            p = self.po_prev[i]
            po = base[p] + 2 * self.blocks[p] - 1 if p >= 0 else -1
            x, r0 = xid[i], self.rank0[i]
            for b in range(self.blocks[i]):
                v = base[i] + 2 * b
                if v >= self._dirty:  # S-node
                    preds = [v - 2] if b else ([po] if po >= 0 else [])
                    sp = self.sync_preds.get(v)
                    if sp:
                        preds.extend(sp)
                    if len(preds) == 1:
                        c[v] = c[preds[0]]
                    elif preds:
                        c[v] = c[preds].max(axis=0)
                    else:
                        c[v] = 0
                if v + 1 >= self._dirty:  # E-node
                    if b:
                        np.maximum(c[v], c[v - 1], out=c[v + 1])
                    else:
                        c[v + 1] = c[v]
                    c[v + 1, x] = r0 + b
        self._dirty = base[last + 1]
        return c

    def adopt_clock(self, other: HbGraph) -> None:
        """Take ``other``'s clocks (computed to the end) as this graph's: for a graph of the same
        instructions and blocks whose edges imply the same happens-before (reachability) --
        the kept needs of a transitive reduction of ``other``, which hold every edge the
        reduction keeps and no edge ``other`` lacks. The clocks are a function of reachability
        alone (the latest E-node of each executor at or before a node), so they are equal; the
        sweep that would compute them again is skipped. ``other`` must not change afterwards
        (the array is shared)."""
        if (self.n, self.blocks) != (other.n, other.blocks):
            raise ValueError("adopt_clock: the graphs have different instructions or blocks")
        c = other.clock()
        if self._clock is None or self._dirty < self.num_nodes:
            self._clock, self._dirty = c, self.num_nodes
            if self._xidl is None:
                self._xidl = [self.xid[e] for e in self.execs]

    def hb(self, u: int, v: int) -> bool:
        """E-node ``u`` happens-before node ``v`` (strictly)."""
        if u == v:
            return False
        # :meth:`locate` and :meth:`clock` inline: counter allocation asks ~1 M times on
        # ResNet-50 224 (a call, a tuple and a numpy scalar each were most of its cost)
        i = self._node_inst[u]
        d = u - self._base[i]
        assert d & 1, "happens-before queries start at an E-node"
        c = self._clock
        if c is None or self._dirty <= v:
            c = self.clock(v)
        return c.item(v, self._xidl[i]) >= self.rank0[i] + (d >> 1)

    def before(self, v: int):
        """A predicate on events ``(i, k)``: ``E(i, k)`` happens-before node ``v`` -- :meth:`hb`
        for many E-nodes and one ``v`` (counter allocation asks, per channel, whether each
        counter's tails happen-before its first event: ~300 000 queries on ResNet-50 224, each
        a call, a node id and a numpy scalar in :meth:`hb`). The graph must not change while
        the predicate is used (it reads ``v``'s clock row once)."""
        c = self._clock
        if c is None or self._dirty <= v:
            c = self.clock(v)
        row = c[v].tolist()
        xid, rank0, base = self._xidl, self.rank0, self._base

        def f(e: tuple[int, int]) -> bool:
            i, k = e
            return row[xid[i]] >= rank0[i] + k and base[i] + 2 * k + 1 != v
        return f

    def _e_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node: its executor's clock column, and its rank in that executor's chain when it
        is an E-node (S-nodes: 0, never asked)."""
        reps = [2 * b for b in self.blocks]
        col = np.repeat(np.array([self.xid[e] for e in self.execs], dtype=np.int64), reps)
        node = np.arange(self.num_nodes, dtype=np.int64)
        rank = np.repeat(np.asarray(self.rank0, dtype=np.int64), reps) + \
            (node - np.repeat(self.base[:-1], reps)) // 2
        rank[node % 2 == 0] = 0
        return col, rank

    def sync_edge_flags(self):
        """For every S-node ``v`` with sync edges (in node order): ``(v, us, flags)`` with ``us``
        its sync predecessors (sorted) and ``flags[n]`` true when the edge ``us[n] -> v`` is
        implied by a longer path (so the transitive reduction drops it).

        ``u -> v`` is implied iff another predecessor ``p`` of ``v`` has ``u`` at or before it:
        ``clock[p, x(u)] >= rank(u)`` (``p = u`` itself has exactly ``rank(u)``, so it is masked
        out). One gather per node, ``O(preds(v) * sync_preds(v))``, over the clocks computed
        once; ``test_redundant_edges_match_networkx_transitive_reduction`` is the oracle."""
        c = self.clock()
        col, rank = self._e_columns()
        coll, rankl = col.tolist(), rank.tolist()
        out = []
        for v in sorted(self.sync_preds):
            us = sorted(self.sync_preds[v])
            hw = self.hw_preds(v)
            if len(us) == 1:
                u = us[0]
                out.append((v, us, [bool(hw) and hw[0] != u and
                                    int(c[hw[0], coll[u]]) >= rankl[u]]))
                continue
            ua = np.array(us, dtype=np.int64)
            h, m = len(hw), len(us)
            # the rows of v's predecessors, the columns of the sync ones' executors (broadcast
            # indices: np.ix_ costs more than the gather on these small blocks)
            a = c[np.array(hw + us, dtype=np.int64)[:, None], col[ua]]
            a[np.arange(h, h + m), np.arange(m)] = 0  # not u itself (ranks start at 1)
            for r, p in enumerate(hw):  # a hardware edge that is also a sync edge: the same edge
                if p in self.sync_preds[v]:
                    a[r, us.index(p)] = 0
            out.append((v, us, (a.max(axis=0) >= rank[ua]).tolist()))
        return out

    def implied_sync_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`sync_edge_flags` as three arrays over every sync edge, in the same order (by
        S-node, then sync predecessor): ``(u, v, implied)``.

        The same test -- ``u -> v`` is implied iff another predecessor ``p`` of ``v`` has
        ``clock[p, x(u)] >= rank(u)`` -- made for all edges at once: the hardware predecessor of
        each ``v`` (not when it is ``u`` itself, the same edge) in one gather, and the other
        sync predecessors as the pairs within each ``v``'s group (sum of squared group sizes
        elements, in slices of ``PAIRS`` elements) instead of a few numpy calls per S-node.
        ``test_implied_sync_edges_are_the_flags`` compares with :meth:`sync_edge_flags`."""
        c = self.clock()
        col, rank = self._e_columns()
        sp = self.sync_preds
        vs = sorted(sp)
        sizes = np.array([len(sp[v]) for v in vs], dtype=np.int64)
        total = int(sizes.sum())
        u = np.fromiter((x for v in vs for x in sorted(sp[v])), dtype=np.int64, count=total)
        v = np.repeat(np.array(vs, dtype=np.int64), sizes)
        cu, ru = col[u], rank[u]
        implied = np.zeros(total, dtype=bool)
        # the hardware predecessor of each S-node (-1: none)
        hw = np.array([(h[0] if h else -1) for h in map(self.hw_preds, vs)], dtype=np.int64)
        h = np.repeat(hw, sizes)
        has = np.flatnonzero((h >= 0) & (h != u))
        implied[has] = c[h[has], cu[has]] >= ru[has]
        # the other sync predecessors of the same S-node
        start = np.repeat(np.cumsum(sizes) - sizes, sizes)  # per edge: its group's first edge
        m = np.repeat(sizes, sizes)  # per edge: its group's size
        multi = np.flatnonzero(m > 1)
        if multi.size:
            cum = np.cumsum(m[multi])
            a = 0
            while a < multi.size:
                base = int(cum[a - 1]) if a else 0
                b = max(a + 1, int(np.searchsorted(cum, base + self.PAIRS, side="right")))
                e = multi[a:b]
                reps = m[e]
                n = int(reps.sum())
                ee = np.repeat(e, reps)
                off = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
                other = np.repeat(start[e], reps) + off
                keep = other != ee
                ee, other = ee[keep], other[keep]
                hit = c[u[other], cu[ee]] >= ru[ee]
                implied[ee[hit]] = True
                a = b
        return u, v, implied

    # elements per slice of :meth:`implied_sync_edges`' pair test (bounds its arrays)
    PAIRS = 1 << 20

    def redundant_sync_edges(self) -> set[tuple[int, int]]:
        """Sync edges (E-node, S-node) implied by a longer path (the complement of the transitive
        reduction restricted to sync edges; hardware edges are always kept)."""
        u, v, implied = self.implied_sync_edges()
        return set(zip(u[implied].tolist(), v[implied].tolist()))
