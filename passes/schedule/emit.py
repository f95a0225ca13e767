"""Placed ``tpb`` IR from a placement: buffers, DMAs, copies and unit instructions with accesses.

The emitter walks the placement in the timeline's program order (segment by segment, wave by wave,
stage by stage, band by band) and turns every mini-tensor piece into instructions:

* memory tensors (inputs, outputs, weights, intermediates between segments) get DDR or CCB SRAM
  buffers at fixed addresses (a bump allocator); constants become ``tpb.segment`` data;
* a piece's inputs arrive in fresh HBSM buffers of the TPB that computes it: by a CCB DMA from
  memory (``#twu.access`` selects the band, halo rows, column slice, permutation or broadcast), or by
  DTDU copies from the producer pieces of the same segment (pipelines: the rows the band needs);
* weights of a stage column stay resident: one DMA per (TPB, column part) at first use;
* the unit instruction (``tpb.matmul`` / ``tpb.conv2d`` / ``tpb.cvu``) writes a fresh output buffer,
  stored to memory by a DMA when a later segment or the caller needs it;
* data-movement ops (transpose, pad, broadcast, reshape) are CCB DMAs memory -> memory.

Every piece buffer is a separate SSA ``hbsm.alloc`` (unallocated): ``hbsm-allocate`` packs them per
TPB by liveness, which yields the double buffering the partitioner sized. Ordering is by
``!sync.token`` (read-after-write edges); ``pred_start``/``pred_end`` carry the timeline's cycles.
"""

from __future__ import annotations

from m100.dialects.tpb import ProgramOp
from m100.targets.m100.machine import Machine

from .emit_units import UnitEmitter
from .from_ir import IRGraph
from .placement import Placement


class Emitter(UnitEmitter):
    """The emitter: bookkeeping (:mod:`.emit_core`) + per-op/unit-kind emission (:mod:`.emit_units`)."""


def emit_program(irg: IRGraph, pl: Placement, machine: Machine) -> ProgramOp:
    return Emitter(irg, pl, machine).run()


__all__ = ["emit_program", "Emitter"]
