"""Discovery of the m100 passes, and the helpers that describe them (``--help``, ``docs/passes.md``).

Every :class:`xdsl.passes.ModulePass` subclass *defined* in a module under ``m100.passes`` is a pass
of the project: adding ``passes/<area>/my_pass.py`` with ``class MyPass(ModulePass): name = "my-pass"``
is all it takes for ``m100-opt`` to offer it. There is no hand-written list to keep in sync.

Conventions (checked by ``test/unit/tools/test_pass_registry.py`` over every discovered pass):

* one pass per file and ``name`` is the file name in kebab-case (``hbsm_allocate.py`` <->
  ``hbsm-allocate``); a complex pass is a folder of stages whose ``__init__.py`` (or a module named
  like the folder) defines the pass, so the folder name is the pass name;
* every pass has its own docstring: what, why, pre/postconditions, options (``m100-opt --help``
  shows its first paragraph, ``m100-opt --pass-help NAME`` all of it);
* no two passes share a name, and none shadows an upstream xDSL pass.

A module that fails to import is skipped with one warning line on stderr so that one broken pass
does not take the whole driver down; :func:`discover` reports such failures to tests.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys
import traceback
import typing
from dataclasses import dataclass, field
from functools import cache

from xdsl.passes import ModulePass

PACKAGE = "m100.passes"


@dataclass(frozen=True)
class ImportFailure:
    """A module under ``m100.passes`` that could not be imported."""

    module: str
    error: str  # one line: "<ExceptionType>: <message>"
    details: str  # the formatted traceback, for tests and debugging


@dataclass(frozen=True)
class Discovery:
    """What :func:`discover` found: passes by name, where each came from, and import failures."""

    passes: dict[str, type[ModulePass]] = field(default_factory=dict)
    failures: tuple[ImportFailure, ...] = ()
    duplicates: tuple[tuple[str, str, str], ...] = ()  # (name, kept module, dropped module)


def _is_pass_class(obj: object, module_name: str) -> bool:
    return (
        inspect.isclass(obj)
        and issubclass(obj, ModulePass)
        and obj is not ModulePass
        and obj.__module__ == module_name  # defined here, not imported from elsewhere
        and not inspect.isabstract(obj)
        and isinstance(getattr(obj, "name", None), str)
    )


def _iter_module_names(package_name: str) -> list[str]:
    package = importlib.import_module(package_name)
    names = [package_name]
    for info in pkgutil.walk_packages(package.__path__, prefix=package_name + ".",
                                      onerror=lambda _name: None):
        names.append(info.name)
    return sorted(set(names))


@cache
def discover(package: str = PACKAGE) -> Discovery:
    """Import every module under ``package`` (``m100.passes``) and collect the pass classes (cached).

    A module that raises while importing is recorded in ``failures`` (not raised); a pass class that
    a module merely imports from elsewhere is not counted twice; the first of two passes with the
    same name wins and the clash is recorded in ``duplicates``.
    """
    passes: dict[str, type[ModulePass]] = {}
    failures: list[ImportFailure] = []
    duplicates: list[tuple[str, str, str]] = []
    for module_name in _iter_module_names(package):
        if module_name == __name__:
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - a broken pass module must not kill the driver
            failures.append(ImportFailure(module_name, f"{type(e).__name__}: {e}".splitlines()[0],
                                          traceback.format_exc()))
            continue
        for obj in vars(module).values():
            if not _is_pass_class(obj, module_name):
                continue
            if obj.name in passes and passes[obj.name] is not obj:
                duplicates.append((obj.name, passes[obj.name].__module__, module_name))
                continue
            passes[obj.name] = obj
    return Discovery(dict(sorted(passes.items())), tuple(failures), tuple(duplicates))


_warned: set[str] = set()


def all_passes(warn: bool = True, package: str = PACKAGE) -> dict[str, type[ModulePass]]:
    """``{pass name: pass class}`` for every m100 pass, sorted by name.

    Modules that fail to import (and duplicate names) are reported once per process on stderr,
    one line each, when ``warn``.
    """
    found = discover(package)
    if warn and package not in _warned:
        _warned.add(package)
        for f in found.failures:
            print(f"warning: skipping pass module {f.module}: {f.error}", file=sys.stderr)
        for name, kept, dropped in found.duplicates:
            print(f"warning: pass name '{name}' defined in {kept} and {dropped}; using {kept}",
                  file=sys.stderr)
    return dict(found.passes)


# --- describing passes ----------------------------------------------------------------------------


def own_docstring(cls: type) -> str | None:
    """The class's own docstring, or None (inherited docs and dataclass-generated signatures
    such as ``MyPass(x: int = 1)`` do not count)."""
    doc = cls.__dict__.get("__doc__")
    if not doc or not doc.strip():
        return None
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return None
    return inspect.cleandoc(doc)


def summary(cls: type) -> str:
    """The first paragraph of the pass's docstring on one line (``"(no description)"`` if none)."""
    doc = own_docstring(cls)
    if doc is None:
        return "(no description)"
    first = doc.split("\n\n", 1)[0]
    return " ".join(line.strip() for line in first.splitlines() if line.strip())


@dataclass(frozen=True)
class PassOption:
    """One option of a pass as written on the command line: ``name{cli-name=value}``."""

    cli_name: str
    type: str
    default: str | None  # None: required


def pass_options(cls: type[ModulePass]) -> list[PassOption]:
    """The options of a pass (its dataclass fields), with their CLI spelling, type and default."""
    if not dataclasses.is_dataclass(cls):
        return []
    from xdsl.utils.hints import type_repr

    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable string annotations: show them as written
        hints = {}
    options: list[PassOption] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default: str | None = _format_default(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = _format_default(f.default_factory())
        else:
            default = None
        hint = hints.get(f.name, f.type)
        type_text = hint if isinstance(hint, str) else type_repr(hint)
        options.append(PassOption(f.name.replace("_", "-"), type_text, default))
    return options


def _format_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(_format_default(v) for v in value)
    if value is None:
        return "none"
    if value == "":
        return '""'
    return str(value)


def describe(cls: type[ModulePass]) -> str:
    """Full help text of one pass: name, docstring, options (for ``m100-opt --pass-help``)."""
    lines = [cls.name, "=" * len(cls.name), ""]
    doc = own_docstring(cls)
    lines.append(doc if doc is not None else "(no description)")
    options = pass_options(cls)
    lines.append("")
    if options:
        lines.append("Options:")
        for o in options:
            default = "required" if o.default is None else f"default {o.default}"
            lines.append(f"  {o.cli_name}: {o.type} ({default})")
    else:
        lines.append("Options: none")
    lines.append("")
    lines.append(f"Defined in {cls.__module__}.{cls.__qualname__}")
    return "\n".join(lines)


__all__ = ["Discovery", "ImportFailure", "PassOption", "all_passes", "describe", "discover",
           "own_docstring", "pass_options", "summary"]
