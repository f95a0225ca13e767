"""Docs that run: every fenced ``sh`` block of README.md and docs/*.md runs as shown.

Each block runs with ``bash -e -o pipefail`` in a fresh temporary directory with the venv's tools
first on PATH. The directory holds ``in.npz`` (one float32 array per input of the bundled MLP,
keyed by the program's input symbol names), the one file the docs describe but do not create;
every other file (``model.onnx``, ``prog.m100``, ...) is made by the block itself. Lines running
``make`` are the CI entry points themselves (``make test`` runs this test) and are not re-run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        for i, m in enumerate(FENCE.finditer(path.read_text())):
            out.append((f"{path.relative_to(ROOT)}#{i}", m.group(1)))
    return out


# blocks that compile and check several times: the slow tier (make test-slow)
SLOW = {"docs/e2e.md#0"}
BLOCKS = [pytest.param(n, t, id=n, marks=[pytest.mark.slow] if n in SLOW else [])
          for n, t in _blocks()]


def _script(text: str) -> str:
    lines = [ln for ln in text.splitlines() if not re.match(r"\s*make\s", ln)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def input_npz(tmp_path_factory):
    from m100.frontend import models
    from m100.tools import driver

    cr = driver.compile(models.mlp(), machine="tiny")
    inputs = driver.symbol_inputs(cr.program, driver.random_inputs(cr.program, 0))
    path = tmp_path_factory.mktemp("docs-inputs") / "in.npz"
    np.savez(path, **{k: np.asarray(v, np.float32) for k, v in inputs.items()})
    return path


def test_the_docs_have_runnable_blocks():
    names = {p.values[0].split("#")[0] for p in BLOCKS}
    assert {"README.md", "docs/e2e.md", "docs/schedule.md"} <= names, names


@pytest.mark.parametrize("name,text", BLOCKS)
def test_sh_block_runs_as_shown(name, text, tmp_path, input_npz):
    script = _script(text)
    if not script.strip():
        pytest.skip(f"{name}: only make targets (run by CI itself)")
    (tmp_path / "in.npz").write_bytes(input_npz.read_bytes())
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{name} failed (exit {r.returncode}):\n{script}\n{r.stdout[-2000:]}" \
                              f"\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
