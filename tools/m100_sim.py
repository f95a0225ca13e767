"""``m100-sim``: run a TPB program on the reference interpreter.

::

    m100-sim prog.m100 --inputs in.npz --outputs out.npz [--machine NAME|FILE]
             [--trace t.json] [--stats s.json] [--plot timeline.png]
             [--functional-only | --timing-only] [--random-latency SEED] [--no-race-check]
             [--check-certificate CERT]

The program is a binary program file (``.m100``) or assembly text (``.asm``; hand-written assembly
may give the fingerprint ``0`` in ``.machine "tiny" 0`` to mean "the current machine of that name",
or of ``--machine``). Inputs are read by
symbol name from the ``.npz`` and must have the symbol's dtype or one that converts to it without
loss (float64 for an f32 input is an error, not a silent rounding); outputs are written by symbol
name. A summary (cycles, TCU
utilization, findings) goes to stdout unless ``-q``.

Exit codes: 0 success; 1 a user error (bad file, missing input: one line ``m100-sim: error: ...``);
3 the run completed but a check failed (race, deadlock, out-of-bounds, counter overflow, malformed
instruction, run-time fault); every finding is printed to stderr as ``m100-sim: <kind>: ...``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from m100.tools.common import ToolError, tool_main

TOOL = "m100-sim"
EXIT_CHECK_FAILED = 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=TOOL, description="Run a TPB program on the M100 reference "
                                "interpreter (functional + cycle model + race/deadlock checks).")
    p.add_argument("program", help="program file (.m100 binary or .asm text)")
    p.add_argument("--inputs", help=".npz with one array per input symbol")
    p.add_argument("--outputs", help="write the output symbols to this .npz")
    p.add_argument("--machine", help="machine preset or .json/.toml file (default: the program's)")
    p.add_argument("--trace", help="write a Perfetto/Chrome trace JSON here")
    p.add_argument("--stats", help="write the stats JSON here")
    p.add_argument("--plot", help="write a PNG timeline here")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--functional-only", action="store_true",
                   help="compute results only (every block takes one cycle)")
    g.add_argument("--timing-only", action="store_true",
                   help="model time only: no data is read, computed or written")
    p.add_argument("--random-latency", type=int, metavar="SEED",
                   help="perturb unit and update latencies randomly (seeded) to expose races")
    p.add_argument("--no-race-check", action="store_true", help="skip the data-race checker")
    p.add_argument("--print-outputs", action="store_true",
                   help="print every output symbol (full numpy text) on stdout")
    p.add_argument("--check-certificate", metavar="CERT",
                   help="verify the compiler's sync certificate (JSON) against the program's own "
                        "counter protocol (m100.sim.certificate); without --inputs only that")
    p.add_argument("--check-dataflow", metavar="CERT",
                   help="check the compiler's dataflow certificate (JSON, PROG.dataflow.json): "
                        "every read reads the tensor it names (m100.sim.dataflow); without "
                        "--inputs only that")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stdout")
    return p


def _load_program(path: str, machine):
    from m100.targets.m100 import loader  # the one loader, shared with m100-translate
    return loader.load(path, machine)


def _load_inputs(path: str | None) -> dict[str, np.ndarray]:
    if path is None:
        return {}
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ToolError(f"{path}: cannot read inputs (.npz expected): {e}") from None


@tool_main(TOOL)
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from m100.sim import Simulator
    from m100.targets.m100.machine import get_machine

    machine = get_machine(args.machine) if args.machine else None
    prog = _load_program(args.program, machine)
    mode = "functional" if args.functional_only else "timing" if args.timing_only else "full"
    if mode == "timing" and args.outputs:
        raise ToolError("--timing-only computes no data, so it cannot write --outputs")
    cert_problems = None
    if args.check_certificate:
        from m100.sim import certificate
        cert = certificate.load(args.check_certificate)
        cert_problems = certificate.verify(prog, cert, machine)
        for msg in cert_problems:
            print(f"{TOOL}: certificate: {msg}", file=sys.stderr)
        if not args.quiet:
            print(f"{TOOL}: certificate {args.check_certificate}: {len(cert.get('edges', []))} "
                  f"edges, conflicts derived from the program: "
                  + ("verified" if not cert_problems else f"{len(cert_problems)} problems"))
        if args.inputs is None and not args.check_dataflow:
            return EXIT_CHECK_FAILED if cert_problems else 0
    if args.check_dataflow:
        from m100.sim import dataflow
        flow = dataflow.verify(prog, dataflow.load(args.check_dataflow), machine)
        for msg in flow:
            print(f"{TOOL}: dataflow: {msg}", file=sys.stderr)
        if not args.quiet:
            print(f"{TOOL}: dataflow certificate {args.check_dataflow}: "
                  + ("every read reads its tensor" if not flow else f"{len(flow)} problems"))
        cert_problems = (cert_problems or []) + flow
        if args.inputs is None:
            return EXIT_CHECK_FAILED if cert_problems else 0
    inputs = _load_inputs(args.inputs)
    n_inst = sum(len(v) for v in prog.streams.values())
    progress = None
    bar = None
    if n_inst >= 500 and sys.stderr.isatty() and not args.quiet:
        from rich.progress import Progress
        bar = Progress(transient=True)
        task = bar.add_task("simulating", total=n_inst)
        bar.start()
        progress = lambda done, total: bar.update(task, completed=done)  # noqa: E731
    try:
        sim = Simulator(prog, machine, mode=mode, random_latency=args.random_latency,
                        check_races=not args.no_race_check, trace=bool(args.trace),
                        progress=progress, exact_input_dtypes=True)
        res = sim.run(inputs)
    finally:
        if bar is not None:
            bar.stop()
    if args.outputs and res.outputs:
        res.write_outputs(args.outputs)
    if args.stats:
        res.write_stats(args.stats)
    if args.trace:
        res.write_trace(args.trace)
    if args.plot:
        res.plot(args.plot)
    st = res.stats
    if not args.quiet:
        done = f"{TOOL}: {st['instructions_completed']}/{st['instructions']} instructions"
        if mode == "functional":
            print(f"{done}, mode functional (no timing)")
        else:
            print(f"{done}, {st['total_cycles']:.0f} cycles ({st['total_us']:.2f} us at "
                  f"{sim.machine.clock_hz / 1e9:g} GHz), TCU MAC utilization "
                  f"{st['tcu_mac_util_pct']:.1f}%, mode {mode}")
    if args.print_outputs:
        for name, v in res.outputs.items():
            text = np.array2string(v, threshold=sys.maxsize, max_line_width=200, separator=", ")
            print(f"{name} = {text}")
    for r in res.reports:
        print(f"{TOOL}: {r.kind}: {r.message}", file=sys.stderr)
    return 0 if res.ok and not cert_problems else EXIT_CHECK_FAILED


if __name__ == "__main__":
    sys.exit(main())
