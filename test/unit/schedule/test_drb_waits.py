"""Broadcasts wait in the program where the plan made them wait for room on the DRB
(``list_schedule.DRB_WAITS``, ``Plan.drb_wait``; docs/llm.md section 5, session 25 pfid).

The plan books every broadcast's rate on the DRB (``RateProfile``) and starts one only where it
fits beside those booked: a DTDU broadcast of a kept K chunk (``Plan.kept_bcast``) waits for the
CCB DMA engines' weight broadcasts, a weight broadcast for the DTDU broadcasts. The interpreter
runs an instruction as soon as its tokens allow and shares the DRB max-min among what runs on it,
so without these waits in the program the DTDU broadcasts ran beside the weight streams and
slowed them (the 7B prefill layer with broadcasts: 2 595 416 predicted, 2 698 379 simulated).

Oracles, from the cycle model's definitions (``sim/timing.py``), not from the plan's figures:
each DRB transfer's alone rate (its bytes over the cycles it takes alone); the DRB's capacity
(``drb_bandwidth``). Where the plan keeps the DRB within its capacity, the simulated program must
too, up to a sync update's latency where one transfer waits for another's end; a DTDU broadcast
the plan gives its full rate runs at its alone rate. The old program (waits off) breaks both,
by thousands of cycles: the checks see the bug. The numbers are checked against onnxruntime in
``test_keep_lockstep_matmul.py`` (the same model, the same keep mode; race and deadlock checks on).
"""

from __future__ import annotations

import numpy as np
import pytest

from m100.passes.schedule import list_schedule, placement
from m100.targets.m100.machine import get_machine

M, K, N = 256, 2048, 512  # 8 TPBs: 4 rows x 2 column parts (each DTDU broadcast to 2 TPBs)
M100 = get_machine("m100")


def _model():
    """``h = relu(x)``, then ``q = h @ wq`` and ``k = h @ wk`` (both read ``h``, kept in HBSM)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    w = {n: (rng.standard_normal((K, N)) / 64).astype(np.float32) for n in ("wq", "wk")}
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("MatMul", ["h", "wq"], ["q"]),
             helper.make_node("MatMul", ["h", "wk"], ["kk"])]
    graph = helper.make_graph(
        nodes, "drb_waits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, [M, N]),
         helper.make_tensor_value_info("kk", TensorProto.FLOAT, [M, N])],
        [numpy_helper.from_array(a, n) for n, a in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _run(waits: bool, monkeypatch, placements):
    """The plan and the timing-only simulation of the model with ``h`` kept and its K chunks
    broadcast by the DTDUs (keep mode ``all-mm``, ``kept_copies`` not tried)."""
    from m100.sim.simulator import Simulator
    from m100.tools import driver
    monkeypatch.setattr(list_schedule, "DRB_WAITS", waits)
    monkeypatch.setattr(placement, "keep_activations",
                        lambda sched, segs, tl: (sched.build(segs, keep="all-mm"), "all-mm"))
    monkeypatch.setattr(placement, "kept_copies", lambda sched, segs, tl, k: (tl, k))
    cr = driver.compile(_model(), machine="m100", tpbs=8, strategy="data-parallel")
    tl = placements[-1].timeline
    assert tl.kept and tl.kept_bcast, "nothing broadcast from kept pieces: the test checks nothing"
    res = Simulator(cr.program, mode="timing", check_races=False).run({})
    return tl, res


def _drb_streams(res):
    """Per DRB transfer of the simulation: its streaming intervals (its blocks, a DTDU's drain
    tail taken off), its alone rate on the DRB (bytes per cycle), its kind."""
    from m100.sim.timing import CostModel, alone_rate, capacity
    from m100.targets.m100.isa import Broadcast, Dma
    cm = CostModel(M100)
    out = []
    for r in res.records:
        i = r.inst
        if not (isinstance(i, (Dma, Broadcast)) and i.tpb_mask):
            continue
        c = cm.cost(i, 0)
        nb = c.links[("drb",)]
        rate = nb * alone_rate(c, {k: capacity(M100, k) for k in c.links})
        tail = c.latency if isinstance(i, Broadcast) else 0.0
        out.append(([(b0, b1 - tail) for b0, b1 in r.blocks], rate, nb,
                    "dtdu" if isinstance(i, Broadcast) else "dma"))
    return out


def _over_capacity(streams) -> list[float]:
    """The lengths of the intervals where the transfers streaming at once ask the DRB for more
    than its capacity at their alone rates."""
    cap = M100.bytes_per_cycle(M100.drb_bandwidth)
    iv = [(a, b, rate) for blocks, rate, _, _ in streams for a, b in blocks if b > a]
    pts = sorted({x for a, b, _ in iv for x in (a, b)})
    out = []
    for a, b in zip(pts, pts[1:]):
        if sum(r for s, e, r in iv if s <= a and e >= b) > cap * (1 + 1e-9):
            out.append(b - a)
    return out


@pytest.mark.parametrize("waits", [True, False])
def test_broadcasts_keep_the_drb_as_the_plan_books_it(waits, monkeypatch, placements):
    tl, res = _run(waits, monkeypatch, placements)
    streams = _drb_streams(res)
    kinds = {k for *_, k in streams}
    assert kinds == {"dma", "dtdu"}, kinds
    # the plan: within the DRB's capacity at every start; each wait is for broadcasts that
    # ended before the waiting one starts
    # (a CCB DMA books its data phase, at its end: its cycles after the setup and latency)
    from m100.passes.schedule.cost import CostModel
    cm = CostModel(M100)
    cap = M100.bytes_per_cycle(M100.drb_bandwidth)
    bc = []
    for t in tl.tasks:
        if len(t.dst_tpbs) > 1 and t.cycles > 0:
            d = t.cycles - (cm.dma_latency(t.src, t.dst) if t.unit == "dma" else 0.0)
            bc.append((t.end - d, t.end, t.nbytes / d))
    for s0, _, _ in bc:
        assert sum(r for s, e, r in bc if s <= s0 < e) <= cap * (1 + 1e-6)
    assert bool(tl.drb_wait) == waits
    for tid, who in tl.drb_wait.items():
        for w in who:
            assert len(tl.tasks[w].dst_tpbs) > 1 and tl.tasks[w].end <= tl.tasks[tid].start
    # the simulation: the DRB over its capacity only for a sync update's latency at a time
    over = _over_capacity(streams)
    lat = M100.remote_update_latency_inter
    # a DTDU broadcast the plan booked at its full rate runs at its alone rate
    stretch = sum(sum(b - a for a, b in blocks) - nb / rate
                  for blocks, rate, nb, k in streams if k == "dtdu")
    if waits:
        assert max(over, default=0.0) <= lat, sorted(over)[-5:]
        assert stretch <= 1e-6 * res.total_cycles, stretch
        pred = float(placements[-1].timeline.makespan)
        assert abs(res.total_cycles / pred - 1) < 0.005, (res.total_cycles, pred)
    else:  # the old program: the checks above see it (thousands of cycles, not a latency)
        assert max(over) > 20 * lat and stretch > 1000, (max(over), stretch)
