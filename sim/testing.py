"""Small helpers for tests and notebooks: build HBSM walks, stage data, run, read back."""

from __future__ import annotations

import numpy as np

from m100.targets.m100.isa import DType, Space, Walk
from m100.targets.m100.machine import get_machine

from .simulator import Result, Simulator


def hb(tpb: int, base: int, dtype: DType, shape, strides=None, offset: int = 0) -> Walk:
    """A row-major (or ``strides``-strided, in elements) walk in the HBSM of TPB ``tpb``."""
    return Walk.strided(Space.HBSM, tpb, base, DType(dtype), tuple(shape), strides, offset)


def run(insts, data=(), reads=(), machine="tiny", **kw) -> tuple[Result, list[np.ndarray]]:
    """Write ``data`` [(walk, values)], run ``insts``, return (result, values read at ``reads``)."""
    sim = Simulator(list(insts), get_machine(machine), **kw)
    for w, v in data:
        sim.write(w, np.asarray(v).reshape(-1))
    res = sim.run()
    outs = [sim.read(w) for w in reads] if sim.memory is not None else []
    return res, outs
