"""``make demo``: ``m100 check`` on a small bundled model, with a Perfetto trace and a timeline PNG.

    python -m m100.tools.demo [--out out] [--machine tiny] [--tpbs 2] [--model convnet|mlp]

The model is built at demo time with ``onnx.helper`` (``m100.frontend.models``: Conv 3x3 + Relu +
MaxPool + Conv stride 2 + Relu, or a 3-layer MLP) and written to ``OUT/<model>.onnx``; then it runs
exactly ``m100 check OUT/<model>.onnx --machine ... --trace OUT/<model>.trace.json --plot
OUT/<model>.timeline.png``: compile (``m100-pipeline``), the sync certificate checked
independently, the interpreter with race/deadlock checks on, onnxruntime as the oracle; it prints
the errors per output, cycles, TCU utilization and PASS/FAIL (the exit code). Open the trace in
https://ui.perfetto.dev.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from m100.sim.certificate import SYNC_MODES

MODELS = ("convnet", "mlp")


def build(name: str):
    from m100.frontend import models
    return models.conv_relu_maxpool() if name == "convnet" else models.mlp()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="m100-demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out", help="output folder (default out/)")
    ap.add_argument("--machine", default="tiny")
    ap.add_argument("--tpbs", type=int, default=0)
    ap.add_argument("--model", default="convnet", choices=MODELS)
    ap.add_argument("--sync-mode", default="dataflow", choices=SYNC_MODES)
    args = ap.parse_args(argv)
    import onnx

    from m100.tools.m100_cli import main as m100

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = out / f"{args.model}.onnx"
    onnx.save(build(args.model), model)
    trace, png = out / f"{args.model}.trace.json", out / f"{args.model}.timeline.png"
    cmd = ["check", str(model), "--machine", args.machine, "--tpbs", str(args.tpbs),
           "--sync-mode", args.sync_mode, "--report", "--trace", str(trace), "--plot", str(png)]
    print("$ m100 " + " ".join(cmd), flush=True)
    rc = m100(cmd)
    if trace.exists():
        print(f"trace: {trace} (open in https://ui.perfetto.dev)")
    if png.exists():
        print(f"timeline: {png}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
