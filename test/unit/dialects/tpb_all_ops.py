"""The lit files that hold every tpb instruction op (placed and resolved), parsed once: the
modules the fast-path tests of ``dialects/fast_verify`` and ``dialects/fast_init`` rebuild and
compare with xDSL's generic paths."""

from __future__ import annotations

import pathlib

from xdsl.parser import Parser

from m100.context import make_context

LIT = pathlib.Path(__file__).parents[2] / "lit" / "dialects" / "tpb"
CTX = make_context()


def module(name: str):
    """``LIT/name`` parsed (its ``//`` lines -- RUN / CHECK -- left out)."""
    text = "\n".join(line for line in (LIT / name).read_text().splitlines()
                     if not line.lstrip().startswith("//"))
    return Parser(CTX, text).parse_module()


MODULES = {n: module(n) for n in ("placed_all_ops.mlir", "resolved_all_ops.mlir")}
