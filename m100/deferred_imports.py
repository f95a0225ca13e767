"""Modules whose code runs when one of their attributes is first read, not when they are imported.

``import onnx`` imports ``onnx._mapping`` (``onnx.helper`` imports it), whose table of element
types calls ``np.dtype(ml_dtypes.bfloat16)`` and so imports ``ml_dtypes``: its extension
registers ~20 element types' ufunc loops with numpy, and numpy's ``PyUFunc_AddLoop`` compares each
new loop with every loop the ufunc has -- ~0.5-0.6 CPU-s of every process that imports onnx (the
biggest single item of an ``m100 compile`` process's start-up; session 27's profile, ml_dtypes 0.7;
pyproject.toml now keeps ml_dtypes < 0.7, whose extension loads in ~0.01 CPU-s, so the deferral saves
little with it -- it stays for environments that bring a newer ml_dtypes). Compiling a
float model never reads either module: onnx reads ``_mapping`` only inside the functions that
convert between ONNX and numpy element types (``helper.tensor_dtype_to_np_dtype``,
``numpy_helper.to_array``, ...), and m100 converts bf16 by its bits (``dialects/dense.py``).

:func:`defer` installs a finder that imports the named modules as *deferred* modules: the import
system creates the module, puts it in ``sys.modules`` and binds it on its parent package as usual
(so ``import ml_dtypes`` / ``from onnx import _mapping`` work unchanged), but its code is not
executed; the first read of an attribute it does not have yet (any name the module defines)
executes it in place -- the module object every importer holds becomes the real module -- and
answers the read. Attributes the import system sets (``__spec__``, ``__name__``, ``__path__``,
``__file__``, ...) are read without executing it (so a later ``import ml_dtypes`` statement does
not). What differs from an import is when the module's code runs, and what runs meanwhile: the
only observable difference is a side effect of the module's code that something reads *without*
reading the module -- for ``ml_dtypes`` that is numpy's registry of dtype names
(``np.dtype("bfloat16")`` fails until it has run). :data:`COMPILE_DEFERRED` are deferred only by
the ``m100 compile`` command line (``tools/m100_cli.py``; never in a library user's process), whose
compile reads no dtype by name (``test/unit/frontend/test_deferred_imports.py``: the same program,
certificate and dataflow bytes with and without, a model with bfloat16 and float8 weights too).

Not the standard library's ``importlib.util.LazyLoader``: its module runs on the first read of
*any* attribute, ``__spec__`` included, and CPython 3.11's ``import x`` of a module already in
``sys.modules`` reads ``x.__spec__`` (to see whether it is still initializing) -- so onnx's own
``import ml_dtypes`` ran it at once (measured: ml_dtypes' extension loaded right after that
statement, 0.76 CPU-s). Here only a name the module does not have yet runs it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

#: what ``m100 compile`` defers (in this order of import: ``onnx._mapping`` imports ``ml_dtypes``)
COMPILE_DEFERRED = ("onnx._mapping", "ml_dtypes")


class _Deferred(types.ModuleType):
    """A module whose code has not run yet; the first read of a missing attribute runs it."""

    def __getattr__(self, attr: str):  # only called for attributes the module does not have
        _run(self)
        return getattr(self, attr)

    def __dir__(self):
        _run(self)
        return dir(self)


def _run(module: types.ModuleType) -> None:
    """Execute a deferred module's code in ``module`` (the object its importers hold)."""
    if type(module) is not _Deferred:
        return
    module.__class__ = types.ModuleType  # first: a read during the execution is a plain read
    loader = module.__spec__.loader
    real = loader.real if isinstance(loader, _DeferringLoader) else loader
    module.__spec__.loader = real
    module.__loader__ = real
    real.exec_module(module)


class _DeferringLoader(importlib.abc.Loader):
    """Wraps the loader the path finder found; executing the module is left to :func:`_run`."""

    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        module.__class__ = _Deferred


class _Finder(importlib.abc.MetaPathFinder):
    """Finds each of ``names`` once (as ``sys.meta_path``'s path finder does) with a deferring
    loader; every other name is left to the finders after it."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        self.names.discard(name)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec  # not a plain source module (or not found): imported as usual
        spec.loader = _DeferringLoader(spec.loader)
        return spec


def defer(names=COMPILE_DEFERRED) -> list[str]:
    """Import each of ``names`` not imported yet as a deferred module from now on; the names
    deferred. A name already in ``sys.modules`` is left alone (its code has run)."""
    todo = [n for n in names if n not in sys.modules]
    if todo:
        sys.meta_path.insert(0, _Finder(todo))
    return todo


def executed(name: str) -> bool:
    """Whether module ``name`` is imported and its code has run (not deferred, or read since)."""
    mod = sys.modules.get(name)
    return mod is not None and type(mod) is not _Deferred


__all__ = ["COMPILE_DEFERRED", "defer", "executed"]
