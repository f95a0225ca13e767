"""Per-head attention chains side by side (passes/schedule/side_by_side.py) on a small LLaMA
prefill layer: the windowed plan is predicted shorter than the one-after-the-other plan, and the
program computes what onnxruntime computes (the layout moves compute, never data paths)."""

import numpy as np
import onnxruntime as ort

from m100.frontend import llm
from m100.passes.schedule import side_by_side as sbs
from m100.tools import driver


def test_heads_side_by_side_shorter_and_same_values(monkeypatch):
    # 8 heads of 8 on the 2-TPB machine: each head's chain is found on both TPBs and laid
    # out on one TPB each, two heads at a time
    cfg = llm.scaled(llm.config("tiny"), hidden=64, heads=8, kv_heads=8, ffn=96)
    T = 32
    model, _ = llm.build(cfg, "layer", "prefill", context=T, batch=1, weights="random", seed=3)
    rng = np.random.default_rng(0)
    cos, sin = llm.rope_tables(cfg, list(range(T)))
    feed = {"x": rng.standard_normal((T, cfg.hidden)).astype(np.float32), "cos": cos,
            "sin": sin}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in model.graph.output], sess.run(None, feed)))
    monkeypatch.setattr(sbs, "WINDOWS", ())
    off = driver.compile(model, machine="tiny").program
    monkeypatch.setattr(sbs, "WINDOWS", (2,))
    on = driver.compile(model, machine="tiny").program
    assert int(on.metadata["predicted_cycles"]) < int(off.metadata["predicted_cycles"])
    got = driver.run(on, feed)
    assert got.ok
    for k, v in want.items():
        g = got.outputs[k].reshape(v.shape)
        assert np.allclose(g, v, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(v)))), k
