"""The segments before which the placement's later whole-plan refinements start their trials.

Each refinement of :func:`.placement.schedule` after the search builds its trials resumed from a
checkpoint of the plan it would replace (:mod:`.resume`): a trial that changes segment ``i`` (or
moves it, or a run from ``i`` on) starts from that plan's latest checkpoint whose prefix's build
looked at none of the segments it changes (``Checkpoint.reach``; ``Scheduler.build`` also keeps
one before the segment before each point asked for). A plan holds the checkpoints its build was
asked for (and those of its base up to where it resumed), so the builds whose plans later
refinements start from ask for one before every segment a later refinement may change:
:func:`later_points`. On the LLaMA2-7B W8A8 prefill layer (heads, 219 segments) those are
side_by_side's run at 117, sibling_tilings' gate / up at 213 / 214, pipe_starts' vector
pipelines at 0 and 215, background's V transpose at 19; without them sibling_tilings' trials
resumed from 117 (session 31: 0.73 / 0.76 -> 0.56 / 0.51 CPU-s, concat / heads). background's
trial gains nothing there: every checkpoint after the V projection has looked past the
transpose (the projection's late stores scan the heads' segments), and before it the RoPE's
late stores are pending (no checkpoint), so it resumes at segment 1 as before. A checkpoint
costs ~1.5 ms there (a copy of the builder's containers); it changes no plan, only where builds
start (``test_later_points``).
"""

from __future__ import annotations

from .segment import SegmentCfg


def later_points(s, segs: list[SegmentCfg], after: int = -1) -> set[int]:
    """The segments after ``after`` that a later refinement's trial may change (a superset: a
    point where no trial is made costs one checkpoint): :func:`.refine.trial_points`
    (unchunk, weights_once), side_by_side's runs and their feeders, sibling_tilings' equal
    contractions, pipe_starts' vector pipelines, background's unread transposes. ``s``: a
    scheduler or search (its ``g`` and ``ops``)."""
    from .background import candidates
    from .pipe_starts import eligible
    from .refine import trial_points
    from .sibling_tiling import pairs
    from .side_by_side import trial_points as runs
    out = trial_points(segs) | runs(s, segs) | set(candidates(s, segs))
    out |= {i for i, seg in enumerate(segs) if eligible(s, seg)}
    out |= {i for pair in pairs(s, segs) for i in pair}
    return {i for i in out if i > after}


__all__ = ["later_points"]
