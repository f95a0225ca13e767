"""Stages 2 and 3 in one forward sweep: each consumer's needs derived and reduced in global order.

:func:`analyze` + :func:`reduce_needs` derive every conflicting pair (ResNet-50 224: 194 858
needs) and then drop the ~80 % that the others imply (38 565 kept). All edges point forward in
the global order, so the happens-before clocks of every node before a consumer ``j`` are final
when ``j`` is reached. The sweep takes the consumers in order and, for each, its candidate
producers (the memory pairs of :func:`hazards.bulk_pairs`, the explicit edges and rings):

* a producer ``i`` all of whose blocks happen-before the end of ``j``'s program-order
  predecessor (``clock[E(po(j), last), x(i)] >= rank(E(i, last))``) is *skipped*: every block
  edge ``E(i, k) -> S(j, b)`` it could give is implied through that predecessor (the hardware
  edge ``E(po(j), last) -> S(j, 0) -> S(j, b)``), so the transitive reduction drops it, whatever
  its need vector; its need vector is never computed (``access_need``);
* the others get their need vectors and the reduction's test (an edge ``u -> S(j, b)`` is implied
  iff another predecessor ``p`` of ``S(j, b)`` has ``clock[p, x(u)] >= rank(u)``, as
  :meth:`HbGraph.implied_sync_edges`), then ``j``'s clock rows are computed.

A skipped edge is implied in the graph of all needs, so leaving it out keeps every reachability
(a DAG's transitive reduction is unique and is a subgraph of every graph with its reachability):
the kept needs are the same. Their need vectors are too: for a 1-block consumer the old path's
vector is the maximum over every contribution (a need :func:`hazards.prune_implied` drops is
only ever re-added, and kept, when what it lost was no wait), which the sweep takes; a consumer
with more blocks gets its needs exactly as the old path builds them (every candidate, memory by
memory, with the same pruning points), so its vectors are the old ones by construction.
``test_sweep.py`` compares both paths (kept needs, vectors, clocks, programs) on random
programs and on the compile's models. ``ENABLED = False`` (or a version 2 certificate, which
lists every pair) keeps :func:`analyze` + :func:`reduce_needs`.
"""

from __future__ import annotations

import numpy as np

from . import hazards
from .analyze import Needs, SyncError, WholeEdges, analyze, prepare
from .footprint import access_need
from .graph import HbGraph
from .hazards import _NEED0, CHUNK_MEMO, Hazard, _prune_group, _Sweep, bulk_pairs, memory_columns, prune_implied
from .redundancy import Reduced

#: False: :func:`analyze` + :func:`reduce_needs` (the tests compare both ways)
ENABLED = True
#: Up to this many candidates of a 1-block consumer are skip-tested, and up to this many
#: producers reduced (:func:`_reduce_one1`), on Python ints (numpy's fixed cost per call is
#: ~20 scalar reads); more: arrays. 0: always arrays (the tests compare both ways)
SMALL = 16

# contribution kinds: a memory pair that meets with need [0]; a memory pair whose need vector
# access_need gives; a whole explicit edge; an explicit need vector (block edges, rings)
_KNOWN, _ACCESS, _WHOLE, _VEC = 0, 1, 2, 3


def usable(sync_mode: str, remove_redundant: bool) -> bool:
    """Whether :func:`analyze_reduce` gives what ``analyze`` + ``reduce_needs`` give here."""
    from . import certificate
    return (ENABLED and sync_mode == "dataflow" and remove_redundant
            and hazards.PRUNE_IMPLIED and not hazards.REASONS and not certificate.LIST_HAZARDS)


def analyze_reduce(insts, machine, *, edges=(), rings=(),
                   stream_blocks: int | None = None) -> tuple[Needs, Reduced]:
    """:func:`analyze` then :func:`reduce_needs` in one sweep (module doc). ``Needs.needs`` of
    the result holds the kept needs only; ``Reduced.removed`` is empty, ``Reduced.implied``
    counts the needs derived and found implied, ``Reduced.skipped`` the producers skipped
    (consumer by consumer) without deriving their needs."""
    nd = prepare(insts, machine, "dataflow", stream_blocks)
    insts, blocks = nd.insts, nd.blocks
    n = len(insts)
    execs = [inst.executor for inst in insts]
    st = _Sweep(execs, blocks)
    exid = st.exid
    Is, Js, Ks, Ms, Qs, Rs = [], [], [], [], [], []
    accls: list[list] = []
    for m, (mem, cols) in enumerate(memory_columns(insts, blocks, st)):
        accls.append(cols.accl)
        got = bulk_pairs(cols, st)
        if got is None:
            continue
        q, r, known = got
        Is.append(cols.ins[q])
        Js.append(cols.ins[r])
        Ks.append(np.where(known, _KNOWN, _ACCESS))
        Ms.append(np.full(q.size, m, dtype=np.int64))
        Qs.append(q)
        Rs.append(r)
    nmem = len(accls)
    vecs = _explicit(nd, edges, rings, execs, exid, Is, Js, Ks, Ms, Qs, Rs, nmem)
    if vecs is None:  # an input error: the old path raises it, worded as it always was
        analyze(insts, machine, edges=edges, rings=rings, sync_mode="dataflow",
                stream_blocks=stream_blocks)
        raise AssertionError("sync-insert: analyze accepted what the sweep refused")
    has_explicit = bool(edges) or bool(rings)
    if Is:
        I = np.concatenate(Is)
        J = np.concatenate(Js)
        order = np.argsort(J, kind="stable")  # per consumer, the old path's order
        I, J = I[order], J[order]
        K, M = np.concatenate(Ks)[order], np.concatenate(Ms)[order]
        Q, R = np.concatenate(Qs)[order], np.concatenate(Rs)[order]
    else:
        I = J = K = M = Q = R = np.zeros(0, dtype=np.int64)
    ar = np.arange(n + 1)
    lo_of = np.searchsorted(J, ar).tolist()

    g = HbGraph(insts, blocks)
    c = np.zeros((g.num_nodes, len(g.xid)), dtype=g.clock_dtype)
    base, rank0, po_prev = g._base, g.rank0, g.po_prev
    xid = [g.xid[e] for e in execs]
    xcol = np.asarray(xid, dtype=np.int64)
    rlast = np.asarray(rank0, dtype=np.int64) + np.asarray(blocks, dtype=np.int64) - 1
    zero = np.zeros(len(g.xid), dtype=g.clock_dtype)
    Il, Kl, Ml, Ql, Rl = I.tolist(), K.tolist(), M.tolist(), Q.tolist(), R.tolist()
    # per contribution: its producer's clock column and last E-node rank (the skip test)
    XC, RL = xcol[I], rlast[I]
    XCl, RLl = XC.tolist(), RL.tolist()
    chunks: dict = {}
    kept: dict[tuple[int, int], Hazard] = {}
    implied = skipped = 0
    for j in range(n):
        p = po_prev[j]
        epo = base[p] + 2 * blocks[p] - 1 if p >= 0 else -1
        row = c[epo] if epo >= 0 else zero
        s, e = lo_of[j], lo_of[j + 1]
        bj = blocks[j]
        prods: list[int] = []
        vals: list = []
        if bj == 1:
            best: dict[int, int] = {}
            if s < e:
                # skip the producers the program-order predecessor already waits for
                if epo >= 0 and e - s <= SMALL:
                    # a few candidates (the usual case): the same test on Python ints
                    xs, dead = [], None
                    for x in range(s, e):
                        if row.item(XCl[x]) < RLl[x]:
                            xs.append(x)
                        elif dead is None:
                            dead = {Il[x]}
                        else:
                            dead.add(Il[x])
                    if dead is not None:
                        skipped += len(dead)
                elif epo >= 0:
                    live = np.flatnonzero(row[XC[s:e]] < RL[s:e])
                    if live.size < e - s:
                        dead = np.ones(e - s, dtype=bool)
                        dead[live] = False
                        skipped += len(set(I[s:e][dead].tolist()))
                    xs = (live + s).tolist()
                else:
                    xs = range(s, e)
                for x in xs:
                    i = Il[x]
                    k = Kl[x]
                    if k == _KNOWN:
                        v = 0
                    elif k == _ACCESS:
                        if len(chunks) > CHUNK_MEMO:
                            chunks.clear()
                        acc = accls[Ml[x]]
                        v = int(access_need(acc[Ql[x]], blocks[i], acc[Rl[x]], 1, chunks)[0])
                        if v < 0:
                            continue
                    elif k == _WHOLE:
                        v = blocks[i] - 1
                    else:
                        v = int(vecs[Ql[x]][0])
                    got = best.get(i)
                    if got is None or v > got:
                        best[i] = v
            if len(best) < 2:  # the usual cases, without _reduce_one's arrays
                v0 = base[j]
                if best:
                    (i, k), = best.items()
                    if k >= 0:
                        if row.item(xid[i]) < rank0[i] + k:  # not implied by po(j)
                            kept[(i, j)] = Hazard(i, j, _NEED0 if k == 0 else
                                                  np.array([k], dtype=np.int64))
                        else:
                            implied += 1
                        r = c[v0]
                        np.maximum(row, c[base[i] + 2 * k + 1], out=r)
                        c[v0 + 1] = r
                        c[v0 + 1, xid[j]] = rank0[j]
                        continue
                    implied += 1  # an explicit need without a wait: no block edge
                if epo >= 0:
                    c[v0:v0 + 2] = row  # S(j, 0) and E(j, 0)
                c[v0 + 1, xid[j]] = rank0[j]
                continue
            for i, v in best.items():
                prods.append(i)
                vals.append([v])
        elif s < e:
            needs = _replicate(j, range(s, e), Il, Kl, Ml, Ql, Rl, accls, vecs, blocks, execs,
                               exid, chunks, nmem, has_explicit)
            for (i, _), h in needs.items():
                prods.append(i)
                vals.append(h)
        if bj == 1 and len(prods) <= SMALL:
            alive = _reduce_one1(j, prods, vals, row, c, base, rank0, xid)
        else:
            alive = _reduce_one(j, prods, vals, row, c, base, rank0, xid, bj)
        for n_, i in enumerate(prods):
            if alive[n_]:
                v = vals[n_]
                if isinstance(v, Hazard):
                    kept[(i, j)] = v
                else:
                    kept[(i, j)] = Hazard(i, j, _NEED0 if v[0] == 0 else
                                          np.array(v, dtype=np.int64))
            else:
                implied += 1
    nd.needs = kept
    # the graph of the kept needs: ``g`` has no edge yet (only its per-instruction tables were
    # read above), so it is the fresh graph of these instructions and blocks
    g.add_needs(kept)
    g._clock, g._dirty, g._xidl = c, g.num_nodes, xid
    red = Reduced(kept, {}, g)
    red.implied, red.skipped = implied, skipped
    return nd, red


def _reduce_one1(j, prods, vals, row, c, base, rank0, xid) -> list[bool]:
    """:func:`_reduce_one` of a 1-block consumer with a few producers (``vals[n] == [k]``), on
    Python ints: the edge from ``u_b`` is implied iff ``row`` (the program-order predecessor's
    clock) or another producer's E-node ``u_a`` has ``u_b`` at or before it -- the same test
    as the general path's matrix with its diagonal zeroed, one scalar read per pair."""
    us, cols, ranks, who = [], [], [], []
    for n_, i in enumerate(prods):
        k = vals[n_][0]
        if k >= 0:
            us.append(base[i] + 2 * k + 1)
            cols.append(xid[i])
            ranks.append(rank0[i] + k)
            who.append(n_)
    alive = [False] * len(prods)
    v = base[j]
    if not us:
        c[v] = row
    else:
        for b, u in enumerate(us):
            col, rk = cols[b], ranks[b]
            if row.item(col) >= rk:
                continue
            for a, ua in enumerate(us):
                if a != b and c.item(ua, col) >= rk:
                    break
            else:
                alive[who[b]] = True
        r = c[v]
        np.maximum(row, c[us[0]], out=r)
        for u in us[1:]:
            np.maximum(r, c[u], out=r)
    c[v + 1] = c[v]
    c[v + 1, xid[j]] = rank0[j]
    return alive


def _reduce_one(j, prods, vals, row, c, base, rank0, xid, bj) -> list[bool]:
    """The reduction's test for the block edges of ``j``'s needs (``vals``: need per block, a
    list or a :class:`Hazard`), and ``j``'s clock rows; which needs have a block edge kept."""
    alive = [False] * len(prods)
    vecs = [v.need.tolist() if isinstance(v, Hazard) else v for v in vals]
    prev = row
    v0 = base[j]
    for b in range(bj):
        v = v0 + 2 * b
        us, cols, ranks, who = [], [], [], []
        for n_, i in enumerate(prods):
            k = vecs[n_][b]
            if k >= 0:
                us.append(base[i] + 2 * k + 1)
                cols.append(xid[i])
                ranks.append(rank0[i] + k)
                who.append(n_)
        if not us:
            c[v] = prev
        elif len(us) == 1:
            u = us[0]
            if prev[cols[0]] < ranks[0]:
                alive[who[0]] = True
            np.maximum(prev, c[u], out=c[v])
        else:
            rows = c[us]
            ra = np.asarray(ranks)
            m = rows[:, cols]  # m[a, b]: u_a's clock at u_b's executor
            np.fill_diagonal(m, 0)  # not u itself (ranks start at 1)
            imp = (m.max(axis=0) >= ra) | (prev[cols] >= ra)
            for n_ in np.flatnonzero(~imp).tolist():
                alive[who[n_]] = True
            np.maximum(prev, rows.max(axis=0), out=c[v])
        if b:
            np.maximum(c[v], c[v - 1], out=c[v + 1])
        else:
            c[v + 1] = c[v]
        c[v + 1, xid[j]] = rank0[j] + b
        prev = c[v]
    return alive


def _replicate(j, xs, Il, Kl, Ml, Ql, Rl, accls, vecs, blocks, execs, exid, chunks, nmem,
               has_explicit) -> dict:
    """The needs of a consumer with several blocks exactly as ``analyze`` builds them: memory by
    memory in the sweep's order, pruned (:func:`hazards._end_bulk`) after each memory in which a
    need appeared, then the explicit edges, then one :func:`prune_implied`."""
    out: dict[tuple[int, int], Hazard] = {}
    groups: dict[int, list[int]] = {}
    dirty: set[int] = set()
    bj = blocks[j]
    cur, grew = -1, False

    def end(grew):
        if grew:
            for ex in dirty:
                gr = groups[ex]
                if len(gr) > 1:
                    groups[ex] = _prune_group(out, j, gr)
            dirty.clear()

    explicit = []
    for x in xs:
        m = Ml[x]
        if m >= nmem:
            explicit.append(x)
            continue
        if m != cur:
            if cur >= 0:
                end(grew)
            cur, grew = m, False
        i = Il[x]
        ex = int(exid[i])
        if Kl[x] == _KNOWN:
            need = _NEED0
        else:
            if len(chunks) > CHUNK_MEMO:
                chunks.clear()
            acc = accls[m]
            need = access_need(acc[Ql[x]], blocks[i], acc[Rl[x]], bj, chunks)
            if need.max() < 0:
                continue
        h = out.get((i, j))
        if h is None:
            out[(i, j)] = Hazard(i, j, need)
            grew = True
            groups.setdefault(ex, []).append(i)
        else:
            h.need = _NEED0 if need is _NEED0 else np.maximum(h.need, need)
        dirty.add(ex)
    if cur >= 0:
        end(grew)
    for x in explicit:
        i = Il[x]
        need = (np.full(bj, blocks[i] - 1, dtype=np.int64) if Kl[x] == _WHOLE else vecs[Ql[x]])
        h = out.get((i, j))
        if h is None:
            out[(i, j)] = Hazard(i, j, need.copy())
        else:
            h.need = np.maximum(h.need, need)
    if has_explicit and len(out) > 1:
        prune_implied(out, j, [i for (i, _) in out], execs)
    return out


def _explicit(nd: Needs, edges, rings, execs, exid, Is, Js, Ks, Ms, Qs, Rs,
              nmem) -> list | None:
    """The explicit edges and rings as contributions (appended to the columns); their need
    vectors (``_VEC``) in the returned list. None: an input error (the caller lets ``analyze``
    word it)."""
    n = len(nd.insts)
    blocks = nd.blocks
    vecs: list[np.ndarray] = []
    if isinstance(edges, WholeEdges) and edges:  # the pass's tokens: whole, as lists
        P = np.asarray(edges.producers, dtype=np.int64)
        C = np.asarray(edges.consumers, dtype=np.int64)
        if ((P < 0) | (C >= n) | (P >= C)).any():
            return None
        w = exid[P] != exid[C]
        _append(Is, Js, Ks, Ms, Qs, Rs, P[w], C[w], _WHOLE, nmem)
    elif edges:
        ne = len(edges)
        P = np.fromiter((e[0] for e in edges), dtype=np.int64, count=ne)
        C = np.fromiter((e[1] for e in edges), dtype=np.int64, count=ne)
        if ((P < 0) | (C >= n) | (P >= C)).any():
            return None
        gran = [e[2] for e in edges]
        whole = np.fromiter((g == "whole" for g in gran), dtype=bool, count=ne)
        if not whole.all():
            if any(g not in ("whole", "block") for g in gran):
                return None
            for x in np.flatnonzero(~whole).tolist():
                e = edges[x]
                need = _block_need(blocks, e[0], e[1], e[3])
                if need is None:
                    return None
                if execs[e[0]] != execs[e[1]]:
                    vecs.append(need)
        w = whole & (exid[P] != exid[C])
        _append(Is, Js, Ks, Ms, Qs, Rs, P[w], C[w], _WHOLE, nmem)
        if vecs:
            blk = [(e[0], e[1]) for e, wh in zip(edges, whole.tolist())
                   if not wh and execs[e[0]] != execs[e[1]]]
            _append(Is, Js, Ks, Ms, Qs, Rs, np.array([p for p, _ in blk], dtype=np.int64),
                    np.array([c for _, c in blk], dtype=np.int64), _VEC, nmem,
                    q=np.arange(len(vecs), dtype=np.int64))
    rp, rc = [], []
    for rb in rings:
        if rb.slots < 1 or len(rb.producers) != len(rb.consumers):
            return None
        for k, (p, c) in enumerate(zip(rb.producers, rb.consumers)):
            if not (0 <= p < c < n):
                return None
            need = (_block_need(blocks, p, c, None) if rb.block else
                    np.full(blocks[c], blocks[p] - 1, dtype=np.int64))
            if execs[p] != execs[c]:
                rp.append(p), rc.append(c), vecs.append(need)
            if k >= rb.slots:
                c_old = rb.consumers[k - rb.slots]
                if not (0 <= c_old < p < n):
                    return None
                if execs[c_old] != execs[p]:
                    rp.append(c_old), rc.append(p)
                    vecs.append(np.full(blocks[p], blocks[c_old] - 1, dtype=np.int64))
    if rp:
        start = len(vecs) - len(rp)
        _append(Is, Js, Ks, Ms, Qs, Rs, np.array(rp, dtype=np.int64),
                np.array(rc, dtype=np.int64), _VEC, nmem,
                q=np.arange(start, len(vecs), dtype=np.int64))
    return vecs


def _block_need(blocks, p: int, c: int, mapping) -> np.ndarray | None:
    """``analyze``'s block_need, None where it fails."""
    bp, bc = blocks[p], blocks[c]
    if mapping is None:
        mapping = [(b + 1) * bp // bc - 1 if bp >= bc else b * bp // bc for b in range(bc)]
    if len(mapping) != bc or any(not -1 <= k < bp for k in mapping):
        return None
    return np.asarray(mapping, dtype=np.int64)


def _append(Is, Js, Ks, Ms, Qs, Rs, p, c, kind, nmem, q=None) -> None:
    Is.append(p)
    Js.append(c)
    Ks.append(np.full(p.size, kind, dtype=np.int64))
    Ms.append(np.full(p.size, nmem, dtype=np.int64))
    Qs.append(np.zeros(p.size, dtype=np.int64) if q is None else q)
    Rs.append(np.zeros(p.size, dtype=np.int64))


__all__ = ["analyze_reduce", "usable", "ENABLED", "SyncError"]
