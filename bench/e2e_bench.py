"""Benchmark: the end-to-end flow per model, dataflow vs barrier-all sync.

For each model: compile time (frontend + m100-pipeline + emission), instruction count, counters
used per TPB (max / mean over the TPBs that use any), interpreter cycles in both sync modes and
the speed-up, TCU MAC utilization (mean over the TCUs the program uses; and over all TCUs of the
machine), and the
check verdict (onnxruntime oracle, race/deadlock checks, independent certificate check) -- or
the one-line reason a model does not compile yet.

    .venv/bin/python bench/e2e_bench.py [--models mlp,convnet,...] [--big] [--json out.json]

``--big`` adds ResNet-18 at 224x224 and the light ResNet-50 / SqueezeNet (minutes each).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from m100.errors import M100Error
from m100.frontend import models, transformer_models
from m100.tools import driver


def _light(name):
    import onnx
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")
    return models.randomize_light_model(onnx.load(path))


# name -> (builder, machine, tpbs, big)
MODELS = {
    "mlp": (models.mlp, "tiny", 0, False),
    "convnet": (models.conv_relu_maxpool, "tiny", 0, False),
    "mlp-m100": (lambda: models.mlp(batch=64, d_in=256, hidden=256, d_out=64), "m100", 8, False),
    "convnet-m100": (lambda: models.conv_relu_maxpool(c=3, hw=64, f=32), "m100", 8, False),
    "resnet18-32": (lambda: models.resnet18(hw=32, num_classes=10), "m100", 8, False),
    "llama-layer": (lambda: "test/data/llama_layer_small.onnx", "m100", 8, False),
    "bert-layer": (lambda: transformer_models.bert_layer(), "m100", 8, False),
    "vit-small": (lambda: transformer_models.vit(), "m100", 8, False),
    "resnet18-224": (models.resnet18, "m100", 0, True),
    "bert-layer-base": (lambda: transformer_models.bert_layer(seq=128, dim=768, heads=12, ffn=3072),
                        "m100", 0, True),
    "vit-tiny": (lambda: transformer_models.vit(img=224, patch=16, dim=192, depth=12, heads=3,
                                                mlp=768, classes=1000), "m100", 0, True),
    "resnet50-light": (lambda: _light("resnet50"), "m100", 16, True),
    "squeezenet-light": (lambda: _light("squeezenet"), "m100", 16, True),
}
MODES = ("dataflow", "barrier-all")


def bench(name: str) -> dict:
    build, machine, tpbs, _ = MODELS[name]
    row: dict = {"model": name, "machine": machine, "tpbs": tpbs or "all"}
    src = build()
    for mode in MODES:
        t0 = time.perf_counter()
        try:
            ck = driver.check(src, machine=machine, tpbs=tpbs, sync_mode=mode)
        except M100Error as e:
            row["status"] = "blocked: " + str(e).splitlines()[0]
            return row
        wall = time.perf_counter() - t0
        cr = ck.compile
        cpt = [n for n in cr.counters_per_tpb.values() if n]
        key = "df" if mode == "dataflow" else "ba"
        row[f"cycles_{key}"] = round(ck.cycles)
        row[f"pass_{key}"] = ck.passed
        if mode == "dataflow":
            row.update({
                "compile_s": round(sum(cr.timings.values()), 2),
                "instructions": cr.num_instructions,
                "tpbs_used": len(cpt),
                "counters_max": max(cpt, default=0),
                "counters_mean": round(sum(cpt) / len(cpt), 1) if cpt else 0,
                "tcu_util_pct": round(ck.tcu_util, 2),
                "tcu_util_all_pct": round(ck.tcu_util_machine, 3),
                "max_rel_err": float(f"{max((e.max_rel for e in ck.errors), default=0):.2g}"),
                "check_s": round(wall, 1),
            })
        else:
            row["instructions_ba"] = cr.num_instructions
            row["counters_max_ba"] = max(cpt, default=0)
    row["speedup"] = round(row["cycles_ba"] / row["cycles_df"], 2) if row.get("cycles_df") else None
    row["status"] = "PASS" if row["pass_df"] and row["pass_ba"] else "FAIL"
    return row


COLS = ["model", "machine", "tpbs", "status", "compile_s", "instructions", "tpbs_used",
        "counters_max", "counters_mean", "cycles_df", "cycles_ba", "speedup", "tcu_util_pct",
        "tcu_util_all_pct", "max_rel_err"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--big", action="store_true", help="include the big models")
    ap.add_argument("--json", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    names = (args.models.split(",") if args.models
             else [n for n, v in MODELS.items() if args.big or not v[3]])
    for n in names:
        if n not in MODELS:
            print(f"e2e_bench: error: unknown model '{n}' (known: {', '.join(MODELS)})",
                  file=sys.stderr)
            return 1
    rows = []
    for n in names:
        rows.append(bench(n))
        print(f"# {n}: {rows[-1].get('status')}", file=sys.stderr, flush=True)
    w = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows if not str(
        r.get("status", "")).startswith("blocked") or c in ("model", "machine", "tpbs")))
         for c in COLS}
    print("  ".join(c.ljust(w[c]) for c in COLS))
    for r in rows:
        if str(r.get("status", "")).startswith("blocked"):
            print("  ".join(str(r[c]).ljust(w[c]) for c in ("model", "machine", "tpbs"))
                  + "  " + r["status"])
        else:
            print("  ".join(str(r.get(c, "")).ljust(w[c]) for c in COLS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
