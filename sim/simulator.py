"""The reference interpreter's Python API.

>>> result = Simulator(program).run({"x": x})           # doctest: +SKIP
>>> result.outputs["y"], result.stats["total_cycles"], result.ok

``program`` is a :class:`~m100.targets.m100.program.Program`, a ``{stream key: [Instruction]}``
dict, or a plain list of instructions (streams are then formed per cluster of each executor, DMAs
into the CCB stream). Without a program, data is staged with :meth:`Simulator.write` and read back
with :meth:`Simulator.read` (unit tests do this).
"""

from __future__ import annotations

import gc
import json
import math
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any, Callable

import numpy as np

from m100.errors import M100Error
from m100.mempolicy import small_pages
from m100.targets.m100.isa import DType, Instruction, IsaError, Space, Unit, Walk
from m100.targets.m100.machine import Machine, get_machine
from m100.targets.m100.numerics import int_range, value_dtype

from .checks import Report
from .engine import Engine, InstRec
from . import race_batch, replay
from . import segments as segment_load
from .memory import Memory
from .semantics import SimError, make_exec, quiet_run

CCB_STREAM = -1
MODES = ("full", "functional", "timing")


class SimInputError(M100Error):
    """Bad inputs to a simulation (a missing input, a wrong shape, a machine mismatch)."""


@dataclass
class Result:
    outputs: dict[str, np.ndarray]
    stats: dict[str, Any]
    reports: list[Report]
    records: list[InstRec]
    trace_events: list[dict] = field(default_factory=list)
    machine: Machine | None = None

    @property
    def ok(self) -> bool:
        return not self.reports

    @property
    def total_cycles(self) -> float:
        return self.stats["total_cycles"]

    def reports_of(self, kind: str) -> list[Report]:
        return [r for r in self.reports if r.kind == kind]

    def write_outputs(self, path: str | Path) -> None:
        np.savez(path, **self.outputs)

    def write_stats(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.stats, indent=2, sort_keys=True) + "\n")

    def write_trace(self, path: str | Path) -> None:
        from .trace import chrome_trace
        Path(path).write_text(json.dumps(chrome_trace(self)))

    def plot(self, path: str | Path) -> None:
        from .plot import plot_timeline
        plot_timeline(self, path)


def _streams_of(program, machine: Machine) -> dict[int, list[Instruction]]:
    if hasattr(program, "streams"):
        return program.streams
    if isinstance(program, dict):
        return program
    streams: dict[int, list[Instruction]] = {}
    for inst in program:
        unit, idx = inst.executor
        key = CCB_STREAM if unit is Unit.DMA else machine.cluster_of(idx)
        streams.setdefault(key, []).append(inst)
    return streams



class Simulator:
    """Run a program (or instructions) on a machine; see the module doc."""

    def __init__(self, program: Any = (), machine: Machine | str | None = None, *,
                 mode: str = "full", random_latency: int | None = None, check_races: bool = True,
                 trace: bool = False, progress: Callable[[int, int], None] | None = None,
                 blas_threads: int | None = 1, exact_input_dtypes: bool = False,
                 unroll_repeat: bool = False):
        if mode not in MODES:
            raise SimInputError(f"unknown simulation mode '{mode}' (modes: {', '.join(MODES)})")
        if random_latency is not None and (isinstance(random_latency, bool)
                                           or not isinstance(random_latency, (int, np.integer))
                                           or random_latency < 0):
            raise SimInputError(f"the random-latency seed must be an integer >= 0, not "
                                f"{random_latency!r}")
        # True (m100-sim, m100 run): an input whose dtype can not be converted to the symbol's
        # without loss (float64 -> f32, int32 -> f32, ...) is an error, not a silent rounding
        self.exact_input_dtypes = exact_input_dtypes
        # a repeated program (layer repetition) in timing mode simulates instance 0 and multiplies
        # (targets/m100/repeat.py says why that is exact); True simulates every instance
        self.unroll_repeat = unroll_repeat
        self.program = program if hasattr(program, "streams") else None
        if machine is None:
            machine = self.program.machine_obj() if self.program is not None else get_machine()
        self.machine = get_machine(machine)
        if self.program is not None and self.program.fingerprint != self.machine.fingerprint():
            raise SimInputError(f"the program was compiled for machine '{self.program.machine}' "
                                f"(fingerprint {self.program.fingerprint:#018x}), not for "
                                f"'{self.machine.name}'")
        self.mode = mode
        self.random_latency = random_latency
        self.check_races = check_races
        self.trace = trace
        self.progress = progress
        # Instruction-sized matmuls run far faster on one BLAS thread than on a pool of spinning
        # threads (10-200x on a loaded 2-core machine); None leaves the BLAS default.
        self.blas_threads = blas_threads
        self.streams = _streams_of(program, self.machine)
        self.memory = Memory(self.machine) if mode != "timing" else None
        # the program files mapped into the memories made since the last run ended
        # (sim/segments.py; checked after each run: _check_files)
        self._files: list[dict] = []
        self._reset_memory(keep=True)

    def _reset_memory(self, keep: bool = False) -> None:
        """A fresh memory holding the program's segments (``keep``: the one made in __init__)."""
        if not keep and self.memory is not None:
            self.memory = Memory(self.machine)
        if self.program is not None and self.memory is not None:
            # (pages backed at once, or mapped from the program file: sim/segments.py)
            segment_load.load(self.memory, self.program.segments)
            if self.memory.files:
                self._files.append(self.memory.files)
        # the memory's write count while it holds only the program (a run from it can be
        # repeated from the program and the inputs alone: Simulator._run, race batches)
        self._pristine = self.memory.writes if self.memory is not None else 0

    # --- data staging -------------------------------------------------------------------------
    def write(self, walk: Walk, values: np.ndarray, tpb: int | None = None) -> None:
        """Store ``values`` (flat, walk order) at the beats of ``walk``."""
        self.memory.write_walk(walk, np.asarray(values).reshape(-1), tpb=tpb)

    def read(self, walk: Walk, tpb: int | None = None) -> np.ndarray:
        return self.memory.read_walk(walk, tpb=tpb)

    def _symbol_walk(self, s) -> Walk:
        return Walk.strided(Space(s.space), s.tpb if Space(s.space) is Space.HBSM else 0,
                            s.address, DType(s.dtype), (math.prod(s.shape),))

    def _load_inputs(self, inputs: dict[str, np.ndarray] | None, symbols=None,
                     leftover_check: bool = True) -> None:
        """Write the values of the input/weight ``symbols`` (default: the program's) from
        ``inputs`` (consumed: entries used are popped when ``leftover_check`` is False)."""
        # leftover_check False: the caller's dict is consumed (popped) across several calls
        inputs = dict(inputs or {}) if leftover_check else (inputs if inputs is not None else {})
        if self.program is None:
            if inputs:
                raise SimInputError("inputs by name need a program with a symbol table")
            return
        for s in (self.program.symbols if symbols is None else symbols):
            if s.role not in ("input", "weight"):  # weights compiled by shape come like inputs
                continue
            if s.name not in inputs:
                if self.mode == "timing":  # no data is read: inputs are optional
                    continue
                what = "weight (compiled by shape: supply its values)" if s.role == "weight" \
                    else "input"
                raise SimInputError(f"missing {what} '{s.name}' ({DType(s.dtype).short}"
                                    f"{list(s.shape)}); the inputs file has: "
                                    f"{', '.join(sorted(inputs)) or 'nothing'}")
            v = np.asarray(inputs.pop(s.name))
            want = DType(s.dtype)
            if v.dtype.name == "bfloat16":  # ml_dtypes (onnx's numpy type): widened exactly
                v = v.astype(np.float32)
            if v.dtype.kind not in "biuf":
                raise SimInputError(f"input '{s.name}': {v.dtype} values are not numbers (the "
                                    f"program's input is {want.short}{list(s.shape)})")
            if tuple(v.shape) != tuple(s.shape):
                raise SimInputError(f"input '{s.name}': shape {list(v.shape)} does not match the "
                                    f"program's {list(s.shape)}")
            if self.exact_input_dtypes and not np.can_cast(v.dtype, value_dtype(want), "safe") \
                    and not (want.is_int and v.dtype.kind in "biu"):  # integers: range-checked
                raise SimInputError(f"input '{s.name}': {v.dtype} values do not convert to the "
                                    f"program's {want.short} without loss; save the array as "
                                    f"{value_dtype(want)}")
            if want.is_int and v.dtype.kind in "iu" and v.size:
                lo, hi = int_range(want)
                if int(v.min()) < lo or int(v.max()) > hi:
                    raise SimInputError(
                        f"input '{s.name}': {v.dtype} values in [{int(v.min())}, {int(v.max())}] "
                        f"do not fit the program's {want.short} (the M100 has no 64-bit or "
                        "unsigned integers; i64 inputs are narrowed to i32)")
            if self.memory is not None:
                self.memory.write_walk(self._symbol_walk(s), v.reshape(-1))
        if inputs and leftover_check:
            raise SimInputError(f"unknown input(s) {', '.join(sorted(inputs))}; the program's "
                                f"inputs are: " + ", ".join(s.name for s in self.program.symbols
                                                            if s.role in ("input", "weight")))

    # --- run ----------------------------------------------------------------------------------
    def _records(self, streams=None) -> tuple[list[InstRec], list[Report]]:
        recs: list[InstRec] = []
        reports: list[Report] = []
        m = self.machine
        streams = self.streams if streams is None else streams
        for key in sorted(streams):
            for pos, inst in enumerate(streams[key]):
                rec = InstRec(len(recs), key, pos, inst)
                try:
                    inst.check(m)
                except IsaError as e:
                    where = "CCB stream" if key == CCB_STREAM else f"cluster {key} stream"
                    kind = "out-of-bounds" if "outside" in str(e) else "malformed"
                    reports.append(Report(kind, f"#{rec.index} ({where}, position {pos}) "
                                          f"{inst.MNEMONIC}: {e}", inst=rec.index))
                recs.append(rec)
        return recs, reports

    def _dispatch_times(self, recs: list[InstRec]) -> None:
        """ICB dispatch: round-robin over the cluster streams, encoded bits / icb_bits_per_cycle.

        The times are a function of the records' streams and (immutable) instructions, in
        order, and of the machine: kept on the program per machine object
        and set again when a later run's records have the same streams and instructions (by
        identity, checked) -- ResNet-50: ~0.025 CPU-s of every timed run."""
        if self.mode == "functional":
            return
        kept = self.program.__dict__ if self.program is not None else None
        if kept is not None:
            got = kept.get("_sim_dispatch")
            if got is not None and got[0] is self.machine and len(got[1]) == len(recs) and all(
                    r.inst is i and r.stream == s for r, (s, i) in zip(recs, got[1])):
                for r, d in zip(recs, got[2]):
                    r.dispatch = d
                return
        self._dispatch_times_of(recs)
        if kept is not None:  # (not a dataclass field: never compared)
            kept["_sim_dispatch"] = (self.machine, [(r.stream, r.inst) for r in recs],
                                     [r.dispatch for r in recs])

    def _dispatch_times_of(self, recs: list[InstRec]) -> None:
        try:
            from m100.targets.m100.encoding import instruction_bits
        except ImportError:  # pragma: no cover
            instruction_bits = None
        by_stream: dict[int, list[InstRec]] = {}
        for r in recs:
            if r.stream != CCB_STREAM:
                by_stream.setdefault(r.stream, []).append(r)
        queues = [v for _, v in sorted(by_stream.items())]
        t = 0.0
        m = self.machine
        icb = m.icb_bits_per_cycle
        # round-robin: the i-th instruction of every stream in key order, i = 0, 1, ...
        for row in zip_longest(*queues):
            for r in row:
                if r is not None:
                    bits = instruction_bits(r.inst, m, check=False) if instruction_bits else 512
                    t += math.ceil(bits / icb)
                    r.dispatch = t

    def run(self, inputs: dict[str, np.ndarray] | None = None) -> Result:
        # The cyclic garbage collector is off while the engine runs: its full collections walked
        # every object of the program (decoded instructions, walks) again and again, 15-25 % of
        # a ResNet run; reference counting still frees everything else at once, and the cycles
        # left (engine <-> records) are collected when it is back on. While it runs numpy also
        # advises no huge pages for its big temporaries (m100/mempolicy.py: the
        # kernel's zeroing of a 2 MB page per fresh index array cost a ResNet-50 full run up to
        # ~1 CPU-s of system time); both are as before once the run is over
        # A run whose memory maps weights from the program file (sim/segments.py) ends by
        # checking that the file was not written meanwhile (_check_files).
        was = gc.isenabled()
        gc.disable()
        try:
            with quiet_run(), small_pages():
                if self.blas_threads is None:
                    return self._check_files(self._run(inputs))
                try:
                    from threadpoolctl import threadpool_limits
                except ImportError:  # pragma: no cover - a declared dependency
                    return self._check_files(self._run(inputs))
                with threadpool_limits(limits=self.blas_threads, user_api="blas"):
                    return self._check_files(self._run(inputs))
        finally:
            if was:
                if gc.get_freeze_count() == 0:
                    # the run's objects (and any other young ones) into the oldest generation
                    # without a scan (freeze, then unfreeze: no collection runs): with the
                    # collector off the run's allocations only counted up, so the next allocation
                    # made a young collection scan every object the run left -- the decoded
                    # instructions' kept derivations, the records -- and find no garbage (a run
                    # leaves no cycles but the BLAS controller's few), 0.08 / 0.16 CPU-s after a
                    # first functional ResNet-18 / -50 run; a full collection scans them when one
                    # is due, as it would have. (A caller's own freeze is not undone.)
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()

    def _check_files(self, res: Result) -> Result:
        """``res``, unless a program file mapped into a memory of the run (or of the simulator's
        set-up before it) changed since its program was read (``segments.changed_file``): the run
        may then have read bytes that are not the program's -- an error, never a result."""
        files, self._files = self._files, \
            [self.memory.files] if self.memory is not None and self.memory.files else []
        for f in files:
            bad = segment_load.changed_file(f)
            if bad is not None:
                raise SimError(f"the program file {bad.path} was written while a run read the "
                               "program's segments from it (mapped from the file): load the "
                               "program again")
        return res

    def _run(self, inputs: dict[str, np.ndarray] | None) -> Result:
        if self.program is not None and getattr(self.program, "repeat", None) is not None:
            from .repeat import run_repeated
            return run_repeated(self, inputs)
        # races checked in batches (sim/race_batch.py) when the run can be repeated from the
        # program and the inputs alone: the memory holds the program's segments and nothing
        # else was written (no data staged by the caller, no earlier run)
        batch = race_batch.BATCH and self.program is not None and self.check_races \
            and self.memory is not None and self.memory.writes == self._pristine
        # a functional run by the program's schedule (sim/replay.py; None: none kept, or an
        # executor faulted -- the engine runs from the start on a fresh memory, and reports it)
        if replay.key_of(self) is not None:
            res = replay.replay(self, inputs)
            if res is not None:
                return res
            if self.memory.writes != self._pristine:
                self._reset_memory()
        if batch:
            try:
                return self._run_once(inputs, True)
            except race_batch.RaceFound:  # a racy run: again, reported by the per-access checker
                self._reset_memory()
        return self._run_once(inputs, False)

    def _run_once(self, inputs: dict[str, np.ndarray] | None, batch_races: bool,
                  defer: bool = True, cert: bool = True) -> Result:
        recs, reports = self._records()
        if reports:  # malformed / out-of-bounds instructions: nothing runs
            stats = {"machine": self.machine.name, "mode": self.mode, "total_cycles": 0.0,
                     "total_us": 0.0, "instructions": len(recs), "instructions_completed": 0,
                     "units": {}, "stall_cycles": {}, "bytes": {}, "tcu_macs": 0.0,
                     "tcu_mac_util_pct": 0.0, "reports": [r.to_dict() for r in reports]}
            return Result({}, stats, reports, recs, machine=self.machine)
        key = replay.key_of(self)  # (before the run writes the memory)
        if self.memory is not None:
            self.memory.writes += 1  # a run changes the memory (whether it writes or not)
        self._load_inputs(inputs)
        self._dispatch_times(recs)
        if self.mode != "timing":  # (a timing run executes nothing: no executors)
            for r in recs:
                r.ex = make_exec(r.inst, self.memory)
        # a functional or full run whose schedule is kept (its first): the engine's loop logs
        # the executors' calls, made after it in that order (sim/replay.py, "The first full
        # run"); with a report or a fault among them, the engine runs again with the data inline
        defer = defer and self.mode in replay.MODES and (batch_races or not self.check_races)
        rec = replay.recording(self, key, recs, wrap=not defer)
        defer = defer and rec is not None
        # the first full run of instructions whose functional run is kept: its race verdict
        # when every block's clock is the functional run's (sim/clock_cert.py)
        log = replay.race_log_of(self, key) if defer and cert and batch_races \
            and self.mode == "full" else None
        eng = Engine(self.machine, recs, self.memory, self.mode, self.random_latency,
                     self.check_races, self.trace, self.progress, batch_races=batch_races,
                     defer=rec[1] if defer else None, clock_cert=log)
        eng.recs_by_index = recs
        eng.run()
        if eng.clocks_ok is False and not eng.reports:  # (other clocks: its own log and sweep)
            for r in recs:
                r.ex = None
            self._reset_memory()
            return self._run_once(inputs, batch_races, defer, cert=False)
        if defer:
            try:
                if eng.reports:  # (what the loop reported is reported by the engine's run)
                    raise SimError("reported")
                replay.calls([r.ex for r in recs], rec[1], self.check_races)  # (no report)
            except SimError:  # (the data decided: a fault stops the engine's run there)
                for r in recs:
                    r.ex = None
                self._reset_memory()
                return self._run_once(inputs, batch_races, defer=False)
        if rec is not None:
            replay.keep(self, eng, recs, rec)
        outputs = {}
        if self.program is not None and self.memory is not None and not any(
                r.kind in ("fault", "deadlock") for r in eng.reports):
            for s in self.program.symbols:
                if s.role == "output":
                    outputs[s.name] = self.memory.read_walk(self._symbol_walk(s)).reshape(s.shape)
        for r in recs:  # the executors are the run's: fewer objects for the collector to scan
            r.ex = None  # when it is back on, and the result does not keep the memory alive
        stats = self._stats(eng, recs)
        return Result(outputs, stats, eng.reports, recs, eng.events, self.machine)

    def _stats(self, eng: Engine, recs: list[InstRec]) -> dict[str, Any]:
        total = max([r.end for r in recs if r.end is not None] + [eng.now * 0, 0.0])
        units = {}
        stall_total: dict[str, float] = {}
        done = [0] * len(eng.units)  # instructions completed per unit
        for r in recs:
            if r.end is not None:
                done[r.unit] += 1
        for i, us in enumerate(eng.units):
            d = {"busy_cycles": us.busy, "busy_pct": 100.0 * us.busy / total if total else 0.0,
                 "instructions": done[i],
                 "stall_cycles": {k: v for k, v in sorted(us.stalls.items())}}
            if i in eng.macs:
                peak = eng.peak[i]
                d["macs"] = eng.macs[i]
                d["mac_util_pct"] = 100.0 * eng.macs[i] / (peak * total) if total else 0.0
                d["mac_util_busy_pct"] = 100.0 * eng.macs[i] / (peak * us.busy) if us.busy else 0.0
            units[us.name] = d
            for k, v in us.stalls.items():
                stall_total[k] = stall_total.get(k, 0.0) + v
        tcu_macs = sum(eng.macs.values())
        peak_all = sum(eng.peak.values())
        return {
            "machine": self.machine.name, "mode": self.mode,
            "total_cycles": total, "total_us": total * 1e6 / self.machine.clock_hz,
            "instructions": len(recs),
            "instructions_completed": sum(1 for r in recs if r.end is not None),
            "units": units,
            "stall_cycles": stall_total,
            "bytes": dict(sorted(eng.bytes.items())),
            "tcu_macs": tcu_macs,
            "tcu_mac_util_pct": 100.0 * tcu_macs / (peak_all * total) if total and peak_all else 0.0,
            "reports": [r.to_dict() for r in eng.reports],
        }


def simulate(program: Any, inputs: dict[str, np.ndarray] | None = None, **kw) -> Result:
    """One-call convenience: ``Simulator(program, **kw).run(inputs)``."""
    machine = kw.pop("machine", None)
    return Simulator(program, machine, **kw).run(inputs)
