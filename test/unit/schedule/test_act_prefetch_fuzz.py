"""The fuzzer's causal attention chain (``m100.tools.fuzz_attention``, session 26) against the
heads' run-time B operands prefetched across segments (``list_schedule.ACT_PREFETCH``).

Session 25's wrong ``ACT_PREFETCH`` program was found by the CI's same-bits check of the LLaMA
layer, not by the fuzzer, whose heads family never drew ``q_j @ kT_j`` with ``kT`` / ``v``
written by the program. The chain draws it now; ``--family quant-attention --seed 29``'s graph
#813 (W8A8, f16, ``x`` [128, 512], 4 heads of 128, each head's ``kT_j`` a transposed column
slice of ``k``, ``v``'s projection after them -- its stores built late, read by the heads'
column views -- and ``v`` a model output too) is computed wrong with the switch on: ``y`` off by
up to 15 in every row and the ``v`` output itself off (non-finite), race checks clean; with it
off it matches onnxruntime (``v`` bit for bit). Oracle: onnxruntime
(``fuzz_onnx.differential``, the quant family's tolerance, and the dataflow check). The cause
(session 26, pwrong): a head's kT broadcast to 12 TPBs, 6 of which read causal-clipped copies of
their own; hbsm-allocate gave those 6 receivers no lifetime at the broadcast, so the prefetched
broadcast overwrote the projection's A tiles still read there (``test_bcast_unread_receiver``).
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


@pytest.mark.parametrize("on", [True, False], ids=["prefetch", "no-prefetch"])
def test_quant_attention_chain_with_act_prefetch(on, monkeypatch, placements):
    """The graph against onnxruntime on ``m100`` with the switch on and off; the plan must
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
