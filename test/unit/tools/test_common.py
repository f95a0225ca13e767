"""tools/common.py: user errors become `<tool>: error: <msg>` + exit code, internal errors do not."""

from __future__ import annotations

import pytest
from xdsl.parser import Parser

from m100.context import make_context
from m100.errors import M100Error
from m100.tools.common import (EXIT_INTERRUPTED, EXIT_USER_ERROR,
                               format_error, run_tool, tool_main)


def _run(fn, capsys):
    rc = run_tool("tool-x", fn)
    return rc, capsys.readouterr().err


def _raise(exc):
    def fn():
        raise exc
    return fn


def test_m100_error_is_one_line(capsys):
    rc, err = _run(_raise(M100Error("prog.m100: byte offset 12: bad magic")), capsys)
    assert rc == EXIT_USER_ERROR
    assert err == "tool-x: error: prog.m100: byte offset 12: bad magic\n"


def test_success_and_return_codes(capsys):
    assert run_tool("t", lambda: None) == 0
    assert run_tool("t", lambda: 3) == 3


def test_keyboard_interrupt_is_130(capsys):
    rc, err = _run(_raise(KeyboardInterrupt()), capsys)
    assert rc == EXIT_INTERRUPTED == 130
    assert "interrupted" in err and "Traceback" not in err


def test_missing_file(capsys, tmp_path):
    missing = tmp_path / "nope.mlir"
    rc, err = _run(lambda: open(missing), capsys)
    assert rc == 1
    assert err == f"tool-x: error: {missing}: No such file or directory\n"


def test_internal_errors_keep_their_traceback():
    with pytest.raises(ZeroDivisionError):
        run_tool("t", lambda: 1 // 0)


def test_debug_env_reraises(monkeypatch):
    monkeypatch.setenv("M100_DEBUG", "1")
    with pytest.raises(M100Error):
        run_tool("t", _raise(M100Error("x")))


def test_parse_error_names_file_line_column():
    src = "func.func @f(%a : i32) -> i32 {\n  func.return %a : i64\n}\n"
    with pytest.raises(Exception) as info:
        Parser(make_context(), src, "in.mlir").parse_module()
    msg = format_error(info.value)
    lines = msg.splitlines()
    assert lines[0].startswith("in.mlir:2:15: ")
    assert "i64" in lines[0]
    assert lines[1].strip() == "func.return %a : i64"
    assert set(lines[2].strip()) == {"^"}
    assert len(lines) == 3


def test_verify_error_names_the_op_without_dumping_the_module():
    body = "".join(f"  %b{i} = arith.addi %a, %a : i32\n" for i in range(30))
    src = "func.func @f(%a : i32) -> i32 {\n" + body + "  func.return %a, %a : i32, i32\n}\n"
    module = Parser(make_context(), src, "in.mlir").parse_module()
    with pytest.raises(Exception) as info:
        module.verify()
    msg = format_error(info.value)
    lines = msg.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("'func.return' does not verify: ")
    assert lines[1].strip().startswith('"func.return"(%a, %a)')


def test_decorator_returns_exit_code(capsys):
    @tool_main("deco")
    def main(argv=None):
        if argv:
            raise M100Error(f"bad {argv[0]}")
        return 0

    assert main() == 0
    assert main(["x"]) == 1
    assert capsys.readouterr().err == "deco: error: bad x\n"


def test_locate_op_by_result_name_and_op_name():
    from m100.tools.common import locate_op

    src = ("func.func @f(%a : i32) -> i32 {\n"
           "  %x = arith.addi %a, %a : i32\n"
           "  %y = arith.addi %x, %x : i32\n"
           "  %z:2 = test.op : i32, i32  // a tuple result\n"
           "  func.return %y : i32\n"
           "}\n")
    assert locate_op(src, "arith.addi", '%y = "arith.addi"(%x, %x) : (i32, i32) -> i32') == 3
    assert locate_op(src, "arith.addi", '%x = "arith.addi"(%a, %a) : (i32, i32) -> i32') == 2
    assert locate_op(src, "test.op", '%z, %z_1 = "test.op"() : () -> (i32, i32)') == 4
    # no result: the only line naming the op
    assert locate_op(src, "func.return", '"func.return"(%y) : (i32) -> ()') == 5
    # a result name bound by another kind of op, and an op named twice: unknown, not a guess
    assert locate_op(src, "arith.muli", '%y = "arith.muli"(%x, %x) : (i32, i32) -> i32') is None
    assert locate_op(src, "arith.addi", '%w = "arith.addi"(%x, %x) : (i32, i32) -> i32') is None


def test_closed_stdout_pipe_is_quiet():
    import subprocess
    import sys

    code = ("import sys\nfrom m100.tools.common import run_tool\n"
            "def f():\n    for i in range(200000): print('x' * 50)\n"
            "sys.exit(run_tool('t', f))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"x" * 50 + b"\n"
    proc.stdout.close()  # the reader goes away, like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait() == 0
    assert err == ""
