"""Check: a compile-speed change leaves every emitted program and sync certificate byte-identical.

    .venv/bin/python bench/compile_same.py --save before.json [--models a,b] [--profile DIR]
    m100 bench compile_same [--models a,b]          (--save out/bench/compile_same.json)
    .venv/bin/python bench/compile_same.py --compare before.json [--models a,b]

Compiles each model in this process (``m100.tools.driver.compile``) and records the SHA-256 of
the program's bytes (``Program.to_bytes(align=1)``: the file without the padding that places big
segments at page-congruent offsets -- session 36 -- so hashes saved before it still compare), of
its sync certificate and of its dataflow
certificate (JSON, sorted keys), plus the per-stage CPU seconds. ``--compare`` exits non-zero
naming each model whose program, certificate or dataflow certificate differs from the saved run
(a saved run without a dataflow hash compares the other two) and prints the per-stage CPU seconds
side by side.
``--profile DIR`` writes one cProfile file per model (``DIR/<model>.prof``, read with pstats).

Models: ResNet-18 224 (full machine), ResNet-18 32 (8 TPBs), the MLP and conv net (tiny
machine), the small LLaMA layer and LM of ``test/data`` (8 TPBs), ResNet-50 (the onnx wheel's
light model, full machine; not in the default list: ~40 CPU-s).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = "resnet18,resnet18-32,mlp,convnet,llama_layer,llama_lm"


def _cases():
    import onnx

    from m100.frontend import models

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    data = ROOT / "test" / "data"
    return {
        "resnet18": (models.resnet18, "m100", 0),
        "resnet18-32": (lambda: models.resnet18(hw=32, num_classes=10), "m100", 8),
        "mlp": (models.mlp, "tiny", 0),
        "convnet": (models.conv_relu_maxpool, "tiny", 0),
        "llama_layer": (lambda: onnx.load(str(data / "llama_layer_small.onnx")), "m100", 8),
        "llama_lm": (lambda: onnx.load(str(data / "llama_lm_small.onnx")), "m100", 8),
        "resnet50": (lambda: models.randomize_light_model(
            onnx.load(str(light / "light_resnet50.onnx"))), "m100", 0),
    }


def measure(name: str, profile_dir: Path | None = None) -> dict:
    from m100.tools import driver

    build, machine, tpbs = _cases()[name]
    model = build()
    prof = cProfile.Profile() if profile_dir else None
    c0 = time.process_time()
    if prof:
        prof.enable()
    cr = driver.compile(model, machine=machine, tpbs=tpbs)
    if prof:
        prof.disable()
        profile_dir.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(profile_dir / f"{name}.prof"))
    total = time.process_time() - c0
    prog = cr.program.to_bytes(align=1)  # (the padding is a function of these bytes)
    cert = json.dumps(cr.certificate, sort_keys=True).encode()
    dataflow = json.dumps(cr.dataflow, sort_keys=True).encode()
    return {"program": hashlib.sha256(prog).hexdigest(), "certificate": hashlib.sha256(cert).hexdigest(),
            "dataflow": hashlib.sha256(dataflow).hexdigest(),
            "instructions": cr.num_instructions, "cpu": {k: round(v, 3) for k, v in cr.cpu_timings.items()},
            "cpu_total": round(total, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", "--json", type=Path, dest="save",
                   help="write hashes and stage CPU seconds here (m100 bench passes --json)")
    g.add_argument("--compare", type=Path, help="compare with a file written by --save")
    ap.add_argument("--profile", type=Path, default=None)
    a = ap.parse_args(argv)
    names = [n for n in a.models.split(",") if n]
    unknown = [n for n in names if n not in _cases()]
    if unknown:
        print(f"compile_same: unknown model(s) {', '.join(unknown)} (known: {', '.join(_cases())})",
              file=sys.stderr)
        return 2
    old = json.loads(a.compare.read_text()) if a.compare else {}
    res, bad = {}, []
    for n in names:
        r = res[n] = measure(n, a.profile)
        line = f"{n:<12} {r['instructions']:>6} instr  CPU {r['cpu_total']:7.2f} s"
        if n in old:
            o = old[n]
            same_p, same_c = o["program"] == r["program"], o["certificate"] == r["certificate"]
            same_d = o.get("dataflow", r["dataflow"]) == r["dataflow"]
            same = same_p and same_c and same_d
            line += f"  (saved {o['cpu_total']:7.2f} s)  " + (
                "same bytes" if same else "DIFFERENT" if not same_p and not same_c else
                "DIFFERENT program, same certificate" if not same_p else
                "same program, DIFFERENT certificate" if not same_c else
                "same program and certificate, DIFFERENT dataflow certificate")
            if not same:
                bad.append(n)
            stages = sorted(set(o["cpu"]) | set(r["cpu"]), key=list(r["cpu"]).index
                            if set(o["cpu"]) <= set(r["cpu"]) else None)
            line += "\n" + "\n".join(f"    {k:<16} {o['cpu'].get(k, float('nan')):7.2f} -> "
                                     f"{r['cpu'].get(k, float('nan')):7.2f}" for k in stages)
        elif a.compare:
            line += "  (not in the saved run)"
        print(line, flush=True)
    if a.save:
        a.save.write_text(json.dumps(res, indent=1) + "\n")
    if bad:
        print(f"compile_same: program, certificate or dataflow certificate changed for {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
