"""``m100 check`` (onnxruntime oracle, race/deadlock checks) on the transformer models of issue 12,
built with onnx.helper (``frontend/transformer_models.py``): a BERT encoder layer and a small ViT;
ViT-tiny itself (224x224, 12 layers) is in ``bench/e2e_bench.py --big``."""

from __future__ import annotations

import pytest

from m100.frontend import transformer_models as tm
from m100.tools import driver


def _check(src, machine, tpbs, mode="dataflow"):
    ck = driver.check(src, machine=machine, tpbs=tpbs, sync_mode=mode)
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
    return ck


@pytest.mark.parametrize("mode", ["dataflow", pytest.param("barrier-all", marks=pytest.mark.slow)])
def test_bert_layer(mode):
    ck = _check(tm.bert_layer(), "m100", 8, mode)
    tcu = {i.executor[1] for _, i in ck.compile.program.instructions() if i.executor[0].name == "TCU"}
    assert len(tcu) > 1  # the linears are spread over several TPBs


@pytest.mark.slow  # ~30 s on 2 loaded cores
def test_bert_layer_batch2():
    _check(tm.bert_layer(batch=2, seq=8), "m100", 8)


@pytest.mark.slow
def test_vit_small():
    _check(tm.vit(), "m100", 8)
