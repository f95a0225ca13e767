"""m100-translate end to end (in process): exact round trips over random valid programs, and every
truncation / single-byte corruption of a program file is ONE error line with exit code 1."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings

from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import Program
from m100.tools.m100_translate import main

_STRATEGIES = "m100_isa_strategies"


def _strategies():
    if _STRATEGIES not in sys.modules:
        path = Path(__file__).parents[1] / "isa" / "strategies.py"
        spec = importlib.util.spec_from_file_location(_STRATEGIES, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[_STRATEGIES] = mod
        spec.loader.exec_module(mod)
    return sys.modules[_STRATEGIES]


S = _strategies()
TINY = get_machine("tiny")
ROOT = Path(__file__).parents[3]


def _make_program(tmp_path: Path) -> bytes:
    """The lit tests' sample program (built from ISA objects by an independent script)."""
    import runpy

    out = tmp_path / "sample.m100"
    argv = sys.argv
    try:
        sys.argv = ["make_program.py", str(out)]
        runpy.run_path(str(ROOT / "test/lit/tools/Inputs/make_program.py"), run_name="__main__")
    finally:
        sys.argv = argv
    return out.read_bytes()


def _ascii_strings(program: Program) -> bool:
    texts = [program.machine, *program.metadata, *program.metadata.values(),
             *(s.name for s in program.segments), *(s.name for s in program.symbols)]
    return all(t.isascii() for t in texts)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.programs(TINY))
def test_cli_round_trips_are_exact(tmp_path_factory, program):
    assume(_ascii_strings(program))  # non-ASCII names: see the xfail test below
    d = tmp_path_factory.mktemp("rt")
    original = program.to_bytes(TINY)
    (d / "p.m100").write_bytes(original)
    # bin -> IR -> bin
    assert main(["--from-bin", str(d / "p.m100"), "-o", str(d / "p.mlir")]) == 0
    assert main([str(d / "p.mlir"), "--to-bin", "-o", str(d / "p2.m100")]) == 0
    assert (d / "p2.m100").read_bytes() == original
    # IR -> bin -> IR
    assert main(["--from-bin", str(d / "p2.m100"), "-o", str(d / "p2.mlir")]) == 0
    assert (d / "p2.mlir").read_text() == (d / "p.mlir").read_text()
    # bin -> asm -> bin, and IR -> asm gives the same text as bin -> asm
    assert main(["--bin-to-asm", str(d / "p.m100"), "-o", str(d / "p.asm")]) == 0
    assert main(["--from-asm", str(d / "p.asm"), "--to-bin", "-o", str(d / "p3.m100")]) == 0
    assert (d / "p3.m100").read_bytes() == original
    assert main([str(d / "p.mlir"), "--to-asm", "-o", str(d / "p2.asm")]) == 0
    assert (d / "p2.asm").read_text() == (d / "p.asm").read_text()
    # and the decoded program is the one we started from (not just a fixed point of the tools)
    assert Program.from_bytes((d / "p3.m100").read_bytes(), TINY) == \
        Program.from_bytes(original, TINY)


@pytest.mark.xfail(strict=True, reason="xDSL 0.74 prints a non-ASCII StringAttr as byte escapes "
                   "and parses it back as a BytesAttr, which tpb.program's metadata rejects")
def test_non_ascii_metadata_round_trips_through_ir(tmp_path):
    program = Program.empty(TINY)
    program.metadata = {"source": "modèle-\x80.onnx"}
    (tmp_path / "p.m100").write_bytes(program.to_bytes(TINY))
    assert main(["--from-bin", str(tmp_path / "p.m100"), "-o", str(tmp_path / "p.mlir")]) == 0
    assert main([str(tmp_path / "p.mlir"), "--to-bin", "-o", str(tmp_path / "p2.m100")]) == 0
    assert (tmp_path / "p2.m100").read_bytes() == (tmp_path / "p.m100").read_bytes()


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("m100-translate: error: "), err
    return lines[0]


def test_every_truncation_is_one_error_line(tmp_path, capsys):
    data = _make_program(tmp_path)
    bad = tmp_path / "bad.m100"
    for n in range(len(data)):
        bad.write_bytes(data[:n])
        assert main(["--from-bin", str(bad)]) == 1, f"truncated to {n} bytes"
        line = _one_error_line(capsys)
        assert f"{bad}: " in line


def test_every_single_byte_corruption_is_one_error_line(tmp_path, capsys):
    # every byte is covered by the header CRC or a section CRC: any flip must be detected
    data = _make_program(tmp_path)
    bad = tmp_path / "bad.m100"
    for i in range(len(data)):
        for mask in (0x01, 0xFF):
            corrupted = bytearray(data)
            corrupted[i] ^= mask
            bad.write_bytes(bytes(corrupted))
            assert main(["--bin-to-asm", str(bad)]) == 1, f"flip {mask:#x} at byte {i} undetected"
            _one_error_line(capsys)


@pytest.mark.parametrize("seed", range(20))
def test_random_garbage_is_one_error_line(tmp_path, capsys, seed):
    import random

    rng = random.Random(seed)
    data = _make_program(tmp_path)
    # keep the magic sometimes so that the deeper parsing paths are reached too
    junk = rng.randbytes(rng.randrange(0, 600))
    if seed % 2:
        junk = data[:rng.randrange(8, len(data))] + junk
    bad = tmp_path / "junk.m100"
    bad.write_bytes(junk)
    assert main(["--from-bin", str(bad)]) == 1
    _one_error_line(capsys)
