"""Benchmark: how fast m100 compiles and interprets, against IREE and onnxruntime on the same ONNX.

    .venv/bin/python bench/speed.py [--models resnet18,resnet50] [--repeat 2] [--json out.json]
                                    [--no-iree] [--iree-venv DIR] [--no-sim] [--no-compile]

Compile: CPU seconds of the whole process tree (the command and every child it waits for, e.g. the
torch-mlir worker of the frontend) of ``m100 compile model.onnx -o prog.m100`` against
``iree-import-onnx`` + ``iree-compile --iree-hal-target-backends=llvm-cpu`` on the same ``.onnx``,
the two sides alternating, median of ``--repeat``. IREE lives in its own venv (``--iree-venv``,
default ``out/iree-venv``), created with ``pip install iree-base-compiler iree-base-runtime onnx``
when missing; when that fails the IREE columns are skipped with a message.

Interpreter: CPU seconds of this process for ``m100.tools.driver.run`` in ``functional`` (data and
the race/deadlock checks, no timing: ``m100-sim --functional-only``), ``full`` (data + timing +
checks) and ``timing`` (no data) mode, against one ``InferenceSession.run`` of onnxruntime with one
intra-op and one inter-op thread, alternating, median of ``--repeat``. Both sides are warmed up the
same way: onnxruntime by its session creation and one run, the interpreter by one run of each mode
after ``Program.load`` (its first run builds per-instruction caches: view specs, race byte sets,
costs); that first run is reported too (``sim_<mode>_first_cpu_s``, the '1st' columns). ``load``
is ``Program.load`` of the compiled file.

Models: ResNet-18 at 224x224 (``m100.frontend.models.resnet18``, onnx.helper, random weights) and
ResNet-50 (the onnx wheel's ``light_resnet50`` with random weights); both on the full m100 machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
MODES = ("functional", "full", "timing")
MIN_OPSET = 17


def _models():
    import onnx

    from m100.frontend import models

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return {
        "resnet18": models.resnet18,
        "resnet50": lambda: models.randomize_light_model(onnx.load(str(light / "light_resnet50.onnx"))),
    }


def tree_cpu(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    """CPU seconds (user + system) of ``cmd`` and of every descendant it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc


# --- IREE ------------------------------------------------------------------------------------------
def iree_tools(venv: Path, install: bool) -> tuple[Path, Path] | str:
    """(iree-import-onnx, iree-compile) of ``venv``, installing them if needed; or why not."""
    imp, comp = venv / "bin" / "iree-import-onnx", venv / "bin" / "iree-compile"
    if imp.exists() and comp.exists():
        return imp, comp
    if not install:
        return f"IREE not found in {venv} (run without --no-install to install it)"
    print(f"installing IREE into {venv} (pip install iree-base-compiler iree-base-runtime onnx) ...",
          file=sys.stderr)
    try:
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                           capture_output=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "iree-base-compiler", "iree-base-runtime",
                        "onnx"], check=True, capture_output=True, text=True, timeout=1200)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        err = getattr(e, "stderr", "") or str(e)
        last = (err.strip().splitlines() or [type(e).__name__])[-1]
        return f"IREE could not be installed into {venv}: {last}"
    if imp.exists() and comp.exists():
        return imp, comp
    return f"IREE installed into {venv} but iree-import-onnx / iree-compile are missing"


def iree_compile_cpu(tools: tuple[Path, Path], onnx_path: Path, tmp: Path) -> float:
    imp, comp = tools
    mlir, vmfb = tmp / "iree.mlir", tmp / "iree.vmfb"
    c1, p1 = tree_cpu([str(imp), str(onnx_path), "-o", str(mlir)])
    if p1.returncode:
        raise RuntimeError(f"iree-import-onnx failed: {(p1.stderr.strip().splitlines() or [''])[-1]}")
    c2, p2 = tree_cpu([str(comp), str(mlir), "--iree-hal-target-backends=llvm-cpu",
                       "--iree-llvmcpu-target-cpu=host", "-o", str(vmfb)])
    if p2.returncode:
        raise RuntimeError(f"iree-compile failed: {(p2.stderr.strip().splitlines() or [''])[-1]}")
    return c1 + c2


def m100_compile_cpu(onnx_path: Path, out: Path) -> float:
    cpu, p = tree_cpu([sys.executable, "-m", "m100.tools.m100_cli", "compile", str(onnx_path),
                       "-o", str(out)])
    if p.returncode:
        raise RuntimeError(f"m100 compile failed: {(p.stderr.strip().splitlines() or [''])[-1]}")
    return cpu


# --- interpreter vs onnxruntime --------------------------------------------------------------------
def ort_session(onnx_path: Path):
    from m100.frontend.ort_session import ort_session

    return ort_session(onnx_path, threads=1)


def cpu_of(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def bench_model(name: str, build, args, tools, tmp: Path) -> dict:
    import onnx

    from m100.targets.m100.program import Program
    from m100.tools import driver

    onnx_path = tmp / f"{name}.onnx"
    model = build()
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:  # IREE's ONNX importer needs a recent opset (m100 converts anyway)
        model = onnx.version_converter.convert_version(model, MIN_OPSET)
    onnx.save(model, str(onnx_path))
    prog_path = tmp / f"{name}.m100"
    row: dict = {"model": name}
    if not args.no_compile:
        m100_s, iree_s = [], []
        for _ in range(args.repeat):  # alternate the two sides
            m100_s.append(m100_compile_cpu(onnx_path, prog_path))
            if not isinstance(tools, str) and "iree_error" not in row:
                try:
                    iree_s.append(iree_compile_cpu(tools, onnx_path, tmp))
                except RuntimeError as e:
                    row["iree_error"] = str(e)[:200]
                    print(f"note: {name}: {e}", file=sys.stderr)
        row["m100_compile_cpu_s"] = round(statistics.median(m100_s), 2)
        if iree_s:
            row["iree_compile_cpu_s"] = round(statistics.median(iree_s), 2)
            row["compile_ratio"] = round(row["m100_compile_cpu_s"] / row["iree_compile_cpu_s"], 2)
    if args.no_sim:
        return row
    if not prog_path.exists():
        driver.compile(str(onnx_path)).program.save(str(prog_path))
    row["load_cpu_s"] = round(cpu_of(lambda: Program.load(str(prog_path))), 3)
    prog = Program.load(str(prog_path))
    inputs = driver.random_inputs(prog, 0)
    sess = ort_session(onnx_path)
    feed = {i.name: inputs[i.name] for i in sess.get_inputs()}
    sess.run(None, feed)  # warm up
    times: dict[str, list[float]] = {m: [] for m in (*MODES, "ort")}
    # warm up as onnxruntime is warmed up: the interpreter's first run of a program after
    # Program.load builds the per-instruction caches (view specs, race byte sets, costs), as
    # onnxruntime's session creation and first run build its own; reported apart ("first")
    for mode in MODES:
        row[f"sim_{mode}_first_cpu_s"] = round(
            cpu_of(lambda: driver.run(prog, inputs, mode=mode)), 2)
    for _ in range(args.repeat):
        for mode in MODES:  # alternate with onnxruntime
            times[mode].append(cpu_of(lambda: driver.run(prog, inputs, mode=mode)))
            times["ort"].append(cpu_of(lambda: sess.run(None, feed)))
    ort_s = statistics.median(times["ort"])
    row["ort_cpu_s"] = round(ort_s, 4)
    for mode in MODES:
        t = statistics.median(times[mode])
        row[f"sim_{mode}_cpu_s"] = round(t, 2)
        row[f"sim_{mode}_x_ort"] = round(t / ort_s, 1)
        row[f"sim_{mode}_first_x_ort"] = round(row[f"sim_{mode}_first_cpu_s"] / ort_s, 1)
    return row


COLUMNS = (("model", "model"), ("m100_compile_cpu_s", "m100 compile"),
           ("iree_compile_cpu_s", "IREE compile"), ("compile_ratio", "ratio"),
           ("load_cpu_s", "load"), ("sim_functional_cpu_s", "functional"),
           ("sim_functional_x_ort", "x ort"), ("sim_full_cpu_s", "full"), ("sim_full_x_ort", "x ort"),
           ("sim_timing_cpu_s", "timing"), ("sim_timing_x_ort", "x ort"), ("ort_cpu_s", "ort 1-thr"),
           ("sim_functional_first_x_ort", "1st func x"), ("sim_full_first_x_ort", "1st full x"))


def table(rows: list[dict]) -> str:
    cols = [(k, h) for k, h in COLUMNS if any(k in r for r in rows)]
    cells = [[h for _, h in cols]] + [[str(r.get(k, "-")) for k, _ in cols] for r in rows]
    w = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(x) for c, x in zip(row, w)) for row in cells]
    lines.insert(1, "  ".join("-" * x for x in w))
    return "\n".join(lines) + "\n(CPU seconds; compile: whole process tree; interpreter: " \
        "this process, onnxruntime with 1 thread; both warmed up by one run, which the " \
        "'1st' columns show: the interpreter's first run of each mode after Program.load)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--no-iree", action="store_true", help="skip the IREE side")
    ap.add_argument("--no-install", action="store_true", help="do not pip-install IREE")
    ap.add_argument("--iree-venv", default=str(ROOT / "out" / "iree-venv"))
    ap.add_argument("--no-sim", action="store_true", help="skip the interpreter rows")
    ap.add_argument("--no-compile", action="store_true", help="skip the compile rows")
    args = ap.parse_args(argv)
    all_models = _models()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in all_models]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(all_models)}")
    tools: tuple | str = "IREE skipped (--no-iree)"
    if not args.no_iree and not args.no_compile:
        tools = iree_tools(Path(args.iree_venv), not args.no_install)
    if isinstance(tools, str):
        print(f"note: {tools}", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows.append(bench_model(name, all_models[name], args, tools, Path(tmp)))
            print(f"{name}: {rows[-1]}", file=sys.stderr, flush=True)
    print(table(rows))
    if isinstance(tools, str):
        print(f"note: {tools}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "iree": None if isinstance(tools, str)
                                               else str(tools[1])}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
