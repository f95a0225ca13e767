"""m100.sim: the reference interpreter (functional + cycle model + race/deadlock checks + trace).

Never imports xDSL, ``m100.dialects``, ``m100.passes``, ``m100.frontend`` or ``m100.tools``: it
runs programs it did not see compiled. Entry points: :class:`Simulator`, :func:`simulate`, and the
``m100-sim`` command (``tools/m100_sim.py``). Documentation: ``docs/sim.md``.

The names below are imported on first use (PEP 562): the compiler imports only
``m100.sim.certificate`` (the certificate format and sync modes), not the interpreter, its race
checker and networkx (~0.4 CPU-s of every ``m100 compile``).
"""

from __future__ import annotations

import importlib

_LAZY = {"Report": ".checks", "SimError": ".semantics_base", "Result": ".simulator",
         "SimInputError": ".simulator", "Simulator": ".simulator", "simulate": ".simulator"}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Simulator", "Result", "Report", "SimError", "SimInputError", "simulate"]
