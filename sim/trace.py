"""Perfetto / Chrome trace JSON of a simulated run (open it at ui.perfetto.dev or chrome://tracing).

One process per TPB (``TPB k``, pid k+1) with one thread (track) per functional unit, and the CCB
(pid 0) with one track per DMA engine. Every block of every instruction is a slice (``args`` carry
the instruction index, block and cycles; a pipelined unit's latency tail -- results not yet
visible -- is a slice on its "drain" track); every SU counter is a counter track of its TPB; a flow
arrow goes from the block whose update released a monitor to the block it released (the paper's
Fig. 16). Timestamps are microseconds of simulated time at ``machine.clock_hz``.
"""

from __future__ import annotations

from typing import Any

from m100.targets.m100.isa import Unit


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
