"""m100.context.make_context: every xDSL dialect, the m100 dialects, and our linalg instead of xDSL's."""

from __future__ import annotations

import pytest
from xdsl.dialects import get_all_dialects
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError

from m100.context import dialect_factories, make_context

UNREGISTERED = '"foo.bar"() : () -> ()'


def test_unregistered_ops_only_when_allowed():
    with pytest.raises(ParseError, match="foo.bar"):
        Parser(make_context(), UNREGISTERED).parse_module()
    module = Parser(make_context(allow_unregistered=True), UNREGISTERED).parse_module()
    (op,) = module.ops
    assert op.op_name.data == "foo.bar"  # xDSL's stand-in op for unregistered ones


def test_every_xdsl_dialect_is_registered_and_ours_added():
    from m100.dialects import M100_DIALECTS

    names = set(make_context().registered_dialect_names)
    assert set(get_all_dialects()) <= names
    assert {d.name for d in M100_DIALECTS} <= names
    assert {"tpb", "sync", "twu", "hbsm"} <= names


def test_linalg_factory_is_ours():
    from m100.dialects.linalg_ext import LinalgExt

    assert dialect_factories()["linalg"]() is LinalgExt
    assert get_all_dialects()["linalg"]() is not LinalgExt


def test_contexts_are_independent():
    a, b = make_context(), make_context()
    Parser(a, "func.func @f() {\n  func.return\n}").parse_module()
    assert "func" in {d.name for d in a.loaded_dialects}
    assert "func" not in {d.name for d in b.loaded_dialects}
