"""A lower bound of a candidate segment's isolated cost, from the TCU work alone (issue 15).

The search (:meth:`.search.Search.cost`) asks of most candidates only whether they beat the best
so far (``cost(seg, bound) < bound``). :func:`tcu_floor` is a number the isolated build's makespan
can not be below, computed from the configuration without building anything; when it reaches the
bound, the answer (>= bound) is known and the build is skipped.

Why it is a lower bound: every TCU instruction of a contraction ``[m, k] @ [k, n]`` costs
``CostModel.tcu_cycles`` >= ``m * n * k / peak`` (tiles are padded, the operand ports can only
make it longer) + ``tcu_pipeline_latency``; the instructions of a stage cover its output once per
reduction element (``op_macs`` in all) and there is at least one per band and column part; they
run on the TPBs of at most ``min(gr, bands) * gc`` (TPB rows that get a band x column parts), and
one TPB's TCU runs its instructions one after the other from cycle 0 at the earliest
(``ListScheduler.put``). So some TPB is busy at least (sum of the instruction cycles) / (TPBs
used), and the makespan is at least that. A pipeline's stages each give such a bound (the
largest counts). Not bounded (0): grouped convolutions (a column part may hold partial groups),
K splits and resident activations (other piece shapes), non-TCU stages.
"""

from __future__ import annotations

from .cost import CostModel
from .graph import OpGraph, Op, geometry
from .segment import SegmentCfg, StageCfg

TCU_UNITS = ("tcu.matmul", "tcu.conv2d")


def stage_floor(cm: CostModel, g: OpGraph, op: Op, st: StageCfg) -> float:
    """The cycles some TPB's TCU is busy with stage ``st`` of ``op`` at least (0: not bounded)."""
    if op.unit not in TCU_UNITS or op.attrs.get("groups", 1) != 1 or st.ks != 1 or \
            st.act_resident:
        return 0.0
    geo = geometry(g, op)
    acts = g.act_inputs(op)
    peak = cm.peak_macs_per_cycle(acts[0].dtype if acts else g.out(op).dtype)
    used = min(st.gr, st.bands, geo.rows) * min(st.gc, geo.cols)
    if used < 1:
        return 0.0
    instrs = min(st.bands, geo.rows) * min(st.gc, geo.cols)  # >= one per band and column part
    return (cm.op_macs(g, op) / peak + instrs * cm.machine.tcu_pipeline_latency) / used


def tcu_floor(cm: CostModel, g: OpGraph, ops: dict[str, Op], seg: SegmentCfg) -> float:
    """A lower bound of the makespan of ``seg`` built alone (module doc); 0 when unknown."""
    if seg.kind not in ("data-parallel", "pipeline"):
        return 0.0
    return max((stage_floor(cm, g, ops[st.op], st) for st in seg.stages), default=0.0)


__all__ = ["stage_floor", "tcu_floor"]
