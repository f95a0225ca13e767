"""``m100``: the umbrella command.

Subcommands:

* ``m100 machines [NAME_OR_FILE ...] [--json]``: the machine presets (or the named machines / override
  files) with their key numbers and fingerprints; ``--all`` prints every field of each.
* ``m100 compile model.onnx|model.mlir -o prog.m100 [--machine NAME] [--tpbs N]
  [--sync-mode dataflow|barrier-all] [--report] [--profile [N]]``: the whole lowering
  (``m100-pipeline``); also writes the sync certificate ``prog.m100.cert.json``. ``--profile``
  prints wall and CPU seconds per pass and the top N functions of a cProfile run.
* ``m100 run prog.m100 --inputs in.npz --outputs out.npz [--trace t.json]``: the interpreter, with
  race/deadlock checks on; inputs/outputs by the model's names (the program's symbol names).
* ``m100 check model.onnx [--machine NAME] [--tpbs N] [--sync-mode ...] [--seed S]
  [--inputs in.npz]``: compile, run on the interpreter with the given inputs (by the model's input
  names, declared shapes and element types) or seeded random inputs of the declared element types,
  run onnxruntime (the graph reference executor for
  ``.mlir``), print max abs/rel error per output, cycles, TCU utilization and PASS/FAIL (exit 0 /
  3), after checking the sync certificate independently (``m100.sim.certificate``).
* ``compile`` and ``check`` take ``--quantize w8a8|f16 [--calibration FILE.npz]``: post-training
  quantization of a float ONNX model first (``m100.frontend.ptq``), printing the per-layer error.
* ``m100 sweep SPEC.toml`` and ``m100 bench``: see ``tools/research_cli.py``.

The library behind these is ``m100.tools.driver``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Sequence

from m100.targets.m100.machine import PRESETS, Machine, get_machine
from m100.sim.certificate import SYNC_MODES
from m100.tools.common import ToolError, tool_main

TOOL = "m100"

# (header, function of the machine) for the table of `m100 machines`
_KEY_COLUMNS = (
    ("name", lambda m: m.name),
    ("clusters", lambda m: str(m.clusters)),
    ("TPBs", lambda m: str(m.num_tpbs)),
    ("HBSM/TPB", lambda m: _size(m.hbsm_bytes)),
    ("banks", lambda m: str(m.hbsm_banks)),
    ("counters", lambda m: str(m.su_counters)),
    ("TWU levels", lambda m: str(m.twu_max_levels)),
    ("TCU", lambda m: f"{m.tcu_rows}x{m.tcu_cols}x{m.tcu_dot}"),
    ("clock", lambda m: f"{m.clock_hz / 1e9:g} GHz"),
    ("CCB SRAM", lambda m: _size(m.ccb_sram_bytes)),
    ("DDR", lambda m: _size(m.ddr_bytes)),
    ("fingerprint", lambda m: f"{m.fingerprint():#018x}"),
)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _table(machines: list[Machine]) -> str:
    rows = [[h for h, _ in _KEY_COLUMNS]] + [[f(m) for _, f in _KEY_COLUMNS] for m in machines]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _details(m: Machine) -> str:
    fields = m.to_dict()
    width = max(len(k) for k in fields)
    lines = [f"{m.name} (fingerprint {m.fingerprint():#018x})"]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in fields.items()]
    return "\n".join(lines)


def cmd_machines(args: argparse.Namespace) -> int:
    machines = [get_machine(n) for n in args.machines] if args.machines else list(PRESETS.values())
    if args.json:
        out = [dict(m.to_dict(), num_tpbs=m.num_tpbs, fingerprint=f"{m.fingerprint():#018x}")
               for m in machines]
        print(json.dumps(out, indent=2))
    elif args.all:
        print("\n\n".join(_details(m) for m in machines))
    else:
        print(_table(machines))
    return 0


EXIT_CHECK_FAILED = 3


def _load_npz(path: str) -> dict:
    import numpy as np
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ToolError(f"{path}: cannot read inputs (.npz expected): {e}") from None


def _model_arg(args: argparse.Namespace):
    """The model to compile: the path, or with ``--quantize`` the quantized ONNX model
    (``m100.frontend.ptq``), with its per-layer quantization error printed."""
    if not getattr(args, "quantize", None):
        if getattr(args, "calibration", None):
            raise ToolError("--calibration needs --quantize SCHEME")
        return args.model
    import onnx

    from m100.frontend import ptq
    if not str(args.model).lower().endswith(".onnx"):
        raise ToolError("--quantize needs an ONNX model")
    model = onnx.load(args.model)
    cal = ptq.load_calibration(args.calibration, model) if args.calibration else None
    q = ptq.quantize_model(model, args.quantize, cal, per_channel=not args.per_tensor,
                           method=args.calibration_method)
    if cal and args.quantize == "w8a8":
        print(f"{TOOL}: {args.quantize}: per-layer relative error vs the float model "
              f"({len(cal)} calibration inputs):")
        for name, err in ptq.layer_errors(model, q, cal):
            print(f"  {name:40s} {err:.4f}")
    return q


#: ``m100 compile`` as a process's own command line defers ``COMPILE_DEFERRED``'s modules
#: (:mod:`m100.deferred_imports`); False imports them as usual (the A/B switch)
DEFER_IMPORTS = True


def cmd_compile(args: argparse.Namespace) -> int:
    if getattr(args, "process_ends", False) and DEFER_IMPORTS:
        # this process is the command's own: onnx's element-type table (and ml_dtypes, ~0.5 CPU-s
        # of numpy ufunc registrations) run when first read, which a float compile never does
        from m100.deferred_imports import defer
        defer()
    from m100.tools import driver
    ends = getattr(args, "process_ends", False) and not args.profile
    if ends:
        # this process ends after the command: compile with the compile's collector thresholds
        # and keep them (restoring CPython's defaults after the compile triggers a full
        # collection over the whole IR heap, ~1 CPU-s on ResNet-18, for garbage nobody waits for)
        gc.set_threshold(*driver.COMPILE_GC_THRESHOLDS)
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    cr = driver.compile(_model_arg(args), args.machine, args.tpbs, args.sync_mode,
                        strategy=args.strategy, seed=args.seed, verbose=args.report)
    if prof is not None:
        import pstats
        prof.disable()
        print(driver.profile_report(cr, pstats.Stats(prof), args.profile))
    cr.program.save(args.output)
    cert = driver.certificate_path(args.output)
    driver.write_certificate(cr.certificate, cert)
    flow = ""
    if cr.dataflow is not None:
        path = driver.dataflow_path(args.output)
        driver.write_certificate(cr.dataflow, path)  # (the sync certificate's text form)
        flow = f" and {path}"
    if args.report:
        print(cr.report)
    print(f"{TOOL}: wrote {args.output} ({cr.num_instructions} instructions), {cert}{flow}")
    if ends:
        _exit_now(0)
    return 0


def _exit_now(code: int) -> None:
    """End the process without freeing its heap (as ``clang -cc1`` does with ``-disable-free``):
    the compiled module, plan and certificate are millions of Python objects; freeing them one by
    one and the interpreter's final collections cost ~1-3 CPU-s on ResNet-18 for nothing. Only
    for a command line that ends the process (:func:`main` called without ``argv``); the
    outputs are written and closed, standard streams are flushed here, atexit handlers run."""
    import atexit

    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(code)


def cmd_run(args: argparse.Namespace) -> int:
    from m100.targets.m100 import loader
    from m100.tools import driver
    prog = loader.load(args.program)
    inputs = _load_npz(args.inputs) if args.inputs else {}
    res = driver.run(prog, inputs, random_latency=args.random_latency, trace=bool(args.trace),
                     exact_input_dtypes=True)
    if args.outputs and res.outputs:
        import numpy as np
        np.savez(args.outputs, **res.outputs)
    if args.trace:
        res.write_trace(args.trace)
    if args.plot:
        res.plot(args.plot)
    st = res.stats
    print(f"{TOOL}: {st['instructions_completed']}/{st['instructions']} instructions, "
          f"{st['total_cycles']:.0f} cycles ({st['total_us']:.2f} us), TCU MAC utilization "
          f"{st['tcu_mac_util_pct']:.1f}%")
    for r in res.reports:
        print(f"{TOOL}: {r.kind}: {r.message}", file=sys.stderr)
    return 0 if res.ok else EXIT_CHECK_FAILED


def cmd_check(args: argparse.Namespace) -> int:
    from m100.tools import driver
    inputs = _load_npz(args.inputs) if args.inputs else None
    ck = driver.check(_model_arg(args), args.machine, args.tpbs, args.sync_mode, seed=args.seed,
                      strategy=args.strategy, rtol=args.rtol, atol=args.atol,
                      random_latency=args.random_latency, trace=bool(args.trace or args.plot),
                      verbose=args.report, inputs=inputs, inputs_source=args.inputs or "inputs")
    if args.report:
        print(ck.compile.report)
    if args.trace:
        ck.result.write_trace(args.trace)
    if args.plot:
        ck.result.plot(args.plot)
    print(ck.summary())
    return 0 if ck.passed else EXIT_CHECK_FAILED


def _compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model (.onnx) or linalg MLIR text (.mlir)")
    p.add_argument("--machine", default="m100", help="machine preset or file (default m100)")
    p.add_argument("--tpbs", type=int, default=0, help="TPBs to use (default: all)")
    p.add_argument("--sync-mode", default="dataflow", choices=SYNC_MODES)
    p.add_argument("--strategy", default="auto",
                   choices=("auto", "data-parallel", "pipeline", "single"))
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the scheduler's search (and of check's random inputs)")
    p.add_argument("--report", action="store_true",
                   help="print the schedule/sync reports and a compile summary")
    p.add_argument("--quantize", choices=("w8a8", "f16", "w4a16", "bf16"),
                   help="post-training quantization of a float ONNX model first (docs/graph.md)")
    p.add_argument("--calibration", metavar="FILE.npz",
                   help="calibration inputs for --quantize w8a8: per model input an array "
                        "[N, *shape] (or one sample of the input's shape)")
    p.add_argument("--calibration-method", default="minmax", choices=("minmax", "percentile"))
    p.add_argument("--per-tensor", action="store_true",
                   help="--quantize: per-tensor weight scales (default per output channel)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=TOOL, description="m100: compile, run and check models "
                                     "for the M100 NPU; list machine descriptions.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("machines", help="list machine presets with key numbers and fingerprints")
    p.add_argument("machines", nargs="*", metavar="NAME_OR_FILE",
                   help="preset names or .json/.toml override files (default: all presets)")
    p.add_argument("--json", action="store_true", help="print every field as JSON")
    p.add_argument("--all", action="store_true", help="print every field of each machine")
    p.set_defaults(func=cmd_machines)

    p = sub.add_parser("compile", help="compile an ONNX/MLIR model to a program file "
                       "(+ PROG.cert.json, the sync certificate, and PROG.dataflow.json, the "
                       "dataflow certificate)")
    _compile_options(p)
    p.add_argument("-o", "--output", required=True, help="program file to write (.m100)")
    p.add_argument("--profile", type=int, nargs="?", const=25, default=0, metavar="N",
                   help="print wall/CPU seconds per pass and the top N functions (cProfile; "
                   "default 25)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run a program file on the reference interpreter")
    p.add_argument("program", help="program file (.m100)")
    p.add_argument("--inputs", help=".npz with one array per input (model or symbol names)")
    p.add_argument("--outputs", help="write the outputs to this .npz")
    p.add_argument("--trace", help="write a Perfetto/Chrome trace JSON here")
    p.add_argument("--plot", help="write a PNG timeline here")
    p.add_argument("--random-latency", type=int, metavar="SEED",
                   help="perturb latencies (seeded) to expose races")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("check", help="compile, run on the interpreter and compare against "
                       "onnxruntime (or the reference executor for .mlir): PASS/FAIL")
    _compile_options(p)
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="inputs to use instead of seeded random ones: one array per model input, "
                   "keyed by the model's input names, of the declared shape and element type")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    p.add_argument("--random-latency", type=int, metavar="SEED",
                   help="perturb latencies (seeded) to expose races")
    p.add_argument("--trace", help="write a Perfetto/Chrome trace JSON here")
    p.add_argument("--plot", help="write a PNG timeline here")
    p.set_defaults(func=cmd_check)

    from m100.tools.research_cli import add_subcommands
    add_subcommands(sub)  # sweep, bench
    return parser


@tool_main(TOOL)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.process_ends = argv is None  # the process's own command line (tests pass a list)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
