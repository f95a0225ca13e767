"""Activations kept in the producer TPBs' HBSM between segments (issue 9, ``passes/schedule/keep.py``).

Oracles: the rows a conv piece needs are recomputed here from the conv's definition (output row
``r`` reads input rows ``r*s - pad .. r*s - pad + kh - 1``); the same plan without keeping moves
the same weights; the HBSM share is recomputed from the plan's tile footprints; the numbers of
a program whose activations are kept are compared with onnxruntime in both sync modes.
"""

from collections import Counter

import numpy as np
import pytest

from m100.passes.schedule import placement
from m100.passes.schedule import list_schedule as LS
from m100.passes.schedule import timeline as T
from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.examples import GraphBuilder
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")
TPBS = tuple(range(8))


def _chain():
    """conv -> conv -> conv (3x3, pad 1, ReLU), 16x16x32: each one data-parallel segment."""
    b = GraphBuilder()
    x = b.input((1, 16, 16, 32))
    for _ in range(3):
        x = b.conv(x, 32, 3, epilogue=("relu",))
    g = b.output(x)
    # 4 bands x 2 column parts: a piece of the next conv needs rows of up to 3 bands (halo)
    # and both column parts (all input channels)
    segs = [T.SegmentCfg((T.StageCfg(op.name, TPBS, gc=2, bands=4),)) for op in g.ops]
    return g, segs


def test_kept_conv_outputs_are_copied_not_stored():
    g, segs = _chain()
    s = T.Scheduler(CostModel(M100), g)
    base = s.build(segs)
    tl = s.build(segs, keep="all")
    ops = [op.name for op in g.ops]
    assert base.kept == set() and tl.kept == set(ops[:2])  # the last one is the model output
    kept_t = {g.ops[0].outputs[0], g.ops[1].outputs[0]}
    # nothing of a kept tensor goes through memory
    assert not [t for t in tl.tasks if t.unit == "dma" and t.tensor in kept_t]
    assert {t.tensor for t in base.tasks if t.unit == "dma" and t.role in ("act", "out")} >= kept_t
    # the weights move exactly as without keeping
    w = lambda p: Counter((t.tensor, round(t.nbytes), t.dst_tpbs)  # noqa: E731
                          for t in p.tasks if t.unit == "dma" and t.role in ("w", "bias"))
    assert w(tl) == w(base)
    # each piece of conv 2 and 3 receives exactly its input rows (halo included) x all 32
    # channels, each cell once, from the pieces of the segment before that hold them (16
    # columns x 4 bytes per cell)
    for si in (1, 2):
        prod = {p.compute: p for p in tl.pieces[si - 1]}
        for p in tl.pieces[si]:
            lo, hi = max(0, p.r0 - 1), min(16, p.r1 + 1)  # stride 1, pad 1, 3 rows
            cps = [tl.tasks[i] for i in p.tasks if tl.tasks[i].kind == "copy"]
            assert cps and all(c.dst_tpbs == (p.tpb,) for c in cps)
            cells = []
            for c in cps:
                q = prod[c.deps[0]]  # the producer piece's compute comes first
                assert q.tpb == c.tpb  # the DTDU of the TPB holding the rows sends them
                rows = range(max(lo, q.r0), min(hi, q.r1))
                cells += [(r, ch) for r in rows for ch in range(q.c0, q.c1)]
                assert c.nbytes == len(rows) * 16 * (q.c1 - q.c0) * 4
            assert sorted(cells) == [(r, ch) for r in range(lo, hi) for ch in range(32)]


def test_kept_bytes_stay_within_the_hbsm_share():
    g, segs = _chain()
    s = T.Scheduler(CostModel(M100), g)
    tl = s.build(segs, keep="all")
    cap = M100.hbsm_bytes * LS.PREFETCH_HBSM_SHARE
    held = Counter()
    for name in tl.kept:  # all of a kept op's output tiles, from its segment to its reader's
        si = next(i for i, sg in enumerate(segs) if sg.ops == (name,))
        for p in tl.pieces[si]:
            nb = -(-p.out_dims[0] * p.out_dims[1] * p.out_dims[2] * 4 // M100.hbsm_bank_width) \
                * M100.hbsm_bank_width
            for q in (si, si + 1):
                held[(p.tpb, q)] += nb
    assert held
    for (x, q), nb in held.items():
        assert nb + tl.plans[segs[q].ops[0]].footprint <= cap


def test_keep_is_refused_when_the_hbsm_is_full():
    g, segs = _chain()
    # (40 KB: the pieces' footprints fill the share; since the once-filled buffers count one
    # slot -- ``tile_piece(once=True)``, session 19 -- 64 KB left room to keep two of them)
    small = M100.replace(hbsm_bytes=40 * 1024)
    tl = T.Scheduler(CostModel(small), g).build(segs, keep="all")
    assert tl.kept == set()


def test_keep_activations_returns_a_shorter_plan_or_the_same():
    g, segs = _chain()
    s = T.Scheduler(CostModel(M100), g)
    base = s.build(segs)
    tl, mode = placement.keep_activations(s, segs, base)
    assert (tl is base and mode == "") or (tl.kept and tl.makespan < base.makespan and mode)


def _block_onnx():
    """A ResNet basic block, 16x16x32: conv-relu-conv, + x, relu, then one more conv."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = [(rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32) for _ in range(3)]
    bias = [rng.standard_normal(32).astype(np.float32) for _ in range(3)]
    conv = lambda i, x, y: helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y],  # noqa: E731
                                            kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [conv(0, "x", "c0"), helper.make_node("Relu", ["c0"], ["r0"]),
             conv(1, "r0", "c1"), helper.make_node("Add", ["c1", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["r1"]), conv(2, "r1", "y")]
    inits = [numpy_helper.from_array(a, n) for i in range(3)
             for a, n in ((w[i], f"w{i}"), (bias[i], f"b{i}"))]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_kept_activations_match_onnxruntime(monkeypatch):
    """Every eligible activation kept (whether or not the plan gets shorter): the program reads
    them from the producer TPBs and computes what onnxruntime computes."""
    from m100.tools import driver
    seen = []

    def force(sched, segs, tl):
        tl2 = sched.build(segs, keep="all")
        seen.append(tl2.kept)
        return tl2, "all"

    monkeypatch.setattr(placement, "keep_activations", force)
    # (both sync modes: test_kept_ksplit_outputs_match_onnxruntime)
    ck = driver.check(_block_onnx(), machine="m100", tpbs=8, strategy="data-parallel")
    assert seen and seen[-1], "nothing was kept: the test checks nothing"
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()


def _ksplit_onnx():
    """Two 7x7 convs 256 -> 256 -> 128 (+ bias, ReLU) whose K the search splits over TPBs,
    then x * x: the first conv's reduced tiles kept for the second (a lockstep conv reading its
    K chunks from them), the second's for the product."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    w1 = (rng.standard_normal((256, 256, 3, 3)) / 48).astype(np.float32)
    w2 = (rng.standard_normal((128, 256, 3, 3)) / 48).astype(np.float32)
    b1 = rng.standard_normal(256).astype(np.float32)
    b2 = rng.standard_normal(128).astype(np.float32)
    conv = lambda x, w, b, y: helper.make_node("Conv", [x, w, b], [y], kernel_shape=[3, 3],  # noqa: E731
                                               pads=[1, 1, 1, 1])
    nodes = [conv("x", "w1", "b1", "c1"), helper.make_node("Relu", ["c1"], ["r1"]),
             conv("r1", "w2", "b2", "c2"), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Mul", ["r2", "r2"], ["y"])]
    graph = helper.make_graph(
        nodes, "ksplit_keep",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 7, 7])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (b1, "b1"),
                                                    (b2, "b2"))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
def test_kept_ksplit_outputs_match_onnxruntime(mode, monkeypatch):
    """The reduced tiles of a K split stay on their part-0 TPBs; the next segments copy them
    from there (no store, no load of the convs' outputs) -- a lockstep conv per K chunk -- and
    compute what onnxruntime does."""
    from m100.tools import driver
    seen = []

    def force(sched, segs, tl):
        tl2 = sched.build(segs, keep="all")
        seen.append((segs, tl2))
        return tl2, "all"

    monkeypatch.setattr(placement, "keep_activations", force)
    ck = driver.check(_ksplit_onnx(), machine="m100", sync_mode=mode, strategy="data-parallel")
    segs, tl = seen[-1]
    kept = [(si, st) for si, sg in enumerate(segs) for st in sg.stages if st.op in tl.kept]
    assert any(st.ks > 1 for _, st in kept), "no K split kept: the test checks nothing"
    red = {p.compute: p for pcs in tl.pieces for p in pcs if p.reduce}
    out_t = {t.tensor for t in tl.tasks for _, st in kept if t.op == st.op and t.kind == "compute"}
    assert not [t for t in tl.tasks if t.unit == "dma" and t.tensor in out_t]
    cps = [t for t in tl.tasks if t.kind == "copy" and t.tensor in out_t and t.role == "act"]
    assert all(c.tpb == red[c.deps[0]].tpb for c in cps if c.deps[0] in red)
    # the second conv is a lockstep group reading its chunks from the first conv's tiles
    lock = {p.segment for pcs in tl.pieces for p in pcs if p.group >= 0}
    assert any(c.segment in lock for c in cps), "no lockstep reader: the test checks nothing"
    assert any(len(c.dst_tpbs) > 1 for c in cps), "no DTDU broadcast: the test checks nothing"
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()


def test_lockstep_conv_copies_each_k_chunk_from_kept_pieces():
    """A K-split conv (lockstep, its K chunks = runs of input channels) reading a kept tensor:
    each chunk instruction gets exactly its rows (halo included) x its channels, each cell once,
    copied from the producer pieces (nothing from memory) by one DTDU broadcast per producer
    piece to the column parts that read the chunk."""
    from m100.passes.schedule.partition import k_part_range
    g, segs = _chain()
    segs[1] = T.SegmentCfg((T.StageCfg(g.ops[1].name, TPBS, gc=2, bands=2, ks=2),))
    s = T.Scheduler(CostModel(M100), g)
    tl = s.build(segs, keep="all")
    assert g.ops[0].name in tl.kept
    x_t = g.ops[0].outputs[0]
    assert not [t for t in tl.tasks if t.unit == "dma" and t.tensor == x_t]
    prod = {p.compute: p for p in tl.pieces[0]}
    kc = tl.plans[g.ops[1].name].tk // 9  # input channels per chunk of a 3x3 conv
    chunks = list(range(0, 32, kc))
    assert len(chunks) >= 2
    n = 0
    bcasts: set[int] = set()
    for p in tl.pieces[1]:
        if p.reduce:
            continue
        lo, hi = max(0, p.r0 - 1), min(16, p.r1 + 1)
        a, b = k_part_range(len(chunks), 2, p.kpart)
        comp = [tl.tasks[i] for i in p.tasks if tl.tasks[i].kind == "compute"]
        assert len(comp) == b - a
        for u, k0 in zip(comp, chunks[a:b]):
            k1 = min(32, k0 + kc)
            got = []
            for d in u.deps:
                t = tl.tasks[d]
                if t.kind == "copy":
                    q = prod[t.deps[0]]
                    rows = range(max(lo, q.r0), min(hi, q.r1))
                    ch = range(max(k0, q.c0), min(k1, q.c1))
                    # one DTDU broadcast to the column parts of the K part (``a_share``)
                    assert t.nbytes == len(rows) * 16 * len(ch) * 4 and t.dst_tpbs == p.a_share
                    assert p.tpb in t.dst_tpbs and len(t.dst_tpbs) == 2
                    bcasts.add(t.id)
                    got += [(r, c) for r in rows for c in ch]
                elif d in prod and (prod[d].tpb, prod[d].r0, prod[d].r1, prod[d].c0,
                                    prod[d].c1) == (p.tpb, lo, hi, k0, k1):
                    got += [(r, c) for r in range(lo, hi) for c in range(k0, k1)]  # in place
            assert sorted(got) == [(r, c) for r in range(lo, hi) for c in range(k0, k1)]
            n += 1
    assert n
    # each broadcast is read by both column parts: half as many transfers as chunk reads need
    reads = sum(1 for p in tl.pieces[1] if not p.reduce for i in p.tasks
                for d in tl.tasks[i].deps if d in bcasts and tl.tasks[i].kind == "compute")
    assert reads == 2 * len(bcasts)
    _drb_within_bandwidth(tl)


def _drb_within_bandwidth(tl):
    """At no time do the broadcasts running (DMA and DTDU) book more than ``drb_bandwidth``
    (each its bytes / cycles), checked at every start, where the sum can rise."""
    cap = M100.bytes_per_cycle(M100.drb_bandwidth)
    bc = [t for t in tl.tasks if len(t.dst_tpbs) > 1 and t.cycles > 0]
    for t0 in bc:
        used = sum(t.nbytes / t.cycles for t in bc if t.start <= t0.start < t.end)
        assert used <= cap * (1 + 1e-6), (t0, used, cap)


def test_dtdu_broadcast_waits_for_the_drb():
    """Two weight broadcasts of the CCB DMA engines fill the DRB (AXI rate each); a DTDU broadcast
    ready at the same time starts when the first of them ends, not beside them (the interpreter
    would slow all three down), and waits for it in the program (``Plan.drb_wait``): after its
    sync update's latency (``remote_update_latency_inter`` from a CCB DMA); a mesh copy does not
    use the DRB and starts at once."""
    g, segs = _chain()
    s = T.Scheduler(CostModel(M100), g)
    b = T.PlanBuilder(s, T.Plan(segments=list(segs)))
    b.piece = None  # tasks outside a piece
    cm = s.cm
    nb = 256 * 1024.0
    d = [b.add(kind="dma-in", unit="dma", tpb=-1, op="w", tensor="w", nbytes=nb,
               cycles=cm.dma_cycles(nb, "ddr", broadcast=True), deps=[], dst_tpbs=(0, 1),
               src="ddr", dst="hbsm", role="w") for _ in range(2)]
    assert d[0].start == d[1].start == 0.0 and d[0].engine != d[1].engine
    x = 16 * 1024.0
    c = b.add(kind="copy", unit="dtdu", tpb=2, op="a", tensor="a", nbytes=x,
              cycles=cm.dtdu_broadcast_cycles(x, 2, (3, 4)), deps=[], dst_tpbs=(3, 4),
              src="hbsm", dst="hbsm", role="act")
    first = min(d, key=lambda t: t.end)
    assert LS.DRB_WAITS
    assert c.start == pytest.approx(first.end + M100.remote_update_latency_inter)
    assert b.tl.drb_wait == {c.id: tuple(t.id for t in d if t.end == first.end)}
    m = b.add(kind="copy", unit="dtdu", tpb=5, op="a", tensor="a", nbytes=x,
              cycles=cm.mesh_cycles(x, 5, 6), deps=[], dst_tpbs=(6,), src="hbsm", dst="hbsm",
              role="act")
    assert m.start == 0.0
    _drb_within_bandwidth(b.tl)
