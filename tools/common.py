"""Shared error handling for the m100 command-line tools.

Every tool's ``main()`` is wrapped by :func:`tool_main`::

    @tool_main("m100-translate")
    def main(argv: list[str] | None = None) -> int: ...

User errors end the tool with a short message on stderr and exit code 1, never a traceback:

* :class:`m100.errors.M100Error` (bad input files, unsupported ops, corrupted programs, ...):
  ``<tool>: error: <message>``;
* xDSL ``ParseError``: ``<tool>: error: <file>:<line>:<col>: <message>`` plus the source line and a
  caret under the offending token;
* xDSL ``VerifyException`` / ``DiagnosticException`` (a verifier or a pass rejected the IR):
  ``<tool>: error: <message>`` plus the printed failing operation (xDSL attaches the whole module,
  which we do not repeat);
* ``OSError`` naming a file (missing input, unwritable output): ``<tool>: error: <file>: <reason>``.

``KeyboardInterrupt`` exits with 130, a closed output pipe (``| head``) quietly. Anything else is an
internal error (a bug) and keeps its traceback. ``M100_DEBUG=1`` in the environment re-raises every
error with its traceback, for debugging the tools themselves.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable

from m100.errors import M100Error

EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class ToolError(M100Error):
    """A user error detected by a tool itself (bad flag combination, unknown pass, ...)."""


def _failing_op(e: Exception) -> tuple[str, str] | None:
    """(op name, printed op line) of the operation xDSL marked in the diagnostic note."""
    for note in getattr(e, "__notes__", None) or []:
        note_lines = str(note).splitlines()
        for i, line in enumerate(note_lines):
            if re.match(r"^\s*\^+-*\s*$", line) and i > 0:
                op_text = note_lines[i - 1].strip()
                m = re.search(r'"([A-Za-z_][\w$.]*)"\s*\(', op_text)
                return (m.group(1) if m else ""), op_text
    return None


def locate_op(source: str, op_name: str, op_text: str) -> int | None:
    """The 1-based line of ``source`` that defines the printed op ``op_text``, if unambiguous.

    xDSL 0.74 keeps no source locations on operations, so we search: the line that binds the op's
    first result name (``%x = ...``) and names the op, else the only line naming the op at all.
    """
    if not op_name:
        return None
    lines = source.splitlines()
    name_re = re.compile(r'(?<![\w.$-])"?' + re.escape(op_name) + r'"?(?![\w.$-])')
    m = re.match(r"(%[\w$.-]+)(?::\d+)?(?:\s*,\s*%[\w$.-]+)*\s*=", op_text)
    if m:
        bind = re.compile(r"^\s*" + re.escape(m.group(1)) + r"(?::\d+)?\s*[,=]")
        hits = [i for i, line in enumerate(lines) if bind.match(line) and name_re.search(line)]
        if len(hits) == 1:
            return hits[0] + 1
    hits = [i for i, line in enumerate(lines) if name_re.search(line.split("//", 1)[0])]
    return hits[0] + 1 if len(hits) == 1 else None


def verify_message(e: Exception, source: str | None = None, filename: str | None = None,
                   line_offset: int = 0) -> str:
    """First line of a verifier diagnostic plus the failing operation (from xDSL's note).

    With the ``source`` text the op is located in it: ``<filename>:<line>: '<op>' does not verify:
    <message>`` followed by that source line; otherwise the op as xDSL printed it (generic form).
    """
    msg = str(e).strip() or type(e).__name__
    lines = msg.splitlines()
    head = lines[0]
    prefix = f"{filename}: " if filename else ""
    failing = _failing_op(e)
    if failing is None:
        return prefix + (head if len(lines) == 1 else "\n".join(lines[:4]))
    op_name, op_text = failing
    where = f"'{op_name}'" if op_name else "operation"
    line_no = locate_op(source, op_name, op_text) if source is not None else None
    if line_no is not None:
        shown = source.splitlines()[line_no - 1].strip()
        line = line_no + line_offset
        prefix = f"{filename}:{line}: " if filename else f"line {line}: "
    else:
        shown = op_text
    if len(shown) > 160:
        shown = shown[:157] + "..."
    return f"{prefix}{where} does not verify: {head}\n  {shown}"


def format_error(e: BaseException) -> str | None:
    """The message for a user error, or None if ``e`` is not one (an internal error)."""
    from xdsl.utils.exceptions import DiagnosticException, ParseError

    if isinstance(e, M100Error):
        return str(e).strip() or type(e).__name__
    if isinstance(e, ParseError):
        full = str(e).splitlines()
        location = full[0] if full else "<input>"
        context = [line for line in full[1:3]]  # the source line and the caret line
        msg = e.msg.strip().splitlines()[0] if e.msg.strip() else "parse error"
        return "\n".join([f"{location}: {msg}", *context])
    if isinstance(e, DiagnosticException):
        return verify_message(e)
    if isinstance(e, OSError) and e.filename is not None:
        reason = e.strerror or str(e)
        return f"{e.filename}: {reason}"
    return None


def report(tool: str, message: str) -> None:
    print(f"{tool}: error: {message}", file=sys.stderr)


def run_tool(tool: str, fn: Callable[[], int | None]) -> int:
    """Run ``fn`` and turn user errors into ``<tool>: error: ...`` + an exit code."""
    debug = os.environ.get("M100_DEBUG", "") not in ("", "0")
    try:
        rc = fn()
        return 0 if rc is None else int(rc)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{tool}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of our stdout went away (``| head``): not an error worth a message
        try:  # as the Python docs advise: point stdout at devnull so the flush at exit is silent
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except Exception as e:  # noqa: BLE001 - classified just below
        if debug:
            raise
        message = format_error(e)
        if message is None:
            raise  # an internal error: keep the traceback, it is a bug to report
        report(tool, message)
        return EXIT_USER_ERROR


def tool_main(tool: str) -> Callable[[Callable[..., int | None]], Callable[..., int]]:
    """Decorator for a tool's ``main(argv=None)``: error handling as in :func:`run_tool`.

    The wrapped function returns the exit code (tests call it with an argv list); the console
    script that setuptools generates calls ``sys.exit`` on it.
    """

    def wrap(fn: Callable[..., int | None]) -> Callable[..., int]:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs) -> int:
            return run_tool(tool, lambda: fn(*args, **kwargs))

        return wrapper

    return wrap


def exit_with(main: Callable[[], int]) -> None:
    """``sys.exit(main())``, for ``if __name__ == "__main__"`` blocks and console scripts."""
    sys.exit(main())


__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "EXIT_USER_ERROR", "ToolError",
           "format_error", "locate_op", "verify_message", "report", "run_tool", "tool_main", "exit_with"]
