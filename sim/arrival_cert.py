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
    Python were ~0.035 CPU-s.)"""
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
