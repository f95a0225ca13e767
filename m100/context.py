"""The xDSL context every m100 tool and test parses with.

``make_context()`` returns an :class:`xdsl.context.Context` that knows

* every dialect xDSL 0.74 ships (registered lazily, exactly as ``xdsl-opt`` does: a dialect is only
  imported when the parser first meets one of its ops/attributes),
* the m100 dialects listed in ``m100.dialects.M100_DIALECTS`` (``hbsm``, ``twu``, ``sync``, ``tpb``),
* the project's extended ``linalg`` dialect ``m100.dialects.linalg_ext.LinalgExt`` (xDSL's ``linalg``
  plus the named ops xDSL lacks) which REPLACES xDSL's own ``linalg`` when it exists,
* likewise ``m100.dialects.arith_ext.ArithExt`` (xDSL's ``arith`` plus ``arith.remf``) for ``arith``.

``dialect_factories()`` is the same table as a ``{name: () -> Dialect}`` dict; ``m100-opt`` registers
it through its ``register_all_dialects`` hook (registering after construction is not possible there).

Why one place: a dialect can be registered only once per context (a second ``register_dialect`` raises
``AlreadyRegisteredConstructException``), and which ``linalg`` wins must be the same in every tool.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable

from xdsl.context import Context
from xdsl.ir import Dialect

DialectFactory = Callable[[], Dialect]

_LINALG_EXT_MODULE = "m100.dialects.linalg_ext"
_ARITH_EXT_MODULE = "m100.dialects.arith_ext"


def _m100_dialects() -> list[Dialect]:
    """The project's own dialects (empty while ``m100.dialects`` does not define them yet)."""
    # Import errors inside m100.dialects are real bugs and propagate; only a missing list is tolerated.
    package = importlib.import_module("m100.dialects")
    M100_DIALECTS = getattr(package, "M100_DIALECTS", None)
    if M100_DIALECTS is None:
        return []
    items: Iterable[Dialect]
    if isinstance(M100_DIALECTS, dict):
        items = M100_DIALECTS.values()
    else:
        items = M100_DIALECTS
    return list(items)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package is missing
        return False


def _linalg_ext_factory() -> Dialect:
    module = importlib.import_module(_LINALG_EXT_MODULE)
    return module.LinalgExt


def _arith_ext_factory() -> Dialect:
    return importlib.import_module(_ARITH_EXT_MODULE).ArithExt


def dialect_factories() -> dict[str, DialectFactory]:
    """``{dialect name: factory}`` for xDSL's dialects, the extended linalg and the m100 dialects."""
    from xdsl.universe import Universe

    factories: dict[str, DialectFactory] = dict(Universe.get_multiverse().all_dialects)
    if _module_exists(_LINALG_EXT_MODULE):
        factories["linalg"] = _linalg_ext_factory
    if _module_exists(_ARITH_EXT_MODULE):
        factories["arith"] = _arith_ext_factory
    for dialect in _m100_dialects():
        factories[dialect.name] = lambda d=dialect: d
    return factories


def register_dialects(ctx: Context) -> None:
    """Register every dialect of :func:`dialect_factories` in ``ctx`` (lazily)."""
    if _module_exists(_LINALG_EXT_MODULE):
        # Eager import: it installs xDSL parser fixes (e.g. hex floats such as 0xFF800000 = -inf in
        # dense lists) that must be active before the first constant is parsed, i.e. before the lazy
        # linalg factory would run.
        importlib.import_module(_LINALG_EXT_MODULE)
    registered = set(ctx.registered_dialect_names)
    for name, factory in dialect_factories().items():
        if name not in registered:
            ctx.register_dialect(name, factory)


def make_context(allow_unregistered: bool = False) -> Context:
    """A fresh context with all dialects registered (see the module docstring)."""
    ctx = Context(allow_unregistered=allow_unregistered)
    register_dialects(ctx)
    return ctx


__all__ = ["DialectFactory", "dialect_factories", "make_context", "register_dialects"]
