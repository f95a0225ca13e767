"""sync-insert's certificate (``certificate.py``): the checker sees a missing monitor; its text
(compact JSON, one top-level key per line) reads back as the value it was given.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402

from m100.passes.backend.sync_insert import insert_sync  # noqa: E402
from m100.sim.certificate import verify_instructions as verify_certificate  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

TINY = get_machine("tiny")


# ------------------------------------------------------------------------------------------------
# the certificate
# ------------------------------------------------------------------------------------------------
def test_certificate_detects_a_missing_monitor():
    prog = progs.random_program(3, n=18)
    res = insert_sync(prog, TINY)
    cert = res.certificate
    assert cert["format"] == "m100-sync-certificate" and cert["edges"]
    e = cert["edges"][0]
    j = e["to"]
    q = list(res.instructions)
    q[j] = dataclasses.replace(q[j], sync=dataclasses.replace(q[j].sync, monitors=()))
    assert verify_certificate(q, cert)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda kids: st.lists(kids, max_size=5) | st.tuples(kids, kids)
    | st.dictionaries(st.text(max_size=6), kids, max_size=5),
    max_leaves=40)

def _canonical(value) -> str:
    import json
    return json.dumps(value, sort_keys=True)  # NaN/inf as json writes them, tuples as lists

def _reads_back(value) -> str:
    import json

    from m100.passes.backend.sync_insert.certificate import dumps
    text = dumps(value)
    assert _canonical(json.loads(text)) == _canonical(value)
    if isinstance(value, dict) and value:  # "{", a line per key in sorted order, "}"
        lines = text.split("\n")
        assert lines[0] == "{" and lines[-1] == "}" and len(lines) == len(value) + 2
        assert [json.loads("{" + ln.rstrip(",") + "}").popitem()[0] for ln in lines[1:-1]] == \
            sorted(value)
    return text

@settings(max_examples=300, deadline=None)
@given(_json)
@example({"a": [1, -2, 3.5, float("nan"), float("inf"), -float("inf"), True, None, "é\n\"x"],
          "b": {}, "c": [], "d": [[], {}, [[1]]], "e": (1, "t")})
def test_certificate_text_reads_back(value):
    _reads_back(value)

def test_certificate_text_of_real_certificates_and_errors():
    import json

    from m100.passes.backend.sync_insert.certificate import dumps
    for seed in range(3):
        cert = insert_sync(progs.random_program(seed, n=18), TINY).certificate
        assert json.loads(_reads_back(cert)) == cert
    # non-str keys (not a certificate): json's compact text; values json can not encode: its error
    assert json.loads(dumps({2: [1], 1: {None: 3}})) == {"1": {"null": 3}, "2": [1]}
    for bad in ({"a": [np.int64(1)]}, {1: 0, "x": 0}):
        with pytest.raises(TypeError):
            dumps(bad)


# ------------------------------------------------------------------------------------------------
# version 3: the checker derives the conflicting pairs itself
# ------------------------------------------------------------------------------------------------
def _problems(insts, cert, **changes):
    return verify_certificate(insts, dict(cert, **changes))

def _without_monitor(insts, j):
    q = list(insts)
    q[j] = dataclasses.replace(q[j], sync=dataclasses.replace(q[j].sync, monitors=()))
    return q

def test_version_3_lists_edges_and_no_hazards():
    res = insert_sync(progs.random_program(5, n=24), TINY)
    cert = res.certificate
    assert cert["version"] == 3 and cert["edges"] and "hazards" not in cert
    assert "redundant" not in cert and verify_certificate(res.instructions, cert) == []

@pytest.mark.parametrize("seed", range(6))
def test_a_certificate_missing_an_edge_is_rejected(seed):
    """Every kept edge is needed (the transitive reduction keeps no other): without it, some
    conflicting pair the checker derives is ordered by the program's counters but not by the
    certificate's edges -- a certificate that does not prove what it claims."""
    res = insert_sync(progs.random_program(40 + seed, n=30, extra=seed % 2 == 1), TINY)
    cert, insts = res.certificate, res.instructions
    assert cert["edges"]
    for x in range(len(cert["edges"])):
        edges = cert["edges"][:x] + cert["edges"][x + 1:]
        got = _problems(insts, cert, edges=edges)
        assert got and all("the program's counters order it, the certificate's edges do not"
                           in p for p in got), (x, got)

def test_a_wrong_edge_is_rejected():
    """An edge whose producer the program's counters do not order before the consumer."""
    from m100.sim.certificate import HappensBefore
    caught = 0
    for seed in range(6):
        res = insert_sync(progs.random_program(60 + seed, n=30), TINY)
        cert, insts = res.certificate, res.instructions
        g = HappensBefore(insts)
        for x, e in enumerate(cert["edges"]):
            j = e["to"]
            wrong = [i for i in range(j) if insts[i].sync.blocks == insts[e["from"]].sync.blocks
                     and not g.hb(g.E(i, 0), g.S(j, 0))]
            if not wrong:
                continue
            edges = list(cert["edges"])
            edges[x] = dict(e, **{"from": wrong[-1]})
            got = _problems(insts, cert, edges=edges)
            assert any(f"edge #{wrong[-1]} block" in p and "is not enforced by the program's "
                       "counters" in p for p in got), got
            caught += 1
    assert caught >= 5

@pytest.mark.parametrize("seed", range(6))
def test_a_program_with_a_sync_removed_is_rejected_even_with_a_matching_certificate(seed):
    """Drop a monitor from the program and its edges from the certificate (a consistent lie):
    the pairs the checker derives itself still catch the race, naming both instructions."""
    res = insert_sync(progs.random_program(80 + seed, n=30, extra=seed % 2 == 0), TINY)
    cert, insts = res.certificate, res.instructions
    j = cert["edges"][0]["to"]
    q = _without_monitor(insts, j)
    edges = [e for e in cert["edges"] if e["to"] != j]
    got = _problems(q, cert, edges=edges)
    # (later instructions ordered through j lose their ordering too)
    assert any(f"-> #{j} " in p for p in got) and all(
        p.startswith("conflict ") and
        "neither the program's counters nor the certificate's edges" in p for p in got), got
    # with the certificate unchanged, the edge itself is not enforced either
    assert any("is not enforced by the program's counters" in p
               for p in verify_certificate(q, cert))

def test_version_2_is_still_read_and_other_versions_are_refused(monkeypatch):
    from m100.passes.backend.sync_insert import certificate
    prog = progs.random_program(7, n=24)
    monkeypatch.setattr(certificate, "LIST_HAZARDS", True)
    v2 = insert_sync(prog, TINY)
    assert v2.certificate["version"] == 2 and v2.certificate["hazards"]
    assert verify_certificate(v2.instructions, v2.certificate) == []
    # a v2 certificate's listed hazard is checked too (a monitor dropped: its edge and hazard)
    j = v2.certificate["edges"][0]["to"]
    assert any(p.startswith("hazard ") for p in
               verify_certificate(_without_monitor(v2.instructions, j), v2.certificate))
    for v in (4, 0, None, "3"):
        got = verify_certificate(v2.instructions, dict(v2.certificate, version=v))
        assert got == [f"certificate version {v} is not one this checker reads (1, 2, 3)"]

def test_malformed_edges_are_one_line_each():
    res = insert_sync(progs.random_program(9, n=24), TINY)
    cert, insts = res.certificate, res.instructions
    e = cert["edges"][0]
    for bad in (dict(e, to=len(insts)), dict(e, need=e["need"] + [0]),
                dict(e, **{"from": e["to"]}), {"from": 0}):
        got = _problems(insts, cert, edges=[bad] + cert["edges"][1:])
        assert len(got) == 1 and ("does not fit" in got[0] or "malformed" in got[0]), got


def _members(bs) -> set:
    return set(range(bs.lo, bs.hi)) if bs.arr is None else set(bs.arr.tolist())

def _all_unordered(insts, g) -> set:
    """Every conflicting pair of blocks that ``g`` does not order, by enumeration: each block's
    bytes as a Python set, every pair of blocks of different executors (the oracle of
    ``cert_conflicts``, which sweeps and retires)."""
    from m100.sim.cert_conflicts import _accesses
    from m100.sim.engine_checks import _items
    from m100.sim.semantics import make_exec
    acc = []
    for i, inst in enumerate(insts):
        ex = make_exec(inst, None)
        for k in range(g.blocks[i]):
            for w in (False, True):
                for space, bs, _ in _items(_accesses(inst, ex, k, w)):
                    acc.append((i, k, w, space, _members(bs)))
    out = set()
    for x, (i, k, w1, s1, m1) in enumerate(acc):
        for (j, b, w2, s2, m2) in acc[x + 1:]:
            if (j > i and g.ex[i] != g.ex[j] and (w1 or w2) and s1 == s2 and m1 & m2
                    and not g.hb(g.E(i, k), g.S(j, b))):
                out.add((i, k, j, b))
    return out

@pytest.mark.parametrize("seed", range(10))
def test_derived_conflicts_against_enumeration(seed, monkeypatch):
    """With some certified edges dropped, the sweep reports a pair iff enumeration finds one,
    and each pair it reports is an unordered conflict of the enumeration."""
    from m100.sim import cert_conflicts
    from m100.sim.certificate import HappensBefore, _claimed
    monkeypatch.setattr(cert_conflicts, "MAX_PROBLEMS", 10 ** 6)
    res = insert_sync(progs.random_program(120 + seed, n=24, extra=seed % 2 == 1), TINY,
                      stream_blocks=2 if seed % 3 == 0 else None)
    insts, cert = res.instructions, res.certificate
    rng = np.random.default_rng(seed)
    for drop in (0.0, 0.2, 0.6):
        edges = [e for e in cert["edges"] if rng.random() >= drop]
        claimed, bad = _claimed(dict(cert, edges=edges), [max(1, i.sync.blocks) for i in insts])
        g = HappensBefore(insts, claimed)
        want = _all_unordered(insts, g)
        got = {(i, k, j, b) for _, i, k, j, b, _, _ in cert_conflicts.unordered_conflicts(insts, g)}
        assert bool(got) == bool(want) and got <= want, (drop, got - want, len(want))
        if drop == 0.0:
            assert not want


def _reference_certificate(machine, mode, nd, red, al, out) -> dict:
    """``build_certificate`` as it was before session 33 (the edges from ``sorted`` items, every
    need vector through ``tolist``, the names through the enums' ``.name``)."""
    from m100.passes.backend.sync_insert.certificate import FORMAT, VERSION
    edges = []
    mons: dict = {}
    for (i, j), h in sorted(al.needs.items()):
        t = al.home[(i, j)]
        c = al.inst_counter[(i, t)]
        first = mons.get(j)
        if first is None:
            first = mons[j] = {}
            for m in out[j].sync.monitors:
                first.setdefault((m.tpb, m.counter), m)
        mon = first[(t, c)]
        edges.append({"from": i, "to": j, "need": h.need.tolist(), "counter": [t, c],
                      "trigger": al.trigger[(i, t)].name,
                      "value": [mon.expected + b * mon.per_block for b in range(len(h.need))]})
    return {
        "format": FORMAT, "version": VERSION, "machine": machine.name,
        "fingerprint": f"{machine.fingerprint():016x}", "sync_mode": mode,
        "instructions": len(out), "blocks": [inst.sync.blocks for inst in out],
        "executors": [[out[i].executor[0].name, out[i].executor[1]] for i in range(len(out))],
        "edges": edges,
        "serialized": [list(x) for x in al.chain_needs],
        "counters_used": {str(t): n for t, n in sorted(al.counters_used.items())},
    }


@pytest.mark.parametrize("seed", range(8))
def test_certificate_is_the_reference_one(seed, monkeypatch):
    """The certificate (edges in ``sorted`` order, the shared ``[0]`` need's lists without
    ``tolist``, names from tables) is the written-out reference's, value and text, on random
    programs with streamed blocks (need vectors other than ``[0]``, per-block triggers) and, for
    half of them, a budget of 2 counters (serializing chain needs)."""
    from m100.passes.backend import sync_insert as pkg
    from m100.passes.backend.sync_insert.certificate import dumps
    real = pkg.build_certificate
    seen = []

    def both(*a):
        got = real(*a)
        seen.append((got, _reference_certificate(*a)))
        return got

    monkeypatch.setattr(pkg, "build_certificate", both)
    res = insert_sync(progs.random_program(70 + seed, n=40, extra=seed % 2 == 1), TINY,
                      counter_budget=2 if seed % 2 else None)
    (got, want), = seen
    assert got == want and dumps(got) == dumps(want)
    edges = got["edges"]
    assert len(edges) > 10 and res.certificate is got
    assert any(len(e["need"]) > 1 for e in edges) or seed % 2
