"""Wrong programs the fuzzer's causal attention chain (``m100.tools.fuzz_attention``, session 26)
found, each against onnxruntime (``fuzz_onnx.differential``, the quant family's tolerance).

1. A DRB broadcast receiver that nothing on its TPB reads (hbsm-allocate): the main settings'
   program of the W8A8 chain below without its ``v`` output was off by 7.4 (``|y|`` <= 15).
2. The same graph with its ``v`` output and ``list_schedule.ACT_PREFETCH`` on: ``y`` off by up
   to 15 in every row and the ``v`` output itself non-finite, race checks clean, right with the
   switch off -- the fuzzer's first find of an ``ACT_PREFETCH`` program (session 25's wrong one
   was found by the CI's same-bits check of the LLaMA layer: the heads family never drew ``q_j @
   kT_j`` with ``kT`` / ``v`` written by the program). The root was case 1's (pwrong's view
   writers fix, a89061d, did not change it); kept with the switch on and off.

The graph: ``--family quant-attention --seed 29``'s #813 (W8A8, f16, ``x`` [128, 512], 4 heads
of 128, each head's ``kT_j`` a transposed column slice of ``k``, ``v``'s projection after them --
its stores built late, read by the heads' column views).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from m100.passes.schedule import list_schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_act_prefetch import _early_loads  # noqa: E402

#: ``random_quant_attention_graph(RandomChoices(SEED))``: ``--family quant-attention --seed 29``, #813
SEED = 29 * 1_000_003 + 813


def test_broadcast_receiver_nothing_reads(monkeypatch):
    """Case 1: without the ``v`` output, head 0's ``kT`` chunk is broadcast over the DRB to a
    mask of TPBs that includes TPB 7, where no piece reads it. The DMA names only its first
    receiver's buffer, so TPB 7's receiver had no use at all: hbsm-allocate gave it the span of
    its alloc alone and packed it onto the bytes of a V tile held there for its late store
    (``LATE_READ_STORES``), which the broadcast then overwrote -- race checks clean (the
    program's order: broadcast, then the store reads what it wrote), ``y`` off by 7.4. Each
    receiver now lives at least past the broadcast. The program must still have such a
    receiver (else the case checks nothing)."""
    from m100.passes.backend import hbsm_allocate
    from m100.tools.fuzz_graph import RandomChoices
    from m100.tools.fuzz_onnx import differential, tolerance
    from m100.tools.fuzz_quant import random_quant_attention_graph

    idle = []
    orig = hbsm_allocate.allocate

    def spy(bufs, cap, bank, groups, **kw):
        names = {n for g in groups for n in g}
        idle.extend(b for b in bufs if b.name in names and not b.unit)  # no instruction uses it
        return orig(bufs, cap, bank, groups, **kw)

    monkeypatch.setattr(hbsm_allocate, "allocate", spy)
    fg = random_quant_attention_graph(RandomChoices(SEED))
    del fg.model.graph.output[1]  # v: then its tiles are stored late into SRAM, not DDR
    outs = differential(fg, ("m100",), **tolerance(fg))
    assert [o.status for o in outs] == ["pass"], [o.detail for o in outs]
    # (session 26's later plans of this graph had none: pmlp's W8A8 / psched's moves. Only the
    # search's own plan has them -- data-parallel, 16 or 28 TPBs: none; quant-attention seed 27
    # #0-5: none (session 27) -- so the case can not be pinned by options or a seed; every
    # compile checks the receivers from the masks, whatever the plan:
    # hbsm_allocate.check_receivers, test_bcast_unread_receiver)
    if not idle:
        pytest.skip("the plan has no broadcast receiver without a reader any more: the graph "
                    "matches onnxruntime, but the case is not exercised -- find another seed "
                    "(hbsm_allocate's idle receivers; test_bcast_unread_receiver covers the fix)")


@pytest.mark.parametrize("on", [True, False], ids=["prefetch", "no-prefetch"])
def test_quant_attention_chain_with_act_prefetch(on, monkeypatch, placements):
    """Case 2: the graph against onnxruntime on ``m100`` with the switch on and off; the plan must
    build the late stores of ``v`` that the heads read and (on) prefetch some head's run-time
    B operand before the head before it ends on its TPBs (off: none), else the case checks
    nothing (the generator changed: find another seed, ``python -m m100.tools.fuzz_onnx
    --family quant-attention`` with the switch on)."""
    from m100.tools.fuzz_graph import RandomChoices
    from m100.tools.fuzz_onnx import differential, tolerance
    from m100.tools.fuzz_quant import random_quant_attention_graph

    monkeypatch.setattr(list_schedule, "ACT_PREFETCH", on)
    fg = random_quant_attention_graph(RandomChoices(SEED))
    assert len(fg.model.graph.output) == 2, fg.describe()  # y and v
    outs = differential(fg, ("m100",), **tolerance(fg))
    pl = placements[-1]
    n, early = _early_loads(pl)
    assert pl.timeline.late_reads and n, "no late stores / run-time B loads: checks nothing"
    if on:
        assert early, "no head's B operand prefetched: the case checks nothing"
    else:
        assert early == 0, early
    assert [o.status for o in outs] == ["pass"], [o.detail for o in outs]
