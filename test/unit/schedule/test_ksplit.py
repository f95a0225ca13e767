"""K split (issue 9): a contraction whose reduction is split over several TPBs (``StageCfg.ks``).

Oracles: the MACs and weight bytes a conv must move follow from its shapes alone (every K chunk of
every output tile computed once, every weight byte read once per round); ``m100 check`` compares
the program's numbers with onnxruntime (both sync modes).
"""

import math
import os
import sys

import numpy as np
import pytest

from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.examples import GraphBuilder
from m100.passes.schedule.placement import schedule
from m100.passes.schedule.segment import SegmentCfg, StageCfg
from m100.passes.schedule.timeline import Scheduler
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _conv_graph(hw, c, f, epilogue=("relu",)):
    b = GraphBuilder()
    x = b.input((1, hw, hw, c))
    return b.output(b.conv(x, f, 3, epilogue=epilogue)) if epilogue else b.output(b.conv(x, f, 3))


def test_ksplit_plan_computes_every_chunk_once_and_reduces_on_part0():
    hw, c, f = 7, 512, 512
    g = _conv_graph(hw, c, f)
    op = g.ops[0]
    s = Scheduler(CostModel(M100), g)
    gc, ks = 8, 4
    st = StageCfg(op.name, tuple(range(gc * ks)), gc, 1, ks=ks)
    tl = s.build([SegmentCfg((st,), "data-parallel")], isolated=True)
    tp = tl.plans[op.name]
    # every MAC of the conv exactly once (K chunks dealt to the parts, none twice, none lost)
    assert sum(t.macs for t in tl.tasks if t.unit == "tcu") == hw * hw * f * 9 * c
    # the weight is read from DDR once (one round, every row tile of the band shares a chunk by
    # its broadcast): K x F x 4 bytes times the row tiles of the band
    row_tiles = math.ceil(hw / tp.tr)
    w_read = sum(t.nbytes for t in tl.tasks if t.kind == "dma-in" and t.tensor == op.inputs[1])
    assert w_read == 9 * c * f * 4 * row_tiles
    # one reduction per output tile on the TPB of part 0, after the copies of parts 1..3
    reds = [p for ps in tl.pieces for p in ps if p.reduce]
    col_tiles = math.ceil(f / gc / tp.tc)
    assert len(reds) == gc * col_tiles * row_tiles
    by_id = {t.id: t for t in tl.tasks}
    for r in reds:
        assert len(r.reduce) == ks and r.tpb == r.reduce[0]
        tasks = [by_id[i] for i in r.tasks]
        copies = [t for t in tasks if t.kind == "copy"]
        assert sorted(t.tpb for t in copies) == sorted(r.reduce[1:])
        assert all(t.dst_tpbs == (r.tpb,) for t in copies)
        cvu = [t for t in tasks if t.unit == "cvu"]
        assert len(cvu) == 1 and cvu[0].tpb == r.tpb
        assert {c.id for c in copies} <= set(cvu[0].deps)
        assert [t.kind for t in tasks][-1] == "dma-out"  # the reduced tile is stored
    # a K part stores nothing itself
    assert all(not p.store for ps in tl.pieces for p in ps if p.kparts > 1)
    for t in tl.tasks:
        assert all(by_id[d].end <= t.start + 1e-6 for d in t.deps)


def test_search_splits_k_of_a_small_output_conv():
    # 7x7 output, 512 -> 512: 16 natural output tiles for 56 TPBs. Without a K split the search
    # predicted 105 410 cycles on 16 TPBs; with it every TPB works (the cost model compares both)
    g = _conv_graph(7, 512, 512)
    pl = schedule(g, M100)
    st = pl.segments[0].stages[0]
    assert st.ks > 1 and len(st.tpbs) > 16
    # and not where the output alone fills the machine
    g = _conv_graph(56, 64, 64)
    assert schedule(g, M100).segments[0].stages[0].ks == 1


def _conv_model(hw, c, f, seed=0):
    from onnx import helper
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import fidelity as F
    rng = np.random.default_rng(seed)
    inits = {"w": (rng.standard_normal((f, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32),
             "b": (rng.standard_normal(f) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    return F._onnx_model(nodes, "convk", [("x", [1, c, hw, hw], np.float32)],
                         [("y", [1, f, hw, hw], np.float32)], inits)


def _gemm_model(m, k, n, seed=0):
    from onnx import helper
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import fidelity as F
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return F._onnx_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"]),
                          helper.make_node("Relu", ["g"], ["y"])], "gemmk",
                         [("x", [m, k], np.float32)], [("y", [m, n], np.float32)],
                         {"w": w, "b": b})


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
@pytest.mark.parametrize("case", ["conv", "gemm"])
def test_ksplit_numbers_match_onnxruntime(case, mode):
    """A conv (bias + ReLU applied after the cross-TPB sum) and a small-M GEMM whose reductions
    the search splits over TPBs: ``m100 check`` against onnxruntime."""
    from m100.targets.m100.isa import CvuPipeline
    from m100.tools import driver
    model = _conv_model(7, 256, 128) if case == "conv" else _gemm_model(8, 1024, 256)
    ck = driver.check(model, machine="m100", sync_mode=mode)
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
    # the model is one contraction with a fused epilogue: every CVU pipeline is a reduction
    prog = ck.compile.program
    assert any(isinstance(i, CvuPipeline) for _, i in prog.instructions())
