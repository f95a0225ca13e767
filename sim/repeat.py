"""Running a repeated program (layer repetition, :mod:`m100.targets.m100.repeat`) on the interpreter.

Instances run one after the other on one memory, each on an idle machine with fresh sync state (an
instance boundary is a barrier). Symbols of an ``instance`` region are supplied and read per
instance as ``name@i``; a ``chain`` input (and any symbol outside the regions) is loaded before
instance 0, a ``chain`` output (and any other output) read after the last instance.

Timing-only runs simulate instance 0 and multiply its counts by the instance count unless
``Simulator(unroll_repeat=True)``: instances differ only in DDR walk base addresses, which the cycle
model never reads (the argument is in :mod:`m100.targets.m100.repeat`); ``stats["repeat"]`` says
which was done.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from m100.targets.m100.isa import Space
from m100.targets.m100.repeat import relocate

from .engine import Engine
from .semantics import make_exec


def _instance_symbols(program, rep, i: int, role_in: bool):
    """(symbol at instance i's address and name) of the symbols active at instance ``i``."""
    n = rep.count
    out = []
    for s in program.symbols:
        if (s.role in ("input", "weight")) != role_in:
            continue
        r = rep.region_of(s.address) if s.space is Space.DDR else None
        if r is not None and r.kind == "instance":
            out.append(dataclasses.replace(s, name=f"{s.name}@{i}", address=s.address + r.offsets[i]))
        elif i == (0 if role_in else n - 1):
            off = r.offsets[i] if r is not None else 0
            out.append(dataclasses.replace(s, address=s.address + off))
    return out


def _scaled(stats: dict[str, Any], n: int) -> dict[str, Any]:
    """The stats of ``n`` identical instances run back to back (counts x n, shares unchanged)."""
    st = dict(stats)
    for k in ("total_cycles", "total_us", "instructions", "instructions_completed", "tcu_macs"):
        st[k] = stats[k] * n
    st["units"] = {}
    for name, u in stats["units"].items():
        d = dict(u)
        d["busy_cycles"] = u["busy_cycles"] * n
        d["instructions"] = u["instructions"] * n
        d["stall_cycles"] = {k: v * n for k, v in u["stall_cycles"].items()}
        if "macs" in u:
            d["macs"] = u["macs"] * n
        st["units"][name] = d
    st["stall_cycles"] = {k: v * n for k, v in stats["stall_cycles"].items()}
    st["bytes"] = {k: v * n for k, v in stats["bytes"].items()}
    return st


def _combined(all_stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The stats of instances run back to back (sums; shares weighted by each instance's time)."""
    st = dict(all_stats[0])
    tot = sum(s["total_cycles"] for s in all_stats)
    for k in ("total_cycles", "total_us", "instructions", "instructions_completed", "tcu_macs"):
        st[k] = sum(s[k] for s in all_stats)
    w = [s["total_cycles"] / tot if tot else 0.0 for s in all_stats]
    st["tcu_mac_util_pct"] = sum(s["tcu_mac_util_pct"] * wi for s, wi in zip(all_stats, w))
    st["units"] = {}
    for name, u0 in all_stats[0]["units"].items():
        us = [s["units"][name] for s in all_stats]
        d = dict(u0)
        d["busy_cycles"] = sum(u["busy_cycles"] for u in us)
        d["busy_pct"] = 100.0 * d["busy_cycles"] / tot if tot else 0.0
        d["instructions"] = sum(u["instructions"] for u in us)
        stalls: dict[str, float] = {}
        for u in us:
            for k, v in u["stall_cycles"].items():
                stalls[k] = stalls.get(k, 0.0) + v
        d["stall_cycles"] = stalls
        if "macs" in u0:
            d["macs"] = sum(u["macs"] for u in us)
            d["mac_util_pct"] = sum(u["mac_util_pct"] * wi for u, wi in zip(us, w))
            busy = d["busy_cycles"]
            d["mac_util_busy_pct"] = (sum(u["mac_util_busy_pct"] * u["busy_cycles"] for u in us)
                                      / busy) if busy else 0.0
        st["units"][name] = d
    st["stall_cycles"] = {}
    st["bytes"] = {}
    for s in all_stats:
        for k, v in s["stall_cycles"].items():
            st["stall_cycles"][k] = st["stall_cycles"].get(k, 0.0) + v
        for k, v in s["bytes"].items():
            st["bytes"][k] = st["bytes"].get(k, 0.0) + v
    st["reports"] = [r for s in all_stats for r in s["reports"]]
    return st


def run_repeated(sim, inputs):
    """``Simulator._run`` for a program with a repeat section."""
    from .simulator import Result

    prog = sim.program
    rep = prog.repeat
    n = rep.count
    pending = dict(inputs or {})
    once = sim.mode == "timing" and not sim.unroll_repeat
    outputs: dict[str, Any] = {}
    all_stats = []
    reports: list = []
    first_recs = None
    events: list = []
    for i in range(1 if once else n):
        streams = relocate(sim.streams, rep, i)
        recs, bad = sim._records(streams)
        if bad:
            reports += bad
            all_stats.append({"machine": sim.machine.name, "mode": sim.mode, "total_cycles": 0.0,
                              "total_us": 0.0, "instructions": len(recs),
                              "instructions_completed": 0, "units": {}, "stall_cycles": {},
                              "bytes": {}, "tcu_macs": 0.0, "tcu_mac_util_pct": 0.0,
                              "reports": [r.to_dict() for r in bad]})
            break
        sim._load_inputs(pending, _instance_symbols(prog, rep, i, True), leftover_check=False)
        sim._dispatch_times(recs)
        for r in recs:
            r.ex = make_exec(r.inst, sim.memory)
        eng = Engine(sim.machine, recs, sim.memory, sim.mode, sim.random_latency,
                     sim.check_races, sim.trace and i == 0, sim.progress)
        eng.recs_by_index = recs
        eng.run()
        reports += eng.reports
        all_stats.append(sim._stats(eng, recs))
        if first_recs is None:
            first_recs, events = recs, eng.events
        if any(r.kind in ("fault", "deadlock") for r in eng.reports):
            break
        if sim.memory is not None:
            for s in _instance_symbols(prog, rep, i, False):
                outputs[s.name] = sim.memory.read_walk(sim._symbol_walk(s)).reshape(s.shape)
    if pending and not once:  # (a timing-only run of one instance reads no values at all)
        from .simulator import SimInputError
        raise SimInputError(f"unknown input(s) {', '.join(sorted(pending))} for a program repeated "
                            f"{n} times (per-instance symbols are named NAME@i)")
    stats = _scaled(all_stats[0], n) if once and len(all_stats) == 1 and not reports \
        else _combined(all_stats)
    stats["repeat"] = {"count": n, "simulated_instances": len(all_stats),
                       "instance_cycles": all_stats[0]["total_cycles"]}
    return Result(outputs, stats, reports, first_recs or [], events, sim.machine)
