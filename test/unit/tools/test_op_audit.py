"""The per-op test audit (m100.tools.op_audit): its references resolve, no op of docs/ops.md has a
gap outside KNOWN_GAPS (which may only shrink), docs/op-tests.md is its current output, and it
rejects references that are not backed by a test."""

from __future__ import annotations

import textwrap

import pytest

from m100.tools import op_audit


@pytest.fixture(scope="module")
def audited():
    return op_audit.audit()


def test_no_gap_outside_the_known_ones(audited):
    rows, table = audited
    gaps = {(r.op, k) for r in rows for k in r.gaps()}
    new = sorted(gaps - op_audit.KNOWN_GAPS)
    assert not new, f"ops without a lit / negative / oracle test (tools/op_audit.py docstring): {new}"
    filled = sorted(g for g in op_audit.KNOWN_GAPS - gaps if g[0] in table)
    assert not filled, f"no longer gaps: remove them from op_audit.KNOWN_GAPS: {filled}"


def test_docs_are_the_audit(audited):
    rows, _ = audited
    with open(op_audit.ROOT / "docs" / "op-tests.md") as f:
        assert f.read() == op_audit.render_docs(rows), \
            "regenerate: python -m m100.tools.op_audit --write-docs docs/op-tests.md"


def _root(tmp_path, lit: str = "", test_py: str = ""):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "ops.md").write_text(
        "## Ops with at least one passing case\n\n| op | cases | pass | not supported | other |"
        " metric |\n|---|---|---|---|---|---|\n| Relu | 2 | 2 | 0 | 0 | 1/1 |\n")
    (tmp_path / "test" / "lit").mkdir(parents=True)
    (tmp_path / "test" / "unit" / "tools").mkdir(parents=True)
    (tmp_path / op_audit.NODE_SUBSET).write_text("SUBSET = {}\n")
    if lit:
        (tmp_path / "test" / "lit" / "relu.test").write_text(textwrap.dedent(lit))
    if test_py:
        (tmp_path / "test" / "test_relu.py").write_text(textwrap.dedent(test_py))
    return tmp_path


LIT_OK = """\
    # RUN: m100-opt %s | filecheck %s
    # ONNX-OPS: Relu
    # Relu: a compare and a select
    # CHECK: arith.select
    """
PY_OK = """\
    import pytest
    @pytest.mark.onnx_op("Relu", kind="oracle")
    def test_a(): pass
    @pytest.mark.onnx_op("Relu", kind="negative")
    def test_b(): pass
    """


def test_a_complete_op_has_no_gap(tmp_path):
    rows, _ = op_audit.audit(_root(tmp_path, LIT_OK, PY_OK))
    assert [r.gaps() for r in rows] == [[]]
    assert rows[0].tests["oracle"] == ["test/test_relu.py::test_a"]


@pytest.mark.parametrize("lit,py,what", [
    (LIT_OK.replace("# CHECK: arith.select\n", ""), PY_OK, "no RUN line into filecheck or no check"),
    (LIT_OK.replace("# Relu: a compare", "# a compare"), PY_OK, "nothing else in the file"),
    (LIT_OK.replace("ONNX-OPS: Relu", "ONNX-OPS: Relu, Rleu"), PY_OK, "not an ONNX op"),
    (LIT_OK, PY_OK.replace('kind="oracle"', 'kind="orcale"'), "kind='negative' or kind='oracle'"),
    (LIT_OK, PY_OK.replace("def test_a", "def helper_a"), "pytest does not collect"),
    (LIT_OK, PY_OK.replace('onnx_op("Relu", kind="oracle")', 'onnx_op(OPS, kind="oracle")'),
     "string literals"),
])
def test_unbacked_references_are_errors(tmp_path, lit, py, what):
    with pytest.raises(op_audit.AuditError, match=what):
        op_audit.audit(_root(tmp_path, lit, py))


def test_slow_tests_and_missing_kinds_are_gaps(tmp_path):
    py = PY_OK.replace('@pytest.mark.onnx_op("Relu", kind="oracle")',
                       '@pytest.mark.slow\n    @pytest.mark.onnx_op("Relu", kind="oracle")')
    rows, _ = op_audit.audit(_root(tmp_path, "", py))
    assert rows[0].gaps() == ["lit", "oracle"]
