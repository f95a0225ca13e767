"""Tensor-Walker address streams: element offsets, contiguity, and HBSM bank-access histograms.

A walk's beats are ``Walk.offsets()`` (levels broadcast into one index array, never a Python loop per
element). For timing, :func:`bank_accesses` counts the HBSM bank accesses of a walk's address stream
*analytically* from its levels, so it also works in ``--timing-only`` mode on walks of billions of
beats:

* the stream is cut into *runs*: if the innermost (non-trivial) level's stride is at most one bank
  granule (``hbsm_bank_width`` bytes), each pass of that level is one run of bytes; consecutive beats
  falling in the same granule coalesce into one access (a 32 B port reads a whole granule);
  otherwise every beat is its own access;
* the distribution of run start addresses modulo one bank sweep (``banks * width`` bytes) is the
  circular convolution of every outer level's residue histogram (FFT over 1024 residues);
* each run start residue contributes the granules its run covers, round-robin over the banks.

This is exact for the usual contiguous and strided walks (every test in ``test/unit/sim``), and an
approximation for i4 walks with odd strides.
"""

from __future__ import annotations

import functools

import numpy as np

from m100.targets.m100.isa import Walk
from m100.targets.m100.machine import Machine


def element_offsets(walk: Walk) -> np.ndarray:
    return walk.offsets()


def contiguous_start(walk: Walk) -> int | None:
    """The first element offset if the walk's beats are ``start, start+1, ...`` (else None)."""
    expect = 1
    start = 0
    for lv in reversed(walk.levels):
        c = lv.count
        start += lv.initial
        if c == 1:
            continue
        if lv.step != expect:
            return None
        expect *= c
    return start


def _run_structure(walk: Walk, width: int) -> tuple[int, list[np.ndarray], float]:
    """(start byte offset, residue arrays of the outer levels in bytes, run length in bytes)."""
    bits = walk.dtype.bits
    esize = max(bits / 8, 1 / 2)
    start = walk.base * 8  # in bits
    levels = [lv for lv in walk.levels]
    nontriv = [lv for lv in levels if lv.count > 1]
    for lv in levels:
        if lv.count == 1:
            start += lv.initial * bits
    run_bytes = max(esize, 1.0)
    outer = nontriv
    if nontriv:
        inner = nontriv[-1]
        stride_b = abs(inner.step) * bits / 8
        if inner.step == 0:  # a repeat level: the same element every beat, one access per pass
            start += inner.initial * bits
            run_bytes = max(esize, 1.0)
            outer = nontriv[:-1]
        elif stride_b <= width:
            lo = min(inner.initial, inner.last)
            start += lo * bits
            run_bytes = (inner.count - 1) * stride_b + max(esize, 1.0)
            outer = nontriv[:-1]
    arrays = [(lv.values() * bits) for lv in outer]
    return start // 8, [a // 8 for a in arrays], run_bytes


@functools.lru_cache(maxsize=4096)
def _pattern(run_bytes: int, width: int, banks: int) -> np.ndarray:
    """[sweep, banks] accesses made by a run of ``run_bytes`` starting at each residue."""
    sweep = width * banks
    s = np.arange(sweep, dtype=np.int64)
    g0 = s // width
    g1 = (s + run_bytes - 1) // width
    n = g1 - g0 + 1
    full, part = n // banks, n % banks
    rel = (np.arange(banks)[None, :] - g0[:, None]) % banks
    return full[:, None] + (rel < part[:, None])


def _walk_bank_accesses(walk: Walk, width: int, banks: int) -> np.ndarray:
    sweep = width * banks
    start, arrays, run_bytes = _run_structure(walk, width)
    hist = np.zeros(sweep, dtype=np.float64)
    hist[start % sweep] = 1.0
    spec = None
    for a in arrays:
        h = np.bincount(a % sweep, minlength=sweep).astype(np.float64)
        f = np.fft.rfft(h)
        spec = f if spec is None else spec * f
    if spec is not None:
        hist = np.rint(np.fft.irfft(np.fft.rfft(hist) * spec, n=sweep))
    pat = _pattern(int(np.ceil(run_bytes)), width, banks)
    return hist @ pat


@functools.lru_cache(maxsize=8192)
def _cached(walk: Walk, width: int, banks: int) -> tuple[float, ...]:
    return tuple(_walk_bank_accesses(walk, width, banks).tolist())


def bank_accesses(walk: Walk, machine: Machine) -> np.ndarray:
    """HBSM bank accesses (granule reads/writes) per bank for the whole walk, shape [banks]."""
    return np.array(_cached(walk, machine.hbsm_bank_width, machine.hbsm_banks))


def block_slice(n_total: int, blocks: int, b: int) -> slice:
    """The element range of block ``b`` of a flat sequence split into equal blocks."""
    per = n_total // blocks
    return slice(b * per, (b + 1) * per)


def sram_bank_accesses(walk: Walk, machine: Machine) -> np.ndarray:
    """CCB SRAM interleave granules touched per bank (``ccb_sram_interleave`` bytes round-robin
    over ``ccb_sram_banks``), shape [ccb_sram_banks]."""
    return np.array(_cached(walk, machine.ccb_sram_interleave, machine.ccb_sram_banks))
