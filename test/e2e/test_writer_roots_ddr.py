"""A transposed layout written by its producer (a root of ``OpGraph.wmap``: the prefill heads'
q) lives in DDR when its producer's stores are bound to a few CCB SRAM banks
(``segment.SCATTERED_IN_DDR``, ``segment.bank_bound``; issue 13, session 27): a band of rows
is stored as one short run per head at the head stride, and a stride of a multiple of the banks'
period (``ccb_sram_banks x ccb_sram_interleave``, 16 KiB) puts every run on the same bank
(LLaMA2-7B: the interpreter moved RoPE's q stores at ~46 B/cycle, the plan counted 79;
docs/llm.md section 5). A head stride of one granule spreads them: SRAM as before.

Oracles: numpy from the ops' definitions on the interpreter's outputs (race checks on), the same
bits as the old rule's program; the program's own DMA walks (bytes written into the CCB SRAM and
into DDR, from each ``Dma``'s destination walk) against the model's q size; the banks of every
byte address of a strided walk enumerated from the machine's interleave (``bank_bound``)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper as h, numpy_helper as nh

from m100.passes.schedule import segment
from m100.targets.m100.isa import Dma, Space
from m100.targets.m100.machine import get_machine
from m100.tools import driver

N, HD, O = 4, 16, 8


def _model(t: int, hd: int = HD):
    """x [t, N*hd] -> [t, N, hd] * c -> y, transposed to q [N, t, hd] (y's producer stores into
    q's layout: a writer map), q as [N*t, hd] @ w -> out."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((hd, O)) / 4).astype(np.float32)
    ints = lambda n, v: nh.from_array(np.array(v, np.int64), n)  # noqa: E731
    nodes = [h.make_node("Reshape", ["x", "s3"], ["x3"]), h.make_node("Mul", ["x3", "c"], ["y"]),
             h.make_node("Transpose", ["y"], ["q"], perm=[1, 0, 2]),
             h.make_node("Reshape", ["q", "s2"], ["q2"]), h.make_node("MatMul", ["q2", "w"], ["out"])]
    g = h.make_graph(nodes, "wroot", [h.make_tensor_value_info("x", TP.FLOAT, [t, N * hd]),
                                      h.make_tensor_value_info("c", TP.FLOAT, [1, N, hd])],
                     [h.make_tensor_value_info("out", TP.FLOAT, [N * t, O])],
                     [ints("s3", [t, N, hd]), ints("s2", [N * t, hd]), nh.from_array(w, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m, w


def _written(program) -> dict[Space, int]:
    """Bytes the program's DMAs write per destination space (from the walks' element counts)."""
    out: dict[Space, int] = {}
    for _, ins in program.instructions():
        if isinstance(ins, Dma):
            d = ins.dst
            out[d.space] = out.get(d.space, 0) + d.num_elements * d.dtype.bits // 8
    return out


@pytest.mark.parametrize("t,hd,moved", [(256, HD, True), (64, HD, False), (1, 2048, True),
                                        (1, 1024, False)])
def test_a_bank_bound_transposed_layout_lives_in_ddr(t, hd, moved, monkeypatch):
    """t = 256: the head stride is 256 x 16 x 4 B = 16 KiB, one bank; t = 64: 4 KiB, all four.
    One row (decode's M = 1): a head of 2048 is an 8 KiB stride, two banks; 1024 is 4 KiB."""
    m, w = _model(t, hd)
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((t, N * hd)).astype(np.float32),
            "c": rng.standard_normal((1, N, hd)).astype(np.float32)}
    q = (feed["x"].reshape(t, N, hd) * feed["c"]).transpose(1, 0, 2)
    want = q.reshape(N * t, hd).astype(np.float64) @ w
    on = driver.compile(m, machine="m100")
    got = driver.run(on.program, feed, check_races=True)
    assert got.ok and not got.reports
    np.testing.assert_allclose(got.outputs["out"], want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(segment, "SCATTERED_IN_DDR", False)
    old = driver.compile(m, machine="m100")
    got_old = driver.run(old.program, feed, check_races=True)
    assert got_old.ok and not got_old.reports
    if hd == HD:
        np.testing.assert_array_equal(got.outputs["out"], got_old.outputs["out"])
    else:  # (K = hd of 1024 / 2048: the plan's K chunks move with q's place, so do f32 sums)
        np.testing.assert_allclose(got_old.outputs["out"], want, rtol=1e-4, atol=1e-4)
    w_on, w_old = _written(on.program), _written(old.program)
    q_bytes = N * t * hd * 4
    # q's bytes: into the SRAM by the old rule, into DDR when bank-bound; nothing else moves
    assert w_old.get(Space.SRAM, 0) - w_on.get(Space.SRAM, 0) == (q_bytes if moved else 0), \
        (w_on, w_old)
    assert w_on.get(Space.DDR, 0) - w_old.get(Space.DDR, 0) == (q_bytes if moved else 0), \
        (w_on, w_old)


def _columns_model(cols: int):
    """v = x @ wv [T2, cols] (f32), read in column boxes: o_j = a @ v[:, 128 j : 128 (j + 1)]
    (column views, ``OpGraph.cviews``), j = 0, 1."""
    rng = np.random.default_rng(9)
    wv = (rng.standard_normal((32, cols)) / 8).astype(np.float32)
    ints = lambda n, v: nh.from_array(np.array(v, np.int64), n)  # noqa: E731
    nodes = [h.make_node("MatMul", ["x", "wv"], ["v"])]
    for j in range(2):
        nodes += [h.make_node("Slice", ["v", f"b{j}", f"e{j}", "ax1"], [f"v{j}"]),
                  h.make_node("MatMul", ["a", f"v{j}"], [f"o{j}"])]
    inits = [nh.from_array(wv, "wv"), ints("ax1", [1])]
    inits += [ints(f"b{j}", [128 * j]) for j in range(2)] + \
        [ints(f"e{j}", [128 * (j + 1)]) for j in range(2)]
    g = h.make_graph(nodes, "cview", [h.make_tensor_value_info("x", TP.FLOAT, [T2, 32]),
                                      h.make_tensor_value_info("a", TP.FLOAT, [T2, T2])],
                     [h.make_tensor_value_info(f"o{j}", TP.FLOAT, [T2, 128]) for j in range(2)],
                     inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m, wv


T2 = 64


@pytest.mark.parametrize("cols,moved", [(2048, True), (1024, False)])
def test_a_column_read_root_at_a_bank_bound_pitch_lives_in_ddr(cols, moved, monkeypatch):
    """cols = 2048: the row pitch is 8 KiB, two banks; 1024: 4 KiB, all four."""
    m, wv = _columns_model(cols)
    rng = np.random.default_rng(4)
    feed = {"x": rng.standard_normal((T2, 32)).astype(np.float32),
            "a": rng.standard_normal((T2, T2)).astype(np.float32)}
    v = feed["x"].astype(np.float64) @ wv
    on = driver.compile(m, machine="m100")
    got = driver.run(on.program, feed, check_races=True)
    assert got.ok and not got.reports
    for j in range(2):
        np.testing.assert_allclose(got.outputs[f"o{j}"], feed["a"] @ v[:, 128 * j:128 * (j + 1)],
                                   rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(segment, "SCATTERED_IN_DDR", False)
    old = driver.compile(m, machine="m100")
    got_old = driver.run(old.program, feed, check_races=True)
    assert got_old.ok and not got_old.reports
    for j in range(2):  # (not the same bits: the plan moves with v's place, f32 sums too)
        np.testing.assert_allclose(got_old.outputs[f"o{j}"],
                                   feed["a"] @ v[:, 128 * j:128 * (j + 1)], rtol=1e-4, atol=1e-3)
    w_on, w_old = _written(on.program), _written(old.program)
    v_bytes = T2 * cols * 4
    assert w_old.get(Space.SRAM, 0) - w_on.get(Space.SRAM, 0) == (v_bytes if moved else 0), \
        (w_on, w_old)
    assert w_on.get(Space.DDR, 0) - w_old.get(Space.DDR, 0) == (v_bytes if moved else 0), \
        (w_on, w_old)


def _banks(mc, stride: int, n: int, run: int) -> int:
    """Banks hit by ``n`` runs of ``run`` bytes ``stride`` apart (every byte address enumerated;
    the first run at a bank boundary)."""
    addr = (np.arange(n)[:, None] * stride + np.arange(run)[None, :]).reshape(-1)
    return len(np.unique((addr // mc.ccb_sram_interleave) % mc.ccb_sram_banks))


@pytest.mark.parametrize("stride", [4096, 8192, 12288, 16384, 20480, 262144, 262144 + 4096])
def test_bank_bound_against_the_addresses(stride):
    """A dim of stride ``stride`` (at least a granule) and 32 steps, runs of 256 B (one head's
    row of f16): bound exactly when the enumerated addresses hit at most half of the banks. A
    stride under a granule is a stream through consecutive granules: never bound."""
    mc = get_machine("m100")
    want = _banks(mc, stride, 32, 256) <= mc.ccb_sram_banks // 2
    assert segment.bank_bound(mc, ((stride, 32),)) == want
    assert not segment.bank_bound(mc, ((256, 1024),))
