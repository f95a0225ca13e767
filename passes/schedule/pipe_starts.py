"""Vector pipelines at their greedy start, tried in the whole plan (issue 13, session 18).

The DP of :meth:`.search.Search.run` costs each candidate pipeline alone, and the local search
of :meth:`.search.Search.best_pipeline` keeps a move when it makes the segment alone cheaper;
its RNG is seeded by the ops' names, so which moves it tries changes whenever ops before it are
numbered differently. On the LLaMA2-7B W8A8 prefill layer (docs/llm.md, session 18) the
residual add + ``mlp_norm`` + quantize pipeline after ``wo`` came out co-located on all 56 TPBs
(cheaper alone) once RoPE was one op per tensor instead of two: in the layer it ran 1.72 -
1.99 M instead of 1.82 - 1.99 M with its stages on 17 / 28 / 11 TPBs -- the MLP's gate, whose
weights stream into every TPB's HBSM meanwhile, started no earlier -- and the 0.1 M the RoPE
change gained were lost there.

:func:`pipe_starts` takes each pipeline segment whose stages are all vector / data-movement ops
(no TCU stage: the attention heads' chains and conv pipelines keep the search's choice) and
whose configuration differs from the local search's greedy start (TPBs in proportion to each
stage's work, :meth:`.search.Search._pipe_start`), and tries that start in the whole plan: one
bounded whole-plan build each (``Scheduler.shorter``), kept only when the plan gets shorter, at
most :data:`MAX_TRIALS`. Each trial resumes from the latest checkpoint of the plan before the
changed segment that fits it (:mod:`.resume`; ResNet-50 224: the trials in the plan's own keep
mode build from segment 22-38 of 63 instead of 0), and stops before a segment once some TPB's
TCU work left reaches the plan's makespan (``Scheduler.build(tail=True)``; exact here: no
refinement after this one reads the search budget's task count; ResNet-50 224: 286 -> 194
segments built).

Pre: the plan after the search's refinements; post: the same plan or a shorter one.
"""

from __future__ import annotations

import os
import sys

from .later_points import later_points
from .segment import SegmentCfg

#: print each trial (segment, makespan before -> after) to stderr
_DEBUG = bool(os.environ.get("M100_DEBUG_PIPE_STARTS"))
#: whole-plan builds at most
MAX_TRIALS = 4
#: False: no trial (A/B)
ENABLED = True


def eligible(s, seg: SegmentCfg) -> bool:
    return seg.kind == "pipeline" and len(seg.stages) > 1 and \
        not any(s.ops[st.op].unit.startswith("tcu") for st in seg.stages)


def pipe_starts(s, segs: list[SegmentCfg], tl, keep: str):
    """``(segs, plan, keep mode)`` with each vector pipeline tried at its greedy start (module
    docstring), in ``tl``'s kept-activation mode ``keep`` and then in the others; ``s`` the
    :class:`.search.Search` whose scheduler builds plans."""
    if not ENABLED:
        return segs, tl, keep
    trials = 0
    for si in range(len(segs)):
        seg = segs[si]
        if trials >= MAX_TRIALS or not eligible(s, seg):
            continue
        ops = [s.ops[st.op] for st in seg.stages]
        state, _ = s._pipe_start(ops)
        start = s._pipe_cfg(ops, *state)
        if start is None or start == seg:
            continue
        trials += 1
        trial = list(segs)
        trial[si] = start
        for mode in dict.fromkeys((keep, "", "one-stage", "all")):  # the keep modes of
            # keep_activations: which tensors stay in HBSM depends on where the pipeline's
            # stages run; resumed from ``tl``'s latest checkpoint before ``si`` that fits the
            # trial (:mod:`.resume`: the same plan as a full build)
            tl2 = s.sched.shorter(trial, tl, mode, base=tl, tail=True,
                                  checkpoints=later_points(s, trial, si))
            if _DEBUG:
                print(f"pipe_starts: {[st.op for st in seg.stages]} "
                      f"{[len(st.tpbs) for st in seg.stages]} -> "
                      f"{[len(st.tpbs) for st in start.stages]} keep '{mode}': "
                      f"{tl.makespan:.0f} -> "
                      f"{'not shorter' if tl2 is None else f'{tl2.makespan:.0f}'}",
                      file=sys.stderr)
            if tl2 is not None and (mode == "" or tl2.kept):
                segs, tl, keep = trial, tl2, mode
                break
    return segs, tl, keep


__all__ = ["ENABLED", "MAX_TRIALS", "eligible", "pipe_starts"]
