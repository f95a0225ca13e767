"""A first run's pre-pass (``engine_checks.Checks._derive_blocks``) makes each block's reads and
writes once and derives from them both its packed race items (the bulk check's, for every block
at once: ``_pack_halves``) and a copy's view spec (issue 15). The oracle is each block's own derivation on a fresh decode of the
same program (nothing kept): ``_items`` of the executor's ``reads(b)`` / ``writes(b)`` and the
spec the executor makes from its own accesses -- every (instruction, block) of compiled programs,
every byte set's members compared. The shared conv box plans and per-levels view plans are
compared with their per-instruction / per-walk derivations in
``test/unit/sim/test_first_run_plans.py``; whole runs through every fast path against the element
index arrays in ``test_speed_paths.py``."""

from __future__ import annotations

import pytest

from m100.targets.m100.isa import CsuCall
from m100.sim import semantics_tcu, twu
from m100.sim.engine_checks import _TABLE, _items, _pack, kept_handle
from m100.sim.race_batch import unpack
from m100.sim.memory import Memory
from m100.sim.semantics import make_exec
from m100.sim.semantics_move import _make_op
from m100.targets.m100.program import Program
from m100.tools import driver
from test_speed_paths import CASES


def _bytes(items) -> list:
    """(space, code, lo, hi, members or None) of race items: their byte sets compared whole."""
    out = []
    for space, bs, code in items:
        arr = bs.arr
        out.append((space, code, bs.lo, bs.hi, None if arr is None else arr.tolist()))
    return out


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama",
                                  pytest.param("resnet18-32", marks=pytest.mark.slow)])
def test_prepass_items_and_view_specs_equal_each_blocks_own(name):
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    blob = cr.program.to_bytes()
    inputs = driver.random_inputs(cr.program, 6)
    twu._GEO.clear()
    twu._IDS.clear()
    semantics_tcu._PLANS.clear()
    prog = Program.from_bytes(blob)
    driver.run(prog, inputs, mode="functional")  # (the pre-pass keeps its values on prog)
    fresh = Program.from_bytes(blob)
    mem = Memory(fresh.machine_obj())
    kept_specs = checked = 0
    for key in sorted(prog.streams):
        for inst, ref in zip(prog.streams[key], fresh.streams[key], strict=True):
            if isinstance(inst, CsuCall):
                assert "_sim_race" not in inst.__dict__  # (index data: never kept)
                continue
            race = inst.__dict__.get("_sim_race")
            assert race is not None and race[0] is twu.STRIDED, inst
            # (a first run: one handle table per instruction, no handle per half -- session 36)
            assert _TABLE in race[1] and not any(len(k) == 3 for k in race[1] if k != _TABLE)
            views = inst.__dict__.get("_sim_views")
            ex = make_exec(ref, mem)
            for b in range(inst.sync.blocks):
                for write in (False, True):
                    own = _items(ex.writes(b) if write else ex.reads(b))
                    # (the bulk check's packed form, made for every block at once --
                    # _pack_halves -- with byte sets made when asked for: _pack's; the items
                    # themselves are made only by a run without the bulk check)
                    assert (b, write) not in race[1]
                    nums, bss = unpack(kept_handle(race[1], b, write))
                    want_nums, want_bss = unpack(_pack(own))
                    assert nums == want_nums
                    assert _bytes([(None, x, None) for x in bss]) == \
                        _bytes([(None, x, None) for x in want_bss])
                checked += 1
                if hasattr(ex, "_make_view_spec"):
                    # (a one-block copy's op when it has one -- semantics_move._make_op --,
                    # else its view spec)
                    op = inst.__dict__.get("_sim_op")
                    assert op is not None and op[0] is twu.STRIDED
                    assert op[1] == _make_op(ex._ends())
                    if op[1] is not None:  # (the stores of the spec's plan: its parts)
                        vt, counts, ssp, stpb, slo, send, sfirst, ss, dsp, dtpb, dlo, dend, \
                            dfirst, ds, rng = op[1]
                        spec = ex._make_view_spec(b)
                        assert spec[0] == vt and spec[2] is not None and spec[3] == rng
                        assert spec[1][0][:5] == (ssp, stpb, slo, send, sfirst)
                        assert set(spec[2]) == {(counts, ss, ds)}
                        assert all(p[0] == dsp and p[2:5] == (dlo, dend, dfirst)
                                   for p in spec[1][1:])
                        assert len(spec[1]) == 2 and spec[1][1][1] == dtpb if rng is None \
                            else [p[1] for p in spec[1][1:]] == list(range(
                                rng[0], rng[0] + rng[1] * rng[2], rng[1]))
                        kept_specs += 1  # (an op: the spec's stores)
                        continue
                    assert views is not None and views[0] is twu.STRIDED
                    assert views[1][b] == ex._make_view_spec(b)
                    kept_specs += views[1][b] is not None
    assert checked and kept_specs  # blocks with view specs were compared
    # a later run with race checks (random latency: the general loop, the log made in it) finds
    # every half kept through the tables: it packs nothing again and adds no handle
    tables = {id(i): i.__dict__["_sim_race"][1][_TABLE] for s in prog.streams.values()
              for i in s if not isinstance(i, CsuCall)}
    driver.run(prog, inputs, mode="full", random_latency=3)
    for s in prog.streams.values():
        for i in s:
            if not isinstance(i, CsuCall):
                kept = i.__dict__["_sim_race"][1]
                assert kept[_TABLE] is tables[id(i)] and set(kept) == {_TABLE}
