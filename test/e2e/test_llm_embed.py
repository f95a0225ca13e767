"""The embedding lookup of the LLaMA step (``llm.build(part='embed')``, issue 13): an ONNX Gather of
token-id rows of the [vocab, hidden] table, compiled to one CSU gather. Oracles: onnxruntime (the
rows, bit for bit) and the CSU charge written from its definition (the routine reads the N rows it
selects, not the table: ``csu_overhead + (ids + 2 N D e) / csu_bytes_per_cycle``)."""

from __future__ import annotations

import numpy as np
import pytest

from m100.frontend import llm
from m100.frontend.ort_session import ort_session
from m100.sim.simulator import Simulator
from m100.targets.m100.isa import CsuCall, Routine
from m100.targets.m100.machine import get_machine
from m100.tools import driver


@pytest.mark.parametrize("quant,batch", [("none", 1), ("w4a16", 3), ("w8a8", 2)])
def test_embedding_rows_match_onnxruntime(quant, batch):
    m, _ = llm.build("tiny", "embed", "decode", batch=batch, quant=quant, seed=3)
    cr = driver.compile(m, machine="tiny")
    ids = np.random.default_rng(batch).integers(0, llm.config("tiny").vocab, batch, np.int64)
    ids[0] = llm.config("tiny").vocab - 1  # the last row
    got = driver.run(cr.program, {"ids": ids}).outputs["x"]
    want = ort_session(m).run(None, {"ids": ids})[0]
    assert np.array_equal(got.reshape(want.shape), want)


def test_a_7b_embedding_reads_its_rows_not_the_table():
    """LLaMA2-7B's 32000 x 4096 f16 table (262 MB) by shape: the CSU gather of one decode token
    is charged its 8 KB row (it was charged the whole table: 16.4 M cycles, 0.33 s a token), and
    the plan predicts the same within 15 %."""
    cfg = llm.config("llama2-7b")
    m100 = get_machine("m100")
    model, _ = llm.build(cfg, "embed", "decode", weights="shape", quant="w4a16")
    prog = driver.compile(model, machine="m100").program
    (call,) = [i for s in prog.streams.values() for i in s if isinstance(i, CsuCall)]
    assert call.routine is Routine.GATHER and tuple(call.params) == (cfg.vocab, cfg.hidden, 1)
    row = 2 * cfg.hidden  # f16
    csu = m100.csu_overhead_cycles + (4 + 2 * row) / m100.csu_bytes_per_cycle  # i32 id, row in+out
    sim = Simulator(prog, mode="timing", check_races=False).run({}).stats["total_cycles"]
    whole_table = cfg.vocab * row / m100.csu_bytes_per_cycle
    assert csu <= sim < csu + 2000 < whole_table  # + the id's load and cast (a few DMAs)
    pred = int(prog.metadata["predicted_cycles"])
    assert abs(pred / sim - 1) <= 0.15, (pred, sim)
