"""Resident-activation matmuls (issue 9, int8 4096^3): band rows kept whole, B streamed past them.

``StageCfg.act_resident``: every band's rows (all of K) are one DRB broadcast to the band's column
parts and stay in the HBSM; B streams in column tiles (one broadcast per column tile and K chunk to
the TPB rows); each column tile's output is stored while the next column tile computes (its store
is created after the next group's first transfer, so B's next tile goes ahead of the stores on the
DMA engines). Oracles: the bytes follow from the shapes alone (A once, B once, every output
element stored exactly once); the numbers from the ONNX MatMulInteger / Gemm definitions (numpy
int32 products, onnxruntime).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from m100.passes.schedule.placement import Search
from m100.passes.schedule.segment import SegmentCfg, StageCfg, tile_band_rows

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import fidelity as F  # noqa: E402


def _graph(model, machine):
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.targets.m100.machine import get_machine
    from m100.tools.driver import load_model
    ctx = shared_context()
    mod, _ = load_model(model, ctx)
    M100Graph().apply(ctx, mod)
    m = get_machine(machine)
    return from_module(mod, m.cvu_max_stages).graph, m


def _force(monkeypatch, gc: int, gr: int, tc: int) -> None:
    """The search returns the resident-activation configuration (gc column parts, gr bands)."""
    def forced(self, op, max_k=None):
        cfg = SegmentCfg((StageCfg(op.name, self.tpbs[:gr * gc], gc, gr, act_resident=tc),),
                         "data-parallel")
        return cfg, self.cost(cfg)
    monkeypatch.setattr(Search, "best_data_parallel", forced)


def test_tile_band_rows_whole_row_tiles_larger_first():
    for rows, bands in ((4096, 14), (200, 4), (4096, 4), (33, 2), (64, 2)):
        cuts = [tile_band_rows(rows, bands, b, 32) for b in range(bands)]
        assert cuts[0][0] == 0 and cuts[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))  # contiguous, disjoint
        assert all(lo % 32 == 0 for lo, _ in cuts)  # every band starts on a TCU row tile
        sizes = [-(-(hi - lo) // 32) for lo, hi in cuts]
        assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1
    assert [tile_band_rows(4096, 14, b, 32)[1] - tile_band_rows(4096, 14, b, 32)[0]
            for b in range(14)] == [320, 320] + [288] * 12


def test_plan_reads_a_and_b_once_stores_every_row_once_and_overlaps_stores():
    from m100.passes.schedule.timeline import Scheduler
    from m100.passes.schedule.cost import CostModel
    m_, k_, n_ = 512, 1024, 1024
    g, mach = _graph(F.gemm_int8_weight(m_, k_, n_), "m100")
    op = g.ops[0]
    gc, gr, tc = 2, 4, 128
    st = StageCfg(op.name, tuple(range(gc * gr)), gc, gr, act_resident=tc)
    tl = Scheduler(CostModel(mach), g).build([SegmentCfg((st,), "data-parallel")], isolated=True)
    tp = tl.plans[op.name]
    assert tp.act_resident and tp.tc == tc and tp.tr == m_ // gr
    x_t, w_t = op.inputs[0], op.inputs[1]
    read = {x_t: 0.0, w_t: 0.0}
    for t in tl.tasks:
        if t.kind == "dma-in":
            read[t.tensor] += t.nbytes
            if t.tensor == x_t:  # a band's rows: one broadcast to the band's column parts
                assert len(t.dst_tpbs) == gc and len({x // gc for x in t.dst_tpbs}) == 1
            else:  # a column tile chunk: one broadcast to the TPB rows of its column part
                assert len(t.dst_tpbs) == gr and len({x % gc for x in t.dst_tpbs}) == 1
    assert read[x_t] == m_ * k_ and read[w_t] == k_ * n_  # int8: A once, B once
    # every output element stored exactly once, by the store of the piece that computed it
    seen = np.zeros((m_, n_), np.int32)
    pieces = [p for p in tl.pieces[0]]
    by_id = {t.id: t for t in tl.tasks}
    for p in pieces:
        assert p.store and p.r0 % 32 == 0
        seen[p.r0:p.r1, p.c0:p.c1] += 1
        stores = [by_id[i] for i in p.tasks if by_id[i].kind == "dma-out"]
        assert len(stores) == 1 and stores[0].nbytes == (p.r1 - p.r0) * (p.c1 - p.c0) * 4
        assert stores[0].deps == [p.compute]
    assert (seen == 1).all()
    # per TPB: the store of column tile i runs while column tile i + 1 computes
    per_tpb: dict[int, list] = {}
    for p in pieces:
        per_tpb.setdefault(p.tpb, []).append(p)
    overlaps = 0
    for tpb, ps in per_tpb.items():
        for a, b in zip(ps, ps[1:]):
            st_a = next(by_id[i] for i in a.tasks if by_id[i].kind == "dma-out")
            cb = by_id[b.compute]
            first_b = min(by_id[i].start for i in b.tasks if by_id[i].kind == "compute")
            overlaps += st_a.start < cb.end and st_a.end > first_b
    assert overlaps >= 0.9 * sum(len(ps) - 1 for ps in per_tpb.values())
    # program order: a group's stores come after the next group's first B transfer
    groups: dict[int, list] = {}
    for p in pieces:
        groups.setdefault(p.group, []).append(p)
    order = sorted(groups)
    for g0, g1 in zip(order, order[1:]):
        store_ids = [i for p in groups[g0] for i in p.tasks if by_id[i].kind == "dma-out"]
        first_w = min(i for p in groups[g1] for i in p.tasks if by_id[i].kind == "dma-in"
                      and by_id[i].tensor == w_t)
        assert min(store_ids) > first_w
    for t in tl.tasks:  # the list schedule honours every dependency
        assert all(by_id[d].end <= t.start + 1e-6 for d in t.deps)


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
@pytest.mark.parametrize("case", ["m100-8", "tiny-chunked"])
def test_int8_matmul_numbers_match_numpy(monkeypatch, case, mode):
    """MatMulInteger (int8 x int8 -> int32) compiled with resident activations, run on the
    interpreter, against numpy's int32 product (the ONNX definition, zero points 0). ``m100-8``:
    200 rows (the last band of 8 rows, a partial TCU tile), whole-K column tiles; ``tiny``:
    64 KiB HBSM, so B's column tiles come in K chunks (an accumulate chain). K >= 1024: the
    frontend keeps a shorter MatMulInteger as an exact f32 contraction."""
    from m100.tools import driver
    if case == "m100-8":
        machine, tpbs, (m_, k_, n_), (gc, gr, tc) = "m100", 8, (200, 1024, 512), (2, 4, 128)
    else:
        machine, tpbs, (m_, k_, n_), (gc, gr, tc) = "tiny", 2, (32, 1024, 256), (1, 2, 64)
    _force(monkeypatch, gc, gr, tc)
    model = F.gemm_int8_weight(m_, k_, n_, seed=3)
    from onnx import numpy_helper
    w = numpy_helper.to_array(model.graph.initializer[0])
    cr = driver.compile(model, machine=machine, tpbs=tpbs, sync_mode=mode)
    from m100.targets.m100.isa import DType, MatMul
    mm = [i for _, i in cr.program.instructions() if isinstance(i, MatMul)]
    assert mm and all(i.a.dtype is DType.I8 and i.c.dtype is DType.I32 for i in mm)
    # one instruction per band and column tile, or (tiny) per K chunk of it
    assert (len(mm) > (n_ // tc) * gr) == (case == "tiny-chunked")
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, size=(m_, k_)).astype(np.int8)
    x[0, :] = -128  # extremes: the largest magnitude products
    res = driver.run(cr.program, {"x": x})
    want = x.astype(np.int32) @ w.astype(np.int32)
    got = res.outputs["y"]
    assert got.dtype == np.int32 and np.array_equal(got.reshape(m_, n_), want)


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
def test_f32_gemm_bias_relu_matches_onnxruntime(monkeypatch, mode):
    """A Gemm + bias + ReLU (the bias loaded per column tile) with resident activations:
    ``m100 check`` against onnxruntime."""
    from onnx import helper
    from m100.tools import driver
    rng = np.random.default_rng(1)
    m_, k_, n_ = 96, 256, 512
    w = (rng.standard_normal((k_, n_)) / 16).astype(np.float32)
    b = rng.standard_normal(n_).astype(np.float32)
    model = F._onnx_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"]),
                           helper.make_node("Relu", ["g"], ["y"])], "gemmar",
                          [("x", [m_, k_], np.float32)], [("y", [m_, n_], np.float32)],
                          {"w": w, "b": b})
    _force(monkeypatch, 2, 3, 64)
    ck = driver.check(model, machine="m100", tpbs=6, sync_mode=mode)
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
