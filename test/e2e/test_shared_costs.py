"""One-TPB block costs shared by geometry (``m100.sim.timing.SHARED``, ``CostModel.cost``): a
cost moved from another TPB equals the cost built for its own instruction, field for field --
primary fields against a fresh ``CostModel`` build, derived ones (``cost_batch``) against a run
that builds every cost -- and whole runs give the same bits either way."""

from __future__ import annotations

import pytest

from e2e_helpers import monitor_sites, mutate
from m100.sim import timing
from m100.sim.timing import CostModel
from m100.targets.m100.program import Program
from m100.tools import driver
from test_speed_paths import CASES, _records, _same

PRIMARY = ("latency", "cycles", "macs", "peak_macs", "exclusive")


def _kept(prog) -> list:
    """(instruction, block kind, cost) of every cost a run kept on the program's instructions."""
    out = []
    for s in sorted(prog.streams):
        for inst in prog.streams[s]:
            got = inst.__dict__.get("_sim_costs")
            for k, c in enumerate(got[1] if got else ()):
                if c is not None:
                    out.append((inst, k, c))
    return out


@pytest.mark.parametrize("name", ["mlp", "convnet", "llama",
                                  pytest.param("resnet18-32", marks=pytest.mark.slow)])
def test_shared_costs_equal_costs_built_per_instruction(name, monkeypatch):
    build, machine, tpbs = CASES[name]
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    inputs = driver.random_inputs(cr.program, 3)
    sites = monitor_sites(cr.program)
    blobs = [cr.program.to_bytes(), mutate(cr.program, sites[len(sites) // 2], "drop").to_bytes()]
    moved = 0
    for blob in blobs:
        for kw in ({"mode": "timing"}, {"mode": "full"}, {"random_latency": 7}):
            shared_prog, built_prog = Program.from_bytes(blob), Program.from_bytes(blob)
            fast = driver.run(shared_prog, inputs, **kw)
            monkeypatch.setattr(timing, "SHARED", False)
            ref = driver.run(built_prog, inputs, **kw)
            monkeypatch.setattr(timing, "SHARED", True)
            _same(fast, ref)
            assert _records(fast) == _records(ref)
            model = CostModel(shared_prog.machine_obj())  # (SHARED on: built fresh below)
            a, b = _kept(shared_prog), _kept(built_prog)
            assert len(a) == len(b) > 0
            moved += len(a) - len({id(x) for _, _, x in a})  # (the same TPB: the same cost)
            for (inst, k, x), (_, _, y) in zip(a, b):
                moved += x.moved is not None
                monkeypatch.setattr(timing, "SHARED", False)
                z = model.cost(inst, k)  # the definition, for this instruction
                monkeypatch.setattr(timing, "SHARED", True)
                for want in (y, z):
                    for f in PRIMARY:
                        assert getattr(x, f) == getattr(want, f), f
                    assert list(x.banks) == list(want.banks)
                    assert all(x.banks[t].tobytes() == want.banks[t].tobytes() for t in x.banks)
                    assert x.links == want.links and list(x.bytes.items()) == list(want.bytes.items())
                # the derived fields: the batch's (a moved cost: its base's, moved) against the
                # batch of the run that built every cost
                assert x.alone == y.alone and x.crit == y.crit
                assert x.cols.tolist() == y.cols.tolist() and x.use.tobytes() == y.use.tobytes()
    print("shared", name, moved)
    assert moved or name == "mlp"  # (the others share geometries; the MLP has none twice)


def test_geometry_key_names_what_a_cost_depends_on():
    """Costs of the same kind and shapes on other TPBs are shared only when their walks' bases
    are the same modulo the bank sweep (the histogram's residue), and never for a walk in
    another TPB."""
    from dataclasses import replace

    from m100.sim.testing import hb
    from m100.targets.m100.isa import Copy, DType
    from m100.targets.m100.machine import get_machine

    m = get_machine("m100")
    model = CostModel(m)
    sweep = m.hbsm_bank_width * m.hbsm_banks
    src, dst = hb(0, 96, DType.I8, (64, 30), (64, 1)), hb(0, 4096, DType.I8, (64, 30))
    base = Copy(0, src, dst)
    c0 = model.cost(base, 0)
    # (the key names levels by identity: a decoded program's equal levels are one tuple)
    same = Copy(5, replace(src, tpb=5, base=96 + 3 * sweep), replace(dst, tpb=5))
    other = Copy(5, replace(src, tpb=5, base=96 + 32), replace(dst, tpb=5))
    remote = Copy(5, replace(src, tpb=5), replace(dst, tpb=6))
    got = model.cost(same, 0)
    assert got.moved is not None and got.moved[0] is c0 and list(got.banks) == [5]
    assert got.banks[5].tobytes() == c0.banks[0].tobytes()
    assert model.cost(other, 0).moved is None
    assert model.cost(remote, 0).moved is None and model._geometry(remote, 0) is None
