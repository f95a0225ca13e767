"""m100-sim on binary program files: outputs, stats, trace (flow arrows), errors, exit codes."""

import json

import numpy as np

from m100.targets.m100 import program as program_mod
from m100.targets.m100.isa import (DType, Dma, MatMul, Monitor, Space, Sync, Update, Walk, mask_of)
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import CCB_STREAM, Program, Segment, Symbol
from m100.tools.m100_sim import main

TINY = get_machine("tiny")


def matmul_program(m=8, k=16, n=8):
    """x (input, DDR) -> HBSM; w (segment) -> HBSM; y = x @ w (i32) -> DDR output."""
    p = Program.empty(TINY)
    X = Walk.strided(Space.HBSM, 0, 0, DType.I8, (m, k))
    W = Walk.strided(Space.HBSM, 0, 1024, DType.I8, (k, n))
    Y = Walk.strided(Space.HBSM, 0, 2048, DType.I32, (m, n))
    ddr = lambda a, dt, shape: Walk.strided(Space.DDR, 0, a, dt, shape)  # noqa: E731
    w = (np.arange(k * n).reshape(k, n) % 11 - 5).astype(np.int8)
    p.streams = {
        CCB_STREAM: [Dma(0, ddr(0x1000, DType.I8, (m, k)), X, sync=Sync(updates=(Update(0, 1),))),
                     Dma(1, ddr(0x2000, DType.I8, (k, n)), W, sync=Sync(updates=(Update(0, 1),))),
                     Dma(0, Y, ddr(0x3000, DType.I32, (m, n)), sync=Sync(monitors=(Monitor(0, 1, 1),)))],
        0: [MatMul(0, X, W, Y, m, n, k, sync=Sync(monitors=(Monitor(0, 0, 2),),
                                               updates=(Update(1, mask_of(0)),)))]}
    p.segments = [Segment(Space.DDR, 0x2000, w.tobytes(), "w")]
    p.symbols = [Symbol("x", "input", (m, k), DType.I8, Space.DDR, 0x1000),
                 Symbol("y", "output", (m, n), DType.I32, Space.DDR, 0x3000)]
    return p, w


def test_binary_program_end_to_end(tmp_path, capsys):
    p, w = matmul_program()
    p.save(tmp_path / "p.m100")
    x = np.random.default_rng(0).integers(-128, 128, (8, 16)).astype(np.int8)
    np.savez(tmp_path / "in.npz", x=x)
    rc = main([str(tmp_path / "p.m100"), "--inputs", str(tmp_path / "in.npz"), "--outputs",
               str(tmp_path / "out.npz"), "--stats", str(tmp_path / "s.json"), "--trace",
               str(tmp_path / "t.json"), "--plot", str(tmp_path / "t.png")])
    assert rc == 0
    out = np.load(tmp_path / "out.npz")
    assert np.array_equal(out["y"], x.astype(np.int64) @ w.astype(np.int64))
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["instructions_completed"] == 4
    assert stats["total_cycles"] > 0
    assert set(stats["units"]) == {"TPB0.TCU", "DMA0", "DMA1"}
    assert stats["units"]["TPB0.TCU"]["macs"] == 8 * 16 * 8
    assert stats["units"]["DMA0"]["stall_cycles"]["sync"] > 0  # the output DMA waited
    assert stats["bytes"]["ddr"] == 8 * 16 + 16 * 8 + 8 * 8 * 4
    # HBSM of TPB 0: the three DMAs' ends (128 + 128 + 256) and the matmul's A, B, C (128+128+256)
    assert stats["bytes"]["hbsm0"] == 2 * (128 + 128 + 256)
    assert (tmp_path / "t.png").stat().st_size > 1000
    trace = json.loads((tmp_path / "t.json").read_text())
    ev = trace["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert names[(1, 0)] == "TCU" and names[(0, 0)] == "DMA0" and names[(0, 1)] == "DMA1"
    # flow arrows: each 'f' (the released monitor) has an 's' (the update) with the same id,
    # starting no later than the slice it releases
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    finishes = [e for e in ev if e["ph"] == "f"]
    # the matmul is released by the update that brought c0 to 2 (a DMA), the output DMA by the
    # matmul's update
    assert sorted((starts[f["id"]]["pid"], f["pid"]) for f in finishes) == [(0, 1), (1, 0)]
    for f in finishes:
        assert starts[f["id"]]["ts"] <= f["ts"]
    assert any(e["ph"] == "C" and e["name"] == "c0" and e["args"]["value"] == 2 for e in ev)
    assert "m100-sim: 4/4 instructions" in capsys.readouterr().out


def test_functional_only_and_timing_only(tmp_path):
    p, w = matmul_program()
    p.save(tmp_path / "p.m100")
    np.savez(tmp_path / "in.npz", x=np.ones((8, 16), np.int8))
    assert main([str(tmp_path / "p.m100"), "--inputs", str(tmp_path / "in.npz"), "-q",
                 "--functional-only", "--outputs", str(tmp_path / "o.npz")]) == 0
    assert np.array_equal(np.load(tmp_path / "o.npz")["y"], np.ones((8, 16)) @ w)
    assert main([str(tmp_path / "p.m100"), "--inputs", str(tmp_path / "in.npz"), "-q",
                 "--timing-only", "--stats", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["mode"] == "timing"


def test_undecodable_instruction_is_one_line_error(tmp_path, monkeypatch, capsys):
    p, _ = matmul_program()
    real = program_mod.encode_instructions

    def bad(insts, m):
        data = bytearray(real(insts, m))
        data[0] = 0xEE  # an opcode no instruction kind has
        return bytes(data)

    monkeypatch.setattr(program_mod, "encode_instructions", bad)
    p.save(tmp_path / "bad.m100")
    monkeypatch.undo()
    assert main([str(tmp_path / "bad.m100")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("m100-sim: error: ") and "unknown opcode 0xee" in err[0]


def test_machine_mismatch_is_one_line_error(tmp_path, capsys):
    p, _ = matmul_program()
    p.save(tmp_path / "p.m100")
    assert main([str(tmp_path / "p.m100"), "--machine", "m100"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("m100-sim: error: ")


def test_check_failure_exit_code(tmp_path, capsys):
    p, _ = matmul_program()
    # drop the matmul's monitor: it reads x and w while the DMAs may still write them
    mm = p.streams[0][0]
    p.streams[0] = [MatMul(0, mm.a, mm.b, mm.c, mm.m, mm.n, mm.k,
                           sync=Sync(updates=mm.sync.updates))]
    p.save(tmp_path / "p.m100")
    np.savez(tmp_path / "in.npz", x=np.ones((8, 16), np.int8))
    assert main([str(tmp_path / "p.m100"), "--inputs", str(tmp_path / "in.npz"), "-q"]) == 3
    err = capsys.readouterr().err
    assert "m100-sim: race:" in err and "tcu.matmul" in err and "ccb.dma" in err
