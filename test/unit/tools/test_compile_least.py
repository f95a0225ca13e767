"""``driver.compile_least`` and ``m100-pipeline``'s ``until`` / ``after`` (session 28, issue 13).

``m100 bench llm`` builds the W8A8 prefill layer in two forms that compute the same bits and keeps
the one whose plan predicts fewer cycles; ``compile_least`` lowers each only through
hbsm-allocate and finishes the chosen one. The oracle: each form compiled on its own by
``driver.compile`` (the whole pipeline, as before session 28) -- the same program bytes and
certificate, and the choice is the argmin of their ``predicted_cycles``."""

from __future__ import annotations

import json

import pytest

from m100.frontend import llm
from m100.passes.m100_pipeline import PipelineError
from m100.tools import driver

#: the bench's options of the W8A8 prefill layer (bench/llm.py PREFILL_SHARES, largest first,
#: tail prefetch)
OPTS = dict(machine="m100", prefetch_shares=(100, 90, 75), pack_largest_first=True,
            tail_prefetch=True)


def _forms():
    cfg = llm.scaled(llm.config("tiny"), heads=4, kv_heads=2)
    return [llm.build(cfg, "layer", "prefill", context=8, weights="shape", quant="w8a8",
                      o_quant=oq)[0] for oq in ("concat", "heads")]


def _same(a: driver.CompileResult, b: driver.CompileResult) -> None:
    assert a.program.to_bytes() == b.program.to_bytes()
    assert json.dumps(a.certificate, sort_keys=True) == json.dumps(b.certificate, sort_keys=True)
    assert json.dumps(a.dataflow, sort_keys=True) == json.dumps(b.dataflow, sort_keys=True)


@pytest.fixture(scope="module")
def whole():
    """Each form compiled whole by ``driver.compile`` (the oracle)."""
    models = _forms()
    return models, [driver.compile(m, **OPTS) for m in models]


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_compile_least_is_the_whole_compile_of_the_shorter_plan(whole, order):
    models, full = whole
    preds = [int(cr.program.metadata["predicted_cycles"]) for cr in full]
    assert preds[0] != preds[1]  # (else the choice is not tested)
    cr, i, got = driver.compile_least([models[k] for k in order], **OPTS)
    assert got == [preds[k] for k in order]
    want = min(order, key=lambda k: preds[k])
    assert order[i] == want
    _same(cr, full[want])
    assert list(cr.timings)[:2] == ["frontend", "m100-graph"] and "sync-insert" in cr.timings


def test_compile_least_keeps_the_first_on_a_tie(whole):
    models, full = whole
    cr, i, got = driver.compile_least([models[1], models[1]], **OPTS)
    assert i == 0 and got[0] == got[1]
    _same(cr, full[1])


@pytest.mark.parametrize("split", ["hbsm-allocate", "twu-materialize"])
def test_pipeline_halves_are_the_whole_pipeline(whole, split):
    models, full = whole
    opts = dict(OPTS)
    machine = opts.pop("machine")
    lw = driver._lower(models[0], machine, 0, "dataflow", clusters=0, strategy="auto", seed=0,
                       verbose=False, until=split, **opts)
    progs = [o for o in lw.module.walk() if o.name == "tpb.program"]
    assert len(progs) == 1 and progs[0].level.data != "resolved" and not lw.certs
    _same(driver._finish(lw, split), full[0])


@pytest.mark.parametrize("bad", ["m100-schedule", "m100-graph", "sync-insert", "nope"])
def test_pipeline_split_points_are_checked(bad):
    from m100.frontend.mlir_load import shared_context
    from m100.passes.m100_pipeline import M100Pipeline
    ctx = shared_context()
    module, _ = driver.load_model(_forms()[0], ctx)
    with pytest.raises(PipelineError, match="hbsm-allocate, twu-materialize"):
        M100Pipeline(machine="m100").run(ctx, module, until=bad)
    with pytest.raises(PipelineError, match="hbsm-allocate, twu-materialize"):
        M100Pipeline(machine="m100").run(ctx, module, after=bad)
    # ``after`` continues a module a run with ``until`` left: one without a program is refused
    with pytest.raises(PipelineError, match="has none"):
        M100Pipeline(machine="m100").run(ctx, module, after="hbsm-allocate")


def test_the_later_form_answers_shared_segments_from_the_earlier(whole, monkeypatch):
    """Session 29: ``compile_least``'s models share one table of isolated builds
    (``shared_costs.carried``). The second form's searches answer more candidates from stored
    builds than the same form lowered alone (``driver._lower`` outside any ``carried()``: a
    table of its own, as before session 29), and the program is each form's whole compile
    alone (the oracle of the tests above, which run with the table shared: both orders, a
    tie)."""
    from m100.passes.schedule import shared_costs
    made, starts = [], []
    init, lower = shared_costs.SharedCosts.__init__, driver._lower

    def spy_init(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    def spy_lower(*a, **k):
        starts.append(len(made))
        return lower(*a, **k)

    monkeypatch.setattr(shared_costs.SharedCosts, "__init__", spy_init)
    monkeypatch.setattr(driver, "_lower", spy_lower)
    models, full = whole
    cr, i, _ = driver.compile_least(models, **OPTS)
    _same(cr, full[i])
    assert len(starts) == 2
    shared = sum(sc.hits for sc in made[starts[1]:])
    made.clear()
    opts = dict(OPTS)
    machine = opts.pop("machine")
    lower(models[1], machine, 0, "dataflow", clusters=0, strategy="auto", seed=0, verbose=False,
          until=driver.LEAST_UNTIL, **opts)
    alone = sum(sc.hits for sc in made)
    assert shared > alone, (shared, alone)


def test_the_lowering_ends_with_one_program():
    """A module that holds two programs after its stages is refused, naming the count (the
    pipeline's end finds them with ``tpb_program.programs``, not xDSL's walk)."""
    from m100.dialects.tpb_program import ProgramOp
    from m100.frontend import models
    from m100.frontend.mlir_load import shared_context
    from m100.frontend.onnx_import import load_onnx
    from m100.passes.m100_pipeline import M100Pipeline

    ctx = shared_context()
    mod = load_onnx(models.mlp(), ctx)
    pipe = M100Pipeline(machine="tiny")
    pipe.run(ctx, mod, until="hbsm-allocate")
    prog = next(o for o in mod.walk() if isinstance(o, ProgramOp))
    prog.parent.add_op(prog.clone())
    with pytest.raises(PipelineError, match="expected one tpb.program after the lowering, "
                                            "found 2"):
        pipe.run(ctx, mod, after="hbsm-allocate")
