"""CSU routine ops (gather, arg-max/min, sort/top-k): one ``csu.call`` of the cluster CPU, memory -> memory.

The CSU reads and writes any memory space (docs/isa.md), so a CSU op is a segment of its own like a
data-movement op: its operands stay in DDR / CCB SRAM, no HBSM tiles. Plan and emission side by side.

* ``gather`` (``Lowering("gather", params=dict(V, D, N))``): the op's inputs are (table, row
  indices); ``out[n, :] = table[indices[n], :]`` with the table viewed as ``[V, D]`` rows and the
  output as ``[N, D]`` rows (from_ir folds the ONNX Gather axis / GatherElements into row indices).
* ``argmax`` (``params=dict(outer, L, inner, largest, last)``): the input ``[outer, L, inner]`` is
  read through a walk that presents it as rows ``[outer * inner, L]`` (any axis); the routine
  writes the row arg-max (arg-min if ``largest == 0``; the last extreme if ``last``).
* ``topk`` (``params=dict(outer, L, inner, largest)``, two outputs: values, indices): torch-mlir's
  TopK is a full sort followed by slices of the first K, so the routine runs with K = L through the
  same transposing walks (ties by the lower index, the ONNX TopK order).
"""
from __future__ import annotations

import math

from xdsl.dialects.builtin import StringAttr

from m100.dialects.tpb import CsuOp
from m100.dialects.twu import i64_array

from ..emit_core import access, ident
from ..graph import ScheduleError
from ..plan import PlanPiece
from ..segment import memory_of


def plan_segment(bld, si: int, seg, pieces: list[PlanPiece]) -> None:
    """One CSU task on the segment's TPB, after the writers of its inputs."""
    g, cm = bld.g, bld.cm
    op = bld.s.ops[seg.stages[0].op]
    tpb = seg.stages[0].tpbs[0]
    bld.piece = p = PlanPiece(op.name, 0, 0, tpb, 0, 0, 0, 0, segment=si)
    pieces.append(p)
    nb = cm.csu_op_bytes(g, op)
    deps = [d for t in op.inputs for d in bld._mem_deps(t)]
    t = bld.task(kind="csu", unit="csu", tpb=tpb, op=op.name, tensor=op.outputs[0], nbytes=nb,
                 cycles=cm.csu_cycles(nb), deps=deps, segment=si,
                 src=memory_of(cm, g, op.inputs[0]), dst=memory_of(cm, g, op.outputs[0]))
    p.compute = t
    for o in op.outputs:
        bld._wrote(o, t)
    bld.piece = None


def emit_op(em, op, tpb: int) -> None:
    """The ``tpb.csu`` instruction of a CSU op, taking its plan task."""
    lw = em.irg.lowering[op.name]
    prm = lw.params
    out_t = op.outputs[0]
    deps = [d for t in op.inputs for d in em.token_of(t)]
    if lw.kind == "gather":
        v, d, n = prm["V"], prm["D"], prm["N"]
        tab, idx = op.inputs
        slots = {"op0": (em.alias(tab, (v, d)), None), "op1": (em.alias(idx, (n,)), None),
                 "op2": (em.alias(out_t, (n, d)), None)}
        routine, params = "gather", (v, d, n)
    elif lw.kind == "argmax":
        outer, ln, inner = prm["outer"], prm["L"], prm["inner"]
        x = op.inputs[0]
        # iterate (o, i, l) over the buffer [outer, L, inner]: rows [outer * inner, L]
        lin = [((1, 0, 0), 0), ((0, 0, 1), 0), ((0, 1, 0), 0)]
        slots = {"op0": (em.alias(x, (outer, ln, inner)), access((outer, inner, ln), lin)),
                 "op1": (em.alias(out_t, (outer * inner,)), None)}
        routine, params = "argmax", (outer * inner, ln, prm["largest"], prm["last"])
    elif lw.kind == "topk":  # a full sort (K = L); the graph's slices take the first K
        outer, ln, inner = prm["outer"], prm["L"], prm["inner"]
        lin = [((1, 0, 0), 0), ((0, 0, 1), 0), ((0, 1, 0), 0)]
        acc = access((outer, inner, ln), lin)
        slots = {"op0": (em.alias(op.inputs[0], (outer, ln, inner)), acc),
                 "op1": (em.alias(op.outputs[0], (outer, ln, inner)), acc),
                 "op2": (em.alias(op.outputs[1], (outer, ln, inner)), acc)}
        routine, params = "topk", (outer * inner, ln, ln, prm["largest"])
    else:
        raise ScheduleError(f"op '{op.name}': no CSU lowering for '{lw.kind}'")
    t = em._take("csu", tpb)
    ins = CsuOp(tpb, slots, deps + em._bar(tpb),
                params={"routine": StringAttr(routine), "params": i64_array(params)})
    tok = em._emit(t, ins).done  # type: ignore[attr-defined]
    em._touch(tpb, tok)
    for o in op.outputs:
        em.writers[o] = [tok]


__all__ = ["plan_segment", "emit_op", "math", "ident"]
