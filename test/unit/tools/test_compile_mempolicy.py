"""numpy's huge-page advice is off while ``driver.compile`` / ``compile_least`` run and as
before after them (``m100/mempolicy.py``); the compile's program, certificate and dataflow
certificate are those of the old path (no context: numpy's advice left on)."""

from __future__ import annotations

import contextlib
import json

import pytest

from m100 import mempolicy
from m100.frontend import models
from m100.tools import driver

pytestmark = pytest.mark.skipif(mempolicy._set_advice is None,
                                reason="numpy can not set its advice")


@pytest.fixture
def advice():
    old = mempolicy._set_advice(True)
    mempolicy._set_advice(old)
    yield
    mempolicy._set_advice(old)


def _spy(monkeypatch, seen):
    load = driver.load_model

    def spy(src, ctx=None):
        seen.append(mempolicy.huge_page_advice())
        return load(src, ctx)

    monkeypatch.setattr(driver, "load_model", spy)


@pytest.mark.parametrize("before", [True, False])
def test_a_compile_has_the_advice_off_and_restores_it(advice, monkeypatch, before):
    seen: list = []
    _spy(monkeypatch, seen)
    mempolicy._set_advice(before)
    driver.compile(models.mlp(), machine="tiny")
    assert mempolicy.huge_page_advice() is before
    driver.compile_least([models.mlp(), models.mlp()], machine="tiny")
    assert mempolicy.huge_page_advice() is before
    assert seen == [False] * 3
    with pytest.raises(driver.DriverError):  # a failing compile restores it too
        driver.compile(models.mlp(), machine="tiny", sync_mode="nonesuch")
    assert mempolicy.huge_page_advice() is before


def test_a_compile_equals_the_old_path(advice, monkeypatch):
    a = driver.compile(models.conv_relu_maxpool(), machine="tiny")
    monkeypatch.setattr(driver, "small_pages", contextlib.nullcontext)
    mempolicy._set_advice(True)
    b = driver.compile(models.conv_relu_maxpool(), machine="tiny")
    assert a.program.to_bytes() == b.program.to_bytes()
    for x, y in ((a.certificate, b.certificate), (a.dataflow, b.dataflow)):
        assert json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)
