"""The pass registry: discovery mechanics (on a synthetic package) and the project's pass conventions
(over every pass actually discovered under ``m100.passes``)."""

from __future__ import annotations

import re
import textwrap

import pytest
from xdsl.transforms import get_all_passes

from m100.passes import registry
from m100.passes.registry import own_docstring, pass_options


# --- loading mechanics on a throw-away package ---------------------------------------------------

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
    _write(root, "broken.py", "raise RuntimeError('boom in broken')\n")
    _write(root, "nested/__init__.py", "")
    _write(root, "nested/deep_pass.py", '''
        from xdsl.passes import ModulePass

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
    import sys
    for mod in [m for m in sys.modules if m.startswith(pkg)]:
        del sys.modules[mod]


def test_load_returns_listed_passes_by_name(fake_package):
    found = registry.load(["nested.deep_pass:DeepPass", "good_pass:GoodPass"], fake_package)
    assert list(found) == ["deep-pass", "good-pass"]
    assert found["good-pass"].__module__ == f"{fake_package}.good_pass"


def test_a_broken_pass_module_fails_loudly(fake_package):
    with pytest.raises(registry.PassRegistryError,
                       match=rf"pass module {fake_package}\.broken failed to import: "
                             r"RuntimeError: boom in broken") as info:
        registry.load(["good_pass:GoodPass", "broken:Broken"], fake_package)
    assert isinstance(info.value.__cause__, RuntimeError)  # the original traceback is kept


@pytest.mark.parametrize("entry", ["good_pass:NotAPass", "good_pass:Missing"])
def test_a_listed_class_that_is_not_a_pass_fails(fake_package, entry):
    with pytest.raises(registry.PassRegistryError, match="has no ModulePass class"):
        registry.load([entry], fake_package)


def test_two_passes_with_one_name_fail(fake_package):
    with pytest.raises(registry.PassRegistryError, match="pass name 'good-pass' defined by"):
        registry.load(["good_pass:GoodPass", "zz_dup:Again"], fake_package)


def test_pass_options_and_docstrings(fake_package):
    found = registry.load(["good_pass:GoodPass", "nested.deep_pass:DeepPass"], fake_package)
    good = found["good-pass"]
    opts = pass_options(good)
    assert [(o.cli_name, o.type, o.default) for o in opts] == [("width", "int", "4")]
    assert own_docstring(good) == "Does good things."
    # DeepPass has no docstring of its own: the inherited ModulePass doc must not count
    assert own_docstring(found["deep-pass"]) is None
    assert "(no description)" in registry.describe(found["deep-pass"])


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

REAL = registry.all_passes()  # raises if a listed pass module fails to import
PASSES = sorted(REAL.items())


def test_no_m100_pass_shadows_an_xdsl_pass():
    clash = sorted(set(REAL) & set(get_all_passes()))
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


def test_every_pass_class_in_the_sources_is_listed():
    # Every `class X(ModulePass):` with a `name = "..."` under passes/ (found by a plain text scan,
    # independent of the import machinery) must be in registry.PASSES, and every entry must exist.
    import pathlib

    import m100.passes as pkg

    root = pathlib.Path(pkg.__path__[0])
    scanned = set()
    for path in root.rglob("*.py"):
        # one chunk per top-level class; a pass is `class X(ModulePass):` with a `name = "..."`
        for chunk in re.split(r"^(?=class )", path.read_text(), flags=re.M):
            m = re.match(r"class (\w+)\((?:[\w.]*\.)?ModulePass\):", chunk)
            if m and re.search(r'^    name(?:: [^=\n]*)? = "([^"]+)"', chunk, re.M):
                module = ".".join(path.relative_to(root).with_suffix("").parts)
                scanned.add(f"{module}:{m.group(1)}")
    assert scanned, "the text scan found no pass: the scan itself is broken"
    assert scanned == set(registry.PASSES), (
        f"not listed in passes/registry.py PASSES: {sorted(scanned - set(registry.PASSES))}; "
        f"listed but not defined: {sorted(set(registry.PASSES) - scanned)}")
    assert list(registry.PASSES) == sorted(registry.PASSES)
