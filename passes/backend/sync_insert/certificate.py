"""Stage 7: the sync certificate -- the happens-before edges the compiler relied on, as JSON.

``m100-sim --check-certificate`` (and :func:`verify_certificate` here) can check it independently:

* ``edges``: every kept ordering ``from -> to`` with its need vector (block ``b`` of ``to`` waits
  for block ``need[b]`` of ``from``; -1: no wait), the counter ``[tpb, id]`` that carries it and the
  values the consumer's monitor asks for per block. A checker confirms each edge in the program:
  the counter's updates, in global order, form a chain, and the ``value``-th update of that chain
  is at or after block ``need[b]`` of ``from`` on ``from``'s executor.
* ``hazards``: every conflicting pair ``[i, j, kind, space, tpb, lo, hi]`` (a byte interval in
  which they conflict), including the ones removed as redundant. A checker confirms each hazard is
  ordered by the closure of ``edges`` plus program order plus block order.
* ``serialized``: chain monitors added by a budget merge decision.
"""

from __future__ import annotations

import json


from m100.targets.m100 import isa
from m100.targets.m100.isa import Trigger

from .allocate import Allocation
from .analyze import Needs
from .graph import HbGraph
from .redundancy import Reduced

FORMAT = "m100-sync-certificate"
VERSION = 1


def build_certificate(machine, mode: str, nd: Needs, red: Reduced, al: Allocation,
                      out: list[isa.Instruction]) -> dict:
    def executor(i):
        unit, idx = out[i].executor
        return [unit.name, idx]

    edges = []
    for (i, j), h in sorted(al.needs.items()):
        t = al.home[(i, j)]
        c = al.counter[(out[i].executor, t)]
        mon = next(m for m in out[j].sync.monitors if m.tpb == t and m.counter == c)
        edges.append({"from": i, "to": j, "need": [int(k) for k in h.need], "counter": [t, c],
                      "trigger": al.trigger[(i, t)].name,
                      "value": [mon.expected + b * mon.per_block for b in range(len(h.need))]})
    hazards = []
    for (i, j), h in sorted(nd.needs.items()):
        for kind, mem, lo, hi in h.why:
            hazards.append([i, j, kind, int(mem[0]) if mem else -1, int(mem[1]) if mem else -1,
                            lo, hi])
    return {
        "format": FORMAT, "version": VERSION, "machine": machine.name,
        "fingerprint": f"{machine.fingerprint():016x}", "sync_mode": mode,
        "instructions": len(out), "blocks": [inst.sync.blocks for inst in out],
        "executors": [executor(i) for i in range(len(out))],
        "edges": edges, "hazards": hazards,
        "serialized": [list(x) for x in al.chain_needs],
        "redundant": [[i, j] for (i, j) in sorted(red.removed)],
        "counters_used": {str(t): n for t, n in sorted(al.counters_used.items())},
    }


def dumps(cert: dict) -> str:
    return json.dumps(cert, indent=1, sort_keys=True)


def verify_certificate(insts: list[isa.Instruction], cert: dict) -> list[str]:
    """Check ``cert`` against ``insts`` (instructions with filled Sync). Returns problems found."""
    problems = []
    if cert.get("format") != FORMAT:
        return ["not a sync certificate"]
    blocks = [inst.sync.blocks for inst in insts]
    g = HbGraph(insts, blocks)
    # 1. each edge is enforced by the program's counters
    chains: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, inst in enumerate(insts):
        for u in inst.sync.updates:
            evs = (range(blocks[i]) if u.trigger is Trigger.BLOCK else [blocks[i] - 1])
            for t in isa.tpbs_of(u.tpb_mask):
                for k in evs:
                    chains.setdefault((t, u.counter), []).extend([(i, k)] * u.amount)
    for e in cert["edges"]:
        for b, k in enumerate(e["need"]):
            if k >= 0:
                g.add_sync(e["from"], k, e["to"], b)
    for x in cert.get("serialized", []):
        g.add_sync(x[0], x[1], x[2], 0)
    # the updates of every counter must form a happens-before chain (the counting argument)
    for (t, c), chain in chains.items():
        for (i1, k1), (i2, k2) in zip(chain, chain[1:]):
            if (i1, k1) != (i2, k2) and not (i1 == i2 or g.hb(g.E(i1, k1), g.E(i2, k2))):
                problems.append(f"counter {c}@TPB{t}: update of #{i1} block {k1} and of #{i2} "
                                f"block {k2} are not ordered (not a chain)")
    for e in cert["edges"]:
        i, j, t, c = e["from"], e["to"], *e["counter"]
        mons = [m for m in insts[j].sync.monitors if m.tpb == t and m.counter == c]
        chain = chains.get((t, c), [])
        for b, k in enumerate(e["need"]):
            if k < 0:
                continue
            v = max((m.expected + b * m.per_block for m in mons), default=0)
            if v < 1 or v > len(chain):
                problems.append(f"edge {i}->{j} block {b}: no monitor of counter {c}@TPB{t} "
                                f"reaching a real update (value {v})")
                continue
            i2, k2 = chain[v - 1]
            if not ((i2, k2) == (i, k) or (insts[i2].executor == insts[i].executor
                                           and (i2, k2) > (i, k))
                    or g.hb(g.E(i, k), g.E(i2, k2))):
                problems.append(f"edge {i}->{j} block {b}: update #{v} of counter {c}@TPB{t} "
                                f"(from #{i2} block {k2}) does not follow block {k} of #{i}")
    # 2. each hazard is ordered
    for i, j, kind, *_ in cert["hazards"]:
        if kind in ("EDGE", "FIFO", "FIFO-BP", "BARRIER"):
            continue
        if insts[i].executor == insts[j].executor:
            continue
        if not g.hb(g.E(i, 0), g.S(j, blocks[j] - 1)):
            problems.append(f"hazard {kind} #{i} -> #{j} is not ordered by the certified edges")
    return problems
