"""Stage 3: redundancy removal -- an ordering implied by others through happens-before gets no
counter traffic.

Every need ``(i, j)`` contributes block edges ``E(i, need[b]) -> S(j, b)`` to the happens-before
graph (with the free hardware edges: program order per executor and block order inside an
instruction). The transitive reduction of that DAG keeps exactly the edges not implied by a longer
path; a need survives when at least one of its block edges survives, and then keeps its whole need
vector (one monitor covers every block of ``j`` anyway, and the vector keeps the expected values
tight). Removing all implied edges at once is safe because the reduction of a DAG preserves its
reachability.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .analyze import Needs
from .graph import HbGraph
from .hazards import Hazard


@dataclass
class Reduced:
    kept: dict[tuple[int, int], Hazard]
    removed: dict[tuple[int, int], Hazard]
    graph: HbGraph  # happens-before over hardware edges + the kept needs
    implied: int | None = None  # the needs found implied when ``removed`` does not list them
    skipped: int = 0  # producers found implied before their needs were derived (sweep.py)

    @property
    def num_removed(self) -> int:
        return len(self.removed) if self.implied is None else self.implied


def reduce_needs(nd: Needs, enabled: bool = True) -> Reduced:
    g = HbGraph(nd.insts, nd.blocks)
    g.add_needs(nd.needs)
    if not enabled:
        return Reduced(dict(nd.needs), {}, g)
    # a block edge E(i, k) -> S(j, b) comes from the need (i, j) alone: the needs with a block
    # edge the reduction keeps are alive
    # (the implied edges of all S-nodes at once; ``test_hb_graph.py`` compares them with
    # :meth:`HbGraph.sync_edge_flags`, S-node by S-node)
    u, v, implied = g.implied_sync_edges()
    ni = np.asarray(g._node_inst, dtype=np.int64)
    alive = set(zip(ni[u[~implied]].tolist(), ni[v[~implied]].tolist()))
    kept: dict[tuple[int, int], Hazard] = {}
    removed: dict[tuple[int, int], Hazard] = {}
    for ij, h in nd.needs.items():
        (kept if ij in alive else removed)[ij] = h
    g2 = HbGraph(nd.insts, nd.blocks)
    for (i, j), h in kept.items():
        g2.add_need(i, j, h.need)
    # the kept needs hold every edge of the reduction and only edges of g: the same
    # happens-before, so the same clocks (counter allocation asks them of this graph)
    g2.adopt_clock(g)
    return Reduced(kept, removed, g2)
