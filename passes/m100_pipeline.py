"""The ``m100-pipeline`` pass: the whole lowering, frontend output -> resolved ``tpb`` IR."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException, VerifyException

from m100.dialects.tpb_program import programs
from m100.errors import M100Error
from m100.sim.certificate import SYNC_MODES

VERIFY_MODES = ("each", "end")
#: where :meth:`M100Pipeline.run` may stop (``until``) and go on (``after``): not inside the
#: m100-schedule / hbsm-allocate pair, whose share retries schedule again
SPLIT_STAGES = ("hbsm-allocate", "twu-materialize")
#: ``m100-schedule``'s prefetch-share (percent) tried in order until hbsm-allocate packs
PREFETCH_SHARES = (90, 75)


class PipelineError(M100Error):
    """A stage of ``m100-pipeline`` left IR that does not verify (a compiler bug, named by stage)."""


def _already_graph(op: ModuleOp) -> bool:
    """True when ``m100-graph`` already ran (every linalg op carries ``m100.unit``; the
    ``linalg.yield`` terminators inside linalg bodies never do, so nested ops are not counted --
    counting them re-ran the graph passes over an annotated module, issue 10)."""
    linalg = [o for o in op.walk() if o.name.startswith("linalg.")
              and not (o.parent_op() is not None and o.parent_op().name.startswith("linalg."))]
    return bool(linalg) and all("m100.unit" in o.attributes for o in linalg)


def _restore(op: ModuleOp, copy: ModuleOp) -> None:
    """Replace the contents of ``op`` by those of ``copy`` (a clone of ``op`` taken earlier)."""
    block = op.body.blocks[0]
    for o in list(block.ops):
        o.detach()
        o.erase(safe_erase=False)
    for o in list(copy.body.blocks[0].ops):
        o.detach()
        block.add_op(o)


def _has_program(op: ModuleOp) -> bool:
    return any(o.name == "tpb.program" for o in op.walk())


@dataclass(frozen=True)
class M100Pipeline(ModulePass):
    """Run the whole m100 lowering: m100-graph -> m100-schedule -> hbsm-allocate -> twu-materialize
    -> sync-insert, verifying the module after every stage, and mark the program ``resolved``.

    What: the named pipeline of issue 6 (``m100-opt -p m100-pipeline{machine=tiny tpbs=2}``). The
    graph stage is skipped when the input was already optimized (every linalg op has ``m100.unit``);
    the module is verified after each stage and a failure names the stage that broke it.
    Why: one entry point for the drivers (``m100 compile``/``check``, ``tools/driver.py``) and for
    lit tests, so every tool runs the same lowering with the same options.
    Pre: one ``func.func`` of linalg on tensors (frontend output, ``m100.frontend.load``).
    Post: one ``tpb.program`` at level ``resolved`` (every operand a ``#twu.walk``, every op a
    ``sync`` attribute): ``m100-translate`` / ``module_to_program`` turn it into a program file.
    Options: ``machine`` (preset or machine file, default m100), ``tpbs`` / ``clusters`` (limit
    the TPBs used, 0 = all), ``strategy`` = auto | data-parallel | pipeline | single,
    ``sync-mode`` = dataflow | barrier-all, ``seed`` (the scheduler's search seed),
    ``certificate`` (write the sync certificate JSON here), ``report`` (schedule and sync
    reports to stderr), ``verify`` = each (after every stage, the default: a failure names the
    stage) | end (once, after the last stage: the drivers' choice, each verification of a
    ResNet-18 program costs ~1.3 CPU-s; a failure is still an error, naming no stage).
    HBSM share: ``m100-schedule`` runs with ``prefetch-share`` = each of :data:`PREFETCH_SHARES`
    in turn until ``hbsm-allocate{strict}`` packs its program keeping apart the buffers the plan
    runs at the same time (weights prefetched during earlier segments fill more of the HBSM with
    a larger share, so the CCB DMA engines start on the late layers' weights sooner -- ResNet-18
    224 -- but the free space can end up too fragmented to pack as planned -- ResNet-50 224 at
    90 %: the loads then wait for the pieces whose bytes they take). The last share is allocated
    as before (not strict). The module after ``m100-graph`` is kept (a clone) for the retries; a
    retry's search reuses the isolated segment builds of the first (``shared_costs.carried``:
    they do not depend on the share; same program as a search from scratch).
    ``prefetch-shares`` (comma-separated percents, e.g. ``100,90,75``; empty = the default
    :data:`PREFETCH_SHARES`) replaces that list: ``m100 bench llm`` schedules a W8A8 prefill
    layer from 100 % (docs/llm-log.md, session 21), which ResNet-50 does not pack (a third schedule).
    ``pack-largest-first``: ``hbsm-allocate{largest-first}`` (a third strict packing order; the
    W8A8 prefill layer of ``m100 bench llm``, docs/llm-log.md session 22). ``tail-prefetch``:
    ``m100-schedule{tail-prefetch}`` (that layer's first weight chunks in the last K step of the
    GEMM before, docs/llm-log.md session 23).
    """

    name = "m100-pipeline"

    machine: str = "m100"
    tpbs: int = 0
    clusters: int = 0
    strategy: str = "auto"
    sync_mode: str = "dataflow"
    seed: int = 0
    certificate: str = ""
    report: bool = False
    verify: str = "each"
    prefetch_shares: str = ""
    pack_largest_first: bool = False
    tail_prefetch: bool = False

    def shares(self) -> list[int]:
        """The prefetch shares (percent) tried in order: ``prefetch-shares`` or the default."""
        if not self.prefetch_shares:
            return list(PREFETCH_SHARES)
        try:
            out = [int(v) for v in self.prefetch_shares.split(",")]
        except ValueError:
            out = []
        if not out or not all(1 <= v <= 100 for v in out):
            raise PipelineError(f"m100-pipeline: prefetch-shares is a comma-separated list of "
                                f"percents 1-100, not '{self.prefetch_shares}'")
        return out

    def stages(self) -> list[ModulePass]:
        from m100.passes.backend.hbsm_allocate import HbsmAllocate
        from m100.passes.backend.sync_insert.sync_insert import SyncInsert
        from m100.passes.backend.twu_materialize import TwuMaterialize
        from m100.passes.graph.m100_graph import M100Graph
        from m100.passes.schedule.m100_schedule import M100Schedule

        return [M100Graph(),
                M100Schedule(machine=self.machine, tpbs=self.tpbs, clusters=self.clusters,
                             strategy=self.strategy, seed=self.seed, report=self.report,
                             tail_prefetch=self.tail_prefetch),
                HbsmAllocate(report=self.report, largest_first=self.pack_largest_first),
                TwuMaterialize(),
                SyncInsert(sync_mode=self.sync_mode, certificate=self.certificate,
                           report=self.report)]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(ctx, op)

    def run(self, ctx: Context, op: ModuleOp, timings: dict[str, float] | None = None,
            cpu_timings: dict[str, float] | None = None,
            certificates: list[dict] | None = None,
            stage_end: Callable[[], None] | None = None,
            dataflows: list[dict] | None = None, until: str = "", after: str = "") -> None:
        """:meth:`apply`, recording the wall seconds of each stage in ``timings``, its CPU
        seconds (this process) in ``cpu_timings`` and appending the sync certificate of each
        program to ``certificates`` (in memory, no file) when given; ``stage_end`` is called at
        the end of each stage but the last, inside its timings (the driver's per-stage garbage
        collection, ``driver.compile_gc``); ``dataflows``: the dataflow certificate of each
        program is appended (``sync_insert/dataflow.py``).

        ``until`` (a stage name): stop after that stage (no final verification, the program
        stays at its level); ``after``: ``op`` is the module a run with ``until=after`` left,
        run the stages after it. The two halves are the same lowering as one run (the share
        retries happen inside hbsm-allocate's stage): ``m100 bench llm`` schedules and packs
        each form of the W8A8 prefill layer, then lowers only the one with the shorter plan
        (``driver.compile_least``)."""
        for opt, v in (("until", until), ("after", after)):
            if v and v not in SPLIT_STAGES:
                raise PipelineError(f"m100-pipeline: {opt} is one of {', '.join(SPLIT_STAGES)} "
                                    f"(m100-schedule's share retries end in hbsm-allocate), "
                                    f"not '{v}'")
        if self.sync_mode not in SYNC_MODES:
            raise PipelineError(f"m100-pipeline: unknown sync-mode '{self.sync_mode}' "
                                f"(known: {', '.join(SYNC_MODES)})")
        if self.verify not in VERIFY_MODES:
            raise PipelineError(f"m100-pipeline: unknown verify '{self.verify}' "
                                f"(known: {', '.join(VERIFY_MODES)})")
        self.shares()  # a bad prefetch-shares is one error before any stage runs
        if _has_program(op) != bool(after):
            raise PipelineError("m100-pipeline: the module already holds a tpb.program; the "
                                "pipeline starts from linalg on tensors (frontend output)"
                                if not after else
                                f"m100-pipeline: after='{after}' continues a module that holds "
                                f"a tpb.program (a run with until='{after}'); this one has none")
        from m100.passes.schedule.shared_costs import carried
        with carried():  # a retry's search answers its candidates from the first one's builds
            self._stages(ctx, op, timings, cpu_timings, certificates, stage_end, dataflows,
                         until, after)

    def _stages(self, ctx: Context, op: ModuleOp, timings: dict[str, float] | None,
                cpu_timings: dict[str, float] | None, certificates: list[dict] | None,
                stage_end: Callable[[], None] | None, dataflows: list[dict] | None = None,
                until: str = "", after: str = "") -> None:
        from dataclasses import replace

        from m100.passes.backend.hbsm_pack import HbsmOverflow
        shares = self.shares()
        saved = None
        stages = self.stages()
        last = stages[-1].name
        names = [s.name for s in stages]
        if after:
            stages = stages[names.index(after) + 1:]
        if until:
            stages = stages[:[s.name for s in stages].index(until) + 1]
        for stage in stages:
            if stage.name == "m100-graph" and _already_graph(op):
                continue
            t0, c0 = time.perf_counter(), time.process_time()
            if stage.name == "m100-schedule":
                saved, sched = op.clone(), stage
                stage = replace(stage, prefetch_share=shares.pop(0))
            while True:
                try:
                    if stage.name == "hbsm-allocate":  # strict but for the last share
                        replace(stage, strict=bool(shares)).apply(ctx, op)
                    else:
                        stage.apply(ctx, op)
                    break
                except HbsmOverflow:
                    if stage.name != "hbsm-allocate" or saved is None or not shares:
                        raise
                # the program of this share does not pack as planned: schedule again with the
                # next one
                _restore(op, saved.clone())
                replace(sched, prefetch_share=shares.pop(0)).apply(ctx, op)
            if self.verify == "each":
                _verify(op, f"after '{stage.name}'")
            if stage_end is not None and stage.name != last:
                stage_end()
            if timings is not None:
                timings[stage.name] = time.perf_counter() - t0
            if cpu_timings is not None:
                cpu_timings[stage.name] = time.process_time() - c0
            if certificates is not None and stage.name == "sync-insert":
                certificates.extend(getattr(stage, "certificates", []))
            if dataflows is not None and stage.name == "sync-insert":
                dataflows.extend(getattr(stage, "dataflows", []))
        if until:
            return
        # (the module's programs without xDSL's walk of every op: ~40 000 on ResNet-50; the
        # pipeline's ops are registered, so an op named tpb.program is a ProgramOp)
        progs = programs(op)
        if len(progs) != 1:
            raise PipelineError(f"m100-pipeline: expected one tpb.program after the lowering, "
                                f"found {len(progs)}")
        progs[0].properties["level"] = StringAttr("resolved")
        if self.verify == "each":
            op.verify()
        else:
            _verify(op, "at the end of the pipeline (verify=each names the stage)")


def _verify(op: ModuleOp, when: str) -> None:
    try:
        op.verify()
    except (VerifyException, DiagnosticException) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PipelineError(f"m100-pipeline: the IR {when} does not verify: {first}") from None


__all__ = ["M100Pipeline", "PipelineError", "SYNC_MODES"]
