"""Functional semantics of every instruction kind, one block at a time, vectorized with numpy.

Each instruction gets an :class:`Exec` that knows, for block ``b`` of its ``sync.blocks``:

* ``reads(b)`` / ``writes(b)``: the operand accesses (walk, TPB, element offsets) -- the byte sets the
  race checker compares;
* ``run(b)``: gather the block's inputs from :class:`~m100.sim.memory.Memory`, compute, and return
  the pending writes (applied by the engine when the block's timing ends, so a reader that overlaps a
  writer in time sees the old bytes, as in hardware).

How blocks split the work (the ISA docstrings): MatMul splits the ``m`` rows of A and C; Conv2D the
``n * oh`` output rows (reading only the input rows their windows touch); CvuPipeline splits
``out_shape[0]``: every input of the same rank whose leading dimension equals ``out_shape[0]`` is
sliced the same way, other inputs are read whole, and the pipeline is evaluated per block (a stage
reducing along axis 0 therefore reduces within the block); Copy/Fill/Broadcast/Dma split the flat
element sequence; CsuCall is one block.

Arithmetic (``docs/isa.md`` and the ``isa.py`` docstrings):

* integer TCU: i8 (or i4) products accumulate exactly; the accumulator (+ the old C if
  ``accumulate``, + bias) wraps to int32; activation (relu/clamp) on int32; then requantization
  in the machine's ``tcu_requant`` mode (:func:`requantize`): ``f32-rne`` (the M100 default)
  ``clamp(round_half_even(f32(f32(x) * m)) + zp)`` with the f32 multiplier ``m = mult * 2**-shift``,
  or ``fixed-half-up`` ``clamp(((x * mult + round) >> shift) + zp)`` in int64. The products are computed with a
  BLAS matmul in float32 when every partial sum fits its 24-bit mantissa (i8 x i8, k <= 1024),
  float64 otherwise (exact while ``k * 2**14 < 2**53``).
* float TCU: operands as float32, ``np.matmul`` in float32, then + old C, + bias, activation in f32 and
  one rounding to the output type (:mod:`m100.targets.m100.numerics`).
* CVU: two lanes. Integer inputs feed the integer lane (exact int64 in numpy; every stage result
  must fit i32, else a run-time fault; division rounds toward zero, by zero faults), float inputs
  the float lane (float32); a stage mixing both lanes converts to float (f32, round to nearest
  even); comparisons give integer 0/1; ``ftoi``/``itof`` convert explicitly. The last stage's
  result is converted once to the output type (round to nearest even, saturating).

Modules: :mod:`.semantics_base` (the ``Exec`` interface, accesses, pending writes, block chunks),
:mod:`.semantics_tcu`, :mod:`.semantics_cvu`, :mod:`.semantics_move` (DTDU, DMA, CSU); this
module maps every instruction type to its executor (:func:`make_exec`).
"""

from __future__ import annotations

from m100.targets.m100.isa import (Broadcast, Conv2D, Copy, CsuCall, CvuPipeline, Dma, Fill,
                                   Instruction, MatMul)

from .memory import Memory
from .semantics_base import Access, Exec, PendingWrite, SimError, quiet, quiet_run
from .semantics_cvu import CvuExec, cvu_eval, cvu_stage, cvu_unary
from .semantics_move import BroadcastExec, CopyExec, CsuExec, DmaExec, FillExec
from .semantics_tcu import Conv2DExec, MatMulExec, requantize


EXECS = {MatMul: MatMulExec, Conv2D: Conv2DExec, CvuPipeline: CvuExec, Copy: CopyExec,
         Fill: FillExec, Broadcast: BroadcastExec, CsuCall: CsuExec, Dma: DmaExec}


def make_exec(inst: Instruction, mem: Memory | None) -> Exec:
    return EXECS[type(inst)](inst, mem)


__all__ = ["Access", "PendingWrite", "Exec", "make_exec", "SimError", "quiet", "quiet_run",
           "requantize", "cvu_eval", "cvu_stage", "cvu_unary"]
