"""The research subcommands of ``m100``: ``sweep`` (design-space sweeps) and ``bench``.

* ``m100 sweep SPEC.toml [-o results.csv] [--workers N] [--address RAY_ADDRESS] [--backend B]
  [--no-cache] [--no-progress]``: every point of the spec's grid compiled and run on the
  interpreter, in parallel as Ray tasks (a local process pool without Ray); one CSV row per point
  with the grid values, the metrics and the error (``m100.sweep``, ``docs/research.md``).
* ``m100 bench --list`` / ``m100 bench NAME [ARGS...]``: the benchmark scripts of ``bench/``, each
  printing its table and writing JSON (``--json``, default ``out/bench/NAME.json``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from m100.tools.common import ToolError

TOOL = "m100"


# --- sweep -----------------------------------------------------------------------------------------
def cmd_sweep(args: argparse.Namespace) -> int:
    from m100 import sweep
    rows = sweep.run(args.spec, workers=args.workers, address=args.address, backend=args.backend,
                     progress=not args.no_progress, cache=False if args.no_cache else None)
    out = args.output or str(Path(args.spec).with_suffix(".csv"))
    sweep.write_csv(rows, out)
    errors = sum(1 for r in rows if r["error"])
    print(f"{TOOL}: wrote {out} ({len(rows)} points, {errors} with an error)")
    return 0


def add_sweep(sub) -> None:
    from m100.sweep import BACKENDS
    p = sub.add_parser("sweep", help="design-space sweep (machine fields x schedule options) on "
                       "Ray or a process pool; CSV of metrics per point")
    p.add_argument("spec", help="sweep spec (.toml; see docs/research.md)")
    p.add_argument("-o", "--output", help="CSV to write (default: SPEC with .csv)")
    p.add_argument("--workers", type=int, default=0,
                   help="points run in parallel (default: the CPU count)")
    p.add_argument("--address", help="Ray cluster address (e.g. ray://head:10001 or auto); "
                   "default: a local Ray started for the sweep")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto (Ray when installed, else a process pool), ray, process, serial")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the compile cache")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)


# --- bench -----------------------------------------------------------------------------------------
def bench_dir() -> Path:
    """``bench/`` of the source tree (``$M100_BENCH_DIR`` overrides)."""
    env = os.environ.get("M100_BENCH_DIR")
    if env:
        return Path(env)
    import m100
    return Path(m100.__file__).resolve().parents[1] / "bench"


def benchmarks() -> dict[str, tuple[Path, str]]:
    """name -> (script, first line of its docstring)."""
    import ast
    d = bench_dir()
    if not d.is_dir():
        raise ToolError(f"no bench/ folder at {d} (benchmarks run from a source checkout; "
                        "set M100_BENCH_DIR)")
    out = {}
    for f in sorted(d.glob("*.py")):
        if f.name.startswith("_"):
            continue
        doc = ast.get_docstring(ast.parse(f.read_text())) or ""
        out[f.stem] = (f, (doc.strip().splitlines() or [""])[0])
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    benches = benchmarks()
    if args.list or not args.name:
        width = max(len(n) for n in benches)
        for n, (_, doc) in benches.items():
            print(f"{n.ljust(width)}  {doc}")
        return 0
    if args.name not in benches:
        raise ToolError(f"unknown benchmark '{args.name}' (benchmarks: {', '.join(benches)}; "
                        "m100 bench --list)")
    script = benches[args.name][0]
    rest = list(args.args)
    if not any(a == "--json" or a.startswith("--json=") for a in rest) \
            and not any(a in ("-h", "--help") for a in rest):
        out = Path("out") / "bench" / f"{args.name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        rest += ["--json", str(out)]
    rc = subprocess.call([sys.executable, str(script), *rest])
    if rc == 0 and "--json" in rest and not any(a in ("-h", "--help") for a in rest):
        print(f"{TOOL}: bench {args.name}: JSON in {rest[rest.index('--json') + 1]}")
    return rc


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark of bench/ (table on stdout, JSON in "
                       "out/bench/NAME.json); --list lists them")
    p.add_argument("--list", action="store_true", help="list the benchmarks")
    p.add_argument("name", nargs="?", help="benchmark name (m100 bench --list)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the benchmark script")
    p.set_defaults(func=cmd_bench)


def add_subcommands(sub) -> None:
    add_sweep(sub)
    add_bench(sub)
