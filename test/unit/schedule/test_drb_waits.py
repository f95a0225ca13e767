"""DTDU broadcasts wait in the program where the plan made them wait for room on the DRB
(``list_schedule.DRB_WAITS``, ``Plan.drb_wait``; docs/llm.md section 5, session 25 pfid).

The plan books every broadcast's rate on the DRB (``RateProfile``) and starts a DTDU broadcast of
a kept K chunk (``Plan.kept_bcast``) only where it fits beside the broadcasts booked there (the
CCB DMA engines' weight streams fill the DRB). The interpreter runs an instruction as soon as its
tokens allow and shares the DRB max-min among what runs on it, so without a wait in the program
the DTDU broadcasts ran beside the weight streams and slowed them (the 7B prefill layer with
broadcasts: 2 595 416 predicted, 2 698 379 simulated).

Oracles, from the cycle model's definitions (``sim/timing.py``), not from the plan's figures:
the simulated streaming intervals of each waiting broadcast and of the broadcasts it waits for
(the interpreter's records; a DTDU's drain tail taken off) must not overlap; each DRB transfer's
alone rate (its bytes over the cycles it takes alone) gives how much longer the DTDU broadcasts
took than alone. The old program (waits off, the same waits recorded by the plan) breaks the
first by thousands of cycles: the check sees the bug. The numbers are checked against
onnxruntime in ``test_keep_lockstep_matmul.py`` (the same model and keep mode; race and deadlock
checks on).
"""

from __future__ import annotations

from m100.passes.schedule import list_schedule, placement
from m100.targets.m100.machine import get_machine

# ``h = relu(x)``, then ``q = h @ wq`` and ``k = h @ wk`` (both read ``h``, kept in HBSM), 256 x
# 2048 @ 2048 x 512 on 8 TPBs: 4 rows x 2 column parts (each DTDU broadcast to 2 TPBs)
from .test_keep_lockstep_matmul import _model

M100 = get_machine("m100")


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
    return cr, tl, res


def _records(cr, res):
    """The simulation's record of each plan task: by (unit, TPB or DMA engine, predicted start,
    predicted end), from the ``pred_start`` / ``pred_end`` the emitter writes on each
    instruction (matched by stream and position, as ``bench/fidelity.instruction_diff``)."""
    from m100.dialects.tpb import InstrOp, ProgramOp, StreamOp
    from m100.dialects.translate import op_to_instruction
    from m100.targets.m100.isa import Dma
    from m100.targets.m100.program import CCB_STREAM
    prog = next(o for o in cr.module.walk() if isinstance(o, ProgramOp))
    preds: dict[int, list] = {}
    for op in prog.body.ops:
        ops = [(op.cluster.value.data, o) for o in op.body.ops if isinstance(o, InstrOp)] \
            if isinstance(op, StreamOp) else [(None, op)] if isinstance(op, InstrOp) else []
        for key, o in ops:
            if key is None:
                i = op_to_instruction(o)
                key = CCB_STREAM if isinstance(i, Dma) else M100.cluster_of(i.tpb)
            a = o.attributes
            preds.setdefault(key, []).append(
                (a["pred_start"].value.data, a["pred_end"].value.data) if "pred_start" in a
                else None)
    out = {}
    for r in res.records:
        p = preds[r.stream][r.pos]
        if p is not None:
            i = r.inst
            who = ("dma", i.engine) if isinstance(i, Dma) else ("tpb", i.tpb)
            out[(who, int(p[0]), int(p[1]))] = r
    return out


def _stream(r):
    """(start, end) of a record's streaming: its blocks, a DTDU's drain tail taken off."""
    from m100.sim.timing import CostModel
    from m100.targets.m100.isa import Broadcast
    tail = CostModel(M100).cost(r.inst, 0).latency if isinstance(r.inst, Broadcast) else 0.0
    return r.blocks[0][0], r.blocks[-1][1] - tail


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


def test_dtdu_broadcasts_wait_on_the_drb_as_the_plan_books_it(monkeypatch, placements):
    """With the waits each DTDU broadcast the DRB delayed streams after the broadcasts it waits
    for in the simulation too; without them (the old program) some stream beside them."""
    got = {}
    for waits in (False, True):
        cr, tl, res = _run(waits, monkeypatch, placements)
        # the plan: within the DRB's capacity at every start (a CCB DMA books its data phase,
        # at its end: its cycles after the setup and latency); each wait is for broadcasts
        # that ended before the waiting one starts
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
        assert tl.drb_wait, "no broadcast waited on the DRB: the test checks nothing"
        kinds = set()
        for tid, who in tl.drb_wait.items():
            assert tl.tasks[tid].unit == "dtdu"
            for w in who:
                assert len(tl.tasks[w].dst_tpbs) > 1 and tl.tasks[w].end <= tl.tasks[tid].start
                kinds.add(tl.tasks[w].unit)
        assert "dma" in kinds, kinds  # (DTDU broadcasts waiting for the weight streams)
        recs = _records(cr, res)

        def rec(t):
            who = ("dma", t.engine) if t.unit == "dma" else ("tpb", t.tpb)
            return recs[(who, int(t.start), int(t.end))]
        # how far each waiting broadcast streams into the ones it waits for (<= 0: after them)
        into = [_stream(rec(tl.tasks[w]))[1] - _stream(rec(tl.tasks[tid]))[0]
                for tid, who in tl.drb_wait.items() for w in who]
        stretch = sum(sum(b - a for a, b in blocks) - nb / rate
                      for blocks, rate, nb, k in _drb_streams(res) if k == "dtdu")
        got[waits] = (max(into), stretch)
    (old_into, old_stretch), (new_into, new_stretch) = got[False], got[True]
    assert new_into <= 0.0, got  # exact: the program waits for them (sync tokens)
    assert old_into > 20 * M100.remote_update_latency_inter, got  # the old program: it did not
    # the DTDU broadcasts lose a tenth of the time they lost beside the weight streams or less
    assert new_stretch < old_stretch / 10, got
