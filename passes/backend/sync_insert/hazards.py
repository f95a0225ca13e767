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
from .footprint import Chunks, MemKey, access_need, block_accesses, is_dense, rows_meet, rows_meet1, walk_rows

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


def _kind(wi: bool, wj: bool) -> str:
    return "WAW" if wi and wj else ("RAW" if wi else "WAR")


# False: every pair goes through ``access_need`` (the tests compare both ways)
DENSE_SHORTCUT = True
# False: pairs of row-shaped walks go through ``access_need`` too (the tests compare both ways)
ROWS_SHORTCUT = True
# up to this many row-shaped candidates of an access are tested by :func:`rows_meet1` in Python
# (more: :func:`rows_meet` on arrays); 0: always arrays (the tests compare both ways)
ROWS_SCALAR = 32
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
    tests (the 1024-token LLaMA prefill layer: millions)."""
    execs = [inst.executor for inst in insts]
    accs = [block_accesses(inst) for inst in insts]
    # per memory, arrays of bounding intervals of every access, in instruction order
    per_mem: dict[MemKey, list[tuple[int, int, int, bool, int]]] = {}
    for idx, al in enumerate(accs):
        for n, a in enumerate(al):
            lo, hi = a.walk.byte_range()
            per_mem.setdefault(a.mem, []).append((lo, hi, idx, a.write, n))
    dense_of: dict[int, bool] = {}  # id(walk) -> is_dense (the walks live in insts)
    rows_of: dict[int, tuple | None] = {}  # id(walk) -> walk_rows
    out: dict[tuple[int, int], Hazard] = {}
    get = out.get
    chunks: dict[tuple[int, int], Chunks] = {}  # (id(access), chunks) -> Chunks of this call
    prods: dict[int, list[int]] = {}  # j -> the producers i of its hazards in ``out``
    for mem, rows in per_mem.items():
        arr = np.array([(lo, hi, idx, int(w), n) for lo, hi, idx, w, n in rows], dtype=np.int64)
        lo, hi, wr = arr[:, 0], arr[:, 1], arr[:, 3].astype(bool)
        # the same columns as Python lists: scalar reads of numpy arrays are slow
        lol, hil, insl, wrl = lo.tolist(), hi.tolist(), arr[:, 2].tolist(), wr.tolist()
        accl = [accs[idx][n] for _, _, idx, _, n in rows]
        dense = []
        for a in accl:
            d = dense_of.get(id(a.walk))
            if d is None:
                d = dense_of[id(a.walk)] = is_dense(a.walk)
            dense.append(d)
        # row shapes (walk_rows) of the 1-block accesses exact for access_need
        shape = np.zeros((len(rows), 4), dtype=np.int64)
        el = np.zeros(len(rows), dtype=bool)
        if ROWS_SHORTCUT:
            for r, a in enumerate(accl):
                if blocks[insl[r]] != 1:
                    continue
                key = id(a.walk)
                got = rows_of.get(key, 0)
                if got == 0:
                    got = rows_of[key] = walk_rows(a.walk)
                if got is not None and (got[2] <= footprint.EXACT_LIMIT or dense[r]):
                    shape[r] = got
                    el[r] = True
        sh0, shp, shn, shl = (shape[:, c] for c in range(4))
        ell = el.tolist()
        shapel = shape.tolist() if ROWS_SCALAR else []
        # rows of earlier instructions still generating needs, with their columns
        live = np.zeros(0, dtype=np.int64)
        llo, lhi, lwr = live, live, np.zeros(0, dtype=bool)
        kills: list[int] = []
        start = 0  # first row of the current instruction
        grew = False  # the current instruction got a new hazard in this memory
        for r in range(len(rows)):
            j = insl[r]
            aj = accl[r]
            known = None  # per candidate: its footprint meets this one's (rows_meet)
            if live.size:
                sel = (llo < hil[r]) & (lhi > lol[r])
                if not wrl[r]:
                    sel &= lwr
                if ell[r]:
                    m = sel & el[live]
                    mi = np.flatnonzero(m)
                    if 0 < mi.size <= ROWS_SCALAR:
                        # a few candidates (the usual case): the same test on Python ints
                        # (numpy's fixed cost per call is ~20 of these)
                        b0, pb, nb, lb = shapel[r]
                        met = set()
                        for x, q in zip(mi.tolist(), live[mi].tolist()):
                            dec, meet = rows_meet1(*shapel[q], b0, pb, nb, lb)
                            if dec:
                                if meet:
                                    met.add(q)
                                else:
                                    sel[x] = False
                        cand = live[sel].tolist()
                        known = [q in met for q in cand]
                    else:
                        if mi.size:
                            q = live[m]
                            dec, meet = rows_meet(sh0[q], shp[q], shn[q], shl[q], int(sh0[r]),
                                                  int(shp[r]), int(shn[r]), int(shl[r]))
                            drop = np.zeros(len(sel), dtype=bool)
                            drop[mi[dec & ~meet]] = True
                            sel &= ~drop
                            yes = np.zeros(len(sel), dtype=bool)
                            yes[mi[dec & meet]] = True
                            known = yes[sel].tolist()
                        cand = live[sel].tolist()
                else:
                    cand = live[sel].tolist()
            else:
                cand = []
            ej = execs[j]
            bj = blocks[j]
            pj = prods.get(j)
            if pj is None:
                pj = prods[j] = []
            fast = DENSE_SHORTCUT and bj == 1 and dense[r]
            for n_c, q in enumerate(cand):
                i = insl[q]
                if execs[i] == ej:
                    continue
                ai = accl[q]
                why = (_kind(ai.write, aj.write), mem, max(lol[q], lol[r]), min(hil[q], hil[r]))
                if (fast and dense[q] and blocks[i] == 1) or (known is not None and known[n_c]):
                    # one chunk each, every byte of both intervals touched: they meet
                    h = get((i, j))
                    if h is None:
                        out[(i, j)] = Hazard(i, j, _NEED0, [why])
                        grew = True
                        pj.append(i)
                    else:
                        h.need = _NEED0  # the largest need of a 1-block producer
                        h.why.append(why)
                    continue
                if len(chunks) > CHUNK_MEMO:  # bounded: chunks are rebuilt when needed again
                    chunks.clear()
                need = access_need(ai, blocks[i], aj, bj, chunks)
                if need.max() < 0:
                    continue
                h = get((i, j))
                if h is None:
                    h = out[(i, j)] = Hazard(i, j, need)
                    grew = True
                    pj.append(i)
                else:
                    h.need = np.maximum(h.need, need)
                h.why.append(why)
            if wrl[r] and dense[r]:
                kills.append(r)
            if r + 1 == len(rows) or insl[r + 1] != j:
                if grew and PRUNE_IMPLIED and len(pj) > 1:
                    prods[j] = prune_implied(out, j, pj, execs)
                grew = False
                # a dense write covering an earlier access implies every later conflict with it
                # (block-exact: see docs/sync.md), so the earlier access stops generating needs
                for k in kills:
                    keep = ~((llo >= lol[k]) & (lhi <= hil[k]))
                    live, llo, lhi, lwr = live[keep], llo[keep], lhi[keep], lwr[keep]
                new = np.arange(start, r + 1)
                live = np.concatenate([live, new])
                llo = np.concatenate([llo, lo[start:r + 1]])
                lhi = np.concatenate([lhi, hi[start:r + 1]])
                lwr = np.concatenate([lwr, wr[start:r + 1]])
                kills = []
                start = r + 1
    return out


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
            continue
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
