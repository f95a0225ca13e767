"""Frontend benchmark: ONNX import (torch-mlir + xDSL parse), m100-graph pipeline and numpy reference
execution time for ResNet-18 (random weights, built with onnx.helper) and other small models.

    .venv/bin/python bench/frontend_bench.py [--models resnet18,mlp,...] [--repeat 1] [--json out.json]

Prints one row per model: parameter count, MLIR text size, the import stages (ONNX preparation =
version conversion + checker + shape inference; torch-mlir lowering in its worker process; xDSL parse
+ verify), the graph pipeline (when ``m100.passes.graph`` provides it), reference execution, and the
onnxruntime time (1 thread, including session creation) for scale. Wall-clock seconds, best of
``--repeat`` runs; ``cpu`` columns are this process's CPU time (robust to a loaded machine; numpy may
use more than one thread, so CPU time can exceed wall time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _models():
    import onnx

    from m100.frontend import models

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return {
        "mlp": (models.mlp, (4, 16)),
        "convnet": (models.conv_relu_maxpool, (1, 3, 16, 16)),
        "llama_layer": (lambda: onnx.load(str(ROOT / "test" / "data" / "llama_layer_small.onnx")), (1, 8, 32)),
        "squeezenet": (lambda: models.randomize_light_model(onnx.load(str(light / "light_squeezenet.onnx"))),
                       (1, 3, 224, 224)),
        "resnet18": (models.resnet18, (1, 3, 224, 224)),
        "resnet50": (lambda: models.randomize_light_model(onnx.load(str(light / "light_resnet50.onnx"))),
                     (1, 3, 224, 224)),
    }


def bench_one(name, build, shape, repeat):
    from onnx import numpy_helper

    from m100.frontend import onnx_import
    from m100.frontend.mlir_load import default_context, load_mlir_text
    from m100.tools.onnx_backend import graph_pipeline_pass, onnxruntime_run
    from m100.frontend.reference import run

    model = build()
    params = sum(int(np.prod(numpy_helper.to_array(i).shape)) for i in model.graph.initializer)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    onnx_import._Worker.lower(onnx_import.prepare_model(model, name), name, True, split=True)  # warm up
    best: dict[str, float] = {}

    def keep(k, v):
        best[k] = min(best.get(k, float("inf")), v)

    text_len = 0
    ok = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        c0 = time.process_time()
        prepared = onnx_import.prepare_model(model, name)
        t1 = time.perf_counter()
        keep("prepare_cpu_s", time.process_time() - c0)
        text, blobs = onnx_import._Worker.lower(prepared, name, True, split=True)
        t2 = time.perf_counter()
        keep("torch_mlir_cpu_s", onnx_import._Worker.last_cpu_s)
        c2 = time.process_time()
        ctx = default_context()
        module = load_mlir_text(text, ctx, name=name, verify=False)
        onnx_import.attach_dense_blobs(module, blobs)
        module.verify()
        t3 = time.perf_counter()
        keep("parse_cpu_s", time.process_time() - c2)
        text_len = len(text) + 2 * sum(map(len, blobs))
        keep("prepare_s", t1 - t0)
        keep("torch_mlir_s", t2 - t1)
        keep("parse_s", t3 - t2)
        keep("import_s", t3 - t0)
        keep("import_cpu_s", best.get("prepare_cpu_s", 0) + onnx_import._Worker.last_cpu_s
             + time.process_time() - c2)
        p = graph_pipeline_pass()
        if p is not None:
            t4 = time.perf_counter()
            c4 = time.process_time()
            p.apply(ctx, module)
            keep("graph_s", time.perf_counter() - t4)
            keep("graph_cpu_s", time.process_time() - c4)
        t5 = time.perf_counter()
        c5 = time.process_time()
        got = run(module, [x])
        keep("execute_s", time.perf_counter() - t5)
        keep("execute_cpu_s", time.process_time() - c5)
        t6 = time.perf_counter()
        exp = onnxruntime_run(model, [x])
        keep("onnxruntime_s", time.perf_counter() - t6)
        scale = float(np.max(np.abs(exp[0])))
        ok = bool(np.allclose(got[0], exp[0], rtol=1e-4, atol=1e-5 * scale))
    return {"model": name, "params": params, "mlir_mb": round(text_len / 1e6, 1), **best, "matches_ort": ok}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,convnet,llama_layer,resnet18",
                    help="comma-separated subset of: " + ", ".join(_models()))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    table = _models()
    rows = []
    for name in args.models.split(","):
        if name not in table:
            print(f"frontend_bench: error: unknown model '{name}'", file=sys.stderr)
            return 2
        build, shape = table[name]
        rows.append(bench_one(name, build, shape, args.repeat))
        r = rows[-1]
        print(f"{r['model']:<12} params {r['params']:>10,}  text {r['mlir_mb']:5.1f} MB | wall s: import "
              f"{r['import_s']:6.2f} (prepare {r['prepare_s']:.2f}, torch-mlir {r['torch_mlir_s']:.2f}, "
              f"parse {r['parse_s']:.2f})  graph {r.get('graph_s', float('nan')):5.2f}  execute "
              f"{r['execute_s']:5.2f} | cpu s: import {r['import_cpu_s']:5.2f} (prepare "
              f"{r['prepare_cpu_s']:.2f}, torch-mlir {r['torch_mlir_cpu_s']:.2f}, parse {r['parse_cpu_s']:.2f})"
              f"  graph {r.get('graph_cpu_s', float('nan')):5.2f}  execute {r['execute_cpu_s']:5.2f} | "
              f"onnxruntime {r['onnxruntime_s']:.3f}  match {r['matches_ort']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
