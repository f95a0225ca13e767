"""The graph-building state of one :func:`~.driver.from_module` walk (split out of ``from_ir.py``).

A :class:`Builder` holds what the walk over the function's ops has learned so far: the
scheduler graph being built, each op's lowering facts, constant data, the SSA value -> tensor name
map and the side tables that let a later op fold an earlier one (constants, fills, pads folded
into a conv/pool, runtime biases, fused-epilogue groups, idiom members, sort iotas). The per-op
handlers in :mod:`.movement`, :mod:`.contraction`, :mod:`.cvu` and :mod:`.csu` read and extend it.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue

from m100.passes.graph.common import describe_op

from ..graph import Op, OpGraph, ScheduleError, Tensor
from ..ir_facts import Lowering, _dtype, _shape, narrow_const
from ..reduce_walk import Walk


class Builder:
    """Mutable state of one function's translation into an :class:`OpGraph`."""

    def __init__(self, max_cvu_stages: int, tcu_post_stages: int = 8):
        self.max_cvu_stages = max_cvu_stages
        self.tcu_post_stages = tcu_post_stages  # the machine's (``from_ir.tcu_post``)
        self.g = OpGraph()
        self.low: dict[str, Lowering] = {}
        self.data: dict[str, np.ndarray] = {}
        self.names: dict[SSAValue, str] = {}
        self._counter = 0  # tensor names t<n> / c<n>
        self._idx = 0  # op names <kind><n>
        self.consts: dict[SSAValue, np.ndarray] = {}  # (or ("bias", vector, source) tuples)
        self.fills: dict[SSAValue, float] = {}  # linalg.fill results (scalar fill value)
        self.pad_fold: dict[SSAValue, tuple[SSAValue, list[int], list[int], float]] = {}
        self.runtime_bias: dict[SSAValue, SSAValue] = {}  # broadcast result -> runtime [F] vector
        self.group_out: dict[int, str] = {}  # contraction group -> output tensor
        self.group_op: dict[int, Op] = {}
        self.idiom_members: dict[int, list[Operation]] = {}
        # an add read only by a softmax group (the attention's mask add): lowered as the first
        # stage of the group's CVU op (``cvu.softmax_addend``), so its result has no tensor
        self.softmax_adds: dict[SSAValue, Operation] = {}
        # (rows, cols, k, dtype) -> the column / row iota tensors of a computed band mask (one pair for
        # all the heads: cvu._softmax_with_add)
        self.band_iotas: dict[tuple[int, int, int, str], list[str]] = {}
        # softmax op -> (v, k) of its computed band mask (``np.triu(full(v), k)``, the causal
        # mask): the candidates of ``causal.find_causal``
        self.band_softmax: dict[str, tuple[float, int]] = {}
        # ids of ops an earlier op's CVU op computes (a silu group's tail: ``silu.silu_tail``);
        # the walk skips them
        self.absorbed: set[int] = set()
        # id(generic) -> {input i: (input k, half)}: input i is input k with the halves of its
        # last dim swapped, read from k's HBSM box (``rotated.find_rotated_reads``)
        self.rotated: dict[int, dict[int, tuple[int, int]]] = {}
        self.iotas: dict[SSAValue, int] = {}  # index iotas feeding a tm_tensor.sort: the dimension
        self.outputs: list[str] = []
        self.walk = Walk(self.add_t, self.tname, self.const_array, self.consts)

    # -- names ---------------------------------------------------------------------------------
    def next_name(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def op_name(self, kind: str) -> str:
        self._idx += 1
        return f"{kind}{self._idx}"

    def tname(self, v: SSAValue) -> str:
        if v not in self.names:
            raise ScheduleError(f"value {v.name_hint or v} is used but was not produced by a "
                                "supported op")
        return self.names[v]

    def value(self, v: SSAValue) -> str:
        """The tensor of ``v``: its constant made a weight tensor, else the tensor produced for it."""
        return self.const_tensor(v, self.consts[v]) if v in self.consts else self.tname(v)

    # -- tensors -------------------------------------------------------------------------------
    def new_tensor(self, v: SSAValue, kind: str = "act", prefix: str = "t") -> str:
        n = self.next_name(prefix)
        self.g.add_tensor(Tensor(n, _shape(v), _dtype(v.type), kind))
        self.names[v] = n
        return n

    def const_tensor(self, v: SSAValue, arr: np.ndarray) -> str:
        if v in self.names:
            return self.names[v]
        n = self.next_name("c")
        self.g.add_tensor(Tensor(n, tuple(arr.shape), _dtype(v.type), "weight"))
        self.data[n] = narrow_const(arr, v.type, describe_op(v.owner)
                                    if isinstance(v.owner, Operation) else n)
        self.names[v] = n
        return n

    def const_array(self, arr: np.ndarray, dt: str) -> str:
        """A new weight tensor holding ``arr`` as is (no IR value of its own)."""
        n = self.next_name("c")
        self.g.add_tensor(Tensor(n, tuple(arr.shape), dt, "weight"))
        self.data[n] = arr
        return n

    # -- ops -----------------------------------------------------------------------------------
    def add(self, kind: str, unit: str, ins: list[str], out_v: SSAValue, attrs: dict,
            lw: Lowering, ir_op: Operation) -> Op:
        name = self.op_name(kind)
        out = self.new_tensor(out_v)
        op = Op(name, unit, tuple(ins), (out,), attrs, loc=describe_op(ir_op))
        self.g.add_op(op)
        self.low[op.name] = lw
        return op

    def add_t(self, kind: str, unit: str, ins: list[str], shape: tuple[int, ...], dtype: str,
              attrs: dict, lw: Lowering, ir_op: Operation, out_v: SSAValue | None = None) -> str:
        """Like add() for an intermediate that has no IR value of its own (or maps to out_v)."""
        name = self.op_name(kind)
        out = self.next_name("t")
        self.g.add_tensor(Tensor(out, shape, dtype, "act"))
        if out_v is not None:
            self.names[out_v] = out
        o = Op(name, unit, tuple(ins), (out,), attrs, loc=describe_op(ir_op))
        self.g.add_op(o)
        self.low[o.name] = lw
        return out
