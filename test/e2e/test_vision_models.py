"""The vision model families of issue 12 pass ``m100 check`` (compile, interpreter, compare with
onnxruntime) on m100: small thin versions (``frontend/vision_models.py`` ``FAMILIES``, 32-64 px).
The YOLO-style detector runs in the default tier, the rest in the slow tier; full-size figures are
in docs/e2e.md (``bench/vision_models.py``)."""

from __future__ import annotations

import pytest

from m100.frontend import vision_models
from m100.tools import driver

FAST = {"yolo"}


def _params():
    for name in vision_models.FAMILIES:
        marks = [] if name in FAST else [pytest.mark.slow]
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_params()))
def test_vision_family_small(name):
    ck = driver.check(vision_models.build(name, "small"), machine="m100", tpbs=8)
    assert ck.result.reports == [] and ck.problems == [], ck.problems[:3]
    assert ck.passed, ck.summary()
    units = {i.executor[0].name for _, i in ck.compile.program.instructions()}
    assert "TCU" in units
