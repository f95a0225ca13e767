"""Equal contractions with each other's tiling, tried in the whole plan.

The search costs each segment in isolation and picks the tiling that is shortest alone. Two
contractions of the same geometry (LLaMA's gate and up projections: the same activation, weight
shape and output shape) can then get different tilings, and the one chosen alone can lose in the
plan. Since session 15 up's matmul reads gate's ``silu(g)`` as its epilogue operand (``post_in``,
``from_ir/tcu_post``): alone, up is costed with ``silu(g)`` ready at cycle 0, and on the 8-head
prefill variant (hidden 1024, ffn 2752) the search put it on 32 TPBs as 16 x 2 while gate ran
8 x 7 on 56; in the plan it then waited for all of gate and ran longer than gate did (docs/llm.md,
session 15: the variant lost 14 % against the CVU form).

:func:`sibling_tilings` takes each one-stage data-parallel TCU segment whose op has the geometry of
an earlier such segment (same unit and contraction attributes, input and weight shapes and
dtypes but ``post_in``'s, output shapes) and a different stage configuration, and tries it with the earlier one's configuration
(its TPBs, bands, column parts, K chunks: everything but the op), then the earlier one with the
later one's; each trial is one bounded whole-plan build (``Scheduler.shorter``), kept only when the
plan gets shorter, at most :data:`MAX_TRIALS`. Runs past the search budget too (a handful of
builds; the graphs whose search runs out of budget are the ones with such projections).

Pre: the plan after the search's refinements; post: the same plan or a shorter one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from .later_points import later_points
from .segment import SegmentCfg

#: print each trial (segment, makespan before -> after) to stderr
_DEBUG = bool(os.environ.get("M100_DEBUG_SIBLING"))
#: whole-plan builds at most
MAX_TRIALS = 4


def _sig(s, name: str) -> tuple:
    g, op = s.g, s.ops[name]
    post_in = op.attrs.get("post_in")
    ins = tuple((g.tensors[t].shape, g.tensors[t].dtype, g.tensors[t].kind)
                for t in op.inputs if t != post_in)
    # the outputs' shapes, not their types (gate stores f16 silu(g), up int8 after its post
    # stages); the contraction's attributes (m, n, k, ...), not its post stages
    return (op.unit, ins, tuple(g.tensors[t].shape for t in op.outputs),
            tuple(sorted((k, repr(v)) for k, v in op.attrs.items()
                         if k not in ("post_in", "post") and not isinstance(v, str))))


def _eligible(s, seg: SegmentCfg) -> bool:
    return seg.kind == "data-parallel" and len(seg.stages) == 1 and \
        s.ops[seg.stages[0].op].unit == "tcu.matmul"


def pairs(s, segs: list[SegmentCfg]) -> list[tuple[int, int]]:
    """``(first, later)`` segment indices of each contraction equal to an earlier one
    (:func:`_sig`; the first of its kind, in order)."""
    first: dict[tuple, int] = {}
    out = []
    for si, seg in enumerate(segs):
        if not _eligible(s, seg):
            continue
        sig = _sig(s, seg.stages[0].op)
        if sig in first:
            out.append((first[sig], si))
        else:
            first[sig] = si
    return out


def sibling_tilings(s, segs: list[SegmentCfg], tl, keep: str):
    """``(segs, plan)`` with equal contractions tried in each other's tiling (module docstring);
    ``s`` the :class:`.search.Search` whose scheduler builds plans, ``keep`` the kept-activation
    mode of ``tl``."""
    trials = 0
    for a, b in pairs(s, segs):
        for src, dst in ((a, b), (b, a)):
            sa, sb = segs[src].stages[0], segs[dst].stages[0]
            if replace(sa, op=sb.op) == sb or trials >= MAX_TRIALS:
                continue
            trials += 1
            trial = list(segs)
            trial[dst] = replace(segs[dst], stages=(replace(sa, op=sb.op),))
            tl2 = s.sched.shorter(trial, tl, keep, base=tl,
                                  checkpoints=later_points(s, trial, dst))
            if _DEBUG:
                print(f"sibling_tilings: {sb.op} as {sa.op} ({len(sa.tpbs)} TPBs, {sa.gc} "
                      f"column parts, {sa.bands} bands): {tl.makespan:.0f} -> "
                      f"{'not shorter' if tl2 is None else f'{tl2.makespan:.0f}'}",
                      file=sys.stderr)
            if tl2 is not None:
                segs, tl = trial, tl2
    return segs, tl


__all__ = ["MAX_TRIALS", "pairs", "sibling_tilings"]
