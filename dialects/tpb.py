"""The ``tpb`` dialect: TPB functional-unit instructions, at two levels, inside a program container.

Every instruction op (``tpb.matmul``, ``tpb.conv2d``, ``tpb.cvu``, ``tpb.copy``, ``tpb.fill``,
``tpb.broadcast``, ``tpb.csu``, ``tpb.dma``) has one syntax::

    %done = tpb.KIND tpb T  SLOT(%buffer[, ACCESS]) ...  [after(%tok, ...)] [sync #sync.actions<...>]
            [{param = value, ..., discardable = value}]

* ``tpb T`` places the op on TPB ``T`` (``engine E`` for ``tpb.dma``, a CCB DMA engine).
* Each operand *slot* (named after the ISA field: ``a b c`` for matmul, ``src dst`` for copies, ...)
  holds an ``!hbsm.buffer`` SSA value and/or an access: ``#twu.access<...>`` (placed level; absent =
  the whole buffer, row-major) or ``#twu.walk<...>`` (resolved). ``SLOT(#twu.walk<...>)`` without a
  buffer is a resolved operand that no IR buffer describes (what ``m100-translate --from-bin`` makes).
* ``after(...)`` lists the ``!sync.token`` values the op waits for; the op's result token is done
  when the op is. ``sync`` holds the concrete SU actions (resolved level).
* The dictionary holds the kind's parameters (``m``, ``n``, ``k``, ``stages`` ...; see each op) and
  any discardable attributes (e.g. the scheduler's ``pred_start``/``pred_end`` cycles).

Levels (``tpb.program "MACHINE" LEVEL``; ops outside a program are checked at the placed level on the
default machine):

* ``placed`` -- dataflow: buffers may be unallocated, accesses affine, ordering by tokens. The
  verifier checks slots, accesses against buffer shapes, and the instruction's shape/type rules
  (``isa.Instruction._check`` on walks synthesized from the accesses), TPB ids against the machine.
* ``resolved`` -- every operand a ``#twu.walk``, every op a ``sync`` attribute, every buffer
  allocated: the op maps 1:1 to an ISA instruction and is verified with ``Instruction.check(machine)``;
  anything missing is reported naming the op and the field.

Containers: ``tpb.program`` (machine, level, fingerprint, metadata; body: ``tpb.segment``,
``tpb.symbol``, ``tpb.stream`` per cluster (``ccb`` for the DMA stream), buffers, instruction ops).
See ``docs/dialects.md`` for worked examples of both levels. Code: ``tpb_base.py`` (the instruction-op
base class: syntax, slots, ISA conversion, verifier), ``tpb_ops.py`` (the eight kinds and
``#tpb.stage``), ``tpb_program.py`` (containers); this module assembles the ``TPB`` dialect.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from .tpb_base import (LEVELS, InstrOp, access_shape, level_of, print_params, program_of,
                       to_param)
from .tpb_ops import (INSTR_OPS, OP_BY_KIND, BroadcastOp, Conv2dOp, CopyOp, CsuOp, CvuPipelineOp,
                      DmaOp, FillOp, MatmulOp, StageAttr)
from .tpb_program import BytesAttr, ProgramOp, SegmentOp, StreamOp, SymbolOp

TPB = Dialect("tpb", [*INSTR_OPS, ProgramOp, StreamOp, SegmentOp, SymbolOp], [StageAttr, BytesAttr])

__all__ = ["TPB", "InstrOp", "MatmulOp", "Conv2dOp", "CvuPipelineOp", "CopyOp", "FillOp",
           "BroadcastOp", "CsuOp", "DmaOp", "ProgramOp", "StreamOp", "SegmentOp", "SymbolOp",
           "StageAttr", "BytesAttr", "INSTR_OPS", "OP_BY_KIND", "level_of", "program_of", "LEVELS",
           "access_shape", "print_params", "to_param"]
