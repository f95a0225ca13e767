"""numpy's huge-page advice is off while the interpreter runs and as before after it
(``m100/mempolicy.py``, ``Simulator.run``): read from numpy and from the kernel's own record of
a mapping's advice (``/proc/self/smaps``' ``hg`` flag); a run's results are those of a run with
numpy's advice left alone (the old path: no context)."""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest

from m100 import mempolicy
from m100.frontend import models
from m100.sim import simulator
from m100.targets.m100.program import Program
from m100.tools import driver

needs_advice = pytest.mark.skipif(mempolicy._set_advice is None, reason="numpy can not set its advice")


@pytest.fixture(scope="module")
def mlp():
    cr = driver.compile(models.mlp(), machine="tiny")
    return cr.program, driver.random_inputs(cr.program, 2)


@pytest.fixture
def advice():
    """Restores numpy's advice as the test found it."""
    old = mempolicy._set_advice(True)
    mempolicy._set_advice(old)
    yield
    mempolicy._set_advice(old)


def _key(res):
    return ({k: v.tobytes() for k, v in res.outputs.items()}, res.stats,
            [str(r) for r in res.reports], [(r.start, r.end, r.blocks) for r in res.records])


def _advised_huge(a: np.ndarray) -> bool:
    """Whether the kernel holds the mapping under ``a``'s middle byte as MADV_HUGEPAGE (numpy
    advises from the page after the allocation's first byte)."""
    addr = a.ctypes.data + a.nbytes // 2
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and ":" not in head:  # a mapping's first line: "lo-hi perms ..."
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return "hg" in line.split()[1:]
    raise AssertionError("no mapping holds the array")


@needs_advice
@pytest.mark.parametrize("before", [True, False])
def test_the_context_turns_the_advice_off_and_restores_it(advice, before):
    mempolicy._set_advice(before)
    assert mempolicy.huge_page_advice() is before
    with mempolicy.small_pages():
        assert mempolicy.huge_page_advice() is False
        with mempolicy.small_pages():  # (nested)
            assert mempolicy.huge_page_advice() is False
        assert mempolicy.huge_page_advice() is False
    assert mempolicy.huge_page_advice() is before
    with pytest.raises(KeyError), mempolicy.small_pages():
        raise KeyError
    assert mempolicy.huge_page_advice() is before


@needs_advice
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="smaps is Linux's")
def test_the_kernel_sees_no_huge_page_advice_inside(advice):
    n = 64 << 20  # above glibc's largest mmap threshold: a mapping of its own
    mempolicy._set_advice(True)
    with mempolicy.small_pages():
        inside = np.empty(n, np.uint8)
    outside = np.empty(n, np.uint8)
    assert not _advised_huge(inside)
    assert _advised_huge(outside)  # (numpy's advice does reach the kernel here)


@needs_advice
@pytest.mark.parametrize("before", [True, False])
def test_a_run_has_the_advice_off_and_restores_it(mlp, advice, monkeypatch, before):
    program, inputs = mlp
    seen = []
    run = simulator.Simulator._run

    def spy(self, inp):
        seen.append(mempolicy.huge_page_advice())
        return run(self, inp)

    monkeypatch.setattr(simulator.Simulator, "_run", spy)
    mempolicy._set_advice(before)
    fresh = Program.from_bytes(program.to_bytes())
    for mode in ("functional", "full", "functional", "timing"):  # first runs, then replays
        driver.run(fresh, inputs, mode=mode)
        assert mempolicy.huge_page_advice() is before
    assert seen == [False] * 4

    def boom(self, inp):
        raise RuntimeError("boom")

    monkeypatch.setattr(simulator.Simulator, "_run", boom)
    with pytest.raises(RuntimeError):
        driver.run(fresh, inputs, mode="functional")
    assert mempolicy.huge_page_advice() is before


@pytest.mark.parametrize("mode", ["functional", "full", "timing"])
def test_a_run_equals_a_run_with_numpys_advice_left_alone(mlp, advice, monkeypatch, mode):
    program, inputs = mlp
    data = program.to_bytes()
    a_prog, b_prog = Program.from_bytes(data), Program.from_bytes(data)
    a = [_key(driver.run(a_prog, inputs, mode=mode)) for _ in range(2)]  # a first run, a replay
    monkeypatch.setattr(simulator, "small_pages", contextlib.nullcontext)  # the old path
    if mempolicy._set_advice is not None:
        mempolicy._set_advice(True)
    b = [_key(driver.run(b_prog, inputs, mode=mode)) for _ in range(2)]
    assert a == b
