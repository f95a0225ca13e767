#!/usr/bin/env python3
"""Fidelity gate: the scheduler's predicted cycles vs the interpreter's, per case of a fixed suite.

For each case the model is compiled end to end (``m100 compile``: frontend, m100-pipeline, emission)
and the program is run on the interpreter in timing-only mode (``m100-sim --timing-only``: no data
is read or computed, only the cycle model runs). Columns:

* ``pred``      the program's own ``predicted_cycles`` (metadata written by ``m100-schedule``);
* ``sim``       interpreter cycles; ``ratio`` = sim / pred (the gate: within 1 +- 0.15);
* ``tcu_used``  TCU MAC utilization (sim) against the dtype peak of the TPBs whose TCU ran anything;
* ``tcu_all``   the same against all TPBs of the machine (56 on the m100);
* ``ddr_util``  DDR bytes moved / (sim cycles x DDR bytes per cycle) -- the DDR bandwidth utilization;
* ``ddr_mb``    DDR bytes moved (reads + writes), MB; ``tpbs`` TPBs with any instruction;
* ``compile_s`` / ``sim_s`` wall seconds (2-core box shared with other jobs: indicative only).

Cases (``--small``: only the small ones, a few seconds each -- the default test run asserts their
ratio; without it every case runs and **the big ones take minutes each**, ResNet-18 224 and the 4096^3
GEMMs about 5-15 min apiece on a loaded 2-core box):

    .venv/bin/python bench/fidelity.py [--small] [--case NAME[,NAME...]] [--json OUT] [--list]
    .venv/bin/python bench/fidelity.py --diff NAME [--limit N]   # where do they disagree?

The suite and the measurement are importable (``CASES``, :func:`measure`) for
``test/unit/schedule/test_fidelity.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- models --------------------------------------------------------------------------------------
def _onnx_model(nodes, name, inputs, outputs, inits):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    ty = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int8): TensorProto.INT8,
          np.dtype(np.int32): TensorProto.INT32}
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, ty[np.dtype(d)], s) for n, s, d in inputs],
        [helper.make_tensor_value_info(n, ty[np.dtype(d)], s) for n, s, d in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def gemm_runtime(m: int, k: int, n: int):
    """Y = A @ B with both operands runtime inputs (f32)."""
    from onnx import helper
    return _onnx_model([helper.make_node("MatMul", ["a", "b"], ["y"])], f"gemm{m}x{k}x{n}",
                       [("a", [m, k], np.float32), ("b", [k, n], np.float32)],
                       [("y", [m, n], np.float32)], {})


def gemm_weight(m: int, k: int, n: int, seed: int = 0):
    """Y = X @ W with a constant weight W (f32)."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    return _onnx_model([helper.make_node("MatMul", ["x", "w"], ["y"])], f"gemmw{m}x{k}x{n}",
                       [("x", [m, k], np.float32)], [("y", [m, n], np.float32)], {"w": w})


def gemm_int8_weight(m: int, k: int, n: int, seed: int = 0):
    """Y = MatMulInteger(X, W) with int8 X (runtime) and an int8 constant W (int32 result)."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    w = rng.integers(-8, 8, size=(k, n)).astype(np.int8)
    return _onnx_model([helper.make_node("MatMulInteger", ["x", "w"], ["y"])], f"gemmi8{m}x{k}x{n}",
                       [("x", [m, k], np.int8)], [("y", [m, n], np.int32)], {"w": w})


def conv_chain(hw: int = 56, c: int = 64, seed: int = 0):
    """conv3x3 (+bias) -> relu -> conv3x3 -> maxpool 2x2 on 1 x c x hw x hw (a ResNet stage)."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    inits = {"w1": (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32),
             "b1": (rng.standard_normal(c) * 0.1).astype(np.float32),
             "w2": (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("MaxPool", ["c2"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return _onnx_model(nodes, "conv_chain", [("x", [1, c, hw, hw], np.float32)],
                       [("y", [1, c, hw // 2, hw // 2], np.float32)], inits)


def conv_layer(hw: int = 7, c: int = 256, f: int = 128, seed: int = 0):
    """conv3x3 (+bias) -> relu on 1 x c x hw x hw: a late CNN layer with few output tiles (the
    search splits its reduction over TPBs: ``StageCfg.ks``)."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    inits = {"w": (rng.standard_normal((f, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32),
             "b": (rng.standard_normal(f) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    return _onnx_model(nodes, "conv_layer", [("x", [1, c, hw, hw], np.float32)],
                       [("y", [1, f, hw, hw], np.float32)], inits)


def decode_layer(hidden: int, ffn: int, m: int = 1, seed: int = 0):
    """A decode-shaped (GEMV-like) LLaMA MLP block: x[m, hidden] -> SwiGLU(x Wg, x Wu) Wd + x.

    M is 1 (or small): every matmul streams a big weight for little compute, so the layer is bound
    by DDR bandwidth (the figure to watch is ``ddr_util``)."""
    from onnx import helper
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    inits = {"wg": f(hidden, ffn), "wu": f(hidden, ffn), "wd": f(ffn, hidden)}
    nodes = [helper.make_node("MatMul", ["x", "wg"], ["g"]),
             helper.make_node("Sigmoid", ["g"], ["sg"]),
             helper.make_node("Mul", ["g", "sg"], ["silu"]),
             helper.make_node("MatMul", ["x", "wu"], ["u"]),
             helper.make_node("Mul", ["silu", "u"], ["h"]),
             helper.make_node("MatMul", ["h", "wd"], ["d"]),
             helper.make_node("Add", ["d", "x"], ["y"])]
    return _onnx_model(nodes, "decode_mlp", [("x", [m, hidden], np.float32)],
                       [("y", [m, hidden], np.float32)], inits)


def _resnet18(hw: int):
    from m100.frontend import models
    return models.resnet18(hw=hw)


def _resnet50():
    """ResNet-50 224 (the onnx wheel's light model, random weights: ``models.randomize_light_model``)."""
    import pathlib

    import onnx

    from m100.frontend import models
    light = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return models.randomize_light_model(onnx.load(str(light / "light_resnet50.onnx")))


def _mlp():
    from m100.frontend import models
    return models.mlp(batch=64, d_in=256, hidden=256, d_out=64)


def _convnet():
    from m100.frontend import models
    return models.conv_relu_maxpool(c=3, hw=64, f=32)


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], object]  # -> onnx ModelProto or a path
    tpbs: int = 0  # 0 = all TPBs of the machine
    small: bool = False
    macs: int = 0  # MACs of the model's contractions (for a cross-check of the sim's count)
    machine: str = "m100"
    strategy: str = "auto"  # m100-schedule's search strategy


CASES: dict[str, Case] = {c.name: c for c in [
    # small: the default test run asserts |sim/pred - 1| <= 0.15 on these. On one TPB the
    # emitted program moves data as the timeline planned (no broadcast / engine / queue-order
    # questions), so these check the per-instruction cost model against the interpreter's.
    Case("gemm256-rt-1", lambda: gemm_runtime(256, 256, 256), 1, True),
    Case("mlp-1", _mlp, 1, True),
    Case("convnet-1", _convnet, 1, True),
    Case("llama-layer-1", lambda: os.path.join(REPO, "test", "data", "llama_layer_small.onnx"), 1,
         True),
    Case("decode1024-1", lambda: decode_layer(1024, 2816), 1, True),
    Case("gemm256-rt-8", lambda: gemm_runtime(256, 256, 256), 8, True),
    Case("gemm512-w-8", lambda: gemm_weight(512, 512, 512), 8, True),
    Case("mlp-8", _mlp, 8, True),
    Case("convnet-8", _convnet, 8, True),
    Case("decode1024-8", lambda: decode_layer(1024, 2816), 8, True),
    Case("llama-layer-8", lambda: os.path.join(REPO, "test", "data", "llama_layer_small.onnx"), 8,
         True),
    Case("conv7-ksplit-8", conv_layer, 8, True),  # K split over TPBs + CVU reduction
    # big (minutes each): the issue-9 acceptance cases, all 56 TPBs
    Case("gemm1024-rt", lambda: gemm_runtime(1024, 1024, 1024)),
    Case("gemm2048-rt", lambda: gemm_runtime(2048, 2048, 2048)),
    Case("gemm4096-w", lambda: gemm_weight(4096, 4096, 4096)),
    Case("int8-4096-w", lambda: gemm_int8_weight(4096, 4096, 4096)),
    Case("conv-chain-56", conv_chain),
    Case("conv-chain-56-pipeline", conv_chain, strategy="pipeline"),
    Case("conv-chain-56-layers", conv_chain, strategy="data-parallel"),
    Case("resnet18-224", lambda: _resnet18(224)),
    Case("resnet50-224", _resnet50),
    Case("llama-layer", lambda: os.path.join(REPO, "test", "data", "llama_layer_small.onnx")),
    Case("decode4096", lambda: decode_layer(4096, 11008)),
]}


# --- measurement ---------------------------------------------------------------------------------
def simulate_timing(program):
    """The interpreter in timing-only mode (``m100-sim --timing-only``): its Result."""
    from m100.sim.simulator import Simulator
    return Simulator(program, mode="timing", check_races=False).run({})


def ddr_bytes(stats: dict) -> float:
    """DDR bytes moved (every ``ddr`` link charge of the cycle model: reads and writes)."""
    return float(stats["bytes"].get("ddr", 0.0))


def measure(case: Case) -> dict:
    """Compile ``case``, run it timing-only, and return one table row."""
    from m100.targets.m100.isa import Unit
    from m100.targets.m100.machine import get_machine
    from m100.tools import driver
    m = get_machine(case.machine)
    t0 = time.perf_counter()
    cr = driver.compile(case.build(), machine=case.machine, tpbs=case.tpbs,
                        strategy=case.strategy)
    t_compile = time.perf_counter() - t0
    pred = int(cr.program.metadata["predicted_cycles"])
    t0 = time.perf_counter()
    res = simulate_timing(cr.program)
    t_sim = time.perf_counter() - t0
    st = res.stats
    sim = float(st["total_cycles"])
    tpbs = {inst.executor[1] for _, inst in cr.program.instructions()
            if inst.executor[0] is not Unit.DMA}
    tcus = [u for u in st["units"].values() if "macs" in u and u["instructions"]]
    peak = max((u["macs"] / (u["mac_util_pct"] / 100.0 * sim) for u in tcus
                if u["mac_util_pct"] > 0), default=0.0)  # the dtype peak MACs/cycle of one TCU
    macs = float(st["tcu_macs"])
    ddr = ddr_bytes(st)
    row = dict(case=case.name, tpbs=len(tpbs), pred=pred, sim=round(sim),
               ratio=round(sim / pred, 3) if pred else None,
               tcu_used=round(100 * macs / (peak * len(tcus) * sim), 2) if tcus and sim else 0.0,
               tcu_all=round(100 * macs / (peak * m.num_tpbs * sim), 2) if peak and sim else 0.0,
               ddr_util=round(100 * ddr / (sim * m.ddr_bytes_per_cycle), 1) if sim else 0.0,
               ddr_mb=round(ddr / 1e6, 1), instructions=cr.num_instructions,
               compile_s=round(t_compile, 1), sim_s=round(t_sim, 1))
    return row


def instruction_diff(case: Case) -> list[dict]:
    """Per instruction: the timeline's ``pred_start``/``pred_end`` next to the interpreter's start/end.

    Instructions are matched by (stream, position): the order ``module_to_program`` gives them."""
    from m100.dialects.tpb import InstrOp, ProgramOp, StreamOp
    from m100.targets.m100.isa import Dma
    from m100.targets.m100.program import CCB_STREAM
    from m100.tools import driver
    cr = driver.compile(case.build(), machine=case.machine, tpbs=case.tpbs,
                        strategy=case.strategy)
    prog = next(o for o in cr.module.walk() if isinstance(o, ProgramOp))
    m = cr.program
    preds: dict[int, list] = {}
    from m100.targets.m100.machine import get_machine
    from m100.dialects.translate import op_to_instruction
    mach = get_machine(case.machine)

    def attrs(op):
        a = op.attributes
        return (a["pred_start"].value.data if "pred_start" in a else None,
                a["pred_end"].value.data if "pred_end" in a else None)
    for op in prog.body.ops:
        if isinstance(op, StreamOp):
            for inner in op.body.ops:
                if isinstance(inner, InstrOp):
                    preds.setdefault(op.cluster.value.data, []).append(attrs(inner))
        elif isinstance(op, InstrOp):
            inst = op_to_instruction(op)
            key = CCB_STREAM if isinstance(inst, Dma) else mach.cluster_of(inst.tpb)
            preds.setdefault(key, []).append(attrs(op))
    from m100.sim.simulator import Simulator
    sim = Simulator(m, mode="timing", check_races=False)
    res = sim.run({})
    rows = []
    for r in res.records:
        ps, pe = preds[r.stream][r.pos]
        u, i = r.inst.executor
        rows.append(dict(stream=r.stream, pos=r.pos, unit=f"{u.name}{i}", op=r.inst.MNEMONIC,
                         pred_start=ps, pred_end=pe, sim_start=r.start, sim_end=r.end,
                         inst=r.inst))
    return rows


def _kind(inst) -> str:
    k = inst.MNEMONIC
    if hasattr(inst, "engine"):
        k += f" {inst.src.space.name}->{inst.dst.space.name}" + (" bcast" if inst.tpb_mask else "")
    elif hasattr(inst, "stages"):
        k += " " + "+".join(s.op.name for s in inst.stages)
    return k


def print_diff(rows: list[dict], limit: int, out=sys.stdout) -> None:
    """Per instruction kind: predicted vs simulated busy cycles; then the first ``limit``
    instructions by simulated start (``-`` = no ``pred_start``: not a task of the timeline)."""
    agg: dict[str, list] = {}
    for r in rows:
        a = agg.setdefault(_kind(r["inst"]), [0, 0, 0.0, 0.0])
        a[0] += 1
        if r["pred_start"] is not None:
            a[1] += 1
            a[2] += r["pred_end"] - r["pred_start"]
        a[3] += (r["sim_end"] or 0) - (r["sim_start"] or 0)
    print(f"{'kind':36s} {'n':>5s} {'w/pred':>6s} {'pred busy':>10s} {'sim busy':>10s} ratio", file=out)
    for k, (n, npred, p, s) in sorted(agg.items()):
        print(f"{k:36s} {n:5d} {npred:6d} {p:10.0f} {s:10.0f} {s / p if p else float('nan'):5.2f}",
              file=out)
    print(f"predicted end {max((r['pred_end'] or 0) for r in rows)}, simulated end "
          f"{max((r['sim_end'] or 0) for r in rows):.0f}", file=out)
    for r in sorted(rows, key=lambda r: r["sim_start"] or 0)[:limit]:
        ps, pe = r["pred_start"], r["pred_end"]
        pred = f"{ps:>9}-{pe:>9} ({pe - ps:>7})" if ps is not None else f"{'-':>29}"
        print(f"{r['unit']:8s} {_kind(r['inst']):28s} pred {pred}  sim {r['sim_start']:9.0f}-"
              f"{r['sim_end']:9.0f} ({r['sim_end'] - r['sim_start']:7.0f})", file=out)


COLS = ["case", "tpbs", "pred", "sim", "ratio", "tcu_used", "tcu_all", "ddr_util", "ddr_mb",
        "instructions", "compile_s", "sim_s"]


def print_table(rows: list[dict], out=sys.stdout) -> None:
    w = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in COLS}
    print("  ".join(c.ljust(w[c]) for c in COLS), file=out)
    for r in rows:
        if "error" in r:
            print(r["case"].ljust(w["case"]) + "  error: " + r["error"], file=out)
        else:
            print("  ".join(str(r.get(c, "")).ljust(w[c]) for c in COLS), file=out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="only the small cases (seconds each)")
    ap.add_argument("--case", help="comma-separated case names (see --list)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--diff", metavar="NAME", help="per-instruction pred_start/pred_end vs the "
                    "interpreter's start/end for one case (aggregate per kind + the first --limit)")
    ap.add_argument("--limit", type=int, default=60, help="instructions listed by --diff")
    a = ap.parse_args(argv)
    if a.diff:
        if a.diff not in CASES:
            print(f"fidelity: error: unknown case '{a.diff}' (known: {', '.join(CASES)})",
                  file=sys.stderr)
            return 1
        print_diff(instruction_diff(CASES[a.diff]), a.limit)
        return 0
    if a.list:
        for c in CASES.values():
            print(f"{c.name:16s} {'small' if c.small else 'big'}  tpbs={c.tpbs or 'all'}")
        return 0
    names = a.case.split(",") if a.case else [n for n, c in CASES.items() if c.small or not a.small]
    for n in names:
        if n not in CASES:
            print(f"fidelity: error: unknown case '{n}' (known: {', '.join(CASES)})", file=sys.stderr)
            return 1
    rows = []
    from m100.errors import M100Error
    for n in names:
        try:
            rows.append(measure(CASES[n]))
        except M100Error as e:
            rows.append(dict(case=n, error=str(e).splitlines()[0]))
        print(f"# {n}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
