"""The pass registry: discovery mechanics (on a synthetic package) and the project's pass conventions
(over every pass actually discovered under ``m100.passes``)."""

from __future__ import annotations

import re
import textwrap

import pytest
from xdsl.transforms import get_all_passes

from m100.passes import registry
from m100.passes.registry import discover, own_docstring, pass_options


# --- discovery mechanics on a throw-away package -------------------------------------------------

def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    pkg = "m100_fake_passes_pkg"
    root = tmp_path / pkg
    _write(root, "__init__.py", "")
    _write(root, "good_pass.py", '''
        from dataclasses import dataclass
        from xdsl.passes import ModulePass

        @dataclass(frozen=True)
        class GoodPass(ModulePass):
            """Does good things."""
            name = "good-pass"
            width: int = 4
            def apply(self, ctx, op):
                pass

        class NotAPass:
            name = "not-a-pass"
        ''')
    _write(root, "reexport.py", "from m100_fake_passes_pkg.good_pass import GoodPass\n")
    _write(root, "broken.py", "raise RuntimeError('boom in broken')\n")
    _write(root, "nested/__init__.py", "")
    _write(root, "nested/deep_pass.py", '''
        from abc import abstractmethod
        from xdsl.passes import ModulePass

        class AbstractBase(ModulePass):
            name = "abstract-base"
            @abstractmethod
            def helper(self): ...

        class DeepPass(ModulePass):
            name = "deep-pass"
            def apply(self, ctx, op):
                pass
        ''')
    _write(root, "zz_dup.py", '''
        from xdsl.passes import ModulePass

        class Again(ModulePass):
            name = "good-pass"
            def apply(self, ctx, op):
                pass
        ''')
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    discover.cache_clear()
    registry._warned.discard(pkg)
    import sys
    for mod in [m for m in sys.modules if m.startswith(pkg)]:
        del sys.modules[mod]


def test_discovery_finds_defined_passes_only(fake_package):
    found = discover(fake_package)
    assert set(found.passes) == {"good-pass", "deep-pass"}
    assert found.passes["good-pass"].__module__ == f"{fake_package}.good_pass"
    assert found.passes["deep-pass"].__module__ == f"{fake_package}.nested.deep_pass"


def test_discovery_reports_broken_modules_instead_of_raising(fake_package):
    found = discover(fake_package)
    assert [f.module for f in found.failures] == [f"{fake_package}.broken"]
    assert found.failures[0].error == "RuntimeError: boom in broken"
    assert "Traceback" in found.failures[0].details


def test_discovery_reports_duplicate_names(fake_package):
    found = discover(fake_package)
    # modules are imported in sorted order: good_pass.py wins over zz_dup.py
    assert found.duplicates == (("good-pass", f"{fake_package}.good_pass", f"{fake_package}.zz_dup"),)


def test_all_passes_warns_once_per_broken_module(fake_package, capsys):
    passes = registry.all_passes(package=fake_package)
    assert set(passes) == {"good-pass", "deep-pass"}
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: skipping pass module {fake_package}.broken: RuntimeError: boom in broken",
                   f"warning: pass name 'good-pass' defined in {fake_package}.good_pass and "
                   f"{fake_package}.zz_dup; using {fake_package}.good_pass"]
    registry.all_passes(package=fake_package)
    assert capsys.readouterr().err == ""


def test_pass_options_and_docstrings(fake_package):
    found = discover(fake_package)
    good = found.passes["good-pass"]
    opts = pass_options(good)
    assert [(o.cli_name, o.type, o.default) for o in opts] == [("width", "int", "4")]
    assert own_docstring(good) == "Does good things."
    # DeepPass has no docstring of its own: the inherited ModulePass doc must not count
    assert own_docstring(found.passes["deep-pass"]) is None
    assert "(no description)" in registry.describe(found.passes["deep-pass"])


def test_dataclass_generated_doc_is_not_a_docstring():
    from dataclasses import dataclass

    from xdsl.passes import ModulePass

    @dataclass(frozen=True)
    class Undocumented(ModulePass):
        name = "undocumented"
        k: int = 1

        def apply(self, ctx, op):
            pass

    assert Undocumented.__doc__.startswith("Undocumented(")  # what dataclass made up
    assert own_docstring(Undocumented) is None


# --- conventions over the project's real passes ------------------------------------------------

REAL = discover()
PASSES = sorted(REAL.passes.items())


def test_every_pass_module_imports():
    assert not REAL.failures, "\n\n".join(f"{f.module}:\n{f.details}" for f in REAL.failures)


def test_no_duplicate_pass_names():
    assert not REAL.duplicates


def test_no_m100_pass_shadows_an_xdsl_pass():
    clash = sorted(set(REAL.passes) & set(get_all_passes()))
    assert not clash, f"m100 passes shadow upstream xDSL passes: {clash}"


def _kebab(identifier: str) -> str:
    return identifier.replace("_", "-")


@pytest.mark.parametrize("name,cls", PASSES, ids=[n for n, _ in PASSES] or None)
def test_pass_name_matches_its_file(name, cls):
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name), f"'{name}' is not kebab-case"
    parts = cls.__module__.split(".")
    stem, folder = parts[-1], parts[-2]
    # passes/hbsm_allocate.py -> hbsm-allocate; a folder of stages passes/sync_insert/ -> sync-insert
    assert name in (_kebab(stem), _kebab(folder)), (
        f"pass '{name}' ({cls.__qualname__}) lives in {cls.__module__}: rename the file to "
        f"{name.replace('-', '_')}.py (or the pass to '{_kebab(stem)}')")


@pytest.mark.parametrize("name,cls", PASSES, ids=[n for n, _ in PASSES] or None)
def test_pass_has_a_docstring_covering_its_options(name, cls):
    doc = own_docstring(cls)
    assert doc is not None, f"pass '{name}' ({cls.__module__}) has no docstring of its own"
    assert len(doc.splitlines()[0].strip()) >= 10, f"pass '{name}': first docstring line too short"
    missing = [o.cli_name for o in pass_options(cls)
               if o.cli_name not in doc and o.cli_name.replace("-", "_") not in doc]
    assert not missing, f"pass '{name}': docstring does not mention its options {missing}"


def test_real_discovery_is_not_empty_or_reports_why():
    # Guards the discovery itself: every .py module under passes/ that defines `class X(ModulePass)`
    # (found by a plain text scan, independent of the import machinery) must be registered.
    import pathlib

    import m100.passes as pkg

    root = pathlib.Path(pkg.__path__[0])
    expected = set()
    for path in root.rglob("*.py"):
        # one chunk per top-level class; a pass is `class X(ModulePass):` with a `name = "..."`
        for chunk in re.split(r"^(?=class )", path.read_text(), flags=re.M):
            if not re.match(r"class \w+\((?:[\w.]*\.)?ModulePass\):", chunk):
                continue
            m = re.search(r'^    name(?:: [^=\n]*)? = "([^"]+)"', chunk, re.M)
            if m:
                expected.add((m.group(1), str(path.relative_to(root))))
    assert expected or not REAL.passes, "the text scan found no pass: the scan itself is broken"
    missing = {(n, f) for n, f in expected if n not in REAL.passes}
    assert not missing, f"defined but not discovered (is there an __init__.py?): {sorted(missing)}"
