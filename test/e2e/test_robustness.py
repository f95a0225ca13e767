"""Random-latency runs and mutation testing of compiled programs.

* 20 ``random_latency`` seeds: the interpreter perturbs unit and update latencies; the outputs must
  be bit-identical and race-free (the counters, not one lucky timing, order the program).
* Mutants: drop any one monitor, or lower any one expected value by one; the interpreter must
  catch >= 95 % of them (a race, a deadlock, or different outputs); the independent certificate
  checker (``m100.sim.certificate``) is measured on the same mutants.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from e2e_helpers import light_model, monitor_sites, mutate, same_outputs
from m100.frontend import models
from m100.tools.onnx_backend import onnxruntime_run
from m100.sim import certificate
from m100.tools import driver


@pytest.fixture(scope="module")
def mlp_dataflow():
    return driver.compile(models.mlp(), machine="tiny")


SEEDED = {"mlp": (models.mlp, "tiny", 0), "convnet": (models.conv_relu_maxpool, "tiny", 0),
          "llama": (lambda: onnx.load("test/data/llama_layer_small.onnx"), "m100", 8),
          "resnet18-32": (lambda: models.resnet18(hw=32, num_classes=10), "m100", 8),
          "squeezenet": (lambda: light_model("squeezenet"), "m100", 16),
          "resnet50": (lambda: light_model("resnet50"), "m100", 16)}


@pytest.mark.parametrize("name,mode", [
    ("mlp", "dataflow"), ("mlp", "barrier-all"), ("convnet", "dataflow"),
    pytest.param("convnet", "barrier-all", marks=pytest.mark.slow),
    pytest.param("llama", "dataflow", marks=pytest.mark.slow),
    pytest.param("resnet18-32", "dataflow", marks=pytest.mark.slow),
    pytest.param("squeezenet", "dataflow", marks=pytest.mark.slow),
    pytest.param("resnet50", "dataflow", marks=pytest.mark.slow)])
def test_20_random_latency_seeds_give_identical_outputs_and_no_races(name, mode, mlp_dataflow):
    build, machine, tpbs = SEEDED[name]
    model = build()
    cr = (mlp_dataflow if (name, mode) == ("mlp", "dataflow")
          else driver.compile(model, machine=machine, tpbs=tpbs, sync_mode=mode))
    inputs = driver.random_inputs(cr.program, 7)
    base = driver.run(cr.program, inputs)
    assert base.ok
    want = onnxruntime_run(model, [inputs[n] for n in cr.input_names])
    for n, w in zip(cr.output_names, want):
        np.testing.assert_allclose(base.outputs[n].reshape(w.shape), w, rtol=1e-3, atol=1e-4)
    cycles = set()
    for seed in range(20):
        r = driver.run(cr.program, inputs, random_latency=seed)
        assert r.reports == [], (seed, [str(x) for x in r.reports[:2]])
        assert same_outputs(r.outputs, base.outputs), seed
        cycles.add(r.total_cycles)
    assert len(cycles) > 1  # the latencies really were perturbed


def _mutation_rates(cr):
    inputs = driver.random_inputs(cr.program, 0)
    base = driver.run(cr.program, inputs)
    assert base.ok
    sites = monitor_sites(cr.program)
    assert sites
    caught = cert_caught = total = 0
    missed = []
    for site in sites:
        for how in ("drop", "lower"):
            mp = mutate(cr.program, site, how)
            r = driver.run(mp, inputs)
            total += 1
            hit = not r.ok or not same_outputs(r.outputs, base.outputs)
            caught += hit
            cert_caught += bool(certificate.verify(mp, cr.certificate))
            if not hit:
                missed.append((site, how))
    return total, caught, cert_caught, missed


@pytest.mark.parametrize("name", ["mlp", "convnet", pytest.param("llama", marks=pytest.mark.slow)])
def test_mutants_are_caught(name, mlp_dataflow, record_property):
    build, machine, tpbs = SEEDED[name]
    cr = mlp_dataflow if name == "mlp" else driver.compile(build(), machine=machine, tpbs=tpbs)
    total, caught, cert_caught, missed = _mutation_rates(cr)
    rate = caught / total
    record_property("mutation_rate", rate)
    print(f"{name}: {total} mutants, interpreter caught {caught} ({100 * rate:.1f} %), "
          f"certificate checker {cert_caught}")
    assert rate >= 0.95, missed
    assert cert_caught / total >= 0.95


def test_unmutated_program_passes_the_certificate_check(mlp_dataflow):
    assert certificate.verify(mlp_dataflow.program, mlp_dataflow.certificate) == []


def test_certificate_checker_names_the_unenforced_edge(mlp_dataflow):
    cr = mlp_dataflow
    site = monitor_sites(cr.program)[0]
    problems = certificate.verify(mutate(cr.program, site, "drop"), cr.certificate)
    assert any("is not enforced by the program's counters" in p for p in problems), problems


def test_certificate_checker_reports_a_monitor_that_can_never_pass(mlp_dataflow):
    cr = mlp_dataflow
    key, pos, k = monitor_sites(cr.program)[0]
    import dataclasses
    inst = cr.program.streams[key][pos]
    mons = list(inst.sync.monitors)
    mons[k] = dataclasses.replace(mons[k], expected=mons[k].expected + 1000)
    streams = {kk: list(v) for kk, v in cr.program.streams.items()}
    streams[key][pos] = dataclasses.replace(inst, sync=dataclasses.replace(inst.sync,
                                                                           monitors=tuple(mons)))
    problems = certificate.verify(dataclasses.replace(cr.program, streams=streams),
                                  cr.certificate)
    assert any(p.startswith("deadlock:") for p in problems), problems
