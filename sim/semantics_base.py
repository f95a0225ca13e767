"""What every instruction kind's executor shares: the :class:`Exec` interface (``reads`` /
``writes`` / ``run`` per block), operand :class:`Access` es, :class:`PendingWrite` s, block
chunks of a walk, the run-time fault :class:`SimError` and the floating-point warning context.
The kinds themselves: :mod:`.semantics_tcu`, :mod:`.semantics_cvu`, :mod:`.semantics_move`;
the overview and the registry: :mod:`.semantics`."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import numpy as np

from m100.errors import M100Error
from m100.targets.m100.isa import Instruction, Space, Walk

from .memory import Memory
from .twu import walk_block


#: True while a simulation runs under ``np.errstate(all="ignore")`` (:func:`quiet_run`): the
#: per-operation contexts of :func:`quiet` (a ContextVar set each) are then no-ops. Floating-point
#: flags never change values, only whether numpy warns.
_QUIET = False
_NULL = contextlib.nullcontext()


def quiet(**kw):
    """``np.errstate(**kw)`` (default all="ignore"), or nothing inside :func:`quiet_run`."""
    return _NULL if _QUIET else np.errstate(**(kw or {"all": "ignore"}))


@contextlib.contextmanager
def quiet_run():
    """No floating-point warnings for the whole block (one context for a whole simulation)."""
    global _QUIET
    prev = _QUIET
    with np.errstate(all="ignore"):
        _QUIET = True
        try:
            yield
        finally:
            _QUIET = prev


class SimError(M100Error):
    """A run-time fault of the simulated program (e.g. a CSU gather index out of range)."""


@dataclass
class Access:
    """Elements ``offsets`` (None: all) of ``walk``, in the space of TPB ``tpb``."""
    walk: Walk
    tpb: int
    offsets: np.ndarray | None = None

    def elem_offsets(self) -> np.ndarray:
        return self.walk.offsets() if self.offsets is None else self.offsets

    @property
    def size(self) -> int:
        """Elements accessed."""
        return self.walk.num_elements if self.offsets is None else self.offsets.size


@dataclass
class PendingWrite:
    access: Access
    values: np.ndarray


def _rows(walk: Walk, shape0: int, blocks: int, b: int) -> np.ndarray | None:
    """Element offsets of block ``b`` when the walk's logical leading dim ``shape0`` is split."""
    if blocks == 1:
        return None
    off = walk_offsets(walk)
    per = off.size // blocks
    return off[b * per:(b + 1) * per]


@functools.lru_cache(maxsize=256)
def walk_offsets(walk: Walk) -> np.ndarray:
    """``walk.offsets()``, computed once per walk (read-only: shared by every block and run)."""
    off = walk.offsets()
    off.flags.writeable = False
    return off


def _block(w: Walk, tpb: int, blocks: int, b: int) -> Access:
    """Block ``b`` of ``blocks`` equal chunks of the beats of ``w``: a sub-walk when the chunk is a
    box (reads/writes become strided views), else the chunk's element offsets."""
    if blocks == 1:
        return Access(w, tpb)
    sub = walk_block(w, blocks, b)
    if sub is not None:
        return Access(sub, tpb)
    return Access(w, tpb, _rows(w, 0, blocks, b))


def _tpb_of(w: Walk) -> int:
    return w.tpb if w.space is Space.HBSM else 0


class Exec:
    """Base executor: subclasses define reads/writes/run for one instruction kind."""

    def __init__(self, inst: Instruction, mem: Memory | None):
        self.inst = inst
        self.mem = mem
        self.blocks = inst.sync.blocks

    def reads(self, b: int) -> list[Access]:
        raise NotImplementedError

    def writes(self, b: int) -> list[Access]:
        raise NotImplementedError

    def run(self, b: int) -> list[PendingWrite]:
        raise NotImplementedError

    def run_free(self, b: int):
        """``run(b)``, for calls in the order of a schedule whose run found no race
        (``replay.calls`` with ``race_free``): no access of another block meets this block's
        bytes between this call and its ``apply`` (they would be unordered by the counters: a
        race), so an executor may write its outputs here already and return what makes its
        ``apply`` write nothing (``CopyExec.run_free``). Here: ``run``."""
        return self.run(b)

    def read(self, a: Access, copy: bool = True) -> np.ndarray:
        """The values of ``a``; ``copy=False``: maybe a read-only view of the memory, for values
        that are computed with at once (never for values returned as a pending write)."""
        assert self.mem is not None
        return self.mem.read_walk(a.walk, tpb=a.tpb, offsets=a.offsets, copy=copy)

    def apply(self, writes: list[PendingWrite]) -> None:
        assert self.mem is not None
        for w in writes:
            self.mem.write_walk(w.access.walk, w.values, tpb=w.access.tpb, offsets=w.access.offsets)
