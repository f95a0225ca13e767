"""The list of the m100 passes, and the helpers that describe them (``--help``, ``docs/passes.md``).

:data:`PASSES` names every pass of the project as ``"module:Class"`` (module relative to
``m100.passes``). Adding ``passes/<area>/my_pass.py`` with ``class MyPass(ModulePass): name =
"my-pass"`` also means adding one line here; ``test/unit/tools/test_pass_registry.py`` scans the
sources and fails if a pass class is defined but not listed (or listed but gone).

A listed module that fails to import is an error (:class:`PassRegistryError`, raised with the
original exception chained): a broken pass must fail loudly, never vanish from ``m100-opt --help``.

Conventions (checked by ``test/unit/tools/test_pass_registry.py`` over every listed pass):

* one pass per file and ``name`` is the file name in kebab-case (``hbsm_allocate.py`` <->
  ``hbsm-allocate``); a complex pass is a folder of stages whose ``__init__.py`` (or a module named
  like the folder) defines the pass, so the folder name is the pass name;
* every pass has its own docstring: what, why, pre/postconditions, options (``m100-opt --help``
  shows its first paragraph, ``m100-opt --pass-help NAME`` all of it);
* no two passes share a name, and none shadows an upstream xDSL pass.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from xdsl.passes import ModulePass

PACKAGE = "m100.passes"

# Every pass of the project, "module:Class" with the module relative to PACKAGE (sorted by module).
PASSES: tuple[str, ...] = (
    "backend.hbsm_allocate:HbsmAllocate",
    "backend.sync_insert.sync_insert:SyncInsert",
    "backend.twu_materialize:TwuMaterialize",
    "graph.check_supported:CheckSupported",
    "graph.classify_ops:ClassifyOps",
    "graph.cse_weights:CseWeights",
    "graph.fold_batchnorm:FoldBatchnorm",
    "graph.fold_constants:FoldConstants",
    "graph.fold_quantized_contractions:FoldQuantizedContractions",
    "graph.fold_slice_reads:FoldSliceReads",
    "graph.fuse_dequant:FuseDequant",
    "graph.fuse_elementwise:FuseElementwise",
    "graph.fuse_epilogue:FuseEpilogue",
    "graph.fuse_predicates:FusePredicates",
    "graph.layout_nhwc:LayoutNhwc",
    "graph.lower_quantized_add:LowerQuantizedAdd",
    "graph.lower_quantized_avgpool:LowerQuantizedAvgpool",
    "graph.m100_graph:M100Graph",
    "graph.materialize_index:MaterializeIndex",
    "graph.raise_quant_casts:RaiseQuantCasts",
    "graph.recognize_idioms:RecognizeIdioms",
    "graph.simplify_algebra:SimplifyAlgebra",
    "graph.split_value_index:SplitValueIndex",
    "m100_pipeline:M100Pipeline",
    "schedule.m100_schedule:M100Schedule",
)


class PassRegistryError(RuntimeError):
    """A listed pass that cannot be loaded (its module fails to import, the class is missing or is
    not a ModulePass, or two entries share a name). An internal error: it is never caught."""


def load(entries: Iterable[str] = PASSES, package: str = PACKAGE) -> dict[str, type[ModulePass]]:
    """Import every ``"module:Class"`` entry (module relative to ``package``) and return
    ``{pass name: class}`` sorted by name; any failure raises :class:`PassRegistryError`."""
    passes: dict[str, type[ModulePass]] = {}
    for entry in entries:
        module_name, _, class_name = entry.partition(":")
        module_name = f"{package}.{module_name}"
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            raise PassRegistryError(f"pass module {module_name} failed to import: "
                                    f"{type(e).__name__}: {e}".splitlines()[0]) from e
        cls = getattr(module, class_name, None)
        if not (inspect.isclass(cls) and issubclass(cls, ModulePass)
                and isinstance(getattr(cls, "name", None), str)):
            raise PassRegistryError(f"{module_name} has no ModulePass class '{class_name}' "
                                    f"(listed in {__name__}.PASSES)")
        if cls.name in passes:
            raise PassRegistryError(f"pass name '{cls.name}' defined by {passes[cls.name].__module__}"
                                    f" and {module_name}")
        passes[cls.name] = cls
    return dict(sorted(passes.items()))


@cache
def _loaded() -> dict[str, type[ModulePass]]:
    return load()


def all_passes() -> dict[str, type[ModulePass]]:
    """``{pass name: pass class}`` for every pass in :data:`PASSES`, sorted by name (a fresh dict
    each call; raises :class:`PassRegistryError` if one cannot be loaded)."""
    return dict(_loaded())


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


__all__ = ["PASSES", "PassOption", "PassRegistryError", "all_passes", "describe", "load",
           "own_docstring", "pass_options", "summary"]
