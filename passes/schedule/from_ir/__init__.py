"""Classified linalg IR (after ``m100-graph``) -> the scheduler's :class:`OpGraph` + lowering facts.

What each graph op becomes (``m100.unit`` set by ``classify-ops``):

* ``tcu.matmul`` (``linalg.matmul``) / ``tcu.conv2d`` (``linalg.conv_2d_nhwc_hwcf``): one scheduler op;
  the fused epilogue (``m100.epilogue``: bias, activation) comes from the ``outs`` broadcast of a
  constant vector and the ``tcu.epilogue`` generics, whose result is the op's output tensor. A
  ``tensor.pad`` of zeros on H/W feeding only the conv folds into the conv's padding.
* ``cvu.elementwise`` generics: a CVU pipeline; the body becomes stages (relu idiom ``select(x > 0,
  x, 0)`` -> ``max(x, 0)``), inputs may use any projected-permutation indexing map.
* ``cvu.pool`` (``pooling_nchw/nhwc_max/sum``): CVU MAXPOOL / AVGPOOL(x kh*kw) with the padding of a
  feeding ``tensor.pad`` folded in.
* data movement (``linalg.transpose``, ``linalg.broadcast`` not used as a bias, ``tensor.pad``,
  reshapes, ``linalg.copy``) -> ``dtdu.copy`` ops that the emitter turns into CCB DMAs with affine
  accesses; ``linalg.fill`` of a constant becomes constant data (a program data segment), or nothing
  when it only initialises an accumulator.

Anything else raises :class:`ScheduleError` naming the op, so an unsupported model fails with one
clear line rather than a wrong program.

The translation is split by concept: :mod:`.driver` (the walk and the order ops are tried in),
:mod:`.builder` (the state of one walk), :mod:`.movement` (constants and DMA data movement),
:mod:`.contraction` (TCU matmul/conv/batch_matmul with fused epilogues), :mod:`.cvu`
(elementwise, reductions, norm/softmax idioms, pooling, quantize casts) and :mod:`.csu` (gather,
TopK, ArgMax).
"""

from ..ir_facts import IRGraph, Lowering, linear_map
from .driver import from_module, symbol_names

__all__ = ["IRGraph", "Lowering", "from_module", "linear_map", "symbol_names"]
