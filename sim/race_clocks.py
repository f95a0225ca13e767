"""The clock rows of a first functional run, made after its loop (issue 15, session 35).

The bulk race check (:mod:`~m100.sim.race_batch`) needs every block's clock row: the unit's
vector clock when the block started. The functional loop (``sim/engine_untimed.py``) used to keep
them as it ran -- a joined row per counter arrival (``Engine.hist``: the prefix maxima of the
arrivals' clocks, kept by reference where one dominates), a ``np.maximum`` per monitor at each
block's start and a copy per start (``RaceBatch.keep``): ~0.1-0.15 CPU-s of ResNet-50's first
functional run, all Python per event. Where the log itself is made after the loop
(``Checks._race_log_after``: the executors' calls logged, every block half packed by the pre-pass)
the loop now logs only each counter arrival -- (counter key, the counter's value after it, the
sending block's record and block, its unit; kept as ``Engine.arrivals``) -- and
:func:`clock_rows` makes the rows here. Such a run's ``vc`` is not joined (nothing reads it after
the loop) and its ``Engine.hist`` stays empty: the functional race log keeps the flat arrival
log instead (``Engine.race_log[2]``, which a full run's ``engine.ARRIVAL_CERT`` reads as it is:
``arrival_cert.verdict`` tests the flat logs after the loop; session 36 dropped the per-counter
copy made here, which nothing read).

What a row is (the loop's own arithmetic). The clocks start as the identity (``vc[u, u] = 1``); a
block's end adds 1 to its unit's own entry; at a block's start the unit's row becomes the maximum
of itself and, for each of the block's monitors ``(tpb, counter) >= need`` (``need > 0``; a
``per_block`` 0 monitor only at block 0), the join ``J[k]`` of that counter's first ``k + 1``
arrivals, where arrival ``k`` is the first whose value reaches ``need`` (``bisect_left`` over the
counter's values -- they never decrease); ``J[k]`` is the maximum of those arrivals' clocks, each
the sender block's start row. So the row of start ``s`` of unit ``u`` is
``max(row(prev start of u) + e_u, J[k] for its monitors)`` (the identity row for ``u``'s first).

How it is computed. Every dependency of a start at time ``t`` is a start at an earlier time (a
functional block takes one cycle: the unit's previous block started at ``<= t - 1``, a sender
started at ``t' - 1`` where ``t' <= t`` is when its update arrived), so the rows are made level by
level, one level per time (~1 000 on ResNet-50), each a gather of the rows it joins (padded with a
zero row to the level's most monitors) and one maximum over them. ``J[k]`` is taken as the sender's row of arrival ``k`` itself: exact when
every arrival's clock dominates the join before it on its counter -- the test the loop makes
(``KNOWN_CLOCKS``: the sender knows the previous arrival's sender at its epoch), checked here on
the computed rows for every arrival after the first of its counter (by induction over time the
rows are then the loop's). ResNet-18 / -50, resnet18-32, mlp, convnet, llama: every arrival.
Where one does not, :func:`_rows_general` makes the joins as the loop does (a Python loop over
the levels with the prefix maxima). ``test/e2e/test_race_log_after.py`` compares the rows with the loop's own (the
path without the pre-pass's table) on compiled models, racy mutants and a deadlock, and
``test/unit/sim/test_race_clocks.py`` the general path and the fast one on random event logs
against a written-out event-by-event reference.
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter

import numpy as np

_KEY = 1 << 20  # counter keys: tpb * _KEY + counter
_VAL = 1 << 32  # search keys: counter key * _VAL + value
_MON = attrgetter("tpb", "counter", "expected", "per_block")


def _monitors(mons: list, sb: np.ndarray) -> tuple:
    """Per start (its instruction's monitors ``mons[s]``, its block ``sb[s]``): its joining
    monitors as arrays (start number, counter key, need) in start order -- ``need > 0``; a
    ``per_block`` 0 monitor at block 0 only (the loop's tests)."""
    cnt = np.fromiter(map(len, mons), dtype=np.int64, count=len(mons))
    tot = int(cnt.sum())
    if not tot:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    f = np.fromiter(chain.from_iterable(map(_MON, chain.from_iterable(mons))),
                    dtype=np.int64, count=4 * tot).reshape(tot, 4)
    ms = np.repeat(np.arange(len(mons), dtype=np.int64), cnt)
    b = sb[ms]
    need = f[:, 2] + b * f[:, 3]
    keep = (need > 0) & ((f[:, 3] != 0) | (b == 0))
    return ms[keep], (f[:, 0] * _KEY + f[:, 1])[keep], need[keep]


def clock_rows(rb, units: np.ndarray, mons: list, calls: np.ndarray,
               times: np.ndarray, arrivals: list, sid_of, general: bool = False) -> None:
    """Write the clock row of every block start into ``rb.buf`` (rows ``[0, S)``, ``rb.used =
    S``). ``calls``: the loop's call log as a ``(k, 2)`` array (record index, block; -1 at an
    end), its starts in start order; ``units`` / ``times``: each start's unit and time;
    ``arrivals``: the loop's arrival log, in arrival order, of (tpb, counter, value after it,
    sender record index, sender block, sender unit); ``sid_of(ri, b)``: the start numbers of
    (record, block) arrays; ``mons``: each start's instruction's monitors (``sync.monitors``);
    ``general``: the joins as written (:func:`_rows_general`) whatever the arrivals (tests)."""
    st = calls[:, 1] >= 0
    sri, sb = calls[st, 0], calls[st, 1]
    S = int(sri.size)
    if S and (np.diff(times) < 0).any():
        raise AssertionError("race clocks: starts not in time order")
    if len(mons) != S:
        raise AssertionError("race clocks: the monitors of every start")
    ms, mk, mn = _monitors(mons, sb)
    m = len(arrivals)
    if m:
        a = np.fromiter(chain.from_iterable(arrivals), dtype=np.int64,
                        count=6 * m).reshape(m, 6)
        akey = a[:, 0] * _KEY + a[:, 1]
        asid = sid_of(a[:, 3], a[:, 4])
        asu = a[:, 5]
        order = np.argsort(akey, kind="stable")  # by counter, then arrival
        comb = akey[order] * _VAL + a[order, 2]
    else:
        akey = asid = asu = order = comb = np.zeros(0, dtype=np.int64)
    # each joining monitor's arrival k: the first of its counter whose value reaches its need
    pos = np.searchsorted(comb, mk * _VAL + mn, "left")
    if ms.size and (m == 0 or (pos >= m).any() or (akey[order[np.minimum(pos, m - 1)]] != mk).any()):
        raise AssertionError("race clocks: a monitor passed without an arrival reaching it")
    k = order[pos] if ms.size else pos
    buf = _room(rb, S + 1)
    # the fast path: J[k] is arrival k's sender row, if each arrival dominates the join before
    _rows_fast(buf, S, units, ms, asid[k], times)
    if general and m <= 1:
        _rows_general(buf, S, units, ms, k, times, akey, asid)
    elif m > 1:
        same = akey[order[1:]] == akey[order[:-1]]
        cur, prev = order[1:][same], order[:-1][same]
        ok = buf[asid[cur], asu[prev]] >= buf[asid[prev], asu[prev]]
        if general or not ok.all():
            _rows_general(buf, S, units, ms, k, times, akey, asid)
    rb.used = S


def _room(rb, rows: int) -> np.ndarray:
    """``rb.buf`` with at least ``rows`` rows (the dtype as ``RaceBatch.keep`` grows it)."""
    buf = rb.buf
    if buf.shape[0] < rows:
        from .race_batch import _I32_ROWS
        buf = rb.buf = np.empty((rows, buf.shape[1]),
                                dtype=buf.dtype if rows < _I32_ROWS else np.int64)
    return buf


def _prev_of_unit(units: np.ndarray, S: int) -> np.ndarray:
    """Each start's previous start of its unit (``S``: none -- the zero row)."""
    prev = np.full(S, S, dtype=np.int64)
    by = np.argsort(units, kind="stable")
    same = units[by[1:]] == units[by[:-1]]
    prev[by[1:][same]] = by[:-1][same]
    return prev


def _rows_fast(buf, S, units, ms, jrow, times) -> None:
    """The rows level by level, each start's joins the rows ``jrow`` of its monitors."""
    buf[S] = 0
    if not S:
        return
    prev = _prev_of_unit(units, S)
    # per start the rows it takes the maximum of: its unit's previous row, then its joins,
    # padded with the zero row S (every entry is >= 0: the maximum is unchanged)
    cnt = np.bincount(ms, minlength=S) + 1
    idx = np.full((S, int(cnt.max())), S, dtype=np.int64)
    idx[:, 0] = prev
    if ms.size:  # (ms sorted by start: its entries fill the slots after each start's first)
        within = np.arange(ms.size) - np.searchsorted(ms, ms, "left")
        idx[ms, 1 + within] = jrow
    bounds = np.flatnonzero(np.diff(times)) + 1
    lv = [0] + bounds.tolist() + [S]
    wide = np.maximum.reduceat(cnt, lv[:-1]).tolist()  # (each level's widest start)
    r_all = np.arange(S)
    for lo, hi, w in zip(lv[:-1], lv[1:], wide):
        u = units[lo:hi]
        own = buf[prev[lo:hi], u] + 1  # (the unit's own entry: its previous block ended)
        red = buf[idx[lo:hi, 0]] if w == 1 else buf[idx[lo:hi, :w]].max(axis=1)
        r = r_all[:hi - lo]
        red[r, u] = np.maximum(red[r, u], own)
        buf[lo:hi] = red


def _rows_general(buf, S, units, ms, k, times, akey, asid) -> None:
    """The rows with the loop's joins as written: ``J[i]`` the maximum of ``J`` of the
    previous arrival on its counter and arrival ``i``'s sender row, made in time order (an
    arrival's sender started at an earlier time than any start that joins it)."""
    buf[S] = 0
    prev = _prev_of_unit(units, S)
    m = akey.size
    # an arrival's time: its sender's + 1; the arrivals of a time before that time's starts
    atime = (times[asid] + 1).tolist() if m else []
    times = times.tolist()
    joins: list = [None] * m
    last: dict = {}
    jof: dict = {}
    for s, j in zip(ms.tolist(), k.tolist()):
        jof.setdefault(s, []).append(j)
    ai = 0
    for s in range(S):
        t = times[s]
        while ai < m and atime[ai] <= t:  # (arrivals come in time order)
            key = int(akey[ai])
            p = last.get(key)
            row = buf[asid[ai]].copy()
            joins[ai] = row if p is None else np.maximum(joins[p], row)
            last[key] = ai
            ai += 1
        u = int(units[s])
        row = buf[prev[s]].copy()
        row[u] += 1
        for j in jof.get(s, ()):
            np.maximum(row, joins[j], out=row)
        buf[s] = row
