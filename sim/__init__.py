"""m100.sim: the reference interpreter (functional + cycle model + race/deadlock checks + trace).

Never imports xDSL, ``m100.dialects``, ``m100.passes``, ``m100.frontend`` or ``m100.tools``: it
runs programs it did not see compiled. Entry points: :class:`Simulator`, :func:`simulate`, and the
``m100-sim`` command (``tools/m100_sim.py``). Documentation: ``docs/sim.md``.
"""

from .checks import Report
from .semantics import SimError
from .simulator import Result, SimInputError, Simulator, simulate

__all__ = ["Simulator", "Result", "Report", "SimError", "SimInputError", "simulate"]
