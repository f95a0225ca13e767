"""The conflicting pairs of a program, derived by the certificate checker itself (certificate
version 3), each proved ordered by the happens-before the program's own counters give.

The accesses of each block are the interpreter's (``Exec.reads(b)`` / ``writes(b)``, the byte
sets of its race checker, :func:`~m100.sim.engine_checks._items`): reads when the block starts,
writes when it ends. Two accesses of blocks ``(i, k)`` (earlier in the global order) and
``(j, b)`` conflict when they are on different executors, meet in one memory space and one of
them writes; then ``E(i,k)`` must happen before ``S(j,b)`` (the static form of the race
checker's test, over every execution: happens-before here is derived from monitors and update
chains alone, :class:`~m100.sim.certificate.HappensBefore`). A CSU routine's gather / scatter
rows depend on index data, so its operands count as accessed whole.

One sweep in the global order keeps, per memory space, the *live* accesses. A write ``w`` whose
bytes are one dense interval covering a live access ``a`` that happens before it retires ``a``:
any later access ``x`` that conflicts with ``a`` on those bytes conflicts with ``w`` too (``w``
writes them), so ``x`` is checked against ``w`` (or follows it in program order), and
``E(a) -> S(w) -> E(w) -> S(x)``. So the live sets stay small on programs that reuse buffers, and
nothing is left out: an access that is never retired stays live.
"""

from __future__ import annotations

from m100.targets.m100.isa import CsuCall, Routine

from .engine_checks import _items
from .semantics import make_exec
from .semantics_base import Access, _tpb_of

#: problems reported at most (a program with a sync removed races in many places)
MAX_PROBLEMS = 20


def _accesses(inst, ex, b: int, write: bool) -> list:
    if isinstance(inst, CsuCall):
        ops = [Access(w, _tpb_of(w)) for w in inst.operands]
        if inst.routine in (Routine.GATHER, Routine.SCATTER):
            return ops[2:] if write else ops[:2]  # the whole table / destination
        return ex.writes(b) if write else ex.reads(b)
    return ex.writes(b) if write else ex.reads(b)


def _dense(bs) -> bool:
    return bs._arr is None and bs._make is None and bs._mask is None and bs._mmake is None


def unordered_conflicts(insts: list, g) -> list[tuple]:
    """``(kind, i, k, j, b, space, byte)`` for each conflicting pair of blocks ``(i, k)``,
    ``(j, b)`` that ``g`` (a :class:`~m100.sim.certificate.HappensBefore` over ``insts`` in the
    global order) does not order, ``kind`` RAW / WAR / WAW, ``byte`` one byte both touch (at
    most :data:`MAX_PROBLEMS`)."""
    problems: list[tuple] = []
    clock, rank, ex_of = g.clock, g.rank, g.ex
    # per space: live records [lo, hi, i, k, executor, write, byte set, rank of E(i,k)]
    live: dict[tuple, list[list]] = {}
    for j, inst in enumerate(insts):
        ex = make_exec(inst, None)
        xj = ex_of[j]
        for b in range(g.blocks[j]):
            sj = g.S(j, b)
            row = clock[sj].tolist()
            re = int(rank[g.E(j, b)])
            new = []
            for write in (False, True):
                for space, bs, _ in _items(_accesses(inst, ex, b, write)):
                    lo, hi = bs.lo, bs.hi
                    if hi <= lo:
                        continue
                    recs = live.get(space)
                    if recs:
                        for r in recs:
                            if (r[4] != xj and (write or r[5]) and r[0] < hi and lo < r[1]
                                    and row[r[4]] < r[7]
                                    and r[6].first_overlap(bs) is not None):
                                kind = ("WAW" if write else "RAW") if r[5] else "WAR"
                                problems.append((kind, r[2], r[3], j, b, space,
                                                 r[6].first_overlap(bs)))
                                if len(problems) >= MAX_PROBLEMS:
                                    return problems
                    new.append((space, [lo, hi, j, b, xj, write, bs, re]))
            for space, rec in new:
                recs = live.setdefault(space, [])
                if rec[5] and _dense(rec[6]):
                    lo, hi = rec[0], rec[1]
                    recs[:] = [r for r in recs
                               if not (lo <= r[0] and r[1] <= hi and r[2] != j
                                       and row[r[4]] >= r[7])]
                recs.append(rec)
    return problems


__all__ = ["MAX_PROBLEMS", "unordered_conflicts"]
