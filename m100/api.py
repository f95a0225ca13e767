"""The research API: compile, run and inspect models from Python (notebooks, sweeps, scripts).

Built on the end-to-end driver (``m100.tools.driver``, the functions behind ``m100 compile / run /
check``); this module adds objects meant for exploration and returns tabular things as pandas
DataFrames. ``docs/research.md`` is the guide::

    from m100 import api
    model = api.load("model.onnx")                    # a path or an onnx.ModelProto
    c = api.compile(model, machine="tiny", strategy="pipeline")
    c.schedule_report()                               # one row per op: unit, TPBs, tile, predicted
    c.tasks()                                         # the scheduler's predicted tasks
    r = c.run(mode="timing")                          # the interpreter; or mode="full" with data
    r.cycles, r.latency_us, r.tcu_util, r.ddr_bytes
    r.timeline(); r.figure()                          # DataFrame / matplotlib Figure
    c.check().errors                                  # vs onnxruntime (or the reference executor)
    m = c.machine.replace(hbsm_bytes=32 * 1024)       # change a machine field ...
    c2 = c.recompile(machine=m)                       # ... and compile again

pandas and matplotlib are imported only by the functions that return DataFrames / figures.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from m100.targets.m100.machine import Machine, get_machine
from m100.tools import driver
from m100.tools.driver import DriverError

SCHEDULE_OPTIONS = ("strategy", "tpbs", "clusters", "sync_mode", "seed")
MODES = ("full", "functional", "timing")


# --- models ----------------------------------------------------------------------------------------
@dataclass
class Model:
    """A model to compile: an onnx ModelProto (or an MLIR file path) and a stable content hash."""

    source: Any  # onnx.ModelProto, or a path of an .mlir file
    name: str
    hash: str  # sha256 of the serialized model (hex)

    def __repr__(self) -> str:
        return f"Model({self.name!r}, hash={self.hash[:12]})"


def load(src, name: str | None = None) -> Model:
    """A :class:`Model` from an ONNX/MLIR path, an ``onnx.ModelProto`` or a :class:`Model`."""
    if isinstance(src, Model):
        return src
    if hasattr(src, "graph"):  # onnx.ModelProto
        blob = src.SerializeToString()
        return Model(src, name or src.graph.name or "model", hashlib.sha256(blob).hexdigest())
    path = os.fspath(src)
    if not os.path.exists(path):
        raise DriverError(f"{path}: no such file")
    blob = open(path, "rb").read()
    stem = os.path.splitext(os.path.basename(path))[0]
    if path.lower().endswith(".onnx"):
        import onnx
        try:
            proto = onnx.load_from_string(blob)
        except Exception as e:  # noqa: BLE001 - onnx raises various errors for garbage files
            raise DriverError(f"{path}: not a readable ONNX model ({type(e).__name__})") from None
        return Model(proto, name or stem, hashlib.sha256(blob).hexdigest())
    return Model(path, name or stem, hashlib.sha256(blob).hexdigest())


def machine(spec: str | Machine | None = "m100", **overrides: Any) -> Machine:
    """A machine preset / machine file / Machine, with ``overrides`` applied (``Machine.replace``)."""
    m = get_machine(spec)
    return m.replace(**overrides) if overrides else m


def _df(rows: list[dict], columns: list[str] | None = None):
    import pandas as pd
    return pd.DataFrame(rows, columns=columns)


# --- compile ---------------------------------------------------------------------------------------
def compile(model, machine: str | Machine = "m100", *, strategy: str = "auto", tpbs: int = 0,
            clusters: int = 0, sync_mode: str = "dataflow", seed: int = 0) -> Compiled:
    """Compile ``model`` (anything :func:`load` takes) for ``machine`` with schedule options."""
    mdl = load(model)
    m = get_machine(machine)
    t0 = time.perf_counter()
    cr = driver.compile(mdl.source, m, tpbs, sync_mode, clusters=clusters, strategy=strategy,
                        seed=seed)
    return Compiled(mdl, m, dict(strategy=strategy, tpbs=tpbs, clusters=clusters,
                                 sync_mode=sync_mode, seed=seed), cr,
                    time.perf_counter() - t0)


@dataclass
class Compiled:
    """A compiled model: the program, its sync certificate, reports and the predicted schedule."""

    model: Model
    machine: Machine
    options: dict[str, Any]
    result: driver.CompileResult
    compile_s: float

    @property
    def program(self):
        return self.result.program

    @property
    def certificate(self) -> dict:
        return self.result.certificate

    @property
    def report(self) -> str:
        """The compile summary (instructions per unit, counters, sync edges, stage times)."""
        return self.result.report

    @property
    def timings(self) -> dict[str, float]:
        return self.result.timings

    @property
    def num_instructions(self) -> int:
        return self.result.num_instructions

    @property
    def predicted_cycles(self) -> float:
        """The scheduler's predicted makespan, read from the instructions' ``pred_end``."""
        ends = [float(op.attributes["pred_end"].value.data) for op in self.result.module.walk()
                if "pred_end" in op.attributes]
        return max(ends, default=0.0)

    def recompile(self, machine: str | Machine | None = None, **options: Any) -> Compiled:
        """Compile the same model again with another machine and/or other schedule options."""
        unknown = set(options) - set(SCHEDULE_OPTIONS)
        if unknown:
            raise DriverError(f"unknown compile option(s) {', '.join(sorted(unknown))} "
                              f"(known: {', '.join(SCHEDULE_OPTIONS)})")
        return compile(self.model, machine if machine is not None else self.machine,
                       **(self.options | options))

    # --- the schedule ----------------------------------------------------------------------------
    @cached_property
    def placement(self):
        """The scheduler's Placement (segments + predicted timeline).

        The m100-schedule pass does not keep it, so it is recomputed here from the frontend's
        module with the same machine and options: the scheduler is deterministic per seed, and
        ``test_api`` checks that its makespan equals :attr:`predicted_cycles` of the program."""
        from m100.frontend.mlir_load import shared_context
        from m100.passes.graph.m100_graph import M100Graph
        from m100.passes.m100_pipeline import _already_graph
        from m100.passes.schedule.from_ir import from_module
        from m100.passes.schedule.placement import schedule

        module = self.result.source.clone()
        if not _already_graph(module):
            M100Graph().apply(shared_context(), module)
        irg = from_module(module, self.machine.cvu_max_stages, self.machine.mem_align,
                          self.machine.tcu_post_stages)
        o = self.options
        return schedule(irg.graph, self.machine, tpbs=o["tpbs"], clusters=o["clusters"],
                        strategy=o["strategy"], seed=o["seed"])

    def schedule_report(self):
        """One row per op: segment, kind, unit, TPBs, split, bands, tile, HBSM bytes, predicted
        start/end/busy cycles, MACs (the table of ``m100-schedule{report}``)."""
        from m100.passes.schedule.report import op_rows
        return _df(op_rows(self.placement))

    def schedule_text(self) -> str:
        """The schedule report as text (with the critical path and the predicted TCU util)."""
        from m100.passes.schedule.report import format_report
        return format_report(self.placement)

    def tasks(self):
        """The scheduler's predicted tasks: one row per DMA / compute / copy task with its TPB,
        unit, op, tensor, bytes, MACs, dependencies and predicted start/end cycles."""
        import dataclasses
        cols = ["id", "kind", "unit", "tpb", "op", "tensor", "segment", "band", "col", "nbytes",
                "macs", "cycles", "start", "end", "src", "dst", "engine", "deps"]
        rows = []
        for t in self.placement.timeline.tasks:
            row = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
            row["unit"] = getattr(row["unit"], "value", row["unit"])
            rows.append(row)
        extra = [c for c in (rows[0] if rows else {}) if c not in cols]
        return _df(rows, cols + extra)

    def plan(self):
        """The schedule's plan (``passes/schedule/plan.py``) as a DataFrame: one row per task,
        i.e. per instruction the emitter emits (:meth:`tasks`)."""
        return self.tasks()

    def pieces(self):
        """The plan's pieces: one instruction tile of one op on one TPB (rows, columns, its
        task ids), per segment in wave order."""
        return _df([p.to_dict() for seg in self.placement.timeline.pieces for p in seg])

    def counters(self):
        """Sync counters used per TPB (from the sync certificate)."""
        used = self.result.counters_per_tpb
        return _df([dict(tpb=t, counters=n, of=self.machine.su_counters)
                    for t, n in sorted(used.items())])

    def predicted_figure(self, ax=None, title: str | None = None):
        """A Gantt chart of the scheduler's predicted tasks (one row per TPB unit / DMA engine)."""
        import matplotlib.pyplot as plt
        from m100.sim.plot import COLORS

        fig, ax = _axes(ax)
        colors = {"tcu": COLORS["tcu.matmul"], "cvu": COLORS["cvu.pipeline"],
                  "dtdu": COLORS["dtdu.copy"], "csu": COLORS["csu.call"], "dma": COLORS["ccb.dma"]}
        rows: dict[str, list] = {}
        for t in self.placement.timeline.tasks:
            key = f"DMA{t.engine}" if t.unit == "dma" else f"TPB{t.tpb}.{t.unit.upper()}"
            rows.setdefault(key, []).append(t)
        order = sorted(rows, key=lambda k: (k.startswith("DMA"), k))
        for y, key in enumerate(order):
            ts = rows[key]
            ax.broken_barh([(t.start, max(t.end - t.start, 1e-9)) for t in ts], (y - 0.4, 0.8),
                           facecolors=[colors.get(t.unit, "k") for t in ts], edgecolor="white",
                           linewidth=0.3)
        ax.set_yticks(range(len(order)), order)
        ax.invert_yaxis()
        ax.set_xlabel("cycles")
        ax.set_title(title if title is not None else
                     f"predicted ({self.options['strategy']}): "
                     f"{self.placement.timeline.makespan:.0f} cycles")
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
        ax.legend(handles, list(colors), loc="upper right", fontsize=7)
        return fig

    # --- run -------------------------------------------------------------------------------------
    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random inputs keyed by the model's input names."""
        return driver.random_inputs(self.program, seed)

    def run(self, inputs: dict[str, np.ndarray] | None = None, *, mode: str = "full",
            seed: int = 0, random_latency: int | None = None, check_races: bool = True) -> Run:
        """Run the program on the interpreter: ``mode`` = full (data + timing), functional (data
        only) or timing (cycles only, no data). Inputs default to :meth:`inputs` (``seed``)."""
        if mode not in MODES:
            raise DriverError(f"unknown interpreter mode '{mode}' (modes: {', '.join(MODES)})")
        if inputs is None:
            inputs = self.inputs(seed) if mode != "timing" else {}
        t0 = time.perf_counter()
        res = driver.run(self.program, inputs, random_latency=random_latency, mode=mode,
                         check_races=check_races and mode != "functional", machine=self.machine)
        return Run(res, self.machine, time.perf_counter() - t0)

    def check(self, *, seed: int = 0, rtol: float = 1e-3, atol: float = 1e-4,
              random_latency: int | None = None) -> Check:
        """Run with seeded random inputs and compare with onnxruntime (the reference executor for
        MLIR input); also verifies the sync certificate (``m100 check``)."""
        ck = driver.check_compiled(self.result, seed=seed, rtol=rtol, atol=atol,
                                   random_latency=random_latency)
        return Check(ck, Run(ck.result, self.machine, 0.0))


def _axes(ax):
    import matplotlib.pyplot as plt
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 4))
        return fig, ax
    return ax.figure, ax


# --- interpreter results ---------------------------------------------------------------------------
@dataclass
class Run:
    """One interpreter run: outputs, statistics, reports (races, deadlocks, faults), timeline."""

    result: Any  # m100.sim.simulator.Result
    machine: Machine
    sim_s: float = 0.0

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        return self.result.outputs

    @property
    def stats(self) -> dict:
        return self.result.stats

    @property
    def reports(self) -> list:
        return self.result.reports

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def cycles(self) -> float:
        return float(self.stats["total_cycles"])

    @property
    def latency_us(self) -> float:
        return float(self.stats["total_us"])

    @property
    def tcus_used(self) -> int:
        return sum(1 for u in self.stats["units"].values() if "macs" in u and u["instructions"])

    @property
    def tcu_util_used(self) -> float:
        """TCU MAC utilization in % of the peak (at the instructions' dtype) of the TCUs the
        program uses, over the whole run (``m100 check``'s figure)."""
        return float(self.stats["tcu_mac_util_pct"])

    @property
    def tcu_util(self) -> float:
        """TCU MAC utilization in % of the peak of ALL the machine's TCUs over the run (the
        figure to compare machines and schedules by)."""
        return self.tcu_util_used * self.tcus_used / self.machine.num_tpbs

    @property
    def ddr_bytes(self) -> float:
        return float(self.stats["bytes"].get("ddr", 0.0))

    def metrics(self) -> dict[str, float]:
        return dict(cycles=self.cycles, latency_us=self.latency_us, tcu_util=self.tcu_util,
                    tcu_util_used=self.tcu_util_used, ddr_bytes=self.ddr_bytes)

    def units(self):
        """One row per unit: busy cycles and %, instructions, MACs and MAC utilization, stalls."""
        rows = []
        for name, u in self.stats["units"].items():
            row = dict(unit=name, busy_cycles=u["busy_cycles"], busy_pct=u["busy_pct"],
                       instructions=u["instructions"], macs=u.get("macs", 0),
                       mac_util_pct=u.get("mac_util_pct", 0.0))
            for cause, cyc in u["stall_cycles"].items():
                row[f"stall_{cause}"] = float(cyc)
            rows.append(row)
        df = _df(rows)
        stall = [c for c in df.columns if c.startswith("stall_")]
        df[stall] = df[stall].fillna(0.0)
        return df

    def timeline(self):
        """One row per executed block: unit, TPB (-1 for a DMA engine), instruction index,
        mnemonic, block, dispatch/start/end cycles."""
        rows = []
        for r in self.result.records:
            u, idx = r.inst.executor
            name = f"DMA{idx}" if u.name == "DMA" else f"TPB{idx}.{u.name}"
            for b, (s, e) in enumerate(r.blocks):
                rows.append(dict(unit=name, kind=u.name, tpb=-1 if u.name == "DMA" else idx,
                                 inst=r.index, mnemonic=r.inst.MNEMONIC, block=b,
                                 dispatch=r.dispatch, start=s, end=e))
        return _df(rows, ["unit", "kind", "tpb", "inst", "mnemonic", "block", "dispatch",
                          "start", "end"])

    def figure(self, ax=None, title: str | None = None, legend: bool = True):
        """The interpreter timeline (one row per unit, one bar per block) as a Figure."""
        from m100.sim.plot import draw_timeline
        fig, ax = _axes(ax)
        draw_timeline(self.result, ax, title=title, legend=legend)
        return fig


@dataclass
class Check:
    """A run compared with the oracle (``Compiled.check``)."""

    result: driver.CheckResult
    run: Run
    errors: Any = field(init=False)  # DataFrame: output, max_abs, max_rel, ok

    def __post_init__(self):
        self.errors = _df([dict(output=e.name, max_abs=e.max_abs, max_rel=e.max_rel, ok=e.ok)
                           for e in self.result.errors],
                          ["output", "max_abs", "max_rel", "ok"])

    @property
    def passed(self) -> bool:
        return self.result.passed

    @property
    def problems(self) -> list[str]:
        return self.result.problems

    @property
    def oracle(self) -> str:
        return self.result.oracle

    def summary(self) -> str:
        return self.result.summary()


def compare(compiled: Compiled, seed: int = 0, **kw) -> Check:
    """``compiled.check(...)``: the interpreter vs onnxruntime on seeded random inputs."""
    return compiled.check(seed=seed, **kw)


__all__ = ["Check", "Compiled", "MODES", "Model", "Run", "SCHEDULE_OPTIONS", "compare", "compile",
           "load", "machine"]
