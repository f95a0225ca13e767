"""The first full run's race verdict from the first functional run's (issue 15, session 32).

A run with race checks in bulk (:mod:`~m100.sim.race_batch`) logs every block's reads and writes
with its unit, its epoch and its clock row (the unit's vector clock when the block started),
and its sweep after the loop decides whether two accesses of one space with a common
byte, one a write, are unordered. That verdict is a function of the *set* of log entries
(unit, epoch, write, byte sets, clock row), not of their order: the sweep tests each pair with
the one logged first as ``Y`` (``e_Y > C_X[v_Y]``: ``Y`` does not happen before ``X``), and a
pair ordered by the clocks (``Y`` before ``X``) is logged in that order in every run -- ``X``'s
unit learns ``Y``'s epoch only by joining the clock an update of ``Y``'s block (or a later one
of its unit) carries, fired after ``Y``'s block ended, so after ``Y``'s reads and writes were
logged -- while an unordered pair fails the test whichever comes first. So the verdict is
"some two accesses with a common byte, one a write, are unordered by the clocks".

The byte sets of a block are functions of its (immutable) instruction and block number (a CSU
routine's are not: programs with one are never recorded, ``replay.recording``), and the unit of
a block and its epoch (its place in the unit's in-order queue) are the same in every run of the
same instructions. So a full run whose every block the functional run logged has the clock row
the functional run logged for it has the functional run's verdict. The first functional run of a
program (``replay.keep``: the one whose schedule is kept, so it reported nothing -- no race)
keeps its log's (unit, epoch, write, row number) entries and its clock rows (references, no
copy: ``Engine.race_log``) on its schedule; the first full run of the same instructions on the
same machine with the same switches (its deferred run, ``Simulator._run_once``) then keeps only
each block's clock row and unit (``Engine.cert_units``), skips the log and the sweep, and
compares the rows here after its loop. Rows that differ (counters whose arrivals come in
another order with timing, so a block joins other clocks) or a block the functional run logged
that this run did not start: the run is made again without the certificate (its own log and
sweep). ResNet-18 / -50: every row the same.

``test/e2e/test_clock_cert.py`` compares the full runs with and without the certificate, and
runs a program whose functional run is race-free and whose full run races (a mutant that takes
the certificate without comparing reports no race).
"""

from __future__ import annotations

import itertools

import numpy as np



def same(cert: tuple, buf: np.ndarray, used: int, units: list[int]) -> bool:
    """True when every entry of the functional run's log ``cert`` = (its ``log_meta``: (unit,
    epoch, write, row number) each -- tuples, or an ``(m, 4)`` array --, its clock rows) has a block of this run -- the block of
    that unit and epoch -- whose clock row, ``buf[i]`` for the ``i``-th block started (``units``:
    their units, ``used`` of them), is the entry's row."""
    meta, fbuf = cert
    m = len(meta)
    if not m:  # (the functional run logged no access with bytes: neither does this run)
        return True
    if len(units) != used or not used:
        return False
    if isinstance(meta, np.ndarray):  # (the log made after the loop: RaceBatch.set_log)
        f = meta
    else:
        f = np.fromiter(itertools.chain.from_iterable(meta), dtype=np.int64, count=4 * m)
        f = f.reshape(m, 4)
    fu, fe, frow = f[:, 0], f[:, 1], f[:, 3]
    # this run's blocks by (unit, epoch): a unit's blocks have the epochs 1, 2, ... in the
    # order they start (the clock's own entry counts the unit's ended blocks), and its row holds
    # its own epoch at its unit -- block (u, e) is number off[u] + e - 1 of a dense table
    tu = np.array(units, dtype=np.int64)
    te = buf[np.arange(used), tu]
    nu = max(int(tu.max()), int(fu.max())) + 1
    cnt = np.bincount(tu, minlength=nu)
    off = np.cumsum(cnt) - cnt
    if int(fu.min()) < 0 or not ((te >= 1) & (te <= cnt[tu])).all() \
            or not ((fe >= 1) & (fe <= cnt[fu])).all():
        return False  # (an epoch this run's blocks do not have: not the same blocks)
    where = np.full(used, -1, dtype=np.int64)
    where[off[tu] + te - 1] = np.arange(used)
    if (where < 0).any():  # pragma: no cover - (two blocks of one unit with one epoch)
        return False
    t = where[off[fu] + fe - 1]  # the functional entries' blocks in this run
    # each functional row once, with its block here (a block's reads and writes are two
    # entries with one row; a row of two blocks: not the same clocks, conservatively)
    of = np.full(fbuf.shape[0], -1, dtype=np.int64)
    of[frow] = t
    if not np.array_equal(of[frow], t):
        return False
    rows = np.flatnonzero(of >= 0)
    mine = of[rows]
    whole = rows.size == rows[-1] + 1  # (rows 0 .. k - 1: no gather of the functional rows)
    for s in range(0, rows.size, _CHUNK):  # (gathers of a few hundred KB: no fresh pages)
        e = s + _CHUNK
        theirs = fbuf[s:min(e, rows.size)] if whole else fbuf[rows[s:e]]
        if not np.array_equal(buf[mine[s:e]], theirs):
            return False
    return True


_CHUNK = 512
