"""Int4-weight GEMVs widened to more TPBs of the pool (issue 13 decode, ``placement.widen_gemvs``).

A W4A16 GEMV pads its one row to the TCU row granule, so fewer TCU column tiles per TPB shorten the
compute that trails its weight stream. The tests run on the M100 with a 32-row granule (every GEMV
padded to the whole 32-row tile, the model before session 9), where a TPB's compute is 4x slower
and widening pays on this small chain; with the 8-row granule the quarter pool's plan of these two
GEMVs is already as short. Oracles: the invariants of the change from the
configurations alone (one row, every TPB a column part, fewer column tiles per TPB, only int4
GEMVs touched), the plan rebuilt from the returned segments, and numpy from the
``DequantizeLinear`` definition on the program compiled with the widened configuration.
"""

import numpy as np
from onnx import TensorProto, helper

from m100.passes.schedule import placement
from m100.passes.schedule.cost import ceil_div
from m100.targets.m100.machine import get_machine

from ...e2e.test_llm_w4 import _matmuls

M100 = get_machine("m100").replace(name="m100-g32", tcu_row_granule=32)
DIMS, B = (1024, 4096, 4096), 128  # x [1, 1024] @ W0 [1024, 4096] @ W1 [4096, 4096]


def _w4_weight(i: int, k: int, n: int, b: int = B) -> list:
    """Shape-only initializers of GEMV ``i``: ``q<i>`` [k, n] int4 and ``s<i>`` [k // b, n] f16
    scales (external data that is never written: the values are run-time feeds)."""
    q = helper.make_tensor(f"q{i}", TensorProto.INT4, [1], [0])
    s = helper.make_tensor(f"s{i}", TensorProto.FLOAT16, [1], [0.0])
    for t, d in ((q, [k, n]), (s, [k // b, n])):
        del t.dims[:]
        t.dims.extend(d)
        t.ClearField("int32_data")
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="absent.bin")
    return [q, s]


def _w4_reference(rng, feed: dict, dims=DIMS, b=B, after=None):
    """Draws the chain's int4 weights ``q<i>`` and f16 scales ``s<i>`` into ``feed`` (which holds
    ``x``) and returns ``y`` by numpy from the ``DequantizeLinear`` definition: the dequantized
    weight rounded to f16, an f64 product rounded to f16 per GEMV; ``after(i, y)`` (optional)
    is applied to GEMV ``i``'s result."""
    want = feed["x"]
    for i, (k, n) in enumerate(zip(dims, dims[1:])):
        feed[f"q{i}"] = rng.integers(-8, 8, (k, n)).astype(np.int8)
        feed[f"s{i}"] = (rng.random((k // b, n)) / 256 + 1e-3).astype(np.float16)
        wdq = (feed[f"q{i}"].astype(np.float32) *
               np.repeat(feed[f"s{i}"].astype(np.float32), b, axis=0)).astype(np.float16)
        want = (want.astype(np.float64) @ wdq.astype(np.float64)).astype(np.float16)
        if after is not None:
            want = after(i, want)
    return want


def _w4_chain(dims=DIMS, b=B):
    """Chained W4A16 GEMVs, every weight shape-only (``q<i>`` int4 + ``s<i>`` f16 scales per
    block of ``b`` rows): the second one's weight prefetches while the first computes."""
    nodes, inits, prev = [], [], "x"
    for i, (k, n) in enumerate(zip(dims, dims[1:])):
        inits += _w4_weight(i, k, n, b)
        out = "y" if i == len(dims) - 2 else f"y{i}"
        nodes += [helper.make_node("DequantizeLinear", [f"q{i}", f"s{i}"], [f"w{i}"], axis=0,
                                   block_size=b), helper.make_node("MatMul", [prev, f"w{i}"], [out])]
        prev = out
    g = helper.make_graph(nodes, "w4_chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, dims[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, dims[-1]])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _graph(model):
    """The scheduler graph as ``m100-schedule`` builds it (int4 weights applied)."""
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.passes.schedule.int4_weights import apply_int4_weights
    from m100.tools import driver
    ctx = shared_context()
    module, _ = driver.load_model(model, ctx)
    M100Graph().apply(ctx, module)
    irg = from_module(module, M100.cvu_max_stages)
    apply_int4_weights(module, irg)
    return irg.graph


def _quarter_pool(pool, strategy):
    """The search on the first quarter of the TPBs only (its plan uses 14 of the 56)."""
    return [pool[:len(pool) // 4]]


def test_widen_moves_the_gemv_to_more_tpbs_with_fewer_tiles_each(monkeypatch):
    seen = []
    orig = placement.widen_gemvs

    def spy(s, segs, tl, keep, pool):
        out = orig(s, segs, tl, keep, pool)
        seen.append((s, segs, tl, keep, pool, out))
        return out

    monkeypatch.setattr(placement, "widen_gemvs", spy)
    monkeypatch.setattr(placement, "_pools", _quarter_pool)
    placement.schedule(_graph(_w4_chain()), M100)
    s, segs, tl, keep, pool, (segs2, tl2) = seen[-1]
    assert len(pool) == M100.num_tpbs
    changed = [(a.stages[0], b.stages[0]) for a, b in zip(segs, segs2) if a != b]
    assert changed, "widen_gemvs changed nothing: the test checks nothing"
    assert len(segs2) == len(segs) and tl2.makespan < tl.makespan
    for a, b in changed:
        op = s.ops[b.op]
        assert "w4" in op.attrs and op.unit == "tcu.matmul"
        assert len(b.tpbs) > len(a.tpbs) and set(b.tpbs) <= set(pool)
        assert b.gc == len(b.tpbs) and b.ks == 1 and b.bands == 1
        n = s.g.out(op).shape[-1]
        tiles = lambda st: ceil_div(ceil_div(n, st.gc), M100.tcu_tile_n)  # noqa: E731
        assert tiles(b) < tiles(a)
    assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan


def test_widened_gemv_program_matches_numpy(monkeypatch):
    from m100.tools import driver
    monkeypatch.setattr(placement, "_pools", _quarter_pool)
    cr = driver.compile(_w4_chain(), machine=M100)
    mm = [i for i in _matmuls(cr.program) if i.scale is not None]
    assert len({i.tpb for i in mm}) > M100.num_tpbs // 4  # widened past the searched pool
    rng = np.random.default_rng(7)
    feed = {"x": rng.standard_normal((1, DIMS[0])).astype(np.float16)}
    want = _w4_reference(rng, feed)
    got = driver.run(cr.program, feed, machine=cr.machine).outputs["y"].reshape(want.shape)
    # f32 accumulation, one f16 rounding per GEMV (the first's ulps feed the second): a few
    # ulps; a wrong column part or scale is off by about the values themselves
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(d <= 4 * np.abs(np.spacing(want)) + 2e-3 * np.abs(want).max())
