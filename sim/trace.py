"""Perfetto / Chrome trace JSON of a simulated run (open it at ui.perfetto.dev or chrome://tracing).

One process per TPB (``TPB k``, pid k+1) with one thread (track) per functional unit, and the CCB
(pid 0) with one track per DMA engine. Every block of every instruction is a slice (``args`` carry
the instruction index, block and cycles; a pipelined unit's latency tail -- results not yet
visible -- is a slice on its "drain" track); every SU counter is a counter track of its TPB; a flow
arrow goes from the block whose update released a monitor to the block it released (the paper's
Fig. 16). Timestamps are microseconds of simulated time at ``machine.clock_hz``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from m100.targets.m100.isa import Unit

if TYPE_CHECKING:
    from .engine import InstRec


def chrome_trace(result: Any) -> dict:
    m = result.machine
    meta: list[dict] = []
    pids: dict[int, str] = {}
    threads: set[tuple[int, int, str]] = set()
    for ev in result.trace_events:
        if ev.get("ph") in ("X", "C"):
            pid = ev["pid"]
            pids[pid] = "CCB" if pid == 0 else f"TPB {pid - 1}"
            if ev["ph"] == "X":
                tid = ev["tid"]
                base, drain = (tid - 16, " drain") if tid >= 16 else (tid, "")
                name = (f"DMA{base}" if pid == 0 else Unit(base).name) + drain
                threads.add((pid, tid, name))
    for pid, name in sorted(pids.items()):
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
    for pid, tid, name in sorted(threads):
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    return {"traceEvents": meta + list(result.trace_events), "displayTimeUnit": "ns",
            "otherData": {"machine": m.name if m else "", "clock_hz": m.clock_hz if m else 0,
                          "total_cycles": result.stats.get("total_cycles", 0)}}


DRAIN_TID = 16  # trace: the drain track of unit tid is tid + DRAIN_TID


class TraceEvents:
    """The engine's trace events (a mixin of :class:`~m100.sim.engine.Engine`)."""

    # --- trace --------------------------------------------------------------------------------
    def _us(self, cycles: float) -> float:
        return cycles * 1e6 / self.m.clock_hz

    def track(self, u: int) -> tuple[int, int]:
        key = self.units[u].key
        if key[0] is Unit.DMA:
            return 0, key[1]
        return key[1] + 1, int(key[0])

    def _trace_block(self, u: int, rec: InstRec, b: int, start: float, end: float,
                     flows: list) -> None:
        pid, tid = self.track(u)
        name = rec.inst.MNEMONIC + (f" [{b}]" if rec.inst.sync.blocks > 1 else "")
        args = {"inst": rec.index, "block": b, "cycles": end - start,
                "visible_at_cycle": self.now}
        self.events.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": self._us(start),
                            "dur": self._us(max(end - start, 1e-3)), "args": args})
        if self.now > end:  # the pipeline tail, on the unit's drain track
            self.events.append({"ph": "X", "name": name + " (drain)", "pid": pid,
                                "tid": tid + DRAIN_TID, "ts": self._us(end),
                                "dur": self._us(self.now - end), "args": args})
        for fid, _t in flows:
            self.events.append({"ph": "f", "bp": "e", "name": "sync", "cat": "sync", "id": fid,
                                "pid": pid, "tid": tid, "ts": self._us(start)})

    def _trace_flow_start(self, u: int, fid: int, start: float, end: float) -> None:
        pid, tid = self.track(u)
        if self.now > end:  # on the drain slice
            tid, lo = tid + DRAIN_TID, end
        else:
            lo = start
        ts = max(self._us(self.now) - 1e-6, self._us(lo))
        self.events.append({"ph": "s", "name": "sync", "cat": "sync", "id": fid, "pid": pid,
                            "tid": tid, "ts": ts})
