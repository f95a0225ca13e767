"""Small vector ops of a DMA-engine-bound plan on one or two TPBs instead of many.

The search costs each segment in isolation, where spreading a small CVU op (a decode layer's RoPE
on ``[1, 32, 1, 128]``, the attention's score scaling, a residual add) over 4-14 TPBs makes it
shorter: its loads and stores run in parallel on the two CCB DMA engines. In a plan the two
in-order engines carry end to end (a W4A16 decode layer: both > 95 % busy), every TPB of such a
segment costs one more load per input and one more store, each ``dma_setup_cycles +
ddr_latency`` (or the SRAM latency) on an engine that has no idle time to give, while the CVU
work itself is a few hundred cycles. :func:`narrow_vector_ops` tries each such segment on its first
TPB, then on its first two, in the whole plan, and keeps a change only where the plan gets
shorter (a bounded whole-plan build per trial, at most :data:`MAX_TRIALS`).

Which segments: one-stage, a ``cvu.*`` op on more than one TPB whose output is at most
:data:`MAX_OUT_BYTES`. Which plans: those whose DMA engines are busy at least :data:`MIN_DMA_BUSY`
of the makespan on average (elsewhere fewer transfers do not shorten the plan: no trial, no
build; ResNet-style plans are TCU-bound). LLaMA2-7B W4A16 decode layer, context 1024, batch 1
(session 10, after ``unchunk_gemv_runs``): 11 segments narrowed (RoPE's 9 ops and two of the
attention's vector ops), 1042 -> 933 transfers, 816.8 k -> 807.1 k predicted cycles.

Pre: the plan after ``unchunk_gemv_runs``; post: the same plan or a shorter one. Runs only while
the search has budget left, like the other whole-plan refinements.
"""

from __future__ import annotations

from dataclasses import replace

from .segment import SegmentCfg

#: whole-plan builds at most
MAX_TRIALS = 32
#: a segment is tried when its op's output is at most this many bytes
MAX_OUT_BYTES = 256 * 1024
#: a plan is tried when its DMA engines are busy at least this share of the makespan (average)
MIN_DMA_BUSY = 0.9


def dma_busy(tl, engines: int, cm=None) -> float:
    """The average share of the makespan the CCB DMA engines are busy in plan ``tl`` (with a
    cost model ``cm``: each transfer's engine time in a stream, ``CostModel.dma_occupancy`` --
    with several transfers in flight their latencies overlap; without: its whole cycles)."""
    if tl.makespan <= 0:
        return 0.0
    if cm is None:
        return sum(t.cycles for t in tl.tasks if t.unit == "dma") / (engines * tl.makespan)
    return sum(cm.dma_occupancy(t.cycles, t.src, t.dst) for t in tl.tasks if t.unit == "dma") \
        / (engines * tl.makespan)


def narrow_vector_ops(s, segs: list[SegmentCfg], tl, keep: str
                      ) -> tuple[list[SegmentCfg], object]:
    """``segs`` with small CVU segments on fewer TPBs where the whole plan gets shorter, and its
    plan (``s``: the placement search, ``tl``: the plan of ``segs``)."""
    if s.spent() or dma_busy(tl, s.cm.machine.ccb_dma_engines, s.cm) < MIN_DMA_BUSY:
        return segs, tl
    trials = 0
    for si in range(len(segs)):
        seg = segs[si]
        if len(seg.stages) != 1:
            continue
        st = seg.stages[0]
        op = s.ops[st.op]
        if len(st.tpbs) <= 1 or not op.unit.startswith("cvu.") or \
                sum(s.g.tensors[t].nbytes for t in op.outputs) > MAX_OUT_BYTES:
            continue
        for n in (1, 2):
            if n >= len(st.tpbs):
                break
            if trials >= MAX_TRIALS:
                return segs, tl
            trials += 1
            # n TPB rows of one column part, a band each
            narrow = replace(st, tpbs=st.tpbs[:n], gc=1, bands=n, block=False)
            trial = segs[:si] + [replace(seg, stages=(narrow,))] + segs[si + 1:]
            tl2 = s.sched.shorter(trial, tl, keep)
            if tl2 is not None:
                segs, tl = trial, tl2
                break
    return segs, tl


__all__ = ["narrow_vector_ops", "dma_busy", "MAX_TRIALS", "MAX_OUT_BYTES", "MIN_DMA_BUSY"]
