"""``m100-opt``: ``xdsl-opt`` with the m100 dialects and passes registered next to xDSL's.

Usage is that of ``xdsl-opt`` (``-p`` pipelines, ``--split-input-file``, ``--verify-diagnostics``,
``--print-op-generic``, ``-o``, ...), plus:

* input files ``*.mlir`` (or stdin) and ``*.onnx`` (imported by ``m100.frontend.load_onnx``);
* ``--help`` ends with the list of m100 passes and the first paragraph of each docstring;
* ``--pass-help NAME`` prints one pass's full docstring and its options (xDSL passes too).

Every user error (parse error, verifier error, unknown pass, bad pass option, missing file, an
``M100Error`` from a pass) is reported in a few lines as ``m100-opt: error: ...`` with exit code 1;
see ``tools/common.py``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import io
import os
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from typing import IO, Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException
from xdsl.xdsl_opt_main import xDSLOptMain

import m100
from m100.context import register_dialects
from m100.passes.registry import all_passes, describe, summary
from m100.tools.common import ToolError, tool_main, verify_message

TOOL = "m100-opt"


def _suggest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


class _PassHelpAction(argparse.Action):
    """``--pass-help NAME``: print the full description of one pass and exit."""

    def __init__(self, *args: Any, driver: M100OptMain, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.driver = driver

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        name = str(values)
        passes = self.driver.available_passes
        if name not in passes:
            raise ToolError(f"unknown pass '{name}'{_suggest(name, passes)}; "
                            "`m100-opt --help` lists the m100 passes")
        print(describe(passes[name]()))
        parser.exit()


class _ListPassesAction(argparse.Action):
    """``--list-passes``: every pass with its docstring's first paragraph cut to one line."""

    def __init__(self, *args: Any, driver: M100OptMain, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.driver = driver

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        names = sorted(self.driver.available_passes)
        width = max(len(n) for n in names)
        for name in names:
            cls = self.driver.available_passes[name]()
            origin = "m100" if name in self.driver.m100_passes else "xdsl"
            print(f"{name.ljust(width)}  [{origin}]  {textwrap.shorten(summary(cls), 90)}")
        parser.exit()


class M100OptMain(xDSLOptMain):
    """The ``m100-opt`` driver (hooks of :class:`xDSLOptMain`, called from its constructor)."""

    current_chunk: tuple[str | None, int] = (None, 0)  # (MLIR text, line offset) being processed
    stage: str | None = None  # None while the input is parsed and verified, then the pass running
    version_format = f"m100-opt (m100 {m100.__version__}, xdsl {{xdsl_version}})"

    # --- registration hooks ----------------------------------------------------------------
    def register_all_dialects(self) -> None:
        register_dialects(self.ctx)  # xDSL's (lazily), linalg replaced by ours, the m100 dialects

    def register_all_passes(self) -> None:
        super().register_all_passes()
        self.m100_passes = all_passes()
        for name, cls in self.m100_passes.items():
            self.register_pass(name, lambda cls=cls: cls)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        self.available_frontends["onnx"] = self._parse_onnx

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        for action in arg_parser._actions:  # xDSL's -p help is a 4 KB list of every pass name
            if "--passes" in action.option_strings:
                action.help = ("comma-separated pass pipeline, e.g. 'canonicalize,cse' or "
                               "'pass{opt=1}'; m100 passes are listed below, --list-passes "
                               "lists every pass")
        arg_parser.add_argument(
            "--pass-help", metavar="NAME", action=_PassHelpAction, driver=self,
            help="print the full documentation and options of one pass, then exit")
        arg_parser.add_argument(
            "--list-passes", action=_ListPassesAction, nargs=0, driver=self,
            help="list every available pass (m100 and upstream xDSL) with a summary, then exit")
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        arg_parser.epilog = self._epilog()

    def _epilog(self) -> str:
        lines = ["m100 passes (`--pass-help NAME` for details and options):"]
        if not self.m100_passes:
            lines.append("  (none registered yet)")
        width = max((len(n) for n in self.m100_passes), default=0)
        for name, cls in self.m100_passes.items():
            text = textwrap.wrap(summary(cls), width=max(40, 98 - width),
                                 break_on_hyphens=False) or [""]
            lines.append(f"  {name.ljust(width)}  {text[0]}")
            lines += [f"  {'':{width}}  {more}" for more in text[1:]]
        lines.append("")
        lines.append("Inputs: .mlir (or stdin) and .onnx files. "
                     "`--list-passes` lists the upstream xDSL passes too.")
        return "\n".join(lines)

    # --- user errors instead of tracebacks ------------------------------------------------------
    def setup_pipeline(self) -> None:
        self._check_pipeline(self.args.passes)
        super().setup_pipeline()
        verify_between = self.pipeline.callback

        def callback(previous: ModulePass | None, module: ModuleOp, following: ModulePass | None):
            # remember where we are, so that an error can say which pass produced the bad IR
            self.stage = None if previous is None else f"after pass '{previous.name}'"
            if verify_between is not None:
                verify_between(previous, module, following)
            if following is not None:
                self.stage = f"in pass '{following.name}'"

        self.pipeline = PassPipeline(self.pipeline.passes, callback)

    def _check_pipeline(self, spec: str) -> None:
        """Reject a bad ``-p`` with a message naming the pass, before xDSL raises ValueError."""
        try:
            specs = list(parse_pipeline(spec))
        except ArgSpecParseError as e:  # a BaseException in xDSL 0.74
            lines = str(e).strip().splitlines()
            msg = lines[-1].strip() if lines else "syntax error"
            raise ToolError(f"bad pass pipeline '{spec}': {msg}") from None
        for s in specs:
            if s.name not in self.available_passes:
                raise ToolError(f"unknown pass '{s.name}'{_suggest(s.name, self.available_passes)}"
                                "; `m100-opt --help` lists the passes")
            cls = self.available_passes[s.name]()
            try:
                cls.from_pass_spec(s)
            except (ValueError, TypeError) as e:
                raise ToolError(f"pass '{s.name}': bad options: {e}; "
                                f"see `m100-opt --pass-help {s.name}`") from None

    def prepare_input(self) -> tuple[list[tuple[IO[bytes], int]], str]:
        try:
            return super().prepare_input()
        except ValueError as e:  # unknown file extension
            known = ", ".join(f".{ext}" for ext in self.available_frontends)
            name = self.get_input_name()
            if name.endswith((".m100", ".asm")):
                raise ToolError(f"{name}: m100-opt reads MLIR and ONNX; for a program file use "
                                f"`m100-translate --from-{'bin' if name.endswith('.m100') else 'asm'} "
                                f"{name}` to get its tpb IR") from None
            raise ToolError(f"{name}: {e} (known: {known}; or use -f)") from None

    def parse_chunk(self, chunk: IO[bytes], file_extension: str,
                    start_offset: int = 0) -> ModuleOp | None:
        # keep the MLIR text of the chunk so that a verifier error can point at its source line
        self.stage = None
        if file_extension == "mlir":
            data = chunk.read()
            self.current_chunk = (data.decode("utf-8", errors="replace"), start_offset)
            chunk = io.BytesIO(data)
        return super().parse_chunk(chunk, file_extension, start_offset)

    # --- ONNX input -----------------------------------------------------------------------------
    def _parse_onnx(self, stream: IO[bytes]) -> ModuleOp:
        frontend = importlib.import_module("m100.frontend")
        load_onnx = getattr(frontend, "load_onnx", None)
        if load_onnx is None:
            raise ToolError(f"{self.get_input_name()}: ONNX input is not available yet "
                            "(m100.frontend.load_onnx is missing)")
        path = self.args.input_file
        if path is not None and self.args.frontend is None and not self.args.split_input_file:
            return load_onnx(path, self.ctx)
        # stdin or a forced frontend: the importer wants a file
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = os.path.join(tmp, "input.onnx")
            with open(tmp_path, "wb") as f:
                f.write(stream.read())
            return load_onnx(tmp_path, self.ctx)


@tool_main(TOOL)
def main(argv: Sequence[str] | None = None) -> int:
    driver = M100OptMain(description="m100-opt: the m100 modular optimizer (xdsl-opt + m100 "
                                     "dialects and passes)", args=argv)
    try:
        driver.run()
    except DiagnosticException as e:  # a verifier or a pass rejected the IR: name the input too
        name = driver.get_input_name()
        if driver.stage is None:  # the input itself is invalid: point at its source line
            source, offset = driver.current_chunk
            raise ToolError(verify_message(e, source, name, offset)) from None
        raise ToolError(f"{name}: {driver.stage}: {verify_message(e)}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
