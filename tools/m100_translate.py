"""``m100-translate``: resolved ``tpb`` IR <-> TPB ISA program (binary container or assembly text).

::

    m100-translate prog.mlir --to-asm [-o prog.asm]      resolved tpb IR -> assembly text
    m100-translate prog.mlir --to-bin -o prog.m100       resolved tpb IR -> program file
    m100-translate --from-bin prog.m100 [-o out.mlir]    program file -> resolved tpb IR
    m100-translate --from-asm prog.asm --to-bin -o p.m100  assembly -> program file
    m100-translate --bin-to-asm prog.m100 [-o prog.asm]  program file -> assembly
    m100-translate --from-asm prog.asm [-o out.mlir]     assembly -> resolved tpb IR

The input format is ``--from-{mlir,asm,bin}`` or, without one, the file suffix (``.m100`` binary,
``.asm`` text, anything else MLIR); ``-`` or no input reads stdin. The output format is
``--to-{mlir,asm,bin}`` or, without one, the suffix of ``-o`` (``.m100``/``.asm``/``.mlir``); it
defaults to MLIR for program inputs. Binary output needs ``-o FILE``
(``-o -`` writes it to stdout). Round trips IR -> bin -> IR and bin -> asm -> bin are exact.

A corrupted or truncated program file, a malformed assembly line, IR that is not fully resolved:
one line ``m100-translate: error: <file>: <what and where>`` and exit code 1.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from m100.errors import M100Error
from m100.targets.m100.machine import get_machine
from m100.tools.common import ToolError, tool_main

TOOL = "m100-translate"
FORMATS = ("mlir", "asm", "bin")
_SUFFIX_FORMAT = {".m100": "bin", ".asm": "asm", ".mlir": "mlir"}


# --- reading -----------------------------------------------------------------------------------


def _read_bytes(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    return Path(path).read_bytes()


def _read_text(path: str) -> str:
    data = _read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{_display(path)}: not a text file (invalid UTF-8 at byte {e.start}); "
                        "use --from-bin for program files") from None


def _display(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _load_program(path: str, fmt: str, machine: Any) -> Any:
    """The input as a validated ``Program`` (from a binary container, assembly text or resolved
    tpb IR), through the loader m100-sim uses too (``m100.targets.m100.loader``)."""
    from m100.targets.m100 import loader

    where = _display(path)
    if fmt == "bin":
        return loader.from_bytes(_read_bytes(path), machine, where)
    if fmt == "asm":
        return loader.from_asm(_read_text(path), machine, where)
    module = _parse_mlir(path)
    from m100.dialects import translate

    return loader.finish(translate.module_to_program(module, machine=machine), machine, where)


def _parse_mlir(path: str) -> Any:
    from xdsl.parser import Parser

    from m100.context import make_context

    text = _read_text(path)
    from xdsl.utils.exceptions import DiagnosticException

    from m100.tools.common import verify_message

    module = Parser(make_context(), text, _display(path)).parse_module()
    try:
        module.verify()
    except DiagnosticException as e:
        raise ToolError(verify_message(e, text, _display(path))) from None
    return module


# --- writing -----------------------------------------------------------------------------------


def _write(output: str | None, data: str | bytes) -> None:
    if output is None or output == "-":
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(data)
            sys.stdout.flush()
        return
    if isinstance(data, bytes):
        Path(output).write_bytes(data)
    else:
        Path(output).write_text(data)


def _emit(program: Any, fmt: str, machine: Any) -> str | bytes:
    if fmt == "bin":
        program.validate(machine)  # never write a program file the interpreter would reject
        return program.to_bytes(machine)
    if fmt == "asm":
        from m100.targets.m100.asm import format_program

        text = format_program(program)
        return text if text.endswith("\n") else text + "\n"
    from m100.dialects.translate import program_to_module

    module = program_to_module(program)
    from xdsl.printer import Printer

    stream = io.StringIO()
    Printer(stream=stream).print_op(module)
    stream.write("\n")
    return stream.getvalue()


# --- command line ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=TOOL, description="Translate between resolved tpb IR, TPB assembly and program files.",
        epilog=("examples:" + __doc__.split("::", 1)[1].split("The input format")[0].rstrip())
        if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", nargs="?", default="-", help="input file ('-' or none: stdin)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--from-mlir", dest="src", action="store_const", const="mlir",
                     help="input is resolved tpb IR (MLIR text)")
    src.add_argument("--from-asm", dest="src", action="store_const", const="asm",
                     help="input is TPB assembly text")
    src.add_argument("--from-bin", dest="src", action="store_const", const="bin",
                     help="input is a binary program file")
    dst = p.add_mutually_exclusive_group()
    dst.add_argument("--to-mlir", dest="dst", action="store_const", const="mlir",
                     help="output resolved tpb IR (the default for program inputs)")
    dst.add_argument("--to-asm", dest="dst", action="store_const", const="asm",
                     help="output TPB assembly text")
    dst.add_argument("--to-bin", dest="dst", action="store_const", const="bin",
                     help="output a binary program file (needs -o)")
    p.add_argument("--bin-to-asm", action="store_true",
                   help="shorthand for --from-bin --to-asm")
    p.add_argument("-o", "--output", help="output file ('-': stdout; default stdout for text)")
    p.add_argument("--machine", help="machine preset or .json/.toml file; overrides the machine the "
                                     "input names (needed for machines that are not presets)")
    return p


def _formats(args: argparse.Namespace) -> tuple[str, str]:
    src, dst = args.src, args.dst
    if args.bin_to_asm:
        if src not in (None, "bin") or dst not in (None, "asm"):
            raise ToolError("--bin-to-asm cannot be combined with other --from-/--to- options")
        src, dst = "bin", "asm"
    if src is None:
        src = _SUFFIX_FORMAT.get(Path(args.input).suffix.lower(), "mlir") if args.input != "-" \
            else "mlir"
    if dst is None and args.output not in (None, "-"):
        dst = _SUFFIX_FORMAT.get(Path(args.output).suffix.lower())
    if dst is None:
        if src == "mlir":
            raise ToolError("choose an output: --to-asm or --to-bin -o FILE")
        dst = "mlir"
    if src == dst:
        raise ToolError(f"input and output are both {src}: nothing to translate")
    if dst == "bin" and args.output is None:
        raise ToolError("--to-bin writes a binary file: give -o FILE (or -o - for stdout)")
    return src, dst


@tool_main(TOOL)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    src, dst = _formats(args)
    name = _display(args.input)
    try:
        machine = get_machine(args.machine) if args.machine is not None else None
        program = _load_program(args.input, src, machine)
        data = _emit(program, dst, machine)
    except ToolError:
        raise
    except M100Error as e:
        msg = str(e).strip()
        raise ToolError(msg if msg.startswith(name) else f"{name}: {msg}") from None
    _write(args.output, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
