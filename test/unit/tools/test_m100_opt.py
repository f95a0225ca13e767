"""m100-opt in process: m100 passes are registered next to xDSL's, listed by --help with their first
docstring line, documented by --pass-help, runnable in -p pipelines; pass errors are one line."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from xdsl.dialects.builtin import StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from m100.errors import M100Error
from m100.passes.registry import all_passes, own_docstring, pass_options, summary
from m100.tools import m100_opt

SRC = "func.func @f(%a : i32) -> i32 {\n  func.return %a : i32\n}\n"


@dataclass(frozen=True)
class TagModule(ModulePass):
    """Tag the module with an attribute (a test pass).

    Option ``label``: the attribute's value.
    """

    name = "tag-module"
    label: str = "hello"

    def apply(self, ctx, op):
        op.attributes["test.tag"] = StringAttr(self.label)


@dataclass(frozen=True)
class Refuse(ModulePass):
    """Refuse every input with a user error (a test pass)."""

    name = "refuse"
    how: str = "m100"

    def apply(self, ctx, op):
        if self.how == "m100":
            raise M100Error("f.mlir: op 'linalg.foo' is not supported (try --allow-foo)")
        raise PassFailedException("cannot do it")


@dataclass(frozen=True)
class BreakReturn(ModulePass):
    """Make the IR invalid: return one value too many (a test pass)."""

    name = "break-return"

    def apply(self, ctx, op):
        from xdsl.dialects.func import ReturnOp

        for ret in list(op.walk()):
            if isinstance(ret, ReturnOp):
                ret.operands = [*ret.operands, *ret.operands]


@pytest.fixture
def fake_passes(monkeypatch):
    monkeypatch.setattr(m100_opt, "all_passes", lambda: {"refuse": Refuse, "tag-module": TagModule,
                                                         "break-return": BreakReturn})


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "f.mlir"
    path.write_text(SRC)
    return str(path)


def test_help_lists_every_real_m100_pass_with_its_summary(capsys):
    with pytest.raises(SystemExit) as info:
        m100_opt.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    epilog = out.split("m100 passes (`--pass-help NAME` for details and options):\n", 1)[1]
    # "  name  summary..." with continuation lines indented further
    listed = {line.split()[0]: line for line in epilog.splitlines()
              if re.match(r"^  [a-z]", line)}
    assert set(listed) == set(all_passes())
    for name, cls in all_passes().items():
        first_words = summary(cls).split()[:4]
        assert " ".join(first_words) in listed[name], name


@pytest.mark.parametrize("name", sorted(all_passes()) or ["(none)"])
def test_pass_help_prints_the_whole_docstring_and_options(name, capsys):
    if name == "(none)":
        pytest.skip("no m100 passes yet")
    cls = all_passes()[name]
    with pytest.raises(SystemExit):
        m100_opt.main(["--pass-help", name])
    out = capsys.readouterr().out
    doc = own_docstring(cls) or ""
    for line in doc.splitlines():
        assert line in out
    for option in pass_options(cls):
        assert f"  {option.cli_name}: " in out


def test_m100_pass_runs_in_a_pipeline_with_xdsl_passes(fake_passes, src, capsys):
    assert m100_opt.main([src, "-p", "canonicalize,tag-module{label=abc},cse"]) == 0
    out = capsys.readouterr().out
    assert 'attributes {test.tag = "abc"}' in out


def test_fake_pass_listed_in_help(fake_passes, capsys):
    with pytest.raises(SystemExit):
        m100_opt.main(["--help"])
    out = capsys.readouterr().out
    assert re.search(r"^  tag-module +Tag the module with an attribute \(a test pass\)\.$", out, re.M)
    assert re.search(r"^  refuse +Refuse every input with a user error \(a test pass\)\.$", out, re.M)


def test_m100_error_in_a_pass_is_one_line(fake_passes, src, capsys):
    assert m100_opt.main([src, "-p", "refuse"]) == 1
    err = capsys.readouterr().err
    assert err == "m100-opt: error: f.mlir: op 'linalg.foo' is not supported (try --allow-foo)\n"


def test_pass_failure_names_the_input(fake_passes, src, capsys):
    assert m100_opt.main([src, "-p", "refuse{how=x}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"m100-opt: error: {src}: in pass 'refuse': cannot do it")
    assert "Traceback" not in err


def test_invalid_ir_after_a_pass_names_the_pass_not_a_source_line(fake_passes, src, capsys):
    assert m100_opt.main([src, "-p", "cse,break-return,canonicalize"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"m100-opt: error: {src}: after pass 'break-return': "
                               "'func.return' does not verify: ")
    assert lines[1].strip() == '"func.return"(%a, %a) : (i32, i32) -> ()'
    assert len(lines) == 2


def test_invalid_input_points_at_its_source_line(tmp_path, capsys):
    path = tmp_path / "bad.mlir"
    path.write_text("// a comment\n" + SRC.replace("func.return %a : i32", "func.return %a, %a : i32, i32"))
    assert m100_opt.main([str(path), "-p", "cse"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(f"m100-opt: error: {path}:3: 'func.return' does not verify: ")
    assert lines[1] == "  func.return %a, %a : i32, i32"


def test_bad_option_type_of_an_m100_pass(fake_passes, src, capsys):
    assert m100_opt.main([src, "-p", "tag-module{label=1}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("m100-opt: error: pass 'tag-module': bad options: ")
    assert err.count("\n") == 1


def test_output_file(src, tmp_path, capsys):
    out = tmp_path / "out.mlir"
    assert m100_opt.main([src, "-p", "cse", "-o", str(out)]) == 0
    assert "func.func @f(%a: i32) -> i32" in out.read_text()
    assert capsys.readouterr().out == ""


def test_m100_dialects_are_registered():
    from m100.context import make_context
    from m100.dialects import M100_DIALECTS

    ctx = make_context()
    names = set(ctx.registered_dialect_names)
    for d in M100_DIALECTS:
        assert d.name in names
    # the extended linalg replaced xDSL's: parsing a linalg op loads LinalgExt (lazily)
    from xdsl.parser import Parser

    from m100.dialects.linalg_ext import LinalgExt

    assert "linalg" not in {d.name for d in ctx.loaded_dialects}
    Parser(ctx, "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                "  %0 = linalg.exp ins(%a : tensor<4xf32>) outs(%a : tensor<4xf32>) -> tensor<4xf32>\n"
                "  func.return %0 : tensor<4xf32>\n}").parse_module()
    loaded = {d.name: d for d in ctx.loaded_dialects}
    assert loaded["linalg"] is LinalgExt
