"""Benchmark: the vision model families of issue 12 through ``m100 check`` on m100.

Per model (``frontend/vision_models.py`` ``FAMILIES``): compile time (frontend + m100-pipeline +
emission, from the driver's stage timings), instruction count, interpreter cycles, TCU MAC
utilization (mean over the TCUs the program uses / over all 56), the share of the TCU's busy
cycles spent in depthwise (grouped) convolutions, the check verdict against onnxruntime -- or the
one-line reason a model does not compile.

    .venv/bin/python bench/vision_models.py [--size small|full] [--models a,b] [--tpbs N] [--json F]

``--size small`` (default) is the default test run's thin 32-64 px versions (seconds each);
``--size full`` the real widths and input sizes (minutes each on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from m100.errors import M100Error
from m100.frontend import vision_models
from m100.tools import driver


def bench(name: str, size: str, tpbs: int) -> dict:
    row: dict = {"model": name, "size": size, "tpbs": tpbs or "all"}
    t0 = time.perf_counter()
    model = vision_models.build(name, size)
    x = model.graph.input[0].type.tensor_type.shape.dim
    row["input"] = "x".join(str(d.dim_value) for d in x[1:])
    try:
        ck = driver.check(model, machine="m100", tpbs=tpbs)
    except M100Error as e:
        row["status"] = "blocked: " + str(e).splitlines()[0][:160]
        return row
    cr = ck.compile
    tcu = [i for _, i in cr.program.instructions() if i.executor[0].name == "TCU"]
    grouped = sum(1 for i in tcu if getattr(i, "groups", 1) > 1)
    row.update({
        "status": "PASS" if ck.passed else "FAIL",
        "compile_s": round(sum(cr.timings.values()), 1),
        "instructions": cr.num_instructions,
        "tcu_instr": len(tcu),
        "grouped_instr": grouped,
        "cycles": round(ck.cycles),
        "tcu_util_pct": round(ck.tcu_util, 2),
        "tcu_util_all_pct": round(ck.tcu_util_machine, 3),
        "max_rel_err": float(f"{max((e.max_rel for e in ck.errors), default=0):.2g}"),
        "wall_s": round(time.perf_counter() - t0, 1),
    })
    return row


def depthwise_table() -> list[dict]:
    """Depthwise 3x3 layers of MobileNetV2-224 on one TPB, f32, as the cost model (``cost.py``, the
    interpreter's charges) prices them: the TCU grouped conv that is built (one natural tile per
    group and 32 output pixels: ``tiles = C * ceil(OH*OW/32)``) against a CVU formulation (per tap
    a multiply by the channel's weight and an add, 8 stages per pipeline: 4 taps per instruction,
    each streaming the output once)."""
    from m100.passes.schedule.cost import CostModel
    from m100.targets.m100.machine import PRESETS

    cm = CostModel(PRESETS["m100"])
    mc = cm.machine
    rows = []
    for hw, c, s in ((112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2), (28, 192, 1),
                     (14, 384, 1), (14, 576, 1), (7, 960, 1)):
        o = hw // s
        tcu = c * cm.tcu_cycles(o * o, 1, 9, "f32", latency=False) + mc.tcu_pipeline_latency
        out_b = o * o * c * 4
        taps_per = mc.cvu_max_stages // 2
        n_instr = -(-9 // taps_per)
        cvu = n_instr * cm.cvu_cycles(out_b, out_b, 1, mc.cvu_max_stages)
        rows.append({"layer": f"{hw}x{hw}x{c} s{s}", "tcu_cycles": round(tcu),
                     "cvu_cycles": round(cvu), "cvu_speedup": round(tcu / cvu, 1),
                     "tcu_util_pct": round(100 * o * o * c * 9 / (tcu * mc.tcu_macs_per_cycle("f32")), 2)})
    return rows


COLS = ["model", "size", "input", "tpbs", "status", "compile_s", "instructions", "tcu_instr",
        "grouped_instr", "cycles", "tcu_util_pct", "tcu_util_all_pct", "max_rel_err", "wall_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated subset of: " + ", ".join(vision_models.FAMILIES))
    ap.add_argument("--size", choices=("small", "full"), default="small")
    ap.add_argument("--tpbs", type=int, default=0, help="TPBs to use (0: all 56)")
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--depthwise", action="store_true",
                    help="only the cost-model table: depthwise conv on the TCU vs the CVU")
    args = ap.parse_args(argv)
    if args.depthwise:
        rows = depthwise_table()
        cols = list(rows[0])
        print("  ".join(f"{c:>14}" for c in cols))
        for r in rows:
            print("  ".join(f"{r[c]!s:>14}" for c in cols))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    names = args.models.split(",") if args.models else list(vision_models.FAMILIES)
    for n in names:
        if n not in vision_models.FAMILIES:
            print(f"vision_models: error: unknown model '{n}' (known: "
                  f"{', '.join(vision_models.FAMILIES)})", file=sys.stderr)
            return 1
    rows = []
    for n in names:
        rows.append(bench(n, args.size, args.tpbs))
        print(f"# {n}: {rows[-1].get('status')}", file=sys.stderr, flush=True)
    w = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in COLS}
    print("  ".join(c.ljust(w[c]) for c in COLS))
    for r in rows:
        if str(r.get("status", "")).startswith("blocked"):
            print("  ".join(str(r[c]).ljust(w[c]) for c in ("model", "size", "input", "tpbs"))
                  + "  " + r["status"])
        else:
            print("  ".join(str(r.get(c, "")).ljust(w[c]) for c in COLS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
