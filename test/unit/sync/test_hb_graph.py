"""sync-insert's happens-before graph (``graph.py``) and the transitive reduction
(``redundancy.py``) against networkx.
"""

from __future__ import annotations

import os
import sys

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402

from m100.passes.backend.sync_insert import insert_sync  # noqa: E402
from m100.passes.backend.sync_insert.graph import HbGraph  # noqa: E402
from m100.targets.m100 import isa  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

TINY = get_machine("tiny")


def _nx(g: HbGraph) -> nx.DiGraph:
    """``g``'s happens-before graph (program order and sync edges) as a networkx graph."""
    G = nx.DiGraph()
    G.add_nodes_from(range(g.num_nodes))
    for v in range(g.num_nodes):
        for p in g.preds(v):
            G.add_edge(p, v)
    return G


# ------------------------------------------------------------------------------------------------
# reachability and the transitive reduction against networkx
# ------------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(10, 15, 2), (14, 60, 3)]))
def test_redundant_edges_match_networkx_transitive_reduction(seed, size):
    # (instructions, sync edges, max blocks): the larger size gives S-nodes with many sync
    # predecessors (several per executor, some also the hardware edge), as joins do
    n, edges, maxb = size
    rng = np.random.default_rng(seed)
    prog = progs.random_program(seed, n=n)
    blocks = [int(rng.integers(1, maxb + 1)) for _ in prog]
    g = HbGraph(prog, blocks)
    for _ in range(edges):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        g.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
    G = _nx(g)
    tr = nx.transitive_reduction(G)
    sync = {(u, v) for v, s in g.sync_preds.items() for u in s}
    assert g.redundant_sync_edges() == {e for e in sync if not tr.has_edge(*e)}
    for v in range(0, g.num_nodes, 3):
        anc = nx.ancestors(G, v)
        assert {u for u in range(1, g.num_nodes, 2) if g.hb(u, v)} == {u for u in anc if u & 1}

@pytest.mark.parametrize("seed", range(4))
def test_clock_kept_up_to_date_only_to_the_query_agrees_with_networkx(seed):
    """HbGraph.hb brings the clocks up to date only up to the queried node: sync edges added
    between queries (as allocate's serialization does) are seen by every later query, which
    answers as networkx's ancestors do on the graph at that moment."""
    rng = np.random.default_rng(seed)
    prog = progs.random_program(40 + seed, n=30)
    blocks = [int(rng.integers(1, 4)) for _ in prog]
    g = HbGraph(prog, blocks)
    for _ in range(30):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        g.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
        G = _nx(g)
        for v in sorted(rng.choice(g.num_nodes, 4, replace=False)):
            anc = nx.ancestors(G, int(v))
            assert {u for u in range(1, g.num_nodes, 2) if g.hb(u, int(v))} == \
                {u for u in anc if u & 1}


@pytest.mark.parametrize("seed", range(4))
def test_before_predicate_agrees_with_networkx(seed):
    """HbGraph.before(v) (counter allocation's reuse test: one clock row per query node) answers
    for every event (i, k) what networkx's ancestors of v say about E(i, k), with sync edges
    added between queries (the predicate is taken after each change, as _greedy does)."""
    rng = np.random.default_rng(seed)
    prog = progs.random_program(80 + seed, n=30)
    blocks = [int(rng.integers(1, 4)) for _ in prog]
    g = HbGraph(prog, blocks)
    events = [(i, k) for i in range(len(prog)) for k in range(blocks[i])]
    for _ in range(20):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        g.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
        G = _nx(g)
        for v in sorted(rng.choice(g.num_nodes, 4, replace=False)):
            anc = nx.ancestors(G, int(v))
            f = g.before(int(v))
            assert {e for e in events if f(e)} == {e for e in events if g.E(*e) in anc}


@pytest.mark.parametrize("seed", range(6))
def test_reduced_graph_clocks_are_the_full_graphs(seed):
    """reduce_needs hands counter allocation the graph of the kept needs with the clocks of the
    graph of all needs (adopt_clock: the reduction keeps the happens-before). They must be the
    clocks a sweep of the kept needs alone computes, and say what networkx's ancestors of the
    kept-needs graph say."""
    from m100.passes.backend.sync_insert.analyze import analyze
    from m100.passes.backend.sync_insert.redundancy import reduce_needs

    prog = progs.random_program(300 + seed, n=24)
    nd = analyze(prog, TINY, stream_blocks=1 + seed % 3)
    red = reduce_needs(nd)
    assert red.removed  # the case that matters: edges were dropped
    fresh = HbGraph(nd.insts, nd.blocks)
    for (i, j), h in red.kept.items():
        fresh.add_need(i, j, h.need)
    assert red.graph._clock is not None  # adopted, not swept again
    assert np.array_equal(red.graph.clock(), fresh.clock())
    G = _nx(fresh)
    for v in range(0, fresh.num_nodes, 2):
        anc = nx.ancestors(G, v)
        assert {u for u in range(1, fresh.num_nodes, 2) if red.graph.hb(u, v)} == \
            {u for u in anc if u & 1}


@pytest.mark.parametrize("seed", range(6))
def test_implied_sync_edges_are_the_flags(seed, monkeypatch):
    """The transitive reduction's test for all sync edges at once (implied_sync_edges, with tiny
    pair slices on odd seeds) gives sync_edge_flags' answers, edge by edge and in its order, on
    graphs whose S-nodes have many sync predecessors (several per executor, some the hardware
    edge); the needs added at once (add_needs) give add_need's predecessor sets; reduce_needs
    keeps the needs with a block edge sync_edge_flags does not find implied."""
    from m100.passes.backend.sync_insert.analyze import analyze
    from m100.passes.backend.sync_insert.redundancy import reduce_needs

    rng = np.random.default_rng(500 + seed)
    prog = progs.random_program(500 + seed, n=40)
    blocks = [int(rng.integers(1, 4)) for _ in prog]
    g = HbGraph(prog, blocks)
    for _ in range(200):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        g.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
    if seed % 2:
        monkeypatch.setattr(HbGraph, "PAIRS", 1 + seed)
    u, v, implied = g.implied_sync_edges()
    want = [(x, w, f) for w, us, flags in g.sync_edge_flags() for x, f in zip(us, flags)]
    assert list(zip(u.tolist(), v.tolist(), implied.tolist())) == want
    assert implied.any() and not implied.all()

    nd = analyze(prog, TINY, stream_blocks=2)
    one, bulk = HbGraph(nd.insts, nd.blocks), HbGraph(nd.insts, nd.blocks)
    for (i, j), h in nd.needs.items():
        one.add_need(i, j, h.need)
    bulk.add_needs(nd.needs)
    assert bulk.sync_preds == one.sync_preds
    # the reduction's needs against the per-S-node flags of a graph built need by need (the path
    # of ``redundancy.VECTOR = False`` until session 31): a need is kept iff a block edge of it is
    fast = reduce_needs(nd)
    inst = one._node_inst
    alive = {(inst[x], inst[w]) for w, us, flags in one.sync_edge_flags()
             for x, f in zip(us, flags) if not f}
    assert list(fast.kept) == [ij for ij in nd.needs if ij in alive]
    assert list(fast.removed) == [ij for ij in nd.needs if ij not in alive]
    assert fast.kept and fast.removed


@pytest.mark.parametrize("seed", range(8))
def test_propagated_clocks_are_the_sweeps(seed):
    """A sync edge (or a need) added under computed clocks raises only the rows it changes
    (``HbGraph._raise``): after every change, the rows kept up to date are those a fresh
    graph of the same edges sweeps from scratch, and so are all rows once swept to the end --
    with queries that leave the clocks computed only part of the way (rows past ``_dirty``
    stay to the lazy sweep), edges already present, edges implied by others, and a fork
    changed on its own (the original keeps its rows). networkx is the other oracle of the
    same clocks (``test_clock_kept_up_to_date_only_...``)."""
    rng = np.random.default_rng(700 + seed)
    prog = progs.random_program(700 + seed, n=36)
    blocks = [int(rng.integers(1, 4)) for _ in prog]

    def fresh(g):
        f = HbGraph(prog, blocks)
        for v, us in g.sync_preds.items():
            for u in us:
                i, k, _ = f.locate(u)
                j, b, _ = f.locate(v)
                f.add_sync(i, k, j, b)
        return f.clock()

    g = HbGraph(prog, blocks)
    for _ in range(25):  # a first set of edges, swept at once
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        g.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
    g.clock()
    raised = 0
    for step in range(60):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        if step % 5 == 4:
            need = rng.integers(-1, blocks[i], size=blocks[j])
            g.add_need(int(i), int(j), need)
        else:
            k, b = int(rng.integers(blocks[i])), int(rng.integers(blocks[j]))
            g.add_sync(int(i), k, int(j), b)
            if step % 7 == 0:
                g.add_sync(int(i), k, int(j), b)  # already there
        want = fresh(g)
        d = g._dirty
        assert np.array_equal(g._clock[:d], want[:d]), step
        raised += d == g.num_nodes
        if step % 3 == 0:  # a query part of the way, or to the end
            g.clock(int(rng.integers(g.num_nodes)) if step % 2 else None)
            d = g._dirty
            assert np.array_equal(g._clock[:d], want[:d]), step
    assert np.array_equal(g.clock(), fresh(g))
    assert raised > 10  # most changes were made under complete clocks
    f = g.fork()
    before = g.clock().copy()
    for _ in range(10):
        i, j = sorted(rng.choice(len(prog), 2, replace=False))
        f.add_sync(int(i), int(rng.integers(blocks[i])), int(j), int(rng.integers(blocks[j])))
    assert np.array_equal(f.clock(), fresh(f))
    assert np.array_equal(g.clock(), before) and np.array_equal(before, fresh(g))


def test_redundant_orderings_get_no_traffic():
    # A (TPB0 DTDU) writes X; B (TPB0 CVU) reads X, writes Y; C (TPB1 DTDU) reads X and Y.
    # C->A is implied by C->B->A, so C has exactly one monitor.
    h = progs.hw
    prog = [isa.Fill(tpb=0, dst=h(0, 0), value=1.0),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 0), h(0, 0)], h(0, 1)),
            progs.cvu(1, isa.CvuOp.ADD, [h(1, 2), h(1, 2)], h(1, 3)),
            isa.Copy(tpb=0, src=h(0, 1), dst=h(0, 2))]
    res = insert_sync(prog, TINY)
    assert res.stats["redundant"] == 0
    prog.append(isa.Copy(tpb=1, src=h(1, 3), dst=h(1, 4)))  # CVU@1 -> DTDU@1 only
    res = insert_sync(prog, TINY)
    assert res.stats["kept"] == 3
    # a chain A -> B -> C with C also reading A's output: one ordering is implied
    prog = [isa.Fill(tpb=0, dst=h(0, 0), value=1.0),
            progs.cvu(0, isa.CvuOp.ADD, [h(0, 0), h(0, 0)], h(0, 1)),
            isa.MatMul(tpb=0, a=h(0, 0), b=h(0, 1), c=h(0, 2), m=16, n=16, k=16)]
    res = insert_sync(prog, TINY)
    assert res.stats["needs"] == 3 and res.stats["redundant"] == 1
    assert len(res.instructions[2].sync.monitors) == 1
