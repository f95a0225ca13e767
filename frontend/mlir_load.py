"""Read MLIR text (generic or pretty form; func + linalg/tensor/arith/math on tensors) into xDSL.

The context must have the project's extended ``linalg`` (:data:`m100.dialects.linalg_ext.LinalgExt`)
registered as ``linalg``; ``m100.context.make_context()`` does that, and :func:`default_context` is the
fallback used when the caller passes no context. Parse errors become one-line :class:`FrontendError`s
``<file>:<line>:<col>: <message>``.
"""

from __future__ import annotations

import os
from pathlib import Path

from m100.frontend.onnx_import import FrontendError, _one_line


def default_context():
    """The project context (``m100.context.make_context``) if it exists, else an equivalent one."""
    try:
        from m100.context import make_context  # type: ignore[import-not-found]

        return make_context()
    except ImportError:
        pass
    from xdsl.context import Context
    from xdsl.dialects import get_all_dialects

    from m100.dialects.linalg_ext import LinalgExt

    ctx = Context()
    for name, factory in get_all_dialects().items():
        if name == "linalg":
            continue
        ctx.register_dialect(name, factory)
    ctx.load_dialect(LinalgExt)
    return ctx


_SHARED: list = []


def shared_context():
    """One :func:`default_context` per process, used when a caller passes no context (building a
    context costs ~0.3 s; parsing does not change it)."""
    if not _SHARED:
        _SHARED.append(default_context())
    return _SHARED[0]


def _ensure_linalg_ext(ctx) -> None:
    """Fail loudly if ``ctx`` would parse ``linalg.generic`` with xDSL's (multi-result-broken) parser."""
    from m100.dialects.linalg_ext import GenericOp

    op = ctx.get_optional_op("linalg.generic")
    if op is not None and op is not GenericOp and not issubclass(op, GenericOp):
        raise FrontendError(
            "context registers xDSL's linalg instead of m100.dialects.linalg_ext.LinalgExt "
            "(use m100.context.make_context())"
        )


def verify_module(module, name: str = "<mlir>") -> None:
    """``module.verify()`` with the failure as a one-line :class:`FrontendError`."""
    from xdsl.utils.exceptions import VerifyException

    try:
        module.verify()
    except VerifyException as e:
        raise FrontendError(f"{name}: invalid IR: {_one_line(e, 240)}") from None


def load_mlir_text(text: str, ctx=None, *, name: str = "<mlir>", verify: bool = True):
    """Parse MLIR text into a (by default verified) ``ModuleOp``."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.utils.exceptions import DiagnosticException, ParseError

    from m100.frontend.parse_memo import MemoParser

    if ctx is None:
        ctx = shared_context()
    _ensure_linalg_ext(ctx)
    try:
        module = MemoParser(ctx, text, name).parse_module(allow_implicit_module=True)
    except ParseError as e:
        loc = e.span.get_location()
        raise FrontendError(f"{loc}: {_one_line(e.msg, 240)}") from None
    except (DiagnosticException, ValueError, KeyError) as e:
        raise FrontendError(f"{name}: cannot parse: {_one_line(e, 240)}") from None
    if verify:
        verify_module(module, name)
    assert isinstance(module, ModuleOp)
    return module


def load_mlir(path_or_text, ctx=None):
    """Parse an ``.mlir`` file (a path) or MLIR text (a string containing a newline or ``{``)."""
    if isinstance(path_or_text, (str, os.PathLike)) and not (
        isinstance(path_or_text, str) and ("\n" in path_or_text or "{" in path_or_text)
    ):
        path = Path(path_or_text)
        if not path.exists():
            raise FrontendError(f"{path}: no such file")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise FrontendError(f"{path}: cannot read: {_one_line(e, 160)}") from None
        return load_mlir_text(text, ctx, name=str(path))
    return load_mlir_text(str(path_or_text), ctx)
