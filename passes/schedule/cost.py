"""Cost model of the space-time scheduler: unit cycles, transfer cycles, HBSM footprints.

Every number comes from :class:`m100.targets.m100.machine.Machine` (the one the interpreter's timing
uses), so a prediction can be diffed against a simulation. Nothing here knows about xDSL.

Unit model (cycles of one instruction)
--------------------------------------
* **TCU** ``m x k @ k x n``: the array works on natural tiles ``tcu_tile_m x tcu_tile_k @
  tcu_tile_k x tcu_tile_n`` (32x32 @ 32x64 on the M100). One natural tile takes
  ``tile_macs / tcu_macs_per_cycle(i8)`` cycles at the int8 rate, divided by the dtype's rate
  (f32 = 1/16). A partial tile costs a whole one (the *tile-shape efficiency*), except along M
  below one tile: fewer than ``tcu_tile_m`` rows cost whole ``tcu_row_granule`` rows (the
  paper's 8 x 64 array; ``Machine.tcu_padded_rows``). The operand ports
  (``tcu_act_bytes_per_cycle``, ``tcu_weight_bytes_per_cycle``) bound the rate too. Each instruction
  pays ``tcu_pipeline_latency`` once (outer-loop control keeps the pipeline busy inside one).
* **CVU**: stages stream at ``cvu_bytes_per_cycle``; an idiom that must read its input several
  times (softmax, layernorm) pays per pass; each stage adds ``cvu_stage_latency``.
* **DTDU**: ``dtdu_bytes_per_cycle``. **CSU**: ``csu_overhead_cycles`` + bytes / ``csu_bytes_per_cycle``.
* Every unit is also bounded by the HBSM bandwidth (``hbsm_banks * hbsm_bank_width`` bytes/cycle).

Transfers
---------
* DDR <-> HBSM by a CCB DMA engine: ``dma_setup_cycles + ddr_latency + bytes / bw`` with
  ``bw = min(axi_bandwidth, ddr_bandwidth / engines_active)``; CCB SRAM uses ``ccb_sram_bandwidth``.
* A DRB broadcast costs one transfer whatever the number of receivers (bounded by ``drb_bandwidth``).
* TPB -> TPB (DTDU over the mesh): ``min(dtdu, mesh)`` inside a cluster,
  ``min(dtdu, mesh_inter_cluster_bandwidth)`` across clusters, plus the remote latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from m100.targets.m100.isa_base import Routine, csu_operand_bytes
from m100.targets.m100.machine import Machine

from .graph import CVU_PASSES, OpGraph, Op, dtype_bytes, geometry


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


# dtype names of the graph -> names of the machine's TCU rates
_TCU_RATE_NAME = {"i8": "i8", "i4": "i4", "f16": "f16", "bf16": "bf16", "f32": "f32", "i32": "i8"}


@dataclass(frozen=True)
class CostModel:
    machine: Machine

    # ---------------------------------------------------------------- machine-derived constants
    @cached_property
    def _memo(self) -> dict:
        """Results of the pure cost functions below, by arguments (the search asks the same
        transfers and pieces hundreds of thousands of times)."""
        return {}

    @cached_property
    def hbsm_bpc(self) -> float:
        return float(self.machine.hbsm_bytes_per_cycle)

    def bpc(self, bandwidth: float) -> float:
        return self.machine.bytes_per_cycle(bandwidth)

    def tcu_rate(self, dtype: str) -> float:
        return self.machine.tcu_rate(_TCU_RATE_NAME.get(dtype, "f32"))

    def peak_macs_per_cycle(self, dtype: str) -> float:
        return self.machine.tcu_macs_per_cycle_i8 * self.tcu_rate(dtype)

    # ---------------------------------------------------------------- units
    def tcu_cycles(self, m: int, n: int, k: int, dtype: str = "f32", wdtype: str | None = None,
                   latency: bool = True) -> float:
        """Cycles of one TCU instruction ``[m,k] @ [k,n]`` (tiles padded to the natural tile)."""
        mc = self.machine
        rows = mc.tcu_padded_rows(m)  # whole tiles; below one tile whole row granules
        kn_tiles = ceil_div(n, mc.tcu_tile_n) * ceil_div(k, mc.tcu_tile_k)
        compute = rows * kn_tiles * mc.tcu_tile_k * mc.tcu_tile_n / self.peak_macs_per_cycle(dtype)
        ab, wb = dtype_bytes(dtype), dtype_bytes(wdtype or dtype)
        # operand ports: A tile streamed once per (m, k) tile and column tile, B once per tile
        a_bytes = kn_tiles * rows * mc.tcu_tile_k * ab
        b_bytes = kn_tiles * ceil_div(m, mc.tcu_tile_m) * mc.tcu_tile_k * mc.tcu_tile_n * wb
        ports = max(a_bytes / mc.tcu_act_bytes_per_cycle, b_bytes / mc.tcu_weight_bytes_per_cycle)
        return max(compute, ports) + (mc.tcu_pipeline_latency if latency else 0)

    def tcu_efficiency(self, m: int, n: int, k: int, dtype: str = "f32") -> float:
        """Useful MACs / (cycles * peak MACs per cycle) of one instruction."""
        return m * n * k / (self.tcu_cycles(m, n, k, dtype) * self.peak_macs_per_cycle(dtype))

    def cvu_cycles(self, bytes_in: float, bytes_out: float, passes: int = 1, stages: int = 1,
                   bytes_in_total: float | None = None) -> float:
        """One CVU pipeline instruction, as the interpreter charges it (``sim/timing.py``).

        ``bytes_in`` is the *largest* input (the stages stream one element of every operand per
        beat: ``passes * max(largest input, output) / cvu_bytes_per_cycle``), ``bytes_in_total``
        all inputs (the HBSM bank bound: every byte of every operand crosses the banks once).
        Latency: the HBSM read latency plus ``cvu_stage_latency`` per stage."""
        mc = self.machine
        total = (bytes_in if bytes_in_total is None else bytes_in_total) + bytes_out
        stream = max(passes * max(bytes_in, bytes_out) / mc.cvu_bytes_per_cycle, total / self.hbsm_bpc)
        return stream + mc.hbsm_latency + stages * mc.cvu_stage_latency

    def dtdu_cycles(self, nbytes: float) -> float:
        return nbytes / self.machine.dtdu_bytes_per_cycle + self.machine.hbsm_latency

    def csu_cycles(self, nbytes: float) -> float:
        return self.machine.csu_overhead_cycles + nbytes / self.machine.csu_bytes_per_cycle

    @staticmethod
    def csu_op_bytes(g: OpGraph, op: Op) -> float:
        """The bytes CSU op ``op`` moves (its operands in the routine's order, through
        :func:`csu_operand_bytes`, the interpreter's rule): a gather reads only its ``N`` rows."""
        names = list(op.inputs) + list(op.outputs)
        sizes = [float(g.tensors[t].nbytes) for t in names]
        if op.unit == "csu.gather":
            a = op.attrs
            return float(sum(csu_operand_bytes(Routine.GATHER, sizes, (a["V"], a["D"], a["N"]))))
        return float(sum(sizes))

    # ---------------------------------------------------------------- transfers
    def dma_cycles(self, nbytes: float, src: str = "ddr", engines_active: int | None = None,
                   dst: str = "hbsm", broadcast: bool = False) -> float:
        """One CCB DMA of ``nbytes`` from ``src`` to ``dst`` (``ddr``, ``sram`` or ``hbsm``).

        The interpreter's charges (``sim/timing.py`` ``_dma``/``_endpoint``), end by end:
        latency ``dma_setup_cycles`` + ``ddr_latency`` if an end is DDR + ``hbsm_latency`` if an end
        is an HBSM; streaming at the slowest link: a DDR end on the engine's AXI master
        (``axi_bandwidth``) and on the DDR shared by ``engines_active`` engines (default all
        ``ccb_dma_engines``); a CCB SRAM end on the banks its ``ccb_sram_interleave`` granules hit
        (``ccb_sram_bandwidth / ccb_sram_banks`` each; a transfer smaller than a granule uses one
        bank); an HBSM end on the CCB -> TPB mesh link, or on the DRB for a ``broadcast`` (one
        transfer whatever the number of receivers). Both ends in the same memory charge it twice."""
        key = ("dma", nbytes, src, engines_active, dst, broadcast)
        r = self._memo.get(key)
        if r is None:
            r = self._memo[key] = self._dma_cycles(nbytes, src, engines_active, dst, broadcast)
        return r

    def _dma_cycles(self, nbytes: float, src: str, engines_active: int | None, dst: str,
                    broadcast: bool) -> float:
        mc = self.machine
        if nbytes <= 0:
            return 0.0
        ends = (src, dst)
        lat = mc.dma_fixed_latency("ddr" in ends, "hbsm" in ends)
        stream = 0.0
        n_ddr = ends.count("ddr")
        if n_ddr:
            share = engines_active or mc.ccb_dma_engines
            stream = max(stream, n_ddr * nbytes / self.bpc(mc.axi_bandwidth),
                         n_ddr * nbytes / (mc.ddr_bytes_per_cycle / share))
        n_sram = ends.count("sram")
        if n_sram:
            # granules an end touches: addresses are not known yet, so a range that does not start
            # on a granule boundary (the common case for a band of a tensor) crosses one more
            granules = n_sram * (int(nbytes) // mc.ccb_sram_interleave + 1)
            busiest = ceil_div(granules, mc.ccb_sram_banks) / granules  # share of the fullest bank
            # the other active engines stream over the banks too: a bank this transfer uses is
            # also used by each of them with probability (banks they touch / banks), taken equal
            # to this transfer's (a transfer spread over all banks gets 1/engines, like the DDR)
            share = engines_active or mc.ccb_dma_engines
            overlap = min(1.0, granules / mc.ccb_sram_banks)
            per_bank = self.bpc(mc.ccb_sram_bandwidth) / mc.ccb_sram_banks \
                / (1 + (share - 1) * overlap)
            stream = max(stream, n_sram * nbytes * busiest / per_bank)
        if "hbsm" in ends:
            stream = max(stream, nbytes / self.bpc(mc.drb_bandwidth if broadcast
                                                    else mc.mesh_bandwidth))
        return lat + stream

    def dma_latency(self, src: str = "ddr", dst: str = "hbsm") -> float:
        """The fixed part of :meth:`dma_cycles`: ``dma_setup_cycles`` + ``ddr_latency`` if an end
        is DDR + ``hbsm_latency`` if an end is an HBSM."""
        ends = (src, dst)
        return self.machine.dma_fixed_latency("ddr" in ends, "hbsm" in ends)

    def dma_engine_cycles(self, nbytes: float, src: str = "ddr", engines_active: int | None = None,
                          dst: str = "hbsm", broadcast: bool = False) -> float:
        """The engine time one transfer of a back-to-back stream of equal ones takes
        (:meth:`dma_occupancy` of its :meth:`dma_cycles`): what the tiler counts to judge how
        loaded the engines are. Memoized by arguments, as :meth:`dma_cycles` (the tiler asks
        it for every candidate tiling)."""
        key = ("engine", nbytes, src, engines_active, dst, broadcast)
        r = self._memo.get(key)
        if r is None:
            r = self._memo[key] = self.dma_occupancy(
                self.dma_cycles(nbytes, src, engines_active, dst, broadcast), src, dst)
        return r

    def dma_occupancy(self, cycles: float, src: str = "ddr", dst: str = "hbsm") -> float:
        """The engine time of a transfer of ``cycles`` (:meth:`dma_cycles`) in a back-to-back
        stream: at depth ``dma_outstanding`` = D (:mod:`.dma_queue`) ``max(data,
        dma_setup_cycles, cycles / D)`` with ``data = cycles - dma_latency`` (the setups are
        serial, the data phases too, and D transfers share the setup + latency + data); at depth
        1 all of ``cycles`` (:meth:`Machine.dma_stream_period`, the interpreter's engine)."""
        return self.machine.dma_stream_period(cycles, self.dma_latency(src, dst))

    def mesh_cycles(self, nbytes: float, src_tpb: int, dst_tpb: int) -> float:
        """TPB -> TPB copy by the source's DTDU over the mesh (0 when it stays on one TPB)."""
        key = ("mesh", nbytes, src_tpb, dst_tpb)
        r = self._memo.get(key)
        if r is None:
            r = self._memo[key] = self._mesh_cycles(nbytes, src_tpb, dst_tpb)
        return r

    def _mesh_cycles(self, nbytes: float, src_tpb: int, dst_tpb: int) -> float:
        mc = self.machine
        if src_tpb == dst_tpb or nbytes <= 0:
            return 0.0
        same = mc.cluster_of(src_tpb) == mc.cluster_of(dst_tpb)
        bw = self.bpc(mc.mesh_bandwidth if same else mc.mesh_inter_cluster_bandwidth)
        bw = min(bw, mc.dtdu_bytes_per_cycle)
        lat = mc.remote_update_latency if same else mc.remote_update_latency_inter
        return nbytes / bw + lat + mc.hbsm_latency

    def dtdu_broadcast_cycles(self, nbytes: float, src_tpb: int, dst_tpbs: tuple[int, ...]
                              ) -> float:
        """``dtdu.broadcast`` by ``src_tpb``'s DTDU into the HBSM of every TPB of ``dst_tpbs``: the
        bytes cross the DRB once (``sim/timing.py`` ``_dtdu``: the DTDU port and the DRB bound the
        stream), then the slowest receiver's sync update (``remote_update_latency`` in the
        cluster, ``_inter`` across) and the HBSM latency. Memoized like :meth:`mesh_cycles`
        (a kept activation's K chunks: ResNet-50 ~43 k calls over ~56 receivers' clusters)."""
        key = ("bcast", nbytes, src_tpb, dst_tpbs)
        r = self._memo.get(key)
        if r is None:
            r = self._memo[key] = self._dtdu_broadcast_cycles(nbytes, src_tpb, dst_tpbs)
        return r

    def _dtdu_broadcast_cycles(self, nbytes: float, src_tpb: int, dst_tpbs: tuple[int, ...]
                               ) -> float:
        mc = self.machine
        if nbytes <= 0:
            return 0.0
        bw = min(self.bpc(mc.drb_bandwidth), mc.dtdu_bytes_per_cycle)
        lat = max((0 if t == src_tpb else mc.remote_update_latency
                   if mc.cluster_of(t) == mc.cluster_of(src_tpb) else
                   mc.remote_update_latency_inter) for t in dst_tpbs)
        return nbytes / bw + lat + mc.hbsm_latency

    # ---------------------------------------------------------------- HBSM
    def align(self, nbytes: float) -> int:
        """A buffer size rounded up to the HBSM bank width (the allocation granule)."""
        bw = self.machine.hbsm_bank_width  # round_up(max(1, ceil(nbytes)), bw), written out
        return -(-max(1, math.ceil(nbytes)) // bw) * bw

    # ---------------------------------------------------------------- ops
    def piece_memo(self, g: OpGraph) -> dict:
        """:meth:`piece_cycles`' answers for ``g``: ``(id(machine), op name, rows, cols, k)`` ->
        ``(machine, cycles)``, kept per graph (ops are immutable once the graph is built;
        ``geometry`` caches the same way). A caller in a hot loop may read it directly (the
        contraction tiler: ``partition.tile_piece``) where :meth:`piece_cycles` is not
        overridden (:meth:`answers_piece_memo`)."""
        return g.__dict__.setdefault("_piece_cycles", {})

    def answers_piece_memo(self) -> bool:
        """Does :meth:`piece_memo` hold this model's :meth:`piece_cycles` answers (False for a
        subclass that answers otherwise, e.g. the tests')?"""
        return type(self).piece_cycles is CostModel.piece_cycles

    def piece_cycles(self, g: OpGraph, op: Op, rows: int, cols: int, k: int | None = None) -> float:
        """Unit cycles of one instruction computing ``rows x cols`` of ``op``'s output (reduction
        chunk ``k``, default the whole reduction)."""
        memo = self.piece_memo(g)
        key = (id(self.machine), op.name, rows, cols, k)
        hit = memo.get(key)
        if hit is None or hit[0] is not self.machine:
            hit = memo[key] = (self.machine, self._piece_cycles(g, op, rows, cols, k))
        return hit[1]

    def _piece_cycles(self, g: OpGraph, op: Op, rows: int, cols: int, k: int | None) -> float:
        geo = geometry(g, op)
        out = g.out(op)
        acts = g.act_inputs(op)
        in_dtype = acts[0].dtype if acts else out.dtype
        if op.unit in ("tcu.matmul", "tcu.conv2d"):
            kk = geo.k if k is None else k
            m = rows * geo.row_elems
            wd = g.weights(op)[0].dtype if g.weights(op) else in_dtype
            if op.unit == "tcu.conv2d" and op.attrs.get("groups", 1) > 1:
                groups = op.attrs["groups"]
                gcols = max(1, cols * groups // geo.cols)  # groups in this column slice
                per = geo.cols // groups
                return gcols * self.tcu_cycles(m, per, kk, in_dtype, wd, latency=False) + \
                    self.machine.tcu_pipeline_latency
            return self.tcu_cycles(m, cols, kk, in_dtype, wd)
        frac = (rows / max(1, geo.rows)) * (cols / max(1, geo.cols))
        in_bytes = sum(t.nbytes for t in acts) * frac
        # the CVU streams its operands side by side, one element of each per beat, as wide as the
        # widest operand (``sim/timing.py``): a small f32 operand read broadcast (a mask's iotas,
        # per-channel scales) widens every beat of an f16 stream
        wide = max(dtype_bytes(g.tensors[t].dtype) for t in (*op.inputs, *op.outputs))
        in_max = max([t.numel for t in acts] + [out.numel]) * wide * frac
        out_bytes = out.nbytes * frac
        # the pipeline's stages (``from_ir`` records a CVU lowering's; else the op and its epilogue)
        stages = op.attrs.get("cvu_stages", 1 + len(op.epilogue))
        if op.unit == "cvu.pool":  # every window element is a beat: kh * kw per output element
            a = op.attrs
            return self.cvu_cycles(max(in_max, out_bytes * a["kh"] * a["kw"]), out_bytes, 1, stages,
                                   in_bytes)
        if op.unit in CVU_PASSES:
            if op.unit != "cvu.reduction":
                # an elementwise / idiom pipeline streams its piece's output elements: each input
                # is loaded as the box of the piece its map reads (``kinds/cvu.input_box``), never
                # more -- a strided half of a wider tensor (fold-slice-reads) is half of it
                in_max = out.numel * wide * frac
            return self.cvu_cycles(in_max, out_bytes, CVU_PASSES[op.unit], stages, in_bytes)
        if op.unit.startswith("dtdu"):
            return self.dtdu_cycles(max(in_bytes, out_bytes))
        if op.unit.startswith("csu"):
            return self.csu_cycles(self.csu_op_bytes(g, op) * frac)
        return self.cvu_cycles(in_max, out_bytes, 1, 1, in_bytes)

    def op_macs(self, g: OpGraph, op: Op) -> int:
        if op.unit not in ("tcu.matmul", "tcu.conv2d"):
            return 0
        geo = geometry(g, op)
        return geo.rows * geo.row_elems * geo.cols * geo.k
