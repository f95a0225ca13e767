"""The end-to-end flow as a library: compile a model, run a program, check it against an oracle.

Used by ``m100 compile|run|check`` (``tools/m100_cli.py``), ``tools/demo.py``, ``test/e2e`` and
``bench/e2e_bench.py``::

    from m100.tools import driver
    cr = driver.compile("model.onnx", machine="tiny", tpbs=2, sync_mode="dataflow")
    cr.program.save("prog.m100")                     # + driver.write_certificate(...)
    res = driver.run(cr.program, {"x": x})           # the interpreter's Result, outputs by name
    ck = driver.check("model.onnx", machine="tiny")  # compile + run + oracle; ck.passed

Names: the compiled program's symbols are the model's names (the ONNX graph's inputs and outputs,
carried through the IR as ``{m100.name = ...}`` on the function's arguments/results), or
``arg<i>`` / ``result<i>`` for MLIR input without them. ``compile`` also records the model's names
in the program metadata (``m100.inputs`` / ``m100.outputs``, comma separated), and ``run``
accepts and returns either.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from m100.mempolicy import small_pages
from m100.sim.certificate import SYNC_MODES
# the program's inputs/outputs and the comparison with an oracle live in their own modules; the
# driver is the flow's one entry point and re-exports them (``__all__``)
from m100.tools.compare import (F16_TOL, LSB_PASS_PCT, OutputError, compare, oracle_outputs,
                                output_lsb)
from m100.tools.program_io import (META_INPUTS, META_OUTPUTS, META_STRINGS, DriverError,
                                   as_program_input, input_specs, intern_strings, random_inputs,
                                   run, symbol_inputs, validate_inputs)


# --- compile ---------------------------------------------------------------------------------------
@dataclass
class CompileResult:
    program: Any  # m100.targets.m100.program.Program
    certificate: dict
    report: str
    timings: dict[str, float]
    module: Any = None  # the resolved ModuleOp
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    source: Any = None  # the frontend's module before the lowering (for the reference executor)
    model: Any = None  # the onnx ModelProto, for ONNX inputs
    # CPU seconds per stage (same keys as ``timings``); "frontend" includes the torch-mlir worker
    cpu_timings: dict[str, float] = field(default_factory=dict)
    machine: Any = None  # the Machine compiled for
    # the dataflow certificate (``sync_insert/dataflow.py``; checked by ``m100.sim.dataflow``)
    dataflow: dict | None = None

    @property
    def num_instructions(self) -> int:
        return sum(len(v) for v in self.program.streams.values())

    @property
    def counters_per_tpb(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in self.certificate.get("counters_used", {}).items()}


def _onnx_names(model) -> tuple[list[str], list[str]]:
    inits = {i.name for i in model.graph.initializer}
    ins = [i.name for i in model.graph.input if i.name not in inits]
    return ins, [o.name for o in model.graph.output]


def refuse_float64(model, name: str) -> None:
    """A :class:`DriverError` naming the op when a graph input or output of ``model`` is float64:
    the M100 has no f64 arithmetic, and the scheduler would refuse it later without naming an ONNX
    op (``element type f64 is not supported``). Checked before the import (torch-mlir) runs.

    Left to the frontend (``frontend/onnx_rewrite_narrow_int.f64_boundary``; ``CastLike`` is a
    ``Cast`` to its ``like``'s type there): an input read only by Casts/CastLikes to one of
    float32/float16 or only as a CastLike's ``like`` (its type), and an output made by a
    Cast/CastLike."""
    from onnx import TensorProto as T

    g = model.graph
    inits = {i.name for i in g.initializer}
    io = [(v.name, "input") for v in g.input if v.name not in inits] + \
        [(v.name, "output") for v in g.output]
    elem = {v.name: v.type.tensor_type.elem_type
            for v in list(g.input) + list(g.output) + list(g.value_info)
            if v.type.HasField("tensor_type")}
    elem.update({i.name: i.data_type for i in g.initializer})
    f64 = {v for v, _ in io if elem.get(v) == T.DOUBLE}

    def cast_to(n):
        """The element type a Cast / CastLike converts to (None: another op or unknown)."""
        if n.domain not in ("", "ai.onnx"):
            return None
        if n.op_type == "Cast":
            return next((a.i for a in n.attribute if a.name == "to"), None)
        if n.op_type == "CastLike" and len(n.input) > 1:
            return elem.get(n.input[1])
        return None

    for v, role in io:
        if v not in f64:
            continue
        if role == "input":
            readers = [n for n in g.node if v in n.input]
            # a CastLike's ``like`` is read for its type only
            casts = [n for n in readers if not (n.op_type == "CastLike" and v not in n.input[:1])]
            tos = {cast_to(n) for n in casts}
            if readers and (not casts or (len(tos) == 1 and tos <= {T.FLOAT, T.FLOAT16})):
                continue
        elif any(v in n.output and cast_to(n) == T.DOUBLE for n in g.node):
            continue
        node = next((n for n in g.node if (v in n.input if role == "input" else v in n.output)),
                    None)
        what = f"{node.op_type} '{node.name or node.output[0]}'" if node is not None else "the graph"
        raise DriverError(f"{name}: {what}: float64 graph {role} '{v}' is not supported (the M100 "
                          "has no float64 arithmetic; convert the model to float32)")


def load_model(src, ctx=None):
    """(module, onnx ModelProto or None) from a path (.onnx / .mlir), a ModelProto or a ModuleOp."""
    from xdsl.dialects.builtin import ModuleOp

    from m100.frontend import load_mlir, load_onnx
    from m100.frontend.mlir_load import shared_context

    ctx = ctx or shared_context()
    if isinstance(src, ModuleOp):
        return src.clone(), None
    if hasattr(src, "graph"):  # onnx.ModelProto
        refuse_float64(src, "<onnx model>")
        return load_onnx(src, ctx), src
    path = os.fspath(src)
    if not os.path.exists(path):
        raise DriverError(f"{path}: no such file")
    if path.lower().endswith(".onnx"):
        try:
            from m100.frontend.shape_only import load_onnx_lazy
            model = load_onnx_lazy(path)
        except Exception as e:  # noqa: BLE001 - onnx raises various errors for garbage files
            raise DriverError(f"{path}: not a readable ONNX model ({type(e).__name__})") from None
        if not model.HasField("graph") or not model.opset_import:
            raise DriverError(f"{path}: not an ONNX model (no graph or no opset; an empty file?)")
        refuse_float64(model, path)
        return load_onnx(model, ctx), model
    return load_mlir(path, ctx), None


def _report(cr: CompileResult, machine) -> str:
    from m100.targets.m100.isa import Unit

    prog = cr.program
    per_unit: dict[str, int] = {}
    tpbs: set[int] = set()
    for _, inst in prog.instructions():
        unit, idx = inst.executor
        per_unit[unit.name] = per_unit.get(unit.name, 0) + 1
        if unit is not Unit.DMA:
            tpbs.add(idx)
    seg_bytes = sum(len(s.data) for s in prog.segments)
    cpt = cr.counters_per_tpb
    lines = [f"machine {machine.name}, sync mode {cr.certificate.get('sync_mode')}, "
             f"{cr.num_instructions} instructions on {len(tpbs)} TPBs "
             f"({', '.join(f'{k} {v}' for k, v in sorted(per_unit.items()))})",
             f"data segments {len(prog.segments)} ({seg_bytes} B), symbols "
             + ", ".join(f"{s.name}:{s.role}{list(s.shape)}" for s in prog.symbols),
             f"counters used per TPB: max {max(cpt.values(), default=0)} of "
             f"{machine.su_counters}; TPB:counters "
             + " ".join(f"{t}:{n}" for t, n in sorted(cpt.items()) if n),
             f"sync edges {len(cr.certificate.get('edges', []))}, serialized "
             f"{len(cr.certificate.get('serialized', []))}",
             "compile time " + ", ".join(f"{k} {v:.2f}s" for k, v in cr.timings.items())]
    return "\n".join(lines)


# Young-generation thresholds while compiling (mypy's choice). CPython's default (700, 10, 10)
# makes ~21 full collections of a ResNet-18 compile's heap (millions of IR objects, hardly any of
# them cyclic garbage: ~20k collected): ~30 % of the compile's CPU. Outputs do not depend on the
# collector (nothing orders by id()); test_compile_gc_independent compiles with aggressive
# automatic collection and compares the bytes.
COMPILE_GC_THRESHOLDS = (200_000, 30, 30)
#: Collect by stage (:func:`compile_gc`): no automatic collection while a stage runs; at each stage's
#: end everything alive is frozen (:func:`_stage_end`). False: the
#: collector runs automatically with :data:`COMPILE_GC_THRESHOLDS` (the test's comparison).
COMPILE_GC_STAGED = True


def _stage_end() -> None:
    """The end of a compile stage under :func:`compile_gc`: freeze what the stage allocated and
    still holds, so no later collection of the compile scans it. No collection first: the stages
    leave little cyclic garbage (ResNet-50 224: ~15 objects after the frontend, ~6 900 after
    m100-graph, ~1 400 after the scheduler, none after the backend stages, of 55 k-670 k young
    objects each; ``test_stages_leave_little_cyclic_garbage``), while a young collection scans every
    object a stage keeps (after the scheduler ~0.4 CPU-s, after the backend stages ~0.15)."""
    gc.freeze()


@contextlib.contextmanager
def compile_gc():
    """Run the body (a compile) with the collector set up for it, restoring the caller's set-up.

    Yields the function to call at the end of each stage (or None). With
    :data:`COMPILE_GC_STAGED`: automatic collection is off, each stage but the last ends with
    ``gc.freeze()`` (:func:`_stage_end`: until session 26 a young collection first, which found
    ~115 k objects of cyclic garbage after the scheduler on ResNet-50 224 -- its closures' and
    the IR builder's cycles, broken since -- and scanned ~670 k kept ones), so no object of the
    compile is scanned by a collection during it. With the thresholds alone every long-lived
    object was scanned twice by the young collections and again by the full ones (ResNet-50 224: 28 collections, ~2 CPU-s;
    by stage: 5, ~0.7). At the end every object of the compile (frozen or young) goes to the
    oldest generation without a scan (``freeze`` then ``unfreeze``): a later full collection
    frees what became garbage. When the caller has frozen objects itself
    (``gc.get_freeze_count()``), only the thresholds are set (unfreezing would undo the
    caller's freeze)."""
    old = gc.get_threshold()
    was = gc.isenabled()
    staged = COMPILE_GC_STAGED and gc.get_freeze_count() == 0
    gc.set_threshold(*COMPILE_GC_THRESHOLDS)
    if staged:
        gc.disable()
        gc.freeze()  # the caller's objects: not the compile's to scan
    try:
        yield _stage_end if staged else None
    finally:
        if staged:
            gc.freeze()  # the young objects too: into the oldest generation unscanned
            gc.unfreeze()
            if was:
                gc.enable()
        gc.set_threshold(*old)


def compile(src, machine="m100", tpbs: int = 0, sync_mode: str = "dataflow", *,
            clusters: int = 0, strategy: str = "auto", seed: int = 0,
            verbose: bool = False, prefetch_shares: tuple[int, ...] = (),
            pack_largest_first: bool = False, tail_prefetch: bool = False) -> CompileResult:
    """Compile a model (path, ModelProto or ModuleOp) to a program + sync certificate.

    ``machine``: a preset name, a machine file, or a :class:`Machine` (``machine_ref``);
    ``prefetch_shares``: ``m100-pipeline``'s ``prefetch-shares`` (percents tried in order; empty =
    its default); ``pack_largest_first``: its ``pack-largest-first``; ``tail_prefetch``: its
    ``tail-prefetch``. numpy advises no huge pages while it runs (``m100.mempolicy``: the
    kernel's zeroing of 2 MB pages for the graph stage's new weight arrays cost ResNet-50's
    compile ~0.4 CPU-s of system time; the forked torch-mlir child inherits it)."""
    with compile_gc() as stage_end, small_pages():
        return _compile(src, machine, tpbs, sync_mode, clusters=clusters, strategy=strategy,
                        seed=seed, verbose=verbose, stage_end=stage_end,
                        prefetch_shares=prefetch_shares,
                        pack_largest_first=pack_largest_first, tail_prefetch=tail_prefetch)


def compile_least(srcs, machine="m100", tpbs: int = 0, sync_mode: str = "dataflow", *,
                  clusters: int = 0, strategy: str = "auto", seed: int = 0,
                  verbose: bool = False, prefetch_shares: tuple[int, ...] = (),
                  pack_largest_first: bool = False, tail_prefetch: bool = False
                  ) -> tuple[CompileResult, int, list[int]]:
    """Of models that compute the same thing (``srcs``), compile the one whose plan predicts the
    fewest cycles (the first on a tie): (its :class:`CompileResult`, its index, each one's
    predicted cycles). Options as :func:`compile`'s.

    Each model is lowered through hbsm-allocate only (``m100-pipeline``'s ``until``: the
    program's ``predicted_cycles`` is the plan of the share that packed, which no later stage
    changes); the stages after it run on the chosen one alone. The result is the program
    :func:`compile` gives that model (``m100 bench llm``'s W8A8 prefill layer: its two
    ``o_quant`` forms, issue 13's compile time; ``test_compile_least``). The models' searches
    share one table of isolated builds (``shared_costs.carried``): a
    later model answers the segments it shares with an earlier one from those builds, keyed by
    everything an isolated build reads -- the same course and plans as alone."""
    from m100.passes.schedule.shared_costs import carried
    with compile_gc() as stage_end, small_pages(), carried():
        opts = dict(clusters=clusters, strategy=strategy, seed=seed, verbose=verbose,
                    stage_end=stage_end, prefetch_shares=prefetch_shares,
                    pack_largest_first=pack_largest_first, tail_prefetch=tail_prefetch)
        best, preds = None, []
        for i, src in enumerate(srcs):
            lw = _lower(src, machine, tpbs, sync_mode, until=LEAST_UNTIL, **opts)
            prog = next(o for o in lw.module.walk() if o.name == "tpb.program")
            preds.append(int(prog.metadata_dict()["predicted_cycles"]))
            if best is None or preds[-1] < preds[best[0]]:
                best = (i, lw)
            del lw, prog  # a losing module is not kept past the next one's lowering
        assert best is not None, "compile_least: no model"
        return _finish(best[1], LEAST_UNTIL), best[0], preds


#: where :func:`compile_least` compares its models' plans (``m100-pipeline``'s ``until``)
LEAST_UNTIL = "hbsm-allocate"


@dataclass
class _Lowering:
    """A compile between :func:`_lower` and :func:`_finish` (``module``: the IR so far)."""
    module: Any
    model: Any
    source: Any
    pipeline: Any
    ctx: Any
    machine: Any
    timings: dict[str, float]
    cpu: dict[str, float]
    stage_end: Any
    certs: list[dict] = field(default_factory=list)
    dfs: list[dict] = field(default_factory=list)


def _compile(src, machine, tpbs, sync_mode, *, clusters, strategy, seed,
             verbose, stage_end=None, prefetch_shares=(),
             pack_largest_first=False, tail_prefetch=False) -> CompileResult:
    return _finish(_lower(src, machine, tpbs, sync_mode, clusters=clusters, strategy=strategy,
                          seed=seed, verbose=verbose, stage_end=stage_end,
                          prefetch_shares=prefetch_shares,
                          pack_largest_first=pack_largest_first, tail_prefetch=tail_prefetch))


def _lower(src, machine, tpbs, sync_mode, *, clusters, strategy, seed,
           verbose, stage_end=None, prefetch_shares=(),
           pack_largest_first=False, tail_prefetch=False, until: str = "") -> _Lowering:
    """The frontend and ``m100-pipeline`` (up to and including the stage ``until``; "": all)."""
    from m100.frontend.mlir_load import shared_context
    from m100.passes.m100_pipeline import M100Pipeline
    from m100.targets.m100.machine import get_machine, machine_ref

    if sync_mode not in SYNC_MODES:
        raise DriverError(f"unknown sync mode '{sync_mode}' (modes: {', '.join(SYNC_MODES)})")
    machine = machine_ref(machine)
    m = get_machine(machine)
    ctx = shared_context()
    from m100.frontend.onnx_import import _Worker

    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}
    t0, c0, w0 = time.perf_counter(), time.process_time(), _Worker.total_cpu_s
    module, model = load_model(src, ctx)
    if stage_end is not None:
        stage_end()
    timings["frontend"] = time.perf_counter() - t0
    cpu["frontend"] = time.process_time() - c0 + _Worker.total_cpu_s - w0
    source = module.clone()
    # verify once at the end (each verification of a ResNet-18 program is ~1.3 CPU-s);
    # ``m100-opt -p m100-pipeline`` verifies after every stage and names the one that broke it
    pipe = M100Pipeline(machine=machine, tpbs=tpbs, clusters=clusters, strategy=strategy,
                        sync_mode=sync_mode, seed=seed, report=verbose,
                        prefetch_shares=",".join(str(v) for v in prefetch_shares),
                        pack_largest_first=pack_largest_first, tail_prefetch=tail_prefetch,
                        verify="end")
    lw = _Lowering(module, model, source, pipe, ctx, m, timings, cpu, stage_end)
    pipe.run(ctx, module, timings, cpu, lw.certs, stage_end=stage_end, dataflows=lw.dfs,
             until=until)
    return lw


def _finish(lw: _Lowering, after: str = "") -> CompileResult:
    """The stages of ``m100-pipeline`` after ``after`` ("": none left), then the program."""
    from m100.dialects.translate import module_to_program

    timings, cpu, module, model, m = lw.timings, lw.cpu, lw.module, lw.model, lw.machine
    if after:
        lw.pipeline.run(lw.ctx, module, timings, cpu, lw.certs, stage_end=lw.stage_end,
                        dataflows=lw.dfs, after=after)
    cert, dfs = lw.certs[0], lw.dfs
    t0, c0 = time.perf_counter(), time.process_time()
    program = module_to_program(module)
    timings["emit"] = time.perf_counter() - t0
    cpu["emit"] = time.process_time() - c0
    ins = [s.name for s in program.symbols if s.role == "input"]
    outs = [s.name for s in program.symbols if s.role == "output"]
    in_names, out_names = list(ins), list(outs)
    if model is not None:
        oi, oo = _onnx_names(model)
        if len(oi) == len(ins) and len(oo) == len(outs):
            in_names, out_names = oi, oo
    program.metadata[META_INPUTS] = ",".join(in_names)
    program.metadata[META_OUTPUTS] = ",".join(out_names)
    strings = [v.name for v in (model.graph.input if model is not None else ())
               if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == 8]  # STRING
    if strings:
        program.metadata[META_STRINGS] = ",".join(strings)
    if model is not None and any(s.role == "weight" for s in program.symbols):
        # compile by shape: which weights the caller supplies, and how each is dequantized
        from m100.frontend.shape_only import WEIGHTS_KEY, lift_shape_only_weights, weights_metadata
        lifted = type(model)()
        lifted.CopyFrom(model)  # shape-only: no weight bytes to copy
        lift_shape_only_weights(lifted)
        program.metadata[WEIGHTS_KEY] = weights_metadata(lifted)
    cr = CompileResult(program, cert, "", timings, module, in_names, out_names, lw.source, model,
                       cpu, m, dfs[0] if dfs else None)
    cr.report = _report(cr, m)
    return cr


def profile_report(cr: CompileResult, stats, top: int = 25) -> str:
    """``m100 compile --profile``: wall and CPU seconds per stage, then the ``top`` functions of
    the ``cProfile`` run (``stats``: a ``pstats.Stats``) by own time and by cumulative time."""
    import io

    lines = [f"{'stage':<18} {'wall s':>8} {'CPU s':>8}"]
    for k, v in cr.timings.items():
        lines.append(f"{k:<18} {v:8.2f} {cr.cpu_timings.get(k, float('nan')):8.2f}")
    lines.append(f"{'total':<18} {sum(cr.timings.values()):8.2f} "
                 f"{sum(cr.cpu_timings.values()):8.2f}")
    for key, title in (("tottime", "own time"), ("cumulative", "cumulative time")):
        buf = io.StringIO()
        stats.stream = buf
        stats.sort_stats(key).print_stats(top)
        body = buf.getvalue()
        start = body.find("   ncalls")
        lines += ["", f"top {top} functions by {title} (cProfile, this process):",
                  body[start:].rstrip() if start >= 0 else body.rstrip()]
    return "\n".join(lines)


def write_certificate(cert: dict, path) -> None:
    from m100.passes.backend.sync_insert.certificate import dumps
    Path(path).write_text(dumps(cert) + "\n")


def certificate_path(program_path) -> Path:
    return Path(f"{os.fspath(program_path)}.cert.json")


def dataflow_path(program_path) -> Path:
    return Path(f"{os.fspath(program_path)}.dataflow.json")


def check_dataflow(cr: CompileResult) -> list[str]:
    """The problems of ``cr``'s dataflow certificate (``m100.sim.dataflow``: every read reads
    the tensor the compiler meant), each ``dataflow: ...``; none without a certificate."""
    if cr.dataflow is None:
        return []
    from m100.sim.dataflow import verify
    return [f"dataflow: {p}" for p in verify(cr.program, cr.dataflow, machine=cr.machine)]


# --- check -----------------------------------------------------------------------------------------
@dataclass
class CheckResult:
    compile: CompileResult
    result: Any  # sim Result
    errors: list[OutputError]
    oracle: str
    problems: list[str]  # race/deadlock/fault reports, shape mismatches, certificate problems

    @property
    def passed(self) -> bool:
        return not self.problems and all(e.ok for e in self.errors) and bool(self.errors)

    @property
    def cycles(self) -> float:
        return self.result.total_cycles

    @property
    def tcu_util(self) -> float:
        """TCU MAC utilization (% of the peak of the TCUs the program uses, over the run)."""
        st = self.result.stats
        used = [u for u in st["units"].values() if "macs" in u and u["instructions"]]
        if not used or not st["total_cycles"]:
            return 0.0
        return sum(u["mac_util_pct"] for u in used) / len(used)

    @property
    def tcus_used(self) -> int:
        return sum(1 for u in self.result.stats["units"].values() if "macs" in u and u["instructions"])

    @property
    def tcu_util_machine(self) -> float:
        """TCU MAC utilization over every TCU of the machine (%)."""
        n = self.result.machine.num_tpbs if self.result.machine is not None else 0
        return self.tcu_util * self.tcus_used / n if n else 0.0

    def summary(self) -> str:
        lines = [f"{e.describe()}{'' if e.ok else '  (out of tolerance)'}" for e in self.errors]
        lines += [f"problem: {p}" for p in self.problems[:10]]
        if len(self.problems) > 10:
            lines.append(f"... {len(self.problems) - 10} more problems")
        st = self.result.stats
        n = self.result.machine.num_tpbs if self.result.machine is not None else 0
        lines.append(f"cycles {st['total_cycles']:.0f} ({st['total_us']:.2f} us), TCU utilization "
                     f"{self.tcu_util:.1f} % of the {self.tcus_used} TCUs used "
                     f"({self.tcu_util_machine:.2f} % of all {n}), oracle {self.oracle}")
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)



def _check_options(rtol: float, atol: float, random_latency: int | None) -> None:
    for what, tol in (("rtol", rtol), ("atol", atol)):
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) \
                or tol < 0:
            raise DriverError(f"{what} must be a finite number >= 0, not {tol!r}")
    if random_latency is not None and random_latency < 0:
        raise DriverError(f"the random-latency seed must be an integer >= 0, not {random_latency}")


def check(src, machine: str = "m100", tpbs: int = 0, sync_mode: str = "dataflow", *,
          seed: int = 0, clusters: int = 0, strategy: str = "auto", rtol: float = 1e-3,
          atol: float = 1e-4, random_latency: int | None = None, trace: bool = False,
          verbose: bool = False, check_certificate: bool = True,
          inputs: dict[str, np.ndarray] | None = None, inputs_source: str = "inputs") -> CheckResult:
    """Compile ``src``, run it on the interpreter (race/deadlock checks on) with ``inputs`` (by
    the model's input names, validated by :func:`validate_inputs`) or seeded random inputs of the
    declared element types, run the oracle on the same inputs and compare."""
    _check_options(rtol, atol, random_latency)  # before the (long) compile
    cr = compile(src, machine, tpbs, sync_mode, clusters=clusters, strategy=strategy, seed=seed,
                 verbose=verbose)
    return check_compiled(cr, seed=seed, rtol=rtol, atol=atol, random_latency=random_latency,
                          trace=trace, check_certificate=check_certificate, inputs=inputs,
                          inputs_source=inputs_source)


def check_compiled(cr: CompileResult, *, seed: int = 0, rtol: float = 1e-3, atol: float = 1e-4,
                   random_latency: int | None = None, trace: bool = False,
                   check_certificate: bool = True, inputs: dict[str, np.ndarray] | None = None,
                   inputs_source: str = "inputs") -> CheckResult:
    """The run + oracle + compare half of :func:`check`, for an already compiled model."""
    _check_options(rtol, atol, random_latency)
    shape_only = [s.name for s in cr.program.symbols if s.role == "weight"]
    if shape_only:
        raise DriverError(f"the model was compiled by shape: {len(shape_only)} weight(s) have no "
                          f"data (e.g. '{shape_only[0]}'), so there is nothing to check against; "
                          "give the external data file, or run it with m100-sim --timing-only")
    if inputs is None:
        inputs = random_inputs(cr.program, seed, cr.model)
    else:
        inputs = validate_inputs(cr.program, inputs, cr.model, inputs_source)
    ordered = [inputs[n] for n in cr.input_names]
    want, oracle = oracle_outputs(cr.model if cr.model is not None else cr.source, ordered)
    res = run(cr.program, inputs, random_latency=random_latency, trace=trace, machine=cr.machine)
    problems = [str(r) for r in res.reports]
    if check_certificate:
        from m100.sim.certificate import verify
        problems += [f"certificate: {p}"
                     for p in verify(cr.program, cr.certificate, machine=cr.machine)]
        problems += check_dataflow(cr)
    errors = []
    if not any(r.kind in ("deadlock", "fault") for r in res.reports):
        if len(want) != len(cr.output_names):
            problems.append(f"the oracle gives {len(want)} outputs, the program "
                            f"{len(cr.output_names)}")
        for name, w in zip(cr.output_names, want):
            if name not in res.outputs:
                problems.append(f"output '{name}' missing")
                continue
            f16 = np.asarray(w).dtype == np.float16
            errors.append(compare(name, res.outputs[name], w, max(rtol, F16_TOL) if f16 else rtol,
                                  max(atol, F16_TOL) if f16 else atol,
                                  output_lsb(cr.model, name)))
    return CheckResult(cr, res, errors, oracle, problems)


__all__ = ["CheckResult", "CompileResult", "DriverError", "F16_TOL", "LSB_PASS_PCT", "META_INPUTS",
           "META_OUTPUTS", "META_STRINGS", "OutputError", "SYNC_MODES", "as_program_input", "check",
           "check_compiled", "compare", "compile", "compile_gc", "compile_least", "input_specs",
           "intern_strings",
           "load_model", "oracle_outputs", "output_lsb", "profile_report", "random_inputs", "run",
           "symbol_inputs", "validate_inputs", "write_certificate", "certificate_path",
           "check_dataflow", "dataflow_path"]
