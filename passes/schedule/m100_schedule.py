"""The ``m100-schedule`` pass: classified linalg -> placed ``tpb`` dataflow (the space-time scheduler)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from m100.targets.m100.machine import get_machine

from .emit import emit_program
from .from_ir import from_module
from .int4_weights import apply_int4_weights
from .placement import STRATEGIES, schedule
from .report import format_report


@dataclass(frozen=True)
class M100Schedule(ModulePass):
    """Space-time scheduler: place every classified linalg op on TPBs, in space and in time.

    What: builds the scheduler's op graph from the function (after ``m100-graph``: every op has
    ``m100.unit``), partitions each op into mini-tensors that fit a TPB's HBSM double buffered,
    searches a placement (data-parallel splits over TPB groups, pipelines of ops on different TPBs
    streaming row bands, or mixed, chosen by a list-scheduled cost model that reads every number
    from the machine description) and emits a ``tpb.program "<machine>" placed``: DDR/SRAM buffers
    and data segments for tensors and weights, unallocated HBSM buffers per mini-tensor, CCB DMAs
    with ``#twu.access`` accesses, DTDU copies between TPBs, TCU/CVU instructions, ``!sync.token``
    edges and the predicted ``pred_start``/``pred_end`` cycles of each instruction.
    Why: the paper's space-time scheduler (Fig. 14); ``docs/schedule.md`` has the algorithm.
    Pre: one ``func.func`` with linalg on tensors, classified by ``m100-graph``. Post: the module
    holds one placed ``tpb.program`` (the function is replaced); run ``hbsm-allocate``,
    ``twu-materialize`` and ``sync-insert`` next. Unsupported ops and shapes that can not fit are
    one error naming the op.
    Options: ``machine`` (preset or file, default m100), ``tpbs`` / ``clusters`` (limit the TPBs
    used, 0 = all), ``strategy`` = auto | data-parallel | pipeline | single, ``seed`` (the local
    search's RNG; the result is deterministic per seed), ``report`` (print the schedule table and
    critical path to stderr), ``max-stages`` (longest pipeline), ``plan-json`` (write the plan --
    every instruction's unit or DMA engine, TPB, broadcast mask, dependencies and predicted cycles
    -- as JSON to this file), ``prefetch-share`` (percent of the HBSM that weights prefetched
    during earlier segments and activations kept between segments may fill; 0 = the default,
    ``list_schedule.PREFETCH_HBSM_SHARE``; ``m100-pipeline`` tries larger shares first and falls
    back when hbsm-allocate can not pack the program), ``tail-prefetch`` (where a segment's
    weights are not prefetched, its first streamed weight chunk loads during the last K step of
    the lockstep contraction before it on the TPB, without the share's count: hbsm-allocate's
    strict packing judges it; off by default, ``m100 bench llm`` asks for it with the W8A8
    prefill layer's shares -- docs/llm-log.md, session 23).
    """

    name = "m100-schedule"

    machine: str = "m100"
    tpbs: int = 0
    clusters: int = 0
    strategy: str = "auto"
    seed: int = 0
    report: bool = False
    max_stages: int = 4
    plan_json: str = ""
    prefetch_share: int = 0
    tail_prefetch: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from .graph import ScheduleError, check_limits
        if self.strategy not in STRATEGIES:
            raise ScheduleError(f"m100-schedule: unknown strategy '{self.strategy}' "
                                f"(known: {', '.join(STRATEGIES)})")
        if not 0 <= self.prefetch_share <= 100:
            raise ScheduleError(f"m100-schedule: prefetch-share is a percent of the HBSM (0 = the "
                                f"default), not {self.prefetch_share}")
        for opt in ("tpbs", "clusters", "max_stages"):
            if getattr(self, opt) < (1 if opt == "max_stages" else 0):
                raise ScheduleError(f"m100-schedule: {opt.replace('_', '-')} must be "
                                    f"{'>= 1' if opt == 'max_stages' else '>= 0 (0 = all)'}, "
                                    f"not {getattr(self, opt)}")
        m = get_machine(self.machine)
        irg = from_module(op, m.cvu_max_stages, m.mem_align, m.tcu_post_stages)
        apply_int4_weights(op, irg)  # W4A16: int4 weights in DDR, dequantized by the TCU
        check_limits(irg.graph, m)
        pl = schedule(irg.graph, m, tpbs=self.tpbs, clusters=self.clusters,
                      strategy=self.strategy, seed=self.seed, max_stages=self.max_stages,
                      prefetch_share=self.prefetch_share / 100 if self.prefetch_share else None,
                      tail_prefetch=self.tail_prefetch)
        pl.graph = irg.graph  # type: ignore[attr-defined]
        prog = emit_program(irg, pl, m)
        # a machine that is not a preset travels in the IR as machine_spec (ProgramOp(m, ...)), so
        # the program names it by its own name and never depends on the file being around
        block = op.body.blocks[0]
        for o in list(block.ops):
            o.detach()
            o.erase(safe_erase=False)
        block.add_op(prog)
        if self.plan_json:
            with open(self.plan_json, "w") as f:
                f.write(pl.timeline.to_json(indent=1))
        if self.report:
            print(format_report(pl, f"m100-schedule report (@{irg.func_name})"), file=sys.stderr)
