"""One module per op family: what the timeline plans for a piece and what the emitter emits for it,
side by side (issue 9). A new family is one module with ``plan_piece`` and ``emit_piece`` and an
entry in :data:`FAMILIES` (keyed by :func:`..plan.op_family`).

* :mod:`.tcu`: TCU contractions (matmul, conv2d);
* :mod:`.cvu`: CVU vector ops (elementwise/idiom pipelines, reductions, pooling);
* :mod:`.movement`: data-movement ops done memory -> memory by CCB DMAs.
"""
from __future__ import annotations

from . import cvu, movement, tcu

FAMILIES = {"matmul": tcu, "conv": tcu, "cvu": cvu, "reduce": cvu, "pool": cvu}

__all__ = ["FAMILIES", "cvu", "movement", "tcu"]
