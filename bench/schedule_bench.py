#!/usr/bin/env python3
"""Space-time scheduler benchmark: the acceptance figures of issue 5 as a table.

Rows:
* ``matmul``   1024x1024x1024 f32 on the m100: predicted cycles and TCU utilization (MACs from the
  op's definition / (makespan x peak f32 MAC rate x TPBs that compute)), with ``tpbs=32`` and on
  the whole machine;
* ``chain``    conv3x3 -> relu -> conv3x3 -> maxpool at 56x56x64 (a ResNet stage): predicted cycles
  of the pipelined schedule vs layer-by-layer data-parallel on all TPBs (and ``auto``);
* ``resnet18`` ResNet-18 (random weights, 224x224, from ONNX through the frontend and m100-graph):
  wall time of the ``m100-schedule`` pass (search + emission) and of hbsm-allocate/twu-materialize,
  predicted cycles, instruction count;
* ``sim``      optional (``--sim``): predicted vs interpreter cycles for small programs.

Usage: ``.venv/bin/python bench/schedule_bench.py [--json out.json] [--quick] [--sim]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _util(g, pl) -> tuple[float, int]:
    tl = pl.timeline
    used = {t.tpb for t in tl.tasks if t.tpb >= 0 and t.unit == "tcu"}
    macs = 0
    for o in g.ops:
        a = o.attrs
        if o.unit == "tcu.matmul":
            macs += a["m"] * a["n"] * a["k"]
        elif o.unit == "tcu.conv2d":
            out = g.tensors[o.outputs[0]].shape
            n = 1
            for d in out:
                n *= d
            macs += n * a["kh"] * a["kw"] * a["c"] // a.get("groups", 1)
    peak = pl.machine.tcu_macs_per_cycle("f32")
    return macs / (tl.makespan * peak * max(1, len(used))), len(used)


def bench_matmul(rows: list[dict]) -> None:
    from m100.passes.schedule.examples import matmul_graph
    from m100.passes.schedule.placement import schedule
    from m100.targets.m100.machine import get_machine
    m = get_machine("m100")
    g = matmul_graph(1024, 1024, 1024)
    for tpbs in (32, 0):
        t = time.perf_counter()
        pl = schedule(g, m, tpbs=tpbs, strategy="auto")
        dt = time.perf_counter() - t
        util, used = _util(g, pl)
        st = pl.segments[0].stages[0]
        rows.append(dict(bench="matmul 1024^3 f32", config=f"tpbs={tpbs or m.num_tpbs}",
                         cycles=round(pl.timeline.makespan), tpbs_used=used,
                         tcu_util=round(util, 3), split=f"{st.gr}x{st.gc} bands={st.bands}",
                         seconds=round(dt, 2)))


def bench_chain(rows: list[dict]) -> None:
    from m100.passes.schedule.examples import conv_chain
    from m100.passes.schedule.placement import schedule
    from m100.targets.m100.machine import get_machine
    m = get_machine("m100")
    g = conv_chain()
    base = None
    for strategy in ("data-parallel", "pipeline", "auto"):
        t = time.perf_counter()
        pl = schedule(g, m, strategy=strategy)
        dt = time.perf_counter() - t
        util, used = _util(g, pl)
        c = pl.timeline.makespan
        base = base or c
        rows.append(dict(bench="conv-relu-conv-pool 56x56x64", config=strategy,
                         cycles=round(c), tpbs_used=used, tcu_util=round(util, 3),
                         split=" | ".join(f"{s.kind}:" + "+".join(
                             f"{st.op}[{len(st.tpbs)}@{st.tpbs[0]}]" for st in s.stages)
                             for s in pl.segments), speedup_vs_layer_by_layer=round(base / c, 3),
                         seconds=round(dt, 2)))


def bench_resnet18(rows: list[dict], hw: int) -> None:
    from m100.dialects.tpb import InstrOp
    from m100.frontend import models
    from m100.frontend.mlir_load import default_context
    from m100.tools.onnx_backend import compile_onnx
    from m100.passes.backend.hbsm_allocate import HbsmAllocate
    from m100.passes.backend.twu_materialize import TwuMaterialize
    from m100.passes.schedule.m100_schedule import M100Schedule
    ctx = default_context()
    t = time.perf_counter()
    mod = compile_onnx(models.resnet18(hw=hw), ctx, graph=True)
    t_import = time.perf_counter() - t
    t = time.perf_counter()
    M100Schedule(strategy="auto").apply(ctx, mod)
    t_sched = time.perf_counter() - t
    prog = next(o for o in mod.walk() if o.name == "tpb.program")
    meta = prog.metadata_dict()
    t = time.perf_counter()
    HbsmAllocate().apply(ctx, mod)
    t_alloc = time.perf_counter() - t
    t = time.perf_counter()
    TwuMaterialize().apply(ctx, mod)
    t_twu = time.perf_counter() - t
    n = sum(1 for o in mod.walk() if isinstance(o, InstrOp))
    rows.append(dict(bench=f"resnet18 {hw}x{hw} f32", config="auto, m100 (56 TPBs)",
                     cycles=int(meta.get("predicted_cycles", 0)), instructions=n,
                     import_graph_s=round(t_import, 1), m100_schedule_s=round(t_sched, 1),
                     hbsm_allocate_s=round(t_alloc, 1), twu_materialize_s=round(t_twu, 1)))


def bench_sim(rows: list[dict]) -> None:
    """Predicted (scheduler) vs simulated (interpreter) cycles on small programs."""
    import numpy as np
    from xdsl.dialects.builtin import StringAttr

    from m100.dialects.tpb import ProgramOp
    from m100.frontend import models
    from m100.frontend.mlir_load import default_context
    from m100.tools.onnx_backend import compile_onnx
    from m100.passes.backend.hbsm_allocate import HbsmAllocate
    from m100.passes.backend.sync_insert.sync_insert import SyncInsert
    from m100.passes.backend.twu_materialize import TwuMaterialize
    from m100.passes.schedule.m100_schedule import M100Schedule
    from m100.sim.simulator import simulate
    from m100.dialects.translate import module_to_program
    for name, model, machine, tpbs in (("mlp", models.mlp(batch=64, d_in=256, hidden=256), "m100", 8),
                                       ("convnet", models.conv_relu_maxpool(hw=32, f=32), "m100", 8)):
        for strategy in ("data-parallel", "auto"):
            ctx = default_context()
            mod = compile_onnx(model, ctx, graph=True)
            fn = next(o for o in mod.walk() if o.name == "func.func")
            x = np.random.default_rng(0).standard_normal(
                tuple(fn.body.blocks[0].args[0].type.get_shape())).astype(np.float32)
            M100Schedule(machine=machine, tpbs=tpbs, strategy=strategy).apply(ctx, mod)
            for p in (HbsmAllocate(), TwuMaterialize(), SyncInsert()):
                p.apply(ctx, mod)
            prog = next(o for o in mod.walk() if isinstance(o, ProgramOp))
            pred = int(prog.metadata_dict()["predicted_cycles"])
            prog.properties["level"] = StringAttr("resolved")
            res = simulate(module_to_program(mod), {model.graph.input[0].name: x})
            rows.append(dict(bench=f"sim {name}", config=f"{strategy}, {machine} tpbs={tpbs}",
                             cycles=pred, simulated=round(res.total_cycles),
                             ratio=round(res.total_cycles / pred, 2), ok=res.ok))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--quick", action="store_true", help="ResNet-18 at 64x64 instead of 224x224")
    ap.add_argument("--sim", action="store_true", help="also compare predictions with the interpreter")
    a = ap.parse_args(argv)
    rows: list[dict] = []
    bench_matmul(rows)
    bench_chain(rows)
    bench_resnet18(rows, 64 if a.quick else 224)
    if a.sim:
        bench_sim(rows)
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    widths = {k: max(len(k), *(len(str(r.get(k, ""))) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r.get(k, "")).ljust(widths[k]) for k in keys))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
