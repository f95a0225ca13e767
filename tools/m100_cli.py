"""``m100``: the umbrella command.

Subcommands:

* ``m100 machines [NAME_OR_FILE ...] [--json]``: the machine presets (or the named machines / override
  files) with their key numbers and fingerprints; ``--all`` prints every field of each.
* ``m100 compile`` / ``m100 run`` / ``m100 check``: the end-to-end flow of issue 6 (not implemented yet:
  they say so and exit with code 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from m100.targets.m100.machine import PRESETS, Machine, get_machine
from m100.tools.common import NotImplementedYet, tool_main

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


def _not_yet(what: str):
    def run(args: argparse.Namespace) -> int:
        raise NotImplementedYet(f"'m100 {what}' is not implemented yet: see issue 6")

    return run


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

    for name, help_text in (
            ("compile", "compile an ONNX/MLIR model to a program file (issue 6)"),
            ("run", "run a program file on the reference interpreter (issue 6)"),
            ("check", "compile, run and compare against onnxruntime (issue 6)")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=_not_yet(name))
    return parser


@tool_main(TOOL)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
