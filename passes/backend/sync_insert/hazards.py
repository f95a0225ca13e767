"""Stage 2b of sync insertion: the hazards of a program, as need vectors.

Over the instructions in their *global order* (a valid sequential execution), which pairs
``i < j`` on different executors conflict (RAW / WAR / WAW on some memory), and for each block
``b`` of ``j`` which is the last block of ``i`` it must wait for (:func:`derive_hazards`; the
bytes come from :mod:`.footprint`). :func:`prune_implied` drops the needs that a later producer
on the same executor implies through program order. Nothing here decides counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from m100.targets.m100 import isa

from . import footprint
from .footprint import Chunks, MemKey, access_need, block_accesses, is_dense, rows_meet, walk_rows

# derive_hazards keeps at most this many accesses' chunks (a pure function of the walk: an
# evicted one is rebuilt; unbounded, the chunks of every access compared held ~10 KB each)
CHUNK_MEMO = 4096


@dataclass(slots=True)  # millions of them on a large program (the LLaMA prefill layer)
class Hazard:
    """Instruction ``j`` must wait, per block, for block ``need[b]`` of instruction ``i``."""
    i: int
    j: int
    need: np.ndarray  # len = blocks(j), values in [-1, blocks(i) - 1]
    why: list[tuple[str, MemKey, int, int]] = field(default_factory=list)  # (RAW/WAR/WAW, mem, lo, hi)


#: Keep each need's reasons (``Hazard.why``: kind, memory, byte range) even when no version 2
#: certificate is written (``certificate.LIST_HAZARDS`` turns them on by itself); the explicit
#: edges always keep them
REASONS = False
_NEED0 = np.zeros(1, dtype=np.int64)  # a 1-block instruction waiting for a 1-block one
_NEED0.setflags(write=False)  # shared by hazards: never changed in place (merges build anew)


def derive_hazards(insts: list[isa.Instruction], blocks: list[int]) -> dict[tuple[int, int], Hazard]:
    """RAW/WAR/WAW conflicts between instructions on different executors, as need vectors.

    Per memory, the accesses in global order sweep a *live* set (earlier accesses that may still
    conflict with a later one; a dense write drops what it covers); each access meets the live
    entries whose bounding intervals overlap it (write: any, read: writes). A pair of 1-block
    instructions whose walks are both dense conflicts exactly when the intervals overlap, so its
    need is ``[0]`` without building chunks (``access_need`` gives the same). Likewise two
    1-block accesses whose footprints are rows of one period (:func:`walk_rows`: column slices
    of one matrix, e.g. the halves of RoPE's rows, interleave in one bounding interval) meet or
    not by :func:`rows_meet`, exactly the decision ``access_need``'s run-by-run test makes for
    them (both are exact: at most ``EXACT_LIMIT`` runs, or dense); pairs that do not meet are
    dropped before the Python loop. Without it, k interleaved slices of one matrix cost k^2 exact
    tests (the 1024-token LLaMA prefill layer: millions). The candidate pairs of a memory are
    found at once (:func:`_bulk_memory`); ``test_hazards.py`` keeps the per-access sweep without
    the shortcuts (the product's path until session 32) as the reference."""
    st = _Sweep([inst.executor for inst in insts], blocks)
    for mem, cols in memory_columns(insts, blocks, st):
        _bulk_memory(mem, cols, st)
    return st.out


def memory_columns(insts: list[isa.Instruction], blocks: list[int], st: _Sweep):
    """Per memory (in the order of first access), its accesses in global order as
    :class:`_Columns` -- what :func:`derive_hazards` sweeps. Each distinct walk object gets a
    number (``st.walks``) and its :func:`is_dense` once; its :func:`walk_rows` when a 1-block
    instruction's access first needs it (a walk is shared by many accesses: the 1024-token
    LLaMA prefill layer has 147 144 accesses of 42 115 walks)."""
    accs = [block_accesses(inst) for inst in insts]
    # per memory, arrays of bounding intervals of every access, in instruction order
    per_mem: dict[MemKey, list[tuple[int, int, int, bool, int, int]]] = {}
    wid_of, walks, ranges = st.wid_of, st.walks, st.ranges
    dense: list[bool] = []
    # is_dense is a function of a walk's element bits and levels alone, and walks moved from
    # one another share their levels tuple (``Walk.moved``; ResNet-50: 26 030 walks, ~1 500
    # levels): one call per (levels object, bits) -- the walks hold their levels while the
    # sweep runs, so the ids stay unique
    dense_of: dict[tuple[int, int], bool] = {}
    for idx, al in enumerate(accs):
        for n, a in enumerate(al):
            w = a.walk
            k = wid_of.get(id(w))  # the walks live in insts while the sweep runs
            if k is None:
                k = wid_of[id(w)] = len(walks)
                walks.append(w)
                ranges.append(w.byte_range())
                key = (id(w.levels), w.dtype.bits)
                d = dense_of.get(key)
                if d is None:
                    d = dense_of[key] = is_dense(w)
                dense.append(d)
            lo, hi = ranges[k]
            per_mem.setdefault(a.mem, []).append((lo, hi, idx, a.write, n, k))
    nw = len(walks)
    st.dense_w = np.array(dense, dtype=bool) if nw else np.zeros(0, dtype=bool)
    st.rows_done = np.zeros(nw, dtype=bool)  # walk_rows computed (for a 1-block access)
    st.rows_ok = np.zeros(nw, dtype=bool)  # ... and exact for access_need
    st.rows_sh = np.zeros((nw, 4), dtype=np.int64)
    for mem, rows in per_mem.items():
        yield mem, _Columns(rows, accs, blocks, st)


class _Sweep:
    """The state of one :func:`derive_hazards` call shared by its memories."""

    def __init__(self, execs: list, blocks: list[int]):
        self.execs, self.blocks = execs, blocks
        self.wid_of: dict[int, int] = {}  # id(walk) -> its number (:func:`memory_columns`)
        self.walks: list[isa.Walk] = []
        self.ranges: list[tuple[int, int]] = []  # per walk number, its byte_range
        self.out: dict[tuple[int, int], Hazard] = {}
        self.chunks: dict[tuple[int, int], Chunks] = {}  # (id(access), chunks) -> Chunks
        # the same per executor id (_bulk_memory), and the executors changed since the last prune
        self.groups: dict[int, dict[int, list[int]]] = {}
        self.dirty: dict[int, set[int]] = {}
        ids: dict = {}
        self.exid = np.array([ids.setdefault(e, len(ids)) for e in execs], dtype=np.int64)
        self.blocks1 = np.asarray(blocks, dtype=np.int64) == 1


class _Columns:
    """The accesses of one memory in global order, as numpy and Python columns."""

    def __init__(self, rows: list, accs: list, blocks: list[int], st: _Sweep):
        arr = np.array(rows, dtype=np.int64)  # lo, hi, instruction, written, access, walk
        self.lo, self.hi, self.wr = arr[:, 0], arr[:, 1], arr[:, 3].astype(bool)
        self.ins = arr[:, 2]
        self.accl = [accs[row[2]][row[4]] for row in rows]
        wid = arr[:, 5]
        self.dense = st.dense_w[wid].tolist()
        # row shapes (walk_rows) of the 1-block accesses exact for access_need
        self.shape = np.zeros((len(rows), 4), dtype=np.int64)
        one = st.blocks1[self.ins] if blocks is st.blocks else \
            np.asarray(blocks, dtype=np.int64)[self.ins] == 1
        walks, done, ok, sh, dense = st.walks, st.rows_done, st.rows_ok, st.rows_sh, st.dense_w
        ranges = st.ranges
        ks = np.unique(wid[one & ~done[wid]])
        if ks.size:
            # the walks' shapes in Python, written to the columns at once (one numpy write per
            # walk cost more than its walk_rows)
            done[ks] = True
            lim, oks, shs = footprint.EXACT_LIMIT, [], []
            for k, d in zip(ks.tolist(), dense[ks].tolist()):
                if d:  # every byte of its interval: one run (no fold of its levels)
                    lo, hi = ranges[k]
                    oks.append(k)
                    shs.append((lo, 0, 1, hi - lo))
                    continue
                got = walk_rows(walks[k])
                if got is not None and got[2] <= lim:
                    oks.append(k)
                    shs.append(got)
            if oks:
                ok[oks] = True
                sh[oks] = shs
        el = self.el = one & ok[wid]
        self.shape[el] = sh[wid[el]]


# pairs of (earlier, later) accesses tested at once by _bulk_memory (bounds its arrays)
BULK_PAIRS = 1 << 20


def bulk_pairs(c: _Columns, st: _Sweep):
    """The candidate pairs of one memory for :func:`_bulk_memory`: rows ``(q, r)`` (earlier,
    later access) whose intervals meet, one of them writing, of different executors, not told
    apart by the row shapes, ``q`` live at ``r`` (not retired by a covering dense write), sorted
    by ``(r, q)`` -- the sweep's order; ``known``: the pair meets for sure with need ``[0]``
    (both dense and 1-block, or the row shapes meet). None when there is no pair."""
    lo, hi, wr, ins = c.lo, c.hi, c.wr, c.ins
    n = len(lo)
    if n < 2:
        return None
    gstart = np.flatnonzero(np.diff(ins)) + 1  # first row of every instruction but the first
    starts = np.concatenate([[0], gstart])
    ends = np.concatenate([gstart, [n]])
    gid = np.repeat(np.arange(len(starts)), ends - starts)
    gend = ends[gid]  # per row: the first row of the next instruction
    # per row: the end (exclusive) of the rows it is live for
    kill_rows = np.flatnonzero(wr & np.asarray(c.dense, dtype=bool))
    kend = (_kill_ends(lo, hi, gid, starts, ends, kill_rows) if KILL_CHUNK else
            _kill_ends_loop(lo, hi, gid, starts, ends, kill_rows))
    ex = st.exid[ins]
    if bool((lo < hi).all()):  # (an empty interval meets nothing: the sorted walk needs none)
        chunks = _overlap_pairs(lo, hi, wr, ex, gend, kend)
    else:
        chunks = _window_pairs(lo, hi, wr, ex, gend, kend)
    qs_all, rs_all, kn_all = [], [], []
    for q, r in chunks:
        known = np.zeros(q.size, dtype=bool)
        if q.size:
            both = np.flatnonzero(c.el[q] & c.el[r])
            if both.size:
                a, b = c.shape[q[both]], c.shape[r[both]]
                dec, meet = rows_meet(a[:, 0], a[:, 1], a[:, 2], a[:, 3],
                                      b[:, 0], b[:, 1], b[:, 2], b[:, 3])
                known[both[dec & meet]] = True
                keep = np.ones(q.size, dtype=bool)
                keep[both[dec & ~meet]] = False
                q, r, known = q[keep], r[keep], known[keep]
        qs_all.append(q)
        rs_all.append(r)
        kn_all.append(known)
    if not qs_all:
        return None
    q = np.concatenate(qs_all)
    if not q.size:
        return None
    r = np.concatenate(rs_all)
    known = np.concatenate(kn_all)
    order = np.argsort(r * n + q)  # the sweep's order (keys are distinct)
    q, r, known = q[order], r[order], known[order]
    # both dense and 1-block: they meet with need [0]
    b1 = st.blocks1
    dn = np.asarray(c.dense, dtype=bool)
    known |= dn[q] & dn[r] & b1[ins[q]] & b1[ins[r]]
    return q, r, known


# bulk_pairs finds the pairs whose intervals meet from the rows sorted by their first byte
# (:func:`_overlap_pairs`: work in proportion to the meeting pairs) -- not by expanding every
# live pair (:func:`_window_pairs`, kept for memories with an empty interval: work in proportion
# to the live pairs, quadratic in a memory's accesses where reads are never retired: the
# 1024-token LLaMA prefill layer expanded 79 M live pairs for 2.4 M candidates). The tests
# compare both.


def _window_pairs(lo, hi, wr, ex, gend, kend):
    """The candidate pairs ``(q, r)`` (intervals meet, one writes, executors differ, ``r`` in
    ``q``'s live rows ``[gend[q], kend[q])``) by expanding every live pair, in slices of
    ``BULK_PAIRS``; yields ``(q, r)`` arrays in no particular order."""
    n = len(lo)
    length = kend - gend
    cum = np.cumsum(length)
    if int(cum[-1]) == 0:
        return
    q0 = 0
    while q0 < n:
        base = int(cum[q0 - 1]) if q0 else 0
        q1 = int(np.searchsorted(cum, base + BULK_PAIRS, side="right"))
        q1 = max(q1, q0 + 1)
        ln = length[q0:q1]
        tot = int(ln.sum())
        if tot:
            q = np.repeat(np.arange(q0, q1), ln)
            first = np.cumsum(ln) - ln
            r = np.arange(tot) - np.repeat(first - gend[q0:q1], ln)
            m = (lo[q] < hi[r]) & (hi[q] > lo[r]) & (wr[r] | wr[q]) & (ex[q] != ex[r])
            yield q[m], r[m]
        q0 = q1


def _overlap_pairs(lo, hi, wr, ex, gend, kend):
    """:func:`_window_pairs`' pairs (the same set) from the intervals' overlaps. With every
    interval non-empty (``lo < hi``: the caller's condition) and the rows in the order of
    ``(lo, row)``, two rows meet iff the later one in that order starts before the earlier one
    ends; so every meeting pair with a writer is found exactly once: from its earlier row when
    that row writes (all later rows starting before its end: one ``searchsorted``), else from
    the earlier, reading row (the later *writing* rows starting before its end). The pairs are
    then oriented by row (``q < r``) and kept when ``r`` is live for ``q`` and the executors
    differ. Expanded in slices of about ``BULK_PAIRS``; yields ``(q, r)`` arrays."""
    n = len(lo)
    rows = np.arange(n, dtype=np.int64)
    order = np.lexsort((rows, lo))
    slo = lo[order]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = rows
    end = np.searchsorted(slo, hi, side="left")  # per row: the first position starting at its end
    wpos = np.flatnonzero(wr[order])  # the positions of the writing rows, ascending
    w = np.flatnonzero(wr)
    rd = np.flatnonzero(~wr)
    # sources: the row, where its partners start in its target list, how many
    src = np.concatenate([w, rd])
    first = np.concatenate([pos[w] + 1, np.searchsorted(wpos, pos[rd], side="right")])
    last = np.concatenate([end[w], np.searchsorted(wpos, end[rd], side="left")])
    length = np.maximum(last - first, 0)
    # the partners' rows: writers' partners in ``order``, readers' in ``order[wpos]``
    targets = np.concatenate([order, order[wpos]])
    first = first + np.concatenate([np.zeros(w.size, dtype=np.int64),
                                    np.full(rd.size, n, dtype=np.int64)])
    nz = np.flatnonzero(length)
    src, first, length = src[nz], first[nz], length[nz]
    cum = np.cumsum(length)
    a = 0
    while a < src.size:
        base = int(cum[a - 1]) if a else 0
        b = max(a + 1, int(np.searchsorted(cum, base + BULK_PAIRS, side="right")))
        ln = length[a:b]
        tot = int(ln.sum())
        x = np.repeat(src[a:b], ln)
        y = targets[np.arange(tot, dtype=np.int64)
                    + np.repeat(first[a:b] - (np.cumsum(ln) - ln), ln)]
        q, r = np.minimum(x, y), np.maximum(x, y)
        m = (r >= gend[q]) & (r < kend[q]) & (ex[q] != ex[r])
        yield q[m], r[m]
        a = b


def _bulk_memory(mem: MemKey, c: _Columns, st: _Sweep) -> None:
    """The hazards of one memory: those of a per-access sweep (each access in global order
    against the *live* earlier accesses; after each instruction its dense writes retire the
    accesses they cover, its own join), in that sweep's order, with the candidate pairs found by
    a few array operations per memory instead of ~15 per access (``test_hazards.py`` keeps the
    per-access sweep, without the shortcuts, as the reference).

    An access ``q`` is live for the accesses of the instructions after its own up to and
    including the first one with a dense write covering it (its *kill*: the sweep retires it
    after that instruction's accesses). So its candidates are a contiguous range of later rows;
    one sweep over the kills alone finds every range, the ranges are expanded as (q, r) arrays
    (in slices of ``BULK_PAIRS``), filtered by the sweep's tests (intervals meet, one of the two
    writes, different executors, the row shapes), sorted by (r, q) -- the sweep's order -- and
    made into hazards pair by pair: a *known* pair (both dense and 1-block, or the row shapes
    meet) has need ``[0]``, any other ``access_need``'s; a need where some block waits is
    merged by maximum; after each instruction, :func:`_end_bulk` prunes."""
    got = bulk_pairs(c, st)
    if got is None:
        return
    q, r, known = got
    lo, hi, wr, ins = c.lo, c.hi, c.wr, c.ins
    i, j = ins[q], ins[r]
    # per pair its reason's kind and byte range
    kind = wr[q].astype(np.int64) * 2 + wr[r]
    wlo, whi = np.maximum(lo[q], lo[r]), np.minimum(hi[q], hi[r])
    il, jl, kl = i.tolist(), j.tolist(), known.tolist()
    ql, rl = q.tolist(), r.tolist()
    reasons = _reasons()
    if reasons:
        kindl, wlol, whil = kind.tolist(), wlo.tolist(), whi.tolist()
    el = st.exid[i].tolist()
    accl, blocks, out, chunks = c.accl, st.blocks, st.out, st.chunks
    groups, dirty = st.groups, st.dirty
    get = out.get
    cur = -1
    grew = False
    for x in range(len(il)):
        j = jl[x]
        if j != cur:
            if cur >= 0:
                _end_bulk(st, cur, grew)
            cur, grew = j, False
            gj = groups.get(j)
            if gj is None:
                gj = groups[j] = {}
                dj = dirty[j] = set()
            else:
                dj = dirty[j]
        i = il[x]
        e = el[x]
        if kl[x]:  # one chunk each, every byte of both intervals touched: they meet
            h = get((i, j))
            if h is None:
                h = out[(i, j)] = Hazard(i, j, _NEED0)
                grew = True
                gj.setdefault(e, []).append(i)
            else:
                h.need = _NEED0  # the largest need of a 1-block producer
            if reasons:
                h.why.append((_KINDS[kindl[x]], mem, wlol[x], whil[x]))
            dj.add(e)
            continue
        if len(chunks) > CHUNK_MEMO:  # bounded: chunks are rebuilt when needed again
            chunks.clear()
        need = access_need(accl[ql[x]], blocks[i], accl[rl[x]], blocks[j], chunks)
        if need.max() < 0:
            continue
        h = get((i, j))
        if h is None:
            h = out[(i, j)] = Hazard(i, j, need)
            grew = True
            gj.setdefault(e, []).append(i)
        else:
            h.need = np.maximum(h.need, need)
        if reasons:
            h.why.append((_KINDS[kindl[x]], mem, wlol[x], whil[x]))
        dj.add(e)
    _end_bulk(st, cur, grew)


def _reasons() -> bool:
    """Whether the needs keep their reasons (``Hazard.why``): only a version 2 certificate
    lists them (``certificate.LIST_HAZARDS``), or :data:`REASONS`."""
    from . import certificate
    return REASONS or certificate.LIST_HAZARDS


# kill rows whose cover tests :func:`_kill_ends` makes at once (at most ~BULK_PAIRS elements per
# test); 0: one test per kill row (:func:`_kill_ends_loop`; the tests compare both ways). A chunk
# tests every pending row before its last kill row's instruction against all of its kill rows,
# so a smaller one wastes fewer tests on rows its first kill rows retire or whose instruction
# comes after a kill row: ResNet-50's 58 memories (~1 000 rows, ~500 kill rows each), warm,
# 0.039 CPU-s at 256, 0.030 at 128, 0.025 at 64, 0.030 at 32, 0.042 at 16 (numpy's cost per call)
KILL_CHUNK = 64


def _kill_ends(lo, hi, gid, starts, ends, kill_rows) -> np.ndarray:
    """Per row ``q`` of one memory, the end (exclusive) of the rows it is live for: the end of the
    first later instruction (group) with a dense write covering it (``lo[k] <= lo[q]``,
    ``hi[q] <= hi[k]``), else ``n``. Kill rows are taken in order, a chunk at a time: one
    (pending rows x chunk) cover test, where a row's first covering column is its first covering
    group (columns are in group order), then the rows killed leave the pending set -- the same
    answers as :func:`_kill_ends_loop`, which tests one kill row at a time."""
    n = len(lo)
    kend = np.full(n, n, dtype=np.int64)
    nk = kill_rows.size
    if not nk:
        return kend
    kg = gid[kill_rows]
    klo, khi = lo[kill_rows], hi[kill_rows]
    pend = np.arange(n, dtype=np.int64)  # rows not killed yet, ascending
    x = 0
    while x < nk and pend.size:
        y = min(nk, x + max(1, min(KILL_CHUNK, BULK_PAIRS // max(1, pend.size))))
        # rows of the instructions before the chunk's last one (only those can be killed in it)
        cnt = int(np.searchsorted(pend, starts[kg[y - 1]]))
        if cnt:
            cand = pend[:cnt]
            m = ((lo[cand][:, None] >= klo[None, x:y]) & (hi[cand][:, None] <= khi[None, x:y])
                 & (gid[cand][:, None] < kg[None, x:y]))
            hit = np.flatnonzero(m.any(axis=1))
            if hit.size:
                first = m[hit].argmax(axis=1)
                kend[cand[hit]] = ends[kg[x + first]]
                keep = np.ones(pend.size, dtype=bool)
                keep[hit] = False
                pend = pend[keep]
        x = y
    return kend


def _kill_ends_loop(lo, hi, gid, starts, ends, kill_rows) -> np.ndarray:
    """:func:`_kill_ends` one kill row at a time over the live rows (``KILL_CHUNK = 0``)."""
    n = len(lo)
    kend = np.full(n, n, dtype=np.int64)
    if kill_rows.size:
        live = np.zeros(0, dtype=np.int64)
        llo = lhi = live
        added = 0
        kr = kill_rows.tolist()
        kg = gid[kill_rows].tolist()
        x = 0
        while x < len(kr):
            g = kg[x]
            s = int(starts[g])
            if added < s:
                live = np.concatenate([live, np.arange(added, s)])
                llo, lhi = lo[live], hi[live]
                added = s
            cov = None
            while x < len(kr) and kg[x] == g:
                k = kr[x]
                cv = (llo >= lo[k]) & (lhi <= hi[k])
                cov = cv if cov is None else cov | cv
                x += 1
            if cov is not None and live.size:
                hit = live[cov]
                if hit.size:
                    kend[hit] = ends[g]
                    keep = ~cov
                    live, llo, lhi = live[keep], llo[keep], lhi[keep]
    return kend


def _end_bulk(st: _Sweep, j: int, grew: bool) -> None:
    """After the last access of instruction ``j`` in a memory, when it got a new producer there:
    drop its implied needs (:func:`prune_implied`). ``j``'s producers are kept per executor
    (``st.groups``), and only the executors whose producers or needs changed since the
    last pruning (``st.dirty``) are pruned again -- the others would lose nothing (a pruned
    group's first waiting blocks strictly decrease towards earlier producers), so the needs
    dropped are the ones :func:`prune_implied` of all producers drops, at the same points."""
    if not (grew and PRUNE_IMPLIED):
        return
    gj, dj = st.groups[j], st.dirty[j]
    for e in dj:
        g = gj[e]
        if len(g) > 1:
            gj[e] = _prune_group(st.out, j, g)
    dj.clear()


_KINDS = (None, "WAR", "RAW", "WAW")  # by 2 * (earlier writes) + (later writes)


def first_wait(need: np.ndarray) -> int:
    """The first block of the consumer that waits for something (``len(need)``: none)."""
    if need is _NEED0:
        return 0
    if len(need) == 1:  # most instructions have one block (flatnonzero costs ~1 us)
        return 0 if need[0] >= 0 else 1
    w = np.flatnonzero(need >= 0)
    return int(w[0]) if w.size else len(need)


def prune_implied(needs: dict, j: int, producers: list[int], execs: list) -> list[int]:
    """Drop the needs ``i -> j`` that program order implies; return the producers left.

    Of two producers ``i1 < i2`` of ``j`` on one executor, ``i2`` implies ``i1`` when the first
    block of ``j`` that waits for ``i2`` is no later than the first that waits for ``i1``:
    every block edge ``E(i1, k) -> S(j, b)`` then follows from ``E(i1, k) -> E(i1, last) ->
    S(i2, 0)`` (program order) ``-> E(i2, need2[b']) -> S(j, b') -> S(j, b)`` with ``b' <= b``.
    Such a need is never kept by the transitive reduction (:func:`reduce_needs` drops every need
    whose block edges are all implied) and removing implied edges keeps every reachability, so
    the kept needs -- and the program -- are the same; only the certificate lists fewer
    conflicting pairs (the ones left imply the others through program order, which its checker
    also derives). On the 1024-token LLaMA prefill layer a consumer of a redistribution meets
    every earlier copy of each producer TPB (millions of pairs), of which one per executor is
    left."""
    seen: dict = {}
    for i in producers:
        seen.setdefault(execs[i], []).append(i)
    if len(seen) == len(producers):
        return producers
    left = []
    for group in seen.values():
        if len(group) == 1:
            left.append(group[0])
        else:
            left += _prune_group(needs, j, group)
    return left


def _prune_group(needs: dict, j: int, group: list[int]) -> list[int]:
    """:func:`prune_implied` of the producers ``group`` of ``j`` on one executor: the ones left,
    latest first."""
    left = []
    best = None
    for i in sorted(group, reverse=True):
        f = first_wait(needs[(i, j)].need)
        if best is not None and f >= best:
            del needs[(i, j)]
            continue
        left.append(i)
        best = f if best is None else min(best, f)
    return left


# False: every conflicting pair is kept as a need (the tests compare both ways)
PRUNE_IMPLIED = True
