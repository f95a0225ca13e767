"""m100: a multi-level compiler on xDSL and a reference interpreter for the Li Auto M100 NPU.

The import package is assembled from the repository's top-level folders (see setup.py):
``m100.dialects`` <- ``dialects/``, ``m100.passes`` <- ``passes/``, ``m100.targets`` <- ``targets/``,
``m100.sim`` <- ``sim/``, ``m100.tools`` <- ``tools/``, ``m100.frontend`` <- ``frontend/``.
"""

__version__ = "0.1.0"
