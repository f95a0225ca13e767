"""The pool of the data spaces' mappings (``sim/mempool.py``): a mapping taken from the pool
reads as zero everywhere, as a fresh anonymous mapping does, whatever the space that held it
before wrote, read or viewed; a mapping still viewed after its space went is never reused; the
resident runs ``mincore`` reports cover every page written; the pool keeps at most its count of
one size; whole runs of a program with the pool equal runs with a fresh mapping per space, run
after run."""

import mmap
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.sim import mempool
from m100.sim.memory import FlatBytes

pytestmark = pytest.mark.skipif(mempool._MINCORE is None, reason="no mincore(2) here")

PAGE = mempool.PAGE
SIZE = 37 * PAGE + 123  # (not a whole number of pages)
op = st.tuples(st.sampled_from(["write", "read", "view_write"]), st.integers(0, SIZE - 1),
               st.integers(1, 3 * PAGE), st.integers(1, 255))


@pytest.fixture(autouse=True)
def _empty_pool(monkeypatch):
    monkeypatch.setattr(mempool, "_free", {})
    monkeypatch.setattr(mempool, "POOL", True)


@settings(max_examples=60, deadline=None)
@given(st.lists(op, min_size=1, max_size=20), st.sampled_from([None, SIZE, SIZE + 1]))
def test_a_pooled_mapping_reads_as_zero(ops, drop_whole):
    """(``drop_whole``: mappings this big are dropped whole when taken, not scanned: SIZE
    drops this one, SIZE + 1 and None scan it.)"""
    mempool._free.clear()
    old_drop, mempool.DROP_WHOLE = mempool.DROP_WHOLE, drop_whole
    try:
        _pooled_reads_as_zero(ops)
    finally:
        mempool.DROP_WHOLE = old_drop


def _pooled_reads_as_zero(ops):
    fb = FlatBytes(SIZE)
    addr = fb.buf.ctypes.data
    written = set()
    for kind, lo, n, val in ops:
        hi = min(SIZE, lo + n)
        if kind == "write":
            fb.write_range(lo, np.full(hi - lo, val, dtype=np.uint8))
        elif kind == "read":  # (maps the zero page: resident, never written)
            fb.read_range(lo, hi)
            continue
        else:
            fb.view_range(lo, hi).view(np.uint8)[...] = val  # (a view written, then dropped)
        written.update(range(lo // PAGE, (hi - 1) // PAGE + 1))
    runs = mempool.resident_runs(fb.buf)
    resident = {p for a, b in runs.tolist() for p in range(a, b)}
    assert written <= resident
    del fb
    assert len(mempool._free[SIZE]) == 1  # given back as it is (zeroed when taken)
    again = FlatBytes(SIZE)
    assert again.buf.ctypes.data == addr  # the same mapping, from the pool
    assert again.buf.size == SIZE and not again.buf.any()  # zero, as a fresh mapping


def test_a_mapping_viewed_after_its_space_went_is_not_reused():
    fb = FlatBytes(SIZE)
    fb.write_range(100, np.arange(50, dtype=np.uint8))
    view = fb.view_range(100, 150)
    del fb
    assert not mempool._free.get(SIZE)
    other = FlatBytes(SIZE)
    other.write_range(0, np.full(SIZE, 7, dtype=np.uint8))
    assert view.tobytes() == np.arange(50, dtype=np.uint8).tobytes()
    # without the view, the mapping goes back
    del view
    del other
    assert len(mempool._free[SIZE]) == 1


def test_a_page_not_reported_resident_reads_as_zero(monkeypatch):
    """A page the kernel swapped out is not resident for ``mincore`` but keeps its bytes: the
    pool must not hand it out with them. Simulated by reporting every written page but one."""
    fb = FlatBytes(SIZE)
    fb.write_range(0, np.full(6 * PAGE, 9, dtype=np.uint8))  # pages 0-5 written
    real = mempool.resident_runs
    monkeypatch.setattr(mempool, "resident_runs",  # page 3 "swapped out"
                        lambda buf: np.array([[0, 3], [4, 6]], dtype=np.int64)
                        if real(buf).size else real(buf))
    addr = fb.buf.ctypes.data
    del fb
    again = FlatBytes(SIZE)
    assert again.buf.ctypes.data == addr  # the same mapping, from the pool
    assert not again.buf.any()


def test_the_pool_keeps_at_most_its_count_per_size(monkeypatch):
    monkeypatch.setattr(mempool, "MAX_PER_SIZE", 2)
    spaces = [FlatBytes(SIZE) for _ in range(3)]
    for fb in spaces:
        fb.write_range(0, np.ones(2 * PAGE, dtype=np.uint8))
    del fb
    spaces.clear()
    assert len(mempool._free[SIZE]) == 2
    again = [FlatBytes(SIZE) for _ in range(3)]  # two from the pool (zeroed), one fresh
    assert not mempool._free[SIZE] and not any(fb.buf.any() for fb in again)


def test_whole_runs_with_the_pool_equal_fresh_mappings(monkeypatch):
    """A compiled model run again and again (each run's spaces taken from the pool the last
    run's filled) gives the outputs, stats and reports of runs on fresh mappings."""
    from m100.frontend import models
    from m100.tools import driver

    cr = driver.compile(models.conv_relu_maxpool(), machine="tiny")
    results = {}
    for pool in (False, True):
        monkeypatch.setattr(mempool, "POOL", pool)
        got = []
        for seed in (1, 2, 1):
            inputs = driver.random_inputs(cr.program, seed)
            for mode in ("functional", "full"):
                r = driver.run(cr.program, inputs, mode=mode)
                got.append(({k: v.tobytes() for k, v in r.outputs.items()}, r.stats,
                            [str(x) for x in r.reports]))
        results[pool] = got
    assert mempool._free  # the pooled runs did take and give mappings
    assert results[True] == results[False]


def _advised_huge(a: np.ndarray) -> bool:
    """Whether the kernel holds the mapping under ``a``'s middle byte as MADV_HUGEPAGE
    (``/proc/self/smaps``' ``hg`` flag; as test_mempolicy.py reads it)."""
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="smaps is Linux's")
def test_mincores_vector_has_no_huge_page_advice(monkeypatch):
    """``resident_runs``' vector (16 MB for a 64 GiB DDR; session 36) is a mapping of its own
    that the kernel does not hold as MADV_HUGEPAGE, with numpy's advice on: a 2 MB page zeroed
    at mincore's first write cost up to ~0.18 CPU-s of system time. Its resident runs equal the
    pages written (brute force: the pages of the bytes set here)."""
    from m100 import mempolicy

    monkeypatch.setattr(mempool, "_vecs", {})
    old = mempolicy._set_advice(True) if mempolicy._set_advice is not None else None
    try:
        size = 64 << 30
        buf = np.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | 0x4000), np.uint8)
        at = [3, 5 * PAGE + 1, (1 << 33) + 7, size - 1]
        for a in at:
            buf[a] = 1
        runs = mempool.resident_runs(buf)
        assert sorted({a // PAGE for a in at}) == [a for a, b in runs.tolist() for a in range(a, b)]
        (vec,) = mempool._vecs.values()
        assert vec.nbytes >= 4 << 20 and not _advised_huge(vec)
        if mempolicy._set_advice is not None:  # (numpy's own array of that size would be)
            assert _advised_huge(np.empty(vec.nbytes, np.uint8))
    finally:
        if mempolicy._set_advice is not None:
            mempolicy._set_advice(old)


def test_a_big_mapping_is_dropped_whole_not_scanned(monkeypatch):
    """A pooled mapping of DROP_WHOLE bytes or more (a 64 GiB DDR; session 36) is set to zero
    by one MADV_DONTNEED, without mincore's scan: it reads zero where it was written, also
    where a file was mapped into it, and no page of it is resident after the take. Below the
    size the scan runs as before."""
    import os
    import tempfile

    size = 64 << 30
    scans = []
    orig = mempool.resident_runs

    def spy(buf):
        scans.append(buf.size)
        return orig(buf)

    monkeypatch.setattr(mempool, "resident_runs", spy)
    monkeypatch.setattr(mempool, "_files", {})
    assert mempool.DROP_WHOLE is not None and mempool.DROP_WHOLE <= size
    fb = FlatBytes(size)
    addr = fb.buf.ctypes.data
    at = [0, 5 * PAGE + 3, (1 << 34) + 11, size - 1]
    for a in at:
        fb.write_range(a, np.array([9], np.uint8))
    with tempfile.TemporaryFile() as f:
        f.write(bytes(range(256)) * (4 * PAGE // 256))
        f.flush()
        assert mempool.map_file(fb.buf, 8 * PAGE, 12 * PAGE, f.fileno(), 0)
    assert fb.buf[8 * PAGE + 1] == 1
    del fb
    assert len(mempool._free[size]) == 1
    again = FlatBytes(size)
    assert again.buf.ctypes.data == addr and size not in scans
    runs = orig(again.buf)
    assert runs.shape[0] == 0  # (nothing resident: every page dropped)
    assert all(again.buf[a] == 0 for a in at) and not again.buf[:16 * PAGE].any()
    del again
    monkeypatch.setattr(mempool, "DROP_WHOLE", size + 1)
    FlatBytes(size)
    assert scans == [size]
