"""User-facing error base class.

Every error that a *user* can cause (bad MLIR/ONNX input, an unsupported op, a shape that cannot fit,
a corrupted program file, a bad machine file) derives from :class:`M100Error`. The command-line
tools catch it and print exactly one line ``<tool>: error: <message>`` with a non-zero exit code,
never a traceback. Internal invariant failures use plain exceptions (and may show a traceback).
"""


class M100Error(Exception):
    """An error caused by the user's input; ``str(e)`` is one line naming what and where."""
