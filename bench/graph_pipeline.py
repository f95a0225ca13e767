"""Graph-pipeline benchmark: ONNX import (torch-mlir) and `m100-graph` time per model.

    .venv/bin/python bench/graph_pipeline.py [--models resnet18,mlp,...] [--json out.json]

Prints a table: model, ops after import, import seconds, per-stage and total pipeline seconds,
and what the pipeline produced (TCU contractions, fused epilogue ops, CVU ops, transposes left).
Models come from m100.frontend.models (random weights); llama_layer from test/data or the shared
model folder when present.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path


def _models():
    from m100.frontend import models

    out = {"mlp": models.mlp, "convnet": models.conv_relu_maxpool, "resnet18": models.resnet18}
    root = Path(__file__).resolve().parents[1]
    for p in (root / "test/data/llama_layer_small.onnx",
              Path("/work/shared/models/llama_layer_small.onnx")):
        if p.exists():
            import onnx

            out["llama_layer"] = lambda p=p: onnx.load(str(p))
            break
    return out


def bench(name: str, build) -> dict:
    from xdsl.dialects import func

    from m100.context import make_context
    from m100.frontend import load_onnx
    from m100.passes.graph.m100_graph import M100Graph

    model = build()
    ctx = make_context()
    t0 = time.perf_counter()
    module = load_onnx(model, ctx)
    t1 = time.perf_counter()
    ops = lambda: [o for f in module.walk() if isinstance(f, func.FuncOp)  # noqa: E731
                   for o in f.body.blocks[0].ops]
    n_in = len(ops())
    stages = {}
    for stage_name, run in M100Graph().stages():
        s = time.perf_counter()
        run(ctx, module)
        stages[stage_name] = stages.get(stage_name, 0.0) + time.perf_counter() - s
    t2 = time.perf_counter()
    units = Counter(o.attributes["m100.unit"].data for o in ops() if "m100.unit" in o.attributes)
    names = Counter(o.name for o in ops())
    return {"model": name, "ops_in": n_in, "ops_out": len(ops()), "import_s": t1 - t0,
            "graph_s": t2 - t1, "stages_s": stages, "units": dict(units),
            "transposes": names["linalg.transpose"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,convnet,llama_layer,resnet18")
    ap.add_argument("--json", help="write the results as JSON")
    args = ap.parse_args(argv)
    avail = _models()
    rows = [bench(n, avail[n]) for n in args.models.split(",") if n in avail]
    print(f"{'model':<12} {'ops in':>6} {'ops out':>7} {'import s':>9} {'graph s':>8} "
          f"{'tcu':>4} {'epi':>4} {'cvu':>4} {'dtdu':>4} {'transp':>6}")
    for r in rows:
        u = r["units"]
        tcu = sum(v for k, v in u.items() if k.startswith("tcu.") and k != "tcu.epilogue")
        cvu = sum(v for k, v in u.items() if k.startswith("cvu."))
        dtdu = sum(v for k, v in u.items() if k.startswith("dtdu."))
        print(f"{r['model']:<12} {r['ops_in']:>6} {r['ops_out']:>7} {r['import_s']:>9.2f} "
              f"{r['graph_s']:>8.2f} {tcu:>4} {u.get('tcu.epilogue', 0):>4} {cvu:>4} {dtdu:>4} "
              f"{r['transposes']:>6}")
    slow = max(rows, key=lambda r: r["graph_s"]) if rows else None
    if slow:
        print(f"\nstages of {slow['model']}: " + ", ".join(
            f"{k} {v:.2f}s" for k, v in sorted(slow["stages_s"].items(), key=lambda kv: -kv[1])))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
