"""Two whole-plan changes of lockstep integer matmuls (docs/llm.md section 5, session 26): the
K-chunked first tile (``kinds.tcu.FIRST_K_CHUNK``: the first piece on each TPB computes K chunk by
K chunk while its whole-K activation band arrives by one DRB broadcast per chunk into the band
buffer that the later pieces read whole) and the stores of a group spread over the next group's
steps (``build_segments.CARRY_STEPS``).

Oracles (a W8A8 projection whose tiling is held whole-K, as LLaMA2-7B's up is): the program
built with both off (every piece reads its band whole: the same bits -- an i8 x i8 -> i32 chain
is exact in any K order), numpy from the ONNX definitions and onnxruntime (bit-exact), the
interpreter's race / deadlock checks (full mode), and in the plan each
chunked piece's chunk broadcasts (their bytes, their receivers, the later pieces' waits on all of
them; each spread store built after the next group's first step, some after its second),
found from the tasks.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from m100.passes.schedule import build_segments
from m100.passes.schedule.kinds import tcu
from m100.passes.schedule.timeline import Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
from test_llm_w8 import _projection  # noqa: E402

M, K, N = 256, 1024, 4096  # on 8 TPBs: 4 bands x 2 column parts, tiles of 64 x 128
CHUNK = 256  # K in four chunks


def _whole_k(monkeypatch):
    """The projection's tiling with its K whole and 128-column tiles (the search chooses 64 x
    1024 x 512 at this size; LLaMA2-7B's up, 147 x 64 x 4096, keeps K whole on its own): the
    pieces then read their activation band whole, the case the switch chunks, and each column
    part has 16 column tiles (lockstep groups) whose stores the next group carries."""
    orig = Scheduler.stage_plan

    def stage_plan(self, seg, st):
        tp = orig(self, seg, st)
        if self.ops[st.op].unit == "tcu.matmul" and not tp.weight_resident and tp.tk < tp.k:
            return replace(tp, tk=tp.k, tc=min(tp.tc, 128))  # (a whole-K weight tile fits)
        return tp

    monkeypatch.setattr(Scheduler, "stage_plan", stage_plan)


def _plan_checks(pl) -> int:
    """Every chunked piece is its op's first compute on its TPB, reads K / CHUNK band chunks of
    rows x CHUNK bytes broadcast to the column parts of its TPB row, and every later piece of
    its op on that TPB waits for all of them. Returns the number of chunked pieces."""
    tl, g = pl.timeline, pl.graph
    tasks = tl.tasks
    n = 0
    for si, pcs in enumerate(tl.pieces):
        for p in pcs:
            if not p.kfirst:
                continue
            n += 1
            st = next(s for s in tl.segments[si].stages if s.op == p.op)
            op = next(o for o in g.ops if o.name == p.op)
            k, x = op.attrs["k"], op.inputs[0]
            assert p.kfirst == CHUNK and k % CHUNK == 0 and k > CHUNK
            first = min((q for q in pcs if q.op == p.op and q.tpb == p.tpb),
                        key=lambda q: tasks[q.compute].start)
            assert first is p
            row = st.row_of(p.band) * st.gc
            mine = [tasks[i] for i in p.tasks]
            comps = [t for t in mine if t.kind == "compute"]
            assert len(comps) == k // CHUNK
            chunks = sorted({d for c in comps for d in c.deps
                             if tasks[d].kind == "dma-in" and tasks[d].tensor == x},
                            key=lambda d: tasks[d].start)
            assert len(chunks) == k // CHUNK
            for d in chunks:
                t = tasks[d]
                assert t.nbytes == (p.r1 - p.r0) * CHUNK * 1  # i8
                assert tuple(t.dst_tpbs) == tuple(st.tpbs[row:row + st.gc])
            for q in pcs:
                if q.op == p.op and q.tpb == p.tpb and q is not p:
                    c = tasks[[i for i in q.tasks if tasks[i].kind == "compute"][0]]
                    assert set(chunks) <= set(c.deps), (q, chunks)
    return n


def _carry_checks(pl) -> int:
    """In each segment of ``Plan.carry`` the stores of every group but the last are built after
    the next group's first step (their task ids: build order), and some after its second (the
    spread). Returns the number of such segments."""
    tl = pl.timeline
    tasks = tl.tasks
    for si in tl.carry:
        groups: dict[int, list] = {}
        for p in tl.pieces[si]:
            groups.setdefault(p.group, []).append(p)
        order = sorted(groups)
        assert len(order) > 1
        for a, b in zip(order, order[1:]):
            stores = [i for p in groups[a] for i in p.tasks if tasks[i].kind == "dma-out"]
            comps = sorted(i for p in groups[b] for i in p.tasks if tasks[i].kind == "compute")
            steps = len(comps) // len(groups[b])
            assert stores and min(stores) > comps[0], (si, a)
            if steps >= 2 and len(stores) >= 2:
                second = sorted(i for p in groups[b] for i in [
                    [t for t in p.tasks if tasks[t].kind == "compute"][1]])[0]
                assert max(stores) > second, (si, a)
    return len(tl.carry)


@pytest.mark.parametrize("M,K,N", [(M, K, N), (120, 2048, 4096)], ids=["256x1024", "120x2048"])
def test_first_tile_k_chunked_and_spread_stores_same_bits(monkeypatch, placements, M, K, N):
    """The projection compiled with both has chunked pieces and spread stores (the plan checks
    above), runs race-free in full mode, passes the dataflow check and gives the bits of the
    program built with both off, which are numpy's from the ONNX definitions and onnxruntime's
    (the second size: 120 rows, K in eight chunks)."""
    from m100.frontend.ort_session import ort_session
    from m100.tools import driver
    _whole_k(monkeypatch)
    rng = np.random.default_rng(26)
    w = rng.integers(-128, 128, (K, N)).astype(np.int8)
    dq = (rng.random(N) * 1e-3 + 1e-4).astype(np.float32)
    x = (rng.standard_normal((M, K)) * 2).astype(np.float16)
    model = _projection(M, K, N, False, w, dq)
    got = {}
    for on in (True, False):
        monkeypatch.setattr(tcu, "FIRST_K_CHUNK", CHUNK if on else 0)
        monkeypatch.setattr(build_segments, "CARRY_STEPS", 4 if on else 1)
        cr = driver.compile(model, machine="m100", tpbs=8)
        prog = cr.program
        assert driver.check_dataflow(cr) == []  # every read reads the tensor the plan meant
        pl = placements[-1]
        n, c = _plan_checks(pl), _carry_checks(pl)
        assert (n > 0, c > 0) == (on, on), (n, c)
        res = driver.run(prog, {"x": x})  # full mode: races and deadlocks checked
        assert res.ok and not res.reports, res.reports[:3]
        got[on] = res.outputs["y"].reshape(M, N)
    assert np.array_equal(got[True], got[False])
    # numpy from the definitions: QuantizeLinear (s = 1/32, exact), MatMulInteger in int64,
    # Cast to f32, Mul in f32, Cast to f16
    xq = np.clip(np.rint(x.astype(np.float64) * 32), -128, 127).astype(np.int64)
    want = ((xq @ w.astype(np.int64)).astype(np.float32) * dq).astype(np.float16)
    assert np.array_equal(got[True], want)
    assert np.array_equal(got[True], ort_session(model).run(["y"], {"x": x})[0])


def test_first_k_chunk_applies_to_integer_lockstep_pieces_only():
    """The rule's own cases: off, not the first piece on the TPB, a float activation, K whole
    in one chunk, one column part, a resident weight."""
    from types import SimpleNamespace
    op = SimpleNamespace(unit="tcu.matmul", attrs={})
    p = SimpleNamespace(group=0, kparts=1, kx=0, cfull=0, b_share=(0, 8))
    args = dict(op=op, k=512, tk=512, weight_resident=False, act_resident=False, p=p,
                x_dtype="i8", started=False, gc=8, streamed=False, isolated=False)
    old = tcu.FIRST_K_CHUNK
    try:
        tcu.FIRST_K_CHUNK = 128
        assert tcu.first_k_chunk(**args) == 128
        for k, v in (("started", True), ("x_dtype", "f16"), ("k", 128), ("gc", 1),
                     ("weight_resident", True), ("isolated", True), ("tk", 256),
                     ("streamed", True), ("act_resident", True)):
            assert tcu.first_k_chunk(**{**args, k: v}) == 0, k
        tcu.FIRST_K_CHUNK = 0
        assert tcu.first_k_chunk(**args) == 0
    finally:
        tcu.FIRST_K_CHUNK = old
