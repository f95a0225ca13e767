"""Stage 6: static deadlock check of a counter protocol (any instruction list with filled Sync).

Counters only grow and a monitor only asks ``counter >= value``, so progress is monotone: running
every block that *can* start, in any order, until nothing can, reaches the one maximal state every
real execution is bounded by (timing can delay but never enable or disable a block). If an
instruction is left then, its executor waits forever on some monitor: a compile error that names
the waiting instruction, the counter, the value it needs and the value the counter can reach, and
the wait-for cycle (the executors whose blocked instructions would have made the updates).

This check does not trust the earlier stages: it reads only ``executor`` and ``sync`` fields.
"""

from __future__ import annotations


from m100.targets.m100 import isa
from m100.targets.m100.isa import Trigger, Unit

from .analyze import SyncError, inst_name


class SyncDeadlockError(SyncError):
    """A cycle of waits that can never be satisfied."""


def _ename(e) -> str:
    unit, idx = e
    return f"dma engine {idx}" if unit is Unit.DMA else f"TPB {idx} {unit.name}"


def run_abstract(insts: list[isa.Instruction]) -> tuple[dict, dict, dict]:
    """Run to the maximal state. Returns (counters, position per executor, queues).

    A worklist: an executor runs until a monitor of its next block is not met, then waits on
    that monitor's counter and is run again only when an update raises the counter (until
    session 32 every executor was tried again in rounds until a round made no progress: R50's
    170 executors took 266 rounds, 58 344 tests for 17 090 instructions). Counters only grow, so
    a waiting executor whose counter did not change is still blocked, and the state reached is
    the maximal one (module doc); the counters' insertion order may differ from the rounds'."""
    queues: dict = {}
    for idx, inst in enumerate(insts):
        queues.setdefault(inst.executor, []).append(idx)
    pos = {e: [0, 0] for e in queues}  # (instruction position, next block)
    ctr: dict[tuple[int, int], int] = {}
    waits: dict[tuple[int, int], list] = {}  # counter -> the executors blocked on it
    ready = list(queues)[::-1]  # popped from the end: the executors in order first

    tpbs: dict[int, list[int]] = {}  # mask -> its TPBs (a few masks, ~40 000 updates)

    def fire(inst, trig) -> None:
        for u in inst.sync.updates:
            if u.trigger is trig:
                ts = tpbs.get(u.tpb_mask)
                if ts is None:
                    ts = tpbs[u.tpb_mask] = isa.tpbs_of(u.tpb_mask)
                for t in ts:
                    k = (t, u.counter)
                    ctr[k] = ctr.get(k, 0) + u.amount
                    w = waits.pop(k, None)
                    if w is not None:
                        ready.extend(w)

    while ready:
        e = ready.pop()
        q, p = queues[e], pos[e]
        while p[0] < len(q):
            inst = insts[q[p[0]]]
            b = p[1]
            for m in inst.sync.monitors:
                k = (m.tpb, m.counter)
                if ctr.get(k, 0) < m.expected + b * m.per_block:
                    waits.setdefault(k, []).append(e)
                    break
            else:
                fire(inst, Trigger.BLOCK)
                p[1] += 1
                if p[1] == inst.sync.blocks:
                    fire(inst, Trigger.END)
                    p[0] += 1
                    p[1] = 0
                continue
            break
    return ctr, pos, queues


def counter_totals(insts: list[isa.Instruction]) -> dict[tuple[int, int], int]:
    tot: dict[tuple[int, int], int] = {}
    for inst in insts:
        for u in inst.sync.updates:
            n = u.amount * (inst.sync.blocks if u.trigger is Trigger.BLOCK else 1)
            for t in isa.tpbs_of(u.tpb_mask):
                tot[(t, u.counter)] = tot.get((t, u.counter), 0) + n
    return tot


def check_deadlock(insts: list[isa.Instruction], machine=None) -> dict[tuple[int, int], int]:
    """Raise :class:`SyncDeadlockError` if the program can not run to completion; return the
    final value of every counter (also checked against the counter width when ``machine``)."""
    ctr, pos, queues = run_abstract(insts)
    stuck = []
    for e, q in queues.items():
        p = pos[e]
        if p[0] < len(q):
            j = q[p[0]]
            inst = insts[j]
            b = p[1]
            m = next(m for m in inst.sync.monitors
                     if ctr.get((m.tpb, m.counter), 0) < m.expected + b * m.per_block)
            stuck.append((e, j, b, m))
    if stuck:
        import networkx as nx  # only to name the wait-for cycle of an error (~0.3 s to import)

        tot = counter_totals(insts)
        wf = nx.DiGraph()
        lines = []
        for e, j, b, m in stuck:
            need = m.expected + b * m.per_block
            have = ctr.get((m.tpb, m.counter), 0)
            lines.append(f"{inst_name(insts, j)} block {b} waits for counter {m.counter} of TPB "
                         f"{m.tpb} >= {need} but it reaches only {have}"
                         + (f" (even if every update ran: {tot.get((m.tpb, m.counter), 0)})"
                            if tot.get((m.tpb, m.counter), 0) < need else ""))
            for e2, q in queues.items():
                if e2 == e:
                    continue
                for idx in q[pos[e2][0]:]:
                    if any(u.counter == m.counter and u.tpb_mask >> m.tpb & 1
                           for u in insts[idx].sync.updates):
                        wf.add_edge(e, e2)
                        break
        try:
            cyc = nx.find_cycle(wf)
            lines.append("wait-for cycle: " + " -> ".join(_ename(a) for a, _ in cyc)
                         + f" -> {_ename(cyc[0][0])}")
        except nx.NetworkXNoCycle:
            pass
        raise SyncDeadlockError("sync deadlock: " + "; ".join(lines))
    if machine is not None:
        for (t, c), v in sorted(ctr.items()):  # (the first by TPB and counter is named)
            if v > machine.su_counter_max:
                raise SyncError(f"sync-insert: counter {c} of TPB {t} reaches {v}, more than its "
                                f"{machine.su_counter_bits} bits hold")
    return ctr
