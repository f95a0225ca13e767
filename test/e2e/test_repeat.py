"""Layer repetition (issue 13 step 2): one compiled decoder layer run N times with per-instance
weights and KV caches. Oracle: onnxruntime running the one-layer model N times, each with its own
weights, the output of one the input of the next."""

from __future__ import annotations

import numpy as np
import pytest

from m100.frontend.ort_session import ort_session
from m100.frontend import llm
from m100.targets.m100.program import Program, ProgramError
from m100.targets.m100.repeat import Repeat, RepeatError, repeat_program
from m100.tools import driver

N = 3
CTX = 6


@pytest.fixture(scope="module")
def layer():
    model, _ = llm.build("tiny", "layer", "decode", context=CTX, weights="shape")
    return model, driver.compile(model, machine="m100").program


def _inputs(cfg, seed):
    rng = np.random.default_rng(seed)
    hd = cfg.head_dim
    cos, sin = llm.rope_tables(cfg, [CTX])
    return {"x": rng.standard_normal((1, cfg.hidden)).astype(np.float32),
            "cos": cos.reshape(1, 1, 1, hd), "sin": sin.reshape(1, 1, 1, hd)}, rng


def test_repeated_layer_matches_n_layers_of_onnxruntime(layer):
    cfg = llm.config("tiny")
    _, prog = layer
    rep = repeat_program(prog, N, chain=[("x", "y")],
                         per_instance=[s.name for s in prog.symbols
                                       if s.name not in ("x", "y", "cos", "sin")])
    rep = Program.from_bytes(rep.to_bytes())  # through the container
    assert rep.repeat.count == N
    ins, rng = _inputs(cfg, 0)
    feed = {"x": ins["x"], "cos": ins["cos"], "sin": ins["sin"]}
    x = ins["x"]
    want_kv = []
    for i in range(N):
        model_i, w = llm.build("tiny", "layer", "decode", context=CTX, seed=10 + i)
        cache = {"past_kT.0": rng.standard_normal((cfg.head_dim, CTX)).astype(np.float32),
                 "past_v.0": rng.standard_normal((CTX, cfg.head_dim)).astype(np.float32)}
        feed |= {f"{k}@{i}": a for k, a in (w | cache).items()}
        sess = ort_session(model_i)
        x, kn, vn = sess.run(["y", "k_new", "v_new"], {"x": x, "cos": ins["cos"],
                                                       "sin": ins["sin"], **cache})
        want_kv.append((kn, vn))
    res = driver.run(rep, feed)
    assert res.ok
    np.testing.assert_allclose(res.outputs["y"], x, rtol=1e-4, atol=1e-5)
    for i, (kn, vn) in enumerate(want_kv):
        np.testing.assert_allclose(res.outputs[f"k_new@{i}"], kn, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(res.outputs[f"v_new@{i}"], vn, rtol=1e-4, atol=1e-5)
    assert res.stats["repeat"] == {"count": N, "simulated_instances": N,
                                   "instance_cycles": res.stats["repeat"]["instance_cycles"]}


def test_timing_of_one_instance_times_n_equals_every_instance_simulated(layer):
    from m100.sim.simulator import Simulator
    _, prog = layer
    rep = repeat_program(prog, 4, chain=[("x", "y")])
    once = Simulator(rep, mode="timing", check_races=False).run({})
    every = Simulator(rep, mode="timing", check_races=False, unroll_repeat=True).run({})
    assert once.stats["repeat"]["simulated_instances"] == 1
    assert every.stats["repeat"]["simulated_instances"] == 4
    assert once.stats["total_cycles"] == every.stats["total_cycles"]
    assert once.stats["bytes"] == pytest.approx(every.stats["bytes"])
    single = Simulator(prog, mode="timing", check_races=False).run({})
    assert once.stats["total_cycles"] == 4 * single.stats["total_cycles"]


def test_program_grows_by_the_offsets_only(layer):
    _, prog = layer
    one = len(repeat_program(prog, 1, chain=[("x", "y")]).to_bytes())
    many = len(repeat_program(prog, 32, chain=[("x", "y")]).to_bytes())
    nregions = len(repeat_program(prog, 32, chain=[("x", "y")]).repeat.regions)
    assert many - one == nregions * 31 * 8


def test_bad_repeats_are_refused(layer):
    _, prog = layer
    with pytest.raises(RepeatError, match="no symbol 'nope'"):
        repeat_program(prog, 2, chain=[("nope", "y")])
    with pytest.raises(RepeatError, match="needs an input and an output"):
        repeat_program(prog, 2, chain=[("x", "k_new")])
    p = repeat_program(prog, 2, chain=[("x", "y")])
    r = p.repeat.regions[0]
    p.repeat = Repeat(2, (r, type(r)(r.lo, r.hi, r.kind, (0, 1 << 50))))
    with pytest.raises(ProgramError, match="outside DDR|overlap"):
        p.validate()
