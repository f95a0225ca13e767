"""The first full run's race certificate by the counters' arrivals (issue 15, session 35).

What: the functions that turn a first functional run's counter arrivals -- the flat log its
loop keeps (``Checks._race_log_after``, :mod:`~m100.sim.race_clocks`) or the general loop's
per-counter histories (``Engine.hist``) -- into what the engine's arrivals certificate reads
(``engine.ARRIVAL_CERT``): per counter its running values and its arrivals' identities (the
sender's record index and block), in arrival order.

Why: a block's clock row is the join of the clocks its monitors' arrivals carry, so a full run
whose every join takes the same arrivals as the functional run's join took has, by induction,
every row the functional run had -- and so its race verdict (:mod:`~m100.sim.clock_cert`). The
engine checks that with one scalar test per join (``Engine.try_start``: the running maximum of
the arrivals' functional ranks is ``k`` and the functional join took as many) instead of keeping
vector clocks, a race batch and the pre-pass in the certified run; a join that fails makes the
run again with its own log and sweep. ``test/e2e/test_arrival_cert.py`` checks it against the
row certificate, the engine's own race checks and a start-time ordering.
"""

from __future__ import annotations

import itertools
from operator import attrgetter

import numpy as np


#: the rank of an arrival the functional run did not have
NEVER = 1 << 62


def by_counter(flat: list) -> dict:
    """A functional run's arrivals as its race log keeps them where its loop logs them flat
    (``(tpb, counter, value after, sender record index, sender block, sender unit)`` in arrival
    order) as the arrivals' certificate reads them: per counter (its running values, its
    arrivals' (sender record index, sender block)), each in arrival order. (In numpy: a stable
    sort by counter keeps each counter's arrival order; R50's 39 717 arrivals one at a time in
    Python were ~0.035 CPU-s.) Since session 36 the engine reads the flat log itself
    (:func:`verdict`); the tests compare this per-counter view with :func:`hist_ids`'."""
    n = len(flat)
    if not n:
        return {}
    a = np.fromiter(itertools.chain.from_iterable(flat), dtype=np.int64, count=6 * n)
    a = a.reshape(n, 6)
    key = a[:, 0] * (int(a[:, 1].max()) + 1) + a[:, 1]
    o = np.argsort(key, kind="stable")
    ks = key[o]
    cut = (np.flatnonzero(ks[1:] != ks[:-1]) + 1).tolist()
    starts, ends = [0] + cut, cut + [n]
    tpbs, cs = a[o[starts], 0].tolist(), a[o[starts], 1].tolist()
    vals = a[o, 2].tolist()
    ids = list(zip(a[o, 3].tolist(), a[o, 4].tolist()))
    return {(t, c): (vals[s:e], ids[s:e]) for t, c, s, e in zip(tpbs, cs, starts, ends)}


def hist_ids(hist: dict, recs: list) -> dict:
    """A functional run's arrival histories (``Engine.hist``'s, as its race log keeps them: per
    counter (its running values, its arrivals' (sender unit, sender epoch))) as
    :func:`by_counter` gives them:
    per counter (running values, (sender record index, sender block)). Unit ``u``'s epoch ``e``
    is its ``e``-th block: it runs its records in queue order (by stream and position), each
    record's blocks in order."""
    blocks: dict[int, list] = {}
    for r in sorted(recs, key=attrgetter("stream", "pos")):
        got = blocks.get(r.unit)
        if got is None:
            got = blocks[r.unit] = []
        got.extend((r.index, b) for b in range(r.inst.sync.blocks))
    return {k: (v, [blocks[u][e - 1] for u, e in ids]) for k, (v, ids) in hist.items()}


def flat_of(by_key: dict) -> list:
    """:func:`by_counter`'s or :func:`hist_ids`' per-counter form back as flat rows ``(tpb,
    counter, value after, sender record index, sender block)``, each counter's in its arrival
    order (what :func:`verdict` reads: it groups by counter, stably)."""
    return [(t, c, v, i, b) for (t, c), (vals, ids) in by_key.items()
            for v, (i, b) in zip(vals, ids)]


def verdict(fun: list, arrivals: list, joins: list) -> bool:
    """Whether every join of a run took the arrivals the functional run's join took.

    ``fun``: the functional run's arrivals, rows ``(tpb, counter, value after, sender record
    index, sender block, ...)`` in arrival order (the flat race log, or :func:`flat_of`);
    ``arrivals``: this run's, the same first five fields; ``joins``: ``(tpb, counter, need)``
    per block start and monitor with ``need > 0``. A join on a counter takes its first ``k +
    1`` arrivals, ``k`` the first whose running value is ``>= need``; it is certified when their
    ranks in the functional run's arrivals of that counter (an identity the functional run had
    twice: its last rank; one it did not have: :data:`NEVER`) have the maximum ``k`` -- the
    functional run's first ``k + 1``, as sets -- and the functional join took as many (``k ==
    0`` or the functional value after arrival ``k - 1`` is ``< need``).

    Why after the loop: a counter's running values only grow and are only appended to, so
    ``k`` (and the ranks' running maximum at ``k``) at the block's start is ``k`` on the
    whole run's values -- the engine logs one tuple per arrival and per join instead of
    testing each join in its loop (the rank lookups and the bisection, ~0.1-0.2 CPU-s of a
    first full ResNet-50 run, are a few numpy calls here). ``test_arrival_cert`` compares it
    with the test made at each block start (the engine's code before) on random runs."""
    if not joins:
        return True
    if not arrivals:
        return False  # (a join with need > 0 follows an arrival: not reached)
    A, F, J = _rows(arrivals, 5), _rows(fun, 5), _rows(joins, 3)
    if (A[:, :2].min(initial=0) < 0 or F[:, :2].min(initial=0) < 0
            or J[:, :2].min(initial=0) < 0 or A[:, 3:].min(initial=0) < 0
            or F[:, 3:].min(initial=0) < 0):
        return _verdict_python(F, A, J)
    ncnt = 1 + max(int(A[:, 1].max()), int(J[:, 1].max()), int(F[:, 1].max(initial=0)))
    nsrc = 1 + max(int(A[:, 3].max()), int(F[:, 3].max(initial=0)))
    nblk = 1 + max(int(A[:, 4].max()), int(F[:, 4].max(initial=0)))
    nkey = 1 + ncnt * (1 + max(int(A[:, 0].max()), int(J[:, 0].max()),
                               int(F[:, 0].max(initial=0))))
    if nkey * nsrc * nblk >= 1 << 62:  # pragma: no cover - (codes would overflow int64)
        return _verdict_python(F, A, J)
    # the functional arrivals by counter (stable: arrival order within one), their ranks, the
    # last rank of each (counter, sender, block)
    fk = F[:, 0] * ncnt + F[:, 1]
    fo = np.argsort(fk, kind="stable")
    fk = fk[fo]
    fkeys, fstart = np.unique(fk, return_index=True)
    frank = np.arange(fk.size) - np.repeat(fstart, np.diff(np.append(fstart, fk.size)))
    fval = F[fo, 2]
    fcode = (fk * nsrc + F[fo, 3]) * nblk + F[fo, 4]
    co = np.argsort(fcode, kind="stable")
    cs = fcode[co]
    last = np.flatnonzero(np.append(cs[1:] != cs[:-1], True))
    ucode, urank = cs[last], frank[co][last]
    # this run's arrivals by counter, each one's functional rank, their running maximum
    ak = A[:, 0] * ncnt + A[:, 1]
    ao = np.argsort(ak, kind="stable")
    ak = ak[ao]
    akeys, astart = np.unique(ak, return_index=True)
    g = np.repeat(np.arange(akeys.size), np.diff(np.append(astart, ak.size)))
    acode = (ak * nsrc + A[ao, 3]) * nblk + A[ao, 4]
    p = np.minimum(np.searchsorted(ucode, acode), max(ucode.size - 1, 0))
    hit = (ucode[p] == acode) if ucode.size else np.zeros(acode.size, dtype=bool)
    sent = A.shape[0] + F.shape[0] + 1  # (above every rank and every k: NEVER's role)
    rank = np.where(hit, urank[p] if ucode.size else 0, sent)
    off = g * (sent + 1)  # (each counter's above every earlier one's: a running max per counter)
    pmax = np.maximum.accumulate(rank + off) - off
    aval = A[ao, 2]
    if (np.diff(aval)[g[1:] == g[:-1]] < 0).any():  # pragma: no cover - (values only grow)
        return _verdict_python(F, A, J)
    # each join's k: the first arrival of its counter whose running value is >= need
    jk = J[:, 0] * ncnt + J[:, 1]
    need = J[:, 2]
    jg = np.searchsorted(akeys, jk)
    if (jg >= akeys.size).any() or (akeys[np.minimum(jg, akeys.size - 1)] != jk).any():
        return False  # (not reached: a join follows an arrival on its counter)
    vspan = 1 + max(int(aval.max()), int(need.max()))
    at = np.searchsorted(g * vspan + aval, jg * vspan + need, side="left")
    end = np.append(astart[1:], ak.size)[jg]
    if (at >= end).any():
        return False  # (not reached: the monitor held, so some value is >= need)
    k = at - astart[jg]
    if not (pmax[at] == k).all():
        return False
    # the functional join took k + 1 too: its value after arrival k - 1 is < need
    later = k > 0
    if later.any():
        fg = np.searchsorted(fkeys, jk[later])  # (rank k there: the counter is among them)
        if not (fval[fstart[fg] + k[later] - 1] < need[later]).all():
            return False
    return True


def _rows(rows: list, width: int) -> np.ndarray:
    """The first ``width`` fields of ``rows`` (tuples of ints, all of one length) as an array."""
    n = len(rows)
    if not n:
        return np.zeros((0, width), dtype=np.int64)
    w = len(rows[0])
    a = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=n * w)
    return a.reshape(n, w)[:, :width]


def _verdict_python(F: np.ndarray, A: np.ndarray, J: np.ndarray) -> bool:
    """:func:`verdict` one arrival and one join at a time (for values the codes cannot hold)."""
    ranks: dict = {}
    fvals: dict = {}
    for t, c, v, i, b in F.tolist():
        got = ranks.setdefault((t, c), {})
        vals = fvals.setdefault((t, c), [])
        got[(i, b)] = len(vals)
        vals.append(v)
    cums: dict = {}
    pm: dict = {}
    for t, c, v, i, b in A.tolist():
        r = ranks.get((t, c), {}).get((i, b), NEVER)
        p = pm.setdefault((t, c), [])
        p.append(max(r, p[-1]) if p else r)
        cums.setdefault((t, c), []).append(v)
    import bisect
    for t, c, need in J.tolist():
        if (t, c) not in cums:
            return False
        k = bisect.bisect_left(cums[(t, c)], need)
        if k >= len(cums[(t, c)]) or pm[(t, c)][k] != k \
                or (k > 0 and fvals[(t, c)][k - 1] >= need):
            return False
    return True
