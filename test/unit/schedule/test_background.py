"""Transposes into outputs nothing reads, built last in chunks (``background.py``; LLaMA prefill's
V -> KV-cache ``[kvh, T, hd]`` copy).

A projection ``h = x @ w`` read by a second projection and, reshaped to heads, transposed into
an output ``vt [1, heads, T, hd]`` that no op reads (the form of LLaMA's V: the heads read ``v``,
the cache output is its transpose). The refinement is forced to keep its trial (its whole-plan
comparison is what decides on real graphs) and the test checks: the transpose's segment is the
last, its plan tasks and the program's DMAs into ``vt`` are one per chunk (ranges of the heads
dimension), and ``vt`` holds the bits of the program's ``h`` (also an output) transposed and is
numpy's projection -- a chunk's source offset wrong by a head gives other values; the
unread-output transpose is the only candidate.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.passes.schedule import background, placement

T, K, H, D = 64, 128, 4, 32


def _model(rng):
    w = (rng.standard_normal((K, H * D)) * 0.1).astype(np.float16)
    w2 = (rng.standard_normal((H * D, H * D)) * 0.1).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["hr"]),
             helper.make_node("Transpose", ["hr"], ["vt"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["h", "w2"], ["y"])]
    g = helper.make_graph(
        nodes, "unread_transpose", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [T, K])],
        [helper.make_tensor_value_info("vt", TensorProto.FLOAT16, [1, H, T, D]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT16, [T, H * D]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT16, [T, H * D])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(np.asarray([1, T, H, D], np.int64), "shape")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m, w


@pytest.mark.parametrize("chunks", [4, 3])
def test_unread_transpose_built_last_in_chunks(chunks, monkeypatch):
    from m100.targets.m100.isa import Dma
    from m100.tools import driver
    rng = np.random.default_rng(chunks)
    model, w = _model(rng)
    seen = []
    orig = background.background

    def spy(s, segs, tl, keep):
        cands = background.candidates(s, segs)
        assert len(cands) == 1 and "perm" in s.ops[segs[cands[0]].stages[0].op].attrs
        # keep the trial whatever it costs (the whole plan decides on real graphs)
        monkeypatch.setattr(s.sched, "shorter", lambda trial, ref, keep, **kw: s.sched.build(
            trial, keep=keep, **kw))
        out = orig(s, segs, tl, keep)
        seen.append((s, cands[0], segs, out))
        return out
    monkeypatch.setattr(background, "CHUNKS", (chunks,))
    monkeypatch.setattr(placement, "background", spy)
    cr = driver.compile(model, machine="m100")
    (s, i, before, (segs, tl)), = seen
    name = before[i].stages[0].op
    assert segs[-1] == before[i] and segs[:-1] == before[:i] + before[i + 1:]
    assert s.g.chunks == {name: chunks}
    tasks = [t for t in tl.tasks if t.op == name]
    assert len(tasks) == chunks
    assert sum(t.nbytes for t in tasks) == H * T * D * 2
    vt = next(sym for sym in cr.program.symbols if sym.name == "vt")
    into = [i for _, i in cr.program.instructions() if isinstance(i, Dma) and
            i.dst.space is vt.space and vt.address <= i.dst.base < vt.address + vt.nbytes]
    assert len(into) == chunks
    x = (rng.standard_normal((T, K)) * 2).astype(np.float16)
    res = driver.run(cr.program, {"x": x})
    assert res.ok and not res.reports
    h = (x.astype(np.float32) @ w.astype(np.float32))
    want = h.reshape(1, T, H, D).transpose(0, 2, 1, 3)
    got = res.outputs["vt"].astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-2)
    # a pure copy: exactly the bits of the program's own h, head by head
    np.testing.assert_array_equal(res.outputs["vt"], res.outputs["h"].reshape(1, T, H, D)
                                  .transpose(0, 2, 1, 3))
