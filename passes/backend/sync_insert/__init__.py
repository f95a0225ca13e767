"""sync-insert: Synchronization Unit counter traffic for TPB ISA instructions.

Entry point: :func:`insert_sync` (an algorithm over ISA objects; the xDSL pass wrapper comes with
the ``sync`` dialect). Stages, one module each (AscendNPU-IR InjectSync style; ``docs/sync.md``):

1. ``analyze``    -- input model and validation; required orderings (hazards from the walks,
                     explicit edges, ring buffers), or the barrier-all chain;
2. ``footprint``  -- the bytes each block of an instruction touches (accesses, chunks, runs);
   ``hazards``    -- conflicting pairs in global order as need vectors, implied ones pruned;
   ``graph``      -- the block-level happens-before graph (vector clocks);
3. ``redundancy`` -- drop orderings implied by others (transitive reduction);
4. ``allocate``   -- home TPBs, channels, counters within the budget (reuse, explicit merges);
5. ``codegen``    -- producer updates, consumer monitors with per-block expected values;
6. ``deadlock``   -- static check of the produced counter protocol;
7. ``certificate``-- the happens-before edges relied on, as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from m100.targets.m100 import isa
from m100.targets.m100.machine import get_machine

from .allocate import allocate
from .analyze import SYNC_MODES, DataEdge, RingBuffer, SyncError, WholeEdges, analyze
from .certificate import build_certificate
from .codegen import codegen
from .deadlock import SyncDeadlockError, check_deadlock
from . import sweep
from .redundancy import reduce_needs


@dataclass
class SyncResult:
    instructions: list[isa.Instruction]  # same order, Sync filled
    counters_used: dict[int, int]  # TPB -> counters
    decisions: list[dict]  # budget decisions (merge + serialize), empty when within budget
    certificate: dict
    stats: dict = field(default_factory=dict)

    def report(self) -> str:
        s = self.stats
        lines = [f"sync-insert ({s['mode']}): {s['instructions']} instructions, "
                 f"{s['needs']} orderings needed, {s['redundant']} implied (no traffic), "
                 f"{s['kept']} synchronized; {s['monitors']} monitors, {s['updates']} updates "
                 f"({s['block_updates']} per block, {s['remote_updates']} remote)",
                 "counters per TPB: " + ", ".join(f"TPB{t}={n}" for t, n in
                                                  sorted(self.counters_used.items()) if n)]
        for d in self.decisions:
            lines.append(f"decision: {d['kind']} channel {d['channel']} into counter "
                         f"{d['counter']} of TPB {d['tpb']} (shared with "
                         f"{', '.join(d['into'])}): {d['why']}; {d['effect']}")
        return "\n".join(lines)


def insert_sync(instructions, machine=None, *, edges=(), rings=(), sync_mode: str = "dataflow",
                counter_budget: int | None = None, on_budget: str = "merge",
                stream_blocks: int | None = None, remove_redundant: bool = True) -> SyncResult:
    """Fill the ``Sync`` of every instruction so the program is race- and deadlock-free.

    ``instructions``: ISA instructions with empty ``Sync()`` (``blocks`` may be set) in a valid
    sequential order. ``edges`` / ``rings``: extra orderings (:class:`DataEdge`\\ s or one
    :class:`WholeEdges`, :class:`RingBuffer`); hazards from the walks are always derived.
    ``sync_mode``: ``dataflow`` or ``barrier-all``. ``counter_budget``: counters usable per TPB (default
    ``machine.su_counters``). ``on_budget``: ``merge`` (reported decision) or ``error``.
    ``stream_blocks``: split instructions with ``blocks == 1`` into up to this many blocks so
    consumers stream (dataflow mode only).
    """
    machine = get_machine(machine)
    if sweep.usable(sync_mode, remove_redundant):
        nd, red = sweep.analyze_reduce(instructions, machine, edges=edges, rings=rings,
                                       stream_blocks=stream_blocks)
    else:
        nd = analyze(instructions, machine, edges=edges, rings=rings, sync_mode=sync_mode,
                     stream_blocks=stream_blocks)
        red = reduce_needs(nd, enabled=remove_redundant and sync_mode == "dataflow")
    al = allocate(red, machine, budget=counter_budget, on_budget=on_budget)
    out, st = codegen(red, al, nd.insts)
    for inst, src in zip(out, nd.insts):
        # the walks were checked by analyze; the new sync fields are checked here
        inst.check_as_resynced(src, machine)
    check_deadlock(out, machine)
    cert = build_certificate(machine, sync_mode, nd, red, al, out)
    stats = {"mode": sync_mode, "instructions": len(out),
             "needs": len(red.kept) + red.num_removed,
             "redundant": red.num_removed, "kept": len(red.kept), "skipped": red.skipped, **st,
             "serialized": len(al.chain_needs) + len(al.extra)}
    return SyncResult(out, al.counters_used, al.decisions, cert, stats)


__all__ = ["insert_sync", "SyncResult", "DataEdge", "WholeEdges", "RingBuffer", "SyncError",
           "SyncDeadlockError", "check_deadlock", "SYNC_MODES"]
