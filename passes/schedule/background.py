"""Transposes into outputs that nothing reads, moved to the end of the plan in chunks: a
whole-plan refinement.

Why: the copy of a result into an output's layout that no op of the graph reads (LLaMA prefill:
V's ``[T, kvh * hd]`` into the KV cache's ``[kvh, T, hd]``, 8 MB at 7B) is one DMA, built where
the search put it (right after V's projection). The list scheduler gives it the first gap of an
engine long enough for all of it: on the LLaMA2-7B W8A8 prefill layer one engine for 99 k
cycles (1.126 - 1.226 M), just when the 32 attention heads start loading their q / kT / v, so
the first round of heads started one after the other on the other engine (the last window
~100 k after the first). Nothing waits for that copy but the end of the program: built last,
in chunks, its DMAs fill the gaps the engines leave anywhere after its input is written, behind
every transfer built before them (the list scheduler never moves a placed task).

How: each such transpose (a data-movement segment of a transpose whose result no op reads) is
tried at the end of the segment list as :data:`CHUNKS` DMAs (``OpGraph.chunks``: ranges of the
result's first dimension longer than 1, planned by ``kinds/movement.plan_segment`` and emitted by
``kinds/movement.emit_op`` alike; the same bytes to the same places), each chunk count one
bounded whole-plan build (``Scheduler.shorter``), the shortest kept.

Pre: the plan after the other refinements; post: the same plan or a shorter one, with
``g.chunks`` naming the chunked transposes.
"""

from __future__ import annotations

import os
import sys

from .segment import SegmentCfg

#: print each trial (op, chunks, makespan before -> after) to stderr
_DEBUG = bool(os.environ.get("M100_DEBUG_BACKGROUND"))
#: chunk counts tried (each at most the result's first dimension); () switches this off
CHUNKS = (32, 8)


def candidates(s, segs: list[SegmentCfg]) -> list[int]:
    """Indices of the data-movement segments of a transpose whose result no op reads."""
    read = {t for op in s.g.ops for t in op.inputs}
    out = []
    for i, cfg in enumerate(segs):
        if cfg.kind != "dma" or len(cfg.stages) != 1:
            continue
        op = s.ops[cfg.stages[0].op]
        if "perm" not in op.attrs or op.name in s.g.view_ops or op.outputs[0] in read or \
                len(op.inputs) != 1 or not s.g.out(op).shape:
            continue
        out.append(i)
    return out


def background(s, segs: list[SegmentCfg], tl, keep: str):
    """``(segs, tl)`` with each transpose of :func:`_candidates` built last in chunks where the
    whole plan gets shorter (module docstring); the input unchanged otherwise."""
    from .kinds.movement import chunk_dim  # (kinds import the emitter, which imports placement)
    g = s.g
    for i in reversed(candidates(s, segs)):
        cfg = segs[i]
        name = cfg.stages[0].op
        shape = g.out(s.ops[name]).shape
        lead = shape[chunk_dim(shape)]
        moved = segs[:i] + segs[i + 1:] + [cfg]
        best = None
        for n in dict.fromkeys(min(c, lead) for c in CHUNKS):
            old = g.chunks.get(name)
            g.chunks[name] = n
            ref = tl if best is None else best[1]
            # resumed from ``ref``'s latest checkpoint whose prefix looked at no segment from
            # ``i`` on (:mod:`.resume`; ``later_points`` asks for one before ``i``)
            tl2 = s.sched.shorter(moved, ref, keep, base=ref)
            if _DEBUG:
                print(f"background: {name} last in {n} chunks: {ref.makespan:.0f} -> "
                      f"{'-' if tl2 is None else round(tl2.makespan)}", file=sys.stderr)
            if old is None:
                del g.chunks[name]
            else:
                g.chunks[name] = old
            if tl2 is not None:
                best = (n, tl2)
        if best is not None:
            g.chunks[name] = best[0]
            segs, tl = moved, best[1]
    return segs, tl


__all__ = ["background", "candidates", "CHUNKS"]
