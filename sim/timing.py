"""The cycle model: what one block of an instruction costs, and how concurrent blocks share resources.

Every number comes from the :class:`~m100.targets.m100.machine.Machine`. A block is a *job* with

* ``latency``: fixed cycles. For the pipelined TCU (``tcu_pipeline_latency``), CVU
  (``hbsm_latency + stages * cvu_stage_latency``) and DTDU (``hbsm_latency``) it is a drain tail
  after every block (the engine overlaps it with the next block); for the CSU
  (``csu_overhead_cycles``, holding the cluster CPU, one routine at a time per cluster) and DMA
  (first block only: ``dma_setup_cycles`` + ``ddr_latency`` if DDR is an end + ``hbsm_latency`` if an
  HBSM is) it comes before the data streams;
* ``cycles``: its intrinsic streaming time when alone, the max of its compute time and its port
  limits:

  - TCU: ``tiles * tile_m*tile_k*tile_n / macs_per_cycle(dtype)`` with ``tiles = groups *
    ceil(M/tile_m) * ceil(K/tile_k) * ceil(N/tile_n)`` (so 32x32 @ 32x64 int8 = 32 cycles);
    activation port ``tcu_act_bytes_per_cycle`` and weight port ``tcu_weight_bytes_per_cycle``
    carry A re-read ``ceil(N/tile_n)`` times and B re-read ``ceil(M/tile_m)`` times (as granule
    accesses, so a strided walk is slower);
  - CVU: ``passes * elements * widest element bytes / cvu_bytes_per_cycle`` (softmax 3 passes,
    layer/rms-norm 2, everything else 1; pooling counts ``kh * kw`` beats per output element);
    every input and the output on a ``cvu_bytes_per_cycle`` port;
  - DTDU: ``bytes / dtdu_bytes_per_cycle``, src and dst each on a ``dtdu_bytes_per_cycle`` port;
  - CSU: ``bytes / csu_bytes_per_cycle``; DMA: none (bounded by the links only);
* ``demands`` on shared resources: HBSM bank accesses per bank of each TPB touched (capacity 1
  granule per cycle per bank), DDR bytes (``ddr_bandwidth``), the AXI master ``engine % axi_masters``
  (``axi_bandwidth``), the CCB SRAM banks (``ccb_sram_bandwidth / ccb_sram_banks`` each, bytes
  split by the walk's ``ccb_sram_interleave`` granules), the DRB (``drb_bandwidth``, broadcasts
  counted once) and mesh node pairs (``mesh_bandwidth``; nodes are TPBs and the CCB).

Concurrent jobs share resources by *max-min fair progressive filling* (:func:`share`): every job runs
at the same fraction of its alone speed until a resource saturates; the jobs on it freeze and the rest
keep growing. Round-robin bank arbitration and bandwidth splitting both come out of this one rule:
a walk hitting one bank serializes (its per-bank demand bounds it), two DMAs on one DDR take twice as
long, etc. Rates are recomputed whenever a job starts or ends (a fluid discrete-event model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from operator import attrgetter

import numpy as np

from m100.targets.m100.isa import (Broadcast, Conv2D, Copy, CsuCall, CvuOp, CvuPipeline, DType, Dma,
                                   Epilogue, Fill, Instruction, MatMul, Space, Walk, tpbs_of)
from m100.targets.m100.isa_base import csu_operand_bytes
from m100.targets.m100.machine import Machine

from .twu import bank_accesses, sram_bank_accesses

BANK = "bank"


@dataclass
class Cost:
    latency: float = 0.0
    cycles: float = 0.0
    banks: dict[int, np.ndarray] = field(default_factory=dict)  # TPB -> accesses per bank
    links: dict[tuple, float] = field(default_factory=dict)  # ('ddr',) -> bytes ...
    exclusive: tuple | None = None  # ('cpu', cluster)
    macs: float = 0.0
    peak_macs: float = 0.0  # the dtype's peak MACs/cycle (TCU)
    bytes: dict[str, float] = field(default_factory=dict)  # stats: bytes per memory/link
    alone: float | None = None  # cached alone_rate
    terms: tuple | None = None  # cached nonzero demands for share (_terms)
    # the engine's resource columns, demands at the alone rate and crit flag (Engine._add_use)
    cols: np.ndarray | None = None
    use: np.ndarray | None = None
    crit: bool = False
    cols_of: int = 0  # the token of the column registry these are of (fluid.Columns)
    neg_use: np.ndarray | None = None  # -use (what a finished job takes off the column sums)
    nzb: list | None = None  # cached (tpb, bank column codes, demands) per TPB (bank_terms)
    # (a cost shared by geometry, CostModel.cost) the cost of the same geometry it was moved
    # from and the bank columns between the two TPBs (tpb - its tpb) * banks
    moved: tuple | None = None

    def add_banks(self, tpb: int, acc: np.ndarray) -> None:
        if tpb in self.banks:
            self.banks[tpb] = self.banks[tpb] + acc
        else:
            self.banks[tpb] = acc

    def add_hbsm(self, tpb: int, nbytes: float) -> None:
        k = f"hbsm{tpb}"
        self.bytes[k] = self.bytes.get(k, 0.0) + nbytes

    def add_link(self, key: tuple, nbytes: float) -> None:
        self.links[key] = self.links.get(key, 0.0) + nbytes
        name = _link_name(key)
        self.bytes[name] = self.bytes.get(name, 0.0) + nbytes


_LINK_NAMES: dict[tuple, str] = {}  # the stats name of a link key


def _link_name(key: tuple) -> str:
    name = _LINK_NAMES.get(key)
    if name is None:
        name = _LINK_NAMES[key] = ".".join(str(k) for k in key)
    return name


def capacity(machine: Machine, key: tuple) -> float:
    """Capacity per cycle of a shared link resource."""
    kind = key[0]
    if kind == "ddr":
        return machine.ddr_bytes_per_cycle
    if kind == "axi":
        return machine.bytes_per_cycle(machine.axi_bandwidth)
    if kind == "sram":  # one of the ccb_sram_banks banks, an equal share of the bandwidth
        return machine.bytes_per_cycle(machine.ccb_sram_bandwidth) / machine.ccb_sram_banks
    if kind == "drb":
        return machine.bytes_per_cycle(machine.drb_bandwidth)
    if kind == "mesh":  # nodes: TPB indices or "ccb"; TPBs of different clusters are slower
        a, b = key[1], key[2]
        if isinstance(a, int) and isinstance(b, int) and \
                machine.cluster_of(a) != machine.cluster_of(b):
            return machine.bytes_per_cycle(machine.mesh_inter_cluster_bandwidth)
        return machine.bytes_per_cycle(machine.mesh_bandwidth)
    raise KeyError(key)


def _nbytes(w: Walk, frac: float = 1.0) -> float:
    nb = w.__dict__.get("_sim_nbytes")  # a function of the (immutable) walk: kept on it
    if nb is None:
        # (numerics.byte_size without its DType(...) conversion: w.dtype is one)
        nb = w.__dict__["_sim_nbytes"] = (w.num_elements * w.dtype.bits + 7) // 8
    return nb * frac


def tcu_rate_name(a: DType, b: DType) -> str:
    if a.is_int:
        return "i4" if b is DType.I4 else "i8"
    return a.short


#: Share the block costs of one-TPB instructions by geometry (:meth:`CostModel.cost`); False:
#: every cost built (the tests compare the two).
SHARED = True

#: The kinds whose cost can be one-TPB (every walk in the instruction's own TPB's HBSM): no
#: links, no CPU, one bank histogram.
_LOCAL_KINDS = (Conv2D, MatMul, CvuPipeline, Copy, Fill)

_HBSM = Space.HBSM
_SPECS: dict[type, tuple] = {}  # per kind: its fields but ``tpb`` and ``sync`` by type (_spec)


def _spec(cls: type) -> tuple:
    """A kind's fields but ``tpb`` and ``sync``, by declared type: (a getter of the others'
    values as one tuple or None, the walks', the walk tuples', the epilogues' names)."""
    plain, walks, tuples, epilogues = [], [], [], []
    for f in fields(cls):
        if f.name in ("tpb", "sync"):
            continue
        ty = str(f.type)
        if "Epilogue" in ty:
            epilogues.append(f.name)
        elif "Walk" in ty:
            (tuples if "tuple" in ty else walks).append(f.name)
        else:
            plain.append(f.name)
    getter = None
    if plain:  # (attrgetter of one name returns the value, not a 1-tuple)
        get = attrgetter(*plain)
        getter = get if len(plain) > 1 else (lambda inst: (get(inst),))
    return getter, tuple(walks), tuple(tuples), tuple(epilogues)


class _Elsewhere(Exception):
    """A walk outside the instruction's own TPB's HBSM (its cost is not shared)."""


class CostModel:
    def __init__(self, machine: Machine):
        self.m = machine
        self.acc_per_cycle = lambda bpc: max(bpc / machine.hbsm_bank_width, 1e-9)
        self.sweep = machine.hbsm_bank_width * machine.hbsm_banks
        # one-TPB costs by geometry (:meth:`_geometry`): (the cost, its TPB, the levels the
        # key names by identity -- held, so no other object takes their ids) or None
        self.shared: dict[tuple, tuple | None] = {}
        self.mesh_caps: dict[tuple, float] = {}  # a TPB pair's mesh link capacity (_remote_geometry)

    def acc(self, w: Walk) -> np.ndarray:
        return bank_accesses(w, self.m)

    def cost(self, inst: Instruction, b: int) -> Cost:
        """Block ``b``'s cost. A one-TPB instruction's cost is a function of its geometry
        (:meth:`_geometry`) and its TPB, which enters only as the key of its one bank histogram
        and of its HBSM bytes: a cost of the same geometry on another TPB is moved there
        (:func:`moved`), the same values, not built again (ResNet-50: 5 880 convolutions, ~430
        geometries). A remote copy's likewise (:meth:`_remote_cost`, two TPBs and a mesh
        link: :func:`moved_remote`)."""
        key = self._geometry(inst, b) if SHARED and isinstance(inst, _LOCAL_KINDS) else None
        if key is not None:
            got = self.shared.get(key)
            if got is not None:
                return moved(got[0], got[1], inst.tpb, self.m.hbsm_banks)
        elif SHARED and type(inst) is Copy:  # (not one-TPB: maybe a remote copy)
            rkey = self._remote_geometry(inst, b)
            if rkey is not None:
                return self._remote_cost(inst, b, rkey)
        fn = getattr(self, "_" + type(inst).__name__.lower())
        c = fn(inst, b)
        if b > 0 and isinstance(inst, Dma):
            c.latency = 0.0  # the setup and first-byte latency happen once per transfer
        if key is not None and key not in self.shared:
            t = inst.tpb
            local = not c.links and c.exclusive is None and list(c.banks) == [t] \
                and set(c.bytes) <= {f"hbsm{t}"}
            if local:  # (its arrays are shared from now on: never written)
                for a in c.banks.values():
                    a.flags.writeable = False
            self.shared[key] = (c, t, [w.levels for _, w, _ in inst.walks()]) if local else None
        return c

    def _geometry(self, inst: Instruction, b: int) -> tuple | None:
        """What a one-TPB instruction's cost depends on besides its TPB: its kind, whether
        ``b`` is its first block, its block count and every field but ``tpb`` and ``sync``, a
        walk as (base modulo the bank sweep, element type, levels by identity) -- its bank
        histogram is a function of those (``twu._bank_hist``), its bytes of the last two --
        the epilogue's walks too; None when some walk is not in the instruction's own TPB's
        HBSM. (A field declared as anything else enters as its value: a walk there would only
        make the key stricter.)"""
        cls = type(inst)
        spec = _SPECS.get(cls)
        if spec is None:
            spec = _SPECS[cls] = _spec(cls)
        plain, walks, tuples, epilogues = spec
        t = inst.tpb
        sweep = self.sweep
        key = [cls, b > 0, inst.sync.blocks, plain(inst) if plain is not None else ()]
        for name in walks:
            w = getattr(inst, name)
            if w is None:
                key.append(None)
            elif w.space is not _HBSM or w.tpb != t:
                return None
            else:
                key.append((w.base % sweep, w.dtype, id(w.levels)))
        try:
            for name in tuples:
                key.append(tuple(self._walk_key(w, t) for w in getattr(inst, name)))
            for name in epilogues:
                v = getattr(inst, name)
                rq = v.requant
                if rq is not None:
                    rq = (rq.multiplier, rq.shift, rq.zero_point, rq.qmin, rq.qmax,
                          self._walk_key(rq.per_channel, t))
                key.append((self._walk_key(v.bias, t), v.act, v.clamp_lo, v.clamp_hi, rq,
                            self._walk_key(v.dequant, t)))
        except _Elsewhere:
            return None
        return tuple(key)

    def _remote_geometry(self, inst: Instruction, b: int) -> tuple | None:
        """A remote copy's key (:meth:`_remote_cost`): a :class:`Copy` from its TPB's HBSM to
        another TPB's, keyed by whether ``b`` is its first block, its block count, each walk's
        (base modulo the bank sweep, element type, levels by identity) -- its two bank
        histograms and its bytes are functions of those (``_dtdu``) -- and its mesh link's
        capacity; None for any other instruction."""
        if type(inst) is not Copy:
            return None
        s, d, t = inst.src, inst.dst, inst.tpb
        if s.space is not _HBSM or d.space is not _HBSM or s.tpb != t or d.tpb == t:
            return None
        sweep = self.sweep
        mesh = self.mesh_caps.get((t, d.tpb))
        if mesh is None:
            mesh = self.mesh_caps[(t, d.tpb)] = capacity(self.m, ("mesh", t, d.tpb))
        return ("remote", b > 0, inst.sync.blocks, s.base % sweep, s.dtype, id(s.levels),
                d.base % sweep, d.dtype, id(d.levels), mesh)

    def _remote_cost(self, inst: Copy, b: int, key: tuple) -> Cost:
        """A remote copy's cost, shared by geometry (:meth:`_remote_geometry`): built once,
        moved to other TPB pairs by :func:`moved_remote` (ResNet-50: 4 113 remote copies)."""
        got = self.shared.get(key)
        if got is not None:
            return moved_remote(got[0], got[1], got[2], inst.tpb, inst.dst.tpb)
        c = self._copy(inst, b)
        t0, t1 = inst.tpb, inst.dst.tpb
        if list(c.banks) == [t0, t1] and list(c.links) == [("mesh", t0, t1)] \
                and c.exclusive is None and list(c.bytes) == [f"hbsm{t0}", f"hbsm{t1}",
                                                              _link_name(("mesh", t0, t1))]:
            for a in c.banks.values():  # (shared from now on: never written)
                a.flags.writeable = False
            self.shared[key] = (c, t0, t1, [inst.src.levels, inst.dst.levels])
        return c

    def _walk_key(self, w: Walk | None, t: int):
        if w is None:
            return None
        if w.space is not _HBSM or w.tpb != t:
            raise _Elsewhere
        return (w.base % self.sweep, w.dtype, id(w.levels))

    # --- TCU ----------------------------------------------------------------------------------
    def _tcu(self, c: Cost, tpb: int, a: Walk, w: Walk, out: Walk, ep, accumulate: bool,
             groups: int, M: int, K: int, N: int, frac: float, a_expand: float,
             scale: Walk | None = None, acc_in: Walk | None = None,
             post_in: Walk | None = None) -> None:
        m = self.m
        dt = tcu_rate_name(a.dtype, w.dtype)
        peak = m.tcu_macs_per_cycle(dt)
        # whole natural tiles along K and N; along M whole tiles, or row granules below one tile
        compute = groups * m.tcu_padded_rows(M) * math.ceil(K / m.tcu_tile_k) * m.tcu_tile_k \
            * math.ceil(N / m.tcu_tile_n) * m.tcu_tile_n / peak
        a_acc = self.acc(a) * frac * a_expand * math.ceil(N / m.tcu_tile_n)
        w_acc = self.acc(w) * math.ceil(M / m.tcu_tile_m)
        if scale is not None:  # the dequantization scales stream in with the weights
            w_acc = w_acc + self.acc(scale) * math.ceil(M / m.tcu_tile_m)
        o_acc = self.acc(out) * frac * (2 if accumulate and acc_in is None else 1)
        if accumulate and acc_in is not None:  # the old accumulator read from its own walk
            o_acc = o_acc + self.acc(acc_in) * frac
        if post_in is not None:  # the post stages' operand, read beside the output
            o_acc = o_acc + self.acc(post_in) * frac
        total = a_acc + w_acc + o_acc
        for extra in (ep.bias, ep.requant.per_channel if ep.requant is not None else None,
                      ep.dequant):
            if extra is not None:
                total = total + self.acc(extra)
        c.add_banks(tpb, total)
        c.cycles = max(compute, a_acc.sum() / self.acc_per_cycle(m.tcu_act_bytes_per_cycle),
                       w_acc.sum() / self.acc_per_cycle(m.tcu_weight_bytes_per_cycle))
        c.latency = m.tcu_pipeline_latency
        c.macs = groups * M * K * N
        c.peak_macs = peak
        c.bytes[f"hbsm{tpb}"] = (_nbytes(a, frac) * a_expand + _nbytes(w) + _nbytes(out, frac)
                           * (2 if accumulate and acc_in is None else 1)) + \
            (_nbytes(scale) if scale else 0.0) + (_nbytes(acc_in, frac) if acc_in else 0.0) + \
            (_nbytes(post_in, frac) if post_in else 0.0)

    def _matmul(self, i: MatMul, b: int) -> Cost:
        c = Cost()
        frac = 1 / i.sync.blocks
        self._tcu(c, i.tpb, i.a, i.b, i.c, i.epilogue, i.accumulate, 1, i.m // i.sync.blocks,
                  i.k, i.n, frac, 1.0, i.scale, i.acc, i.post_in)
        return c

    def _conv2d(self, i: Conv2D, b: int) -> Cost:
        c = Cost()
        oh, ow = i.out_hw
        frac = 1 / i.sync.blocks
        M = (i.n * oh // i.sync.blocks) * ow
        cg = i.c // i.groups
        expand = max(1.0, (i.n * oh * ow * i.kh * i.kw * i.c) / max(1, i.x.num_elements))
        self._tcu(c, i.tpb, i.x, i.w, i.y, i.epilogue, i.accumulate, i.groups, M,
                  i.kh * i.kw * cg, i.f // i.groups, frac, expand)
        return c

    # --- CVU ----------------------------------------------------------------------------------
    def _cvupipeline(self, i: CvuPipeline, b: int) -> Cost:
        m = self.m
        c = Cost()
        frac = 1 / i.sync.blocks
        walks = list(i.inputs) + [i.output]
        esize = max(w.dtype.bits for w in walks) / 8
        elems = max([math.prod(s) for s in i.in_shapes] + [math.prod(i.out_shape)]) * frac
        passes = 1
        for st in i.stages:
            if st.op is CvuOp.SOFTMAX:
                passes = max(passes, 3)
            elif st.op in (CvuOp.LAYERNORM, CvuOp.RMSNORM):
                passes = max(passes, 2)
            elif st.op in (CvuOp.MAXPOOL, CvuOp.AVGPOOL) and len(st.iparams) >= 2:
                # every window element is a beat: kh * kw per output element
                elems = max(elems, math.prod(i.out_shape) * frac * st.iparams[0] * st.iparams[1])
        port = self.acc_per_cycle(m.cvu_bytes_per_cycle)
        cyc = passes * elems * esize / m.cvu_bytes_per_cycle
        total = np.zeros(m.hbsm_banks)
        hb = 0.0
        for w in walks:
            a = self.acc(w) * frac
            total = total + a
            cyc = max(cyc, a.sum() / port)
            hb += _nbytes(w, frac)
        c.add_banks(i.tpb, total)
        c.cycles = cyc
        c.latency = m.hbsm_latency + len(i.stages) * m.cvu_stage_latency
        c.bytes[f"hbsm{i.tpb}"] = hb
        return c

    # --- DTDU ---------------------------------------------------------------------------------
    def _dtdu(self, tpb: int, src: Walk | None, dst: Walk, dst_tpbs: list[int], frac: float,
              broadcast: bool) -> Cost:
        m = self.m
        c = Cost()
        port = self.acc_per_cycle(m.dtdu_bytes_per_cycle)
        nb = _nbytes(dst, frac)
        cyc = nb / m.dtdu_bytes_per_cycle
        if src is not None:
            sa = self.acc(src) * frac
            c.add_banks(tpb, sa)
            cyc = max(cyc, sa.sum() / port, _nbytes(src, frac) / m.dtdu_bytes_per_cycle)
            c.add_hbsm(tpb, _nbytes(src, frac))
        da = self.acc(dst) * frac
        cyc = max(cyc, da.sum() / port)
        for t in dst_tpbs:
            c.add_banks(t, da)
            c.add_hbsm(t, nb)
            if t != tpb and not broadcast:
                c.add_link(("mesh", tpb, t), nb)
        if broadcast and any(t != tpb for t in dst_tpbs):
            c.add_link(("drb",), nb)
        c.cycles = cyc
        c.latency = m.hbsm_latency
        return c

    def _copy(self, i: Copy, b: int) -> Cost:
        return self._dtdu(i.tpb, i.src, i.dst, [i.dst.tpb], 1 / i.sync.blocks, False)

    def _fill(self, i: Fill, b: int) -> Cost:
        return self._dtdu(i.tpb, None, i.dst, [i.tpb], 1 / i.sync.blocks, False)

    def _broadcast(self, i: Broadcast, b: int) -> Cost:
        return self._dtdu(i.tpb, i.src, i.dst, tpbs_of(i.tpb_mask), 1 / i.sync.blocks, True)

    # --- CSU ----------------------------------------------------------------------------------
    def _endpoint(self, c: Cost, w: Walk, nbytes: float, frac: float, node, axi: int,
                  dst_tpbs: list[int] | None = None, broadcast: bool = False,
                  to_node: bool = True) -> None:
        """Charge one end of a transfer between ``node`` (a TPB or 'ccb') and walk ``w``."""
        if w.space is Space.DDR:
            c.add_link(("ddr",), nbytes)
            c.add_link(("axi", axi), nbytes)
        elif w.space is Space.SRAM:  # bytes split over the banks the walk's 4 KiB granules hit
            acc = sram_bank_accesses(w, self.m)
            total = acc.sum()
            for bank in np.nonzero(acc)[0]:
                c.add_link(("sram", int(bank)), nbytes * acc[bank] / total)
        else:
            tpbs = dst_tpbs if dst_tpbs is not None else [w.tpb]
            acc = self.acc(w) * frac
            for t in tpbs:
                c.add_banks(t, acc)
                c.add_hbsm(t, nbytes)
                if not broadcast and t != node:
                    c.add_link(("mesh",) + ((node, t) if to_node else (t, node)), nbytes)
            if broadcast:
                c.add_link(("drb",), nbytes)

    def _csucall(self, i: CsuCall, b: int) -> Cost:
        m = self.m
        c = Cost()
        total = 0.0
        moved = csu_operand_bytes(i.routine, [_nbytes(w) for w in i.operands], i.params)
        for w, nb in zip(i.operands, moved):
            total += nb
            self._endpoint(c, w, nb, 1.0, i.tpb, 0)
        c.cycles = total / m.csu_bytes_per_cycle
        c.latency = m.csu_overhead_cycles
        c.exclusive = ("cpu", m.cluster_of(i.tpb))
        return c

    # --- DMA ----------------------------------------------------------------------------------
    def _dma(self, i: Dma, b: int) -> Cost:
        m = self.m
        c = Cost()
        frac = 1 / i.sync.blocks
        nb = _nbytes(i.dst, frac)
        axi = i.engine % m.axi_masters
        self._endpoint(c, i.src, nb, frac, "ccb", axi, to_node=False)
        dst_tpbs = tpbs_of(i.tpb_mask) if i.tpb_mask else None
        self._endpoint(c, i.dst, nb, frac, "ccb", axi, dst_tpbs=dst_tpbs,
                       broadcast=bool(i.tpb_mask), to_node=True)
        spaces = {i.src.space, i.dst.space}
        c.latency = m.dma_fixed_latency(Space.DDR in spaces, Space.HBSM in spaces)
        c.cycles = 0.0
        return c


def moved(c: Cost, t0: int, t: int, banks: int) -> Cost:
    """The one-TPB cost ``c`` of TPB ``t0`` on TPB ``t``: the same values, its bank histogram
    (the same read-only array) and HBSM bytes keyed by ``t``. Its derived fields come from
    ``c``'s (``cost_batch.derive_batch``: the bank columns moved by ``(t - t0) * banks``)."""
    if t == t0:
        return c
    m = Cost(latency=c.latency, cycles=c.cycles, macs=c.macs, peak_macs=c.peak_macs)
    for a in c.banks.values():
        m.banks[t] = a
    for v in c.bytes.values():
        m.bytes[f"hbsm{t}"] = v
    m.moved = (c, (t - t0) * banks)
    return m


def moved_remote(c: Cost, t0: int, t1: int, t: int, u: int) -> Cost:
    """The remote copy cost ``c`` from TPB ``t0`` to ``t1`` as a copy from ``t`` to ``u``
    (:meth:`CostModel._remote_cost`: the same geometry and mesh capacity): the same values,
    its two bank histograms (the same read-only arrays), HBSM bytes, mesh link and its bytes
    keyed by ``t`` and ``u``, in ``_dtdu``'s order. Its derived fields come from ``c``'s
    (``cost_batch.derive_batch``: each TPB's bank columns moved, the link's column its own)."""
    if t == t0 and u == t1:
        return c
    m = Cost(latency=c.latency, cycles=c.cycles, macs=c.macs, peak_macs=c.peak_macs)
    m.banks[t] = c.banks[t0]
    m.banks[u] = c.banks[t1]
    v0, v1, vl = c.bytes.values()
    m.bytes[f"hbsm{t}"] = v0
    m.bytes[f"hbsm{u}"] = v1
    key = ("mesh", t, u)
    m.links[key] = c.links[("mesh", t0, t1)]
    m.bytes[_link_name(key)] = vl
    m.moved = (c, (t0, t1, t, u))
    return m


def alone_rate(cost: Cost, caps: dict[tuple, float]) -> float:
    """Blocks per cycle when the job runs alone (inf for a job with no streaming work)."""
    if cost.alone is not None:
        return cost.alone
    r = math.inf
    if cost.cycles > 0:
        r = 1.0 / cost.cycles
    for acc in cost.banks.values():
        mx = float(acc.max()) if len(acc) else 0.0
        if mx > 0:
            r = min(r, 1.0 / mx)
    for k, v in cost.links.items():
        if v > 0:
            r = min(r, caps[k] / v)
    cost.alone = r
    return r


# Column codes in :func:`share`: a bank column is ``tpb * banks + bank`` (>= 0), the link
# registered i-th is ``-1 - i`` (assigned when first seen, in this process).
_LINK_CODE: dict[tuple, int] = {}  # link key -> its code
_LINK_KEYS: list[tuple] = []  # link key by registration number
_CODES = object()  # marks the terms computed with these codes (a copied cost's are not)


def _link_code(key: tuple) -> int:
    c = _LINK_CODE.get(key)
    if c is None:
        c = _LINK_CODE[key] = -1 - len(_LINK_KEYS)
        _LINK_KEYS.append(key)
    return c


def bank_terms(c: Cost, banks: int) -> list:
    """``[(tpb, t * banks + b, demand)]``: a cost's nonzero bank demands per TPB of
    ``c.banks`` (in its order; ``b`` the nonzero banks ascending), computed once per cost --
    the bank part of both its share terms (:func:`_terms`) and its engine columns
    (``Fluid._add_use``). The arrays are never written."""
    got = c.nzb
    if got is None:
        got = c.nzb = []
        for t, acc in c.banks.items():
            acc = np.asarray(acc, dtype=np.float64)
            nz = acc.nonzero()[0]  # (a bank histogram is 1-D: np.flatnonzero)
            got.append((t, t * banks + nz, acc[nz]))
    return got


def _terms(c: Cost, banks: int) -> tuple:
    """(column codes, demands) of a cost's nonzero demands, in the definition's column order
    (bank columns ``tpb * banks + bank`` ascending, then links sorted by name; a link's code is
    :func:`_link_code`), computed once per cost (again for a cost from another process)."""
    if c.terms is None or c.terms[2] is not _CODES:
        nzb = bank_terms(c, banks)
        if len(nzb) == 1 and not c.links:  # one TPB, no links: no concatenation
            c.terms = (nzb[0][1], nzb[0][2], _CODES)
            return c.terms
        idx, val = [], []
        for _, code, dem in sorted(nzb, key=lambda e: e[0]):  # TPBs ascending (distinct)
            idx.append(code)
            val.append(dem)
        lk = sorted((k for k, x in c.links.items() if x != 0), key=str)
        if lk:
            idx.append(np.array([_link_code(k) for k in lk], dtype=np.int64))
            val.append(np.array([c.links[k] for k in lk], dtype=np.float64))
        c.terms = (np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64),
                   np.concatenate(val) if val else np.zeros(0), _CODES)
    return c.terms


#: A column whose demand in the first step is at most ``1 - _NEAR`` of its capacity never binds
#: and never saturates (see :func:`share`).
_NEAR = 1e-6


def alone_on_entries(cols: list[int], vals: list[float], columns: list[tuple[int, float]]) -> bool:
    """:func:`alone_on_columns` given the demands on ``columns`` as entries in job order
    (``vals[i]`` on column ``cols[i]``): each column's sum from 0.0 in that order, the same
    IEEE additions."""
    use: dict[int, float] = {}
    for c, v in zip(cols, vals):
        use[c] = use.get(c, 0.0) + v
    for c, cap in columns:
        u = use.get(c, 0.0)
        if u > cap * (1.0 - _NEAR) and u > 1e-12 and cap / u < 1.0:
            return False
    return True


def alone_on_columns(demands: list[dict], columns: list[tuple[int, float]]) -> bool:
    """Whether :func:`share`'s first step leaves every job at its alone rate as far as the
    ``columns`` (``(column, capacity)``) are concerned: on each, the job-order sum from 0.0 of
    the jobs' demands at their alone rates (``demands[j].get(column)``, the products ``w[j] *
    D[j, c]`` of the definition) is not near its capacity (``use <= cap * (1 - 1e-6)``), or
    ``cap / use >= 1.0`` -- then the column's step is at least ``1 - 0``. ``share`` returns
    exactly the alone rates (and no causes) iff this holds for every column it uses, since
    ``d = min(min over near columns of cap / use, 1.0)`` is then exactly 1.0 and ``lam = 1.0``.
    The sums are Python float additions in job order, the same IEEE operations as ``share``'s
    ``bincount`` (which adds in input order)."""
    for c, cap in columns:
        use = 0.0
        for d in demands:
            v = d.get(c)
            if v is not None:
                use += v
        if use > cap * (1.0 - _NEAR) and use > 1e-12 and cap / use < 1.0:
            return False
    return True


def share(costs: list[Cost], caps: dict[tuple, float], banks: int,
          causes: list[str] | None = None) -> np.ndarray:
    """Max-min fair rates (blocks per cycle) of concurrently streaming jobs.

    If ``causes`` is a list, it receives per job the kind of resource that limited it below its
    alone rate ("hbsm_bank", "ddr", "axi", "sram", "drb", "mesh"), or "" if it runs at full speed.

    The definition (``test_timing``'s reference is it, written as loops): a column per resource
    some streaming job uses -- HBSM banks (TPB, then bank ascending), then links (sorted by name)
    -- with capacity 1 granule per cycle per bank and ``caps`` per link; ``D[j, c]`` job ``j``'s
    demand on column ``c`` per block, ``w[j]`` its alone rate. Every job starts at ``lam = 0``;
    each step the active (not frozen, finite ``w``) jobs' demand on a column is the sum, *in job
    order from 0.0*, of the products ``w[j] * D[j, c]`` (each one IEEE product, then one IEEE
    addition per job: no BLAS, no reassociation, so the rates are the same bits on every machine
    and numpy build); ``d = min(min over columns of rem / use, 1 - lam)``; the active jobs' ``lam``
    grows by ``d`` and ``rem`` shrinks by ``d * use``; when ``lam`` reaches ``1 - 1e-12`` every
    active job is at its alone rate; otherwise the jobs on a column with ``rem <= 1e-9 * cap``
    freeze (their cause: that column's resource, the first such column in column order).
    The rates are ``lam * w`` (inf for a job with no streaming work).

    Computed sparsely: a job's zero demands add exact zeros, so each column's sum is
    ``np.bincount`` over the nonzero products in job order (its loop adds them in input order;
    the test checks it against the Python loop). The elementwise steps run only on the columns
    whose first-step demand ``use1 > (1 - 1e-6) * cap``. Any other column has, at every later
    step, a demand of at most ``use1`` up to rounding (a subset of the same nonnegative terms) and
    a remainder ``rem >= cap - lam * use1 > 1e-6 * cap``, so its ratio ``rem / use >= cap / use1 -
    lam > 1 - lam`` is never the minimum step and it never reaches the saturation test ``rem <=
    1e-9 * cap``: the margins are ~1e-6 against rounding errors of ~1e-14. Every active job has
    the same ``lam`` (the same increments from 0): one float.
    """
    n = len(costs)
    w = np.array([c.alone if c.alone is not None else alone_rate(c, caps) for c in costs])
    if n == 0 or not np.isfinite(w).any():
        if causes is not None:
            causes[:] = [""] * n
        return np.where(np.isfinite(w), 0.0, np.inf)
    terms = [c.terms if c.terms is not None and c.terms[2] is _CODES else _terms(c, banks)
             for c in costs]
    # every nonzero demand, in job order and within a job in column order: (code, job, demand)
    sizes = [t[0].size for t in terms]
    code = np.concatenate([t[0] for t in terms])
    val = np.concatenate([t[1] for t in terms])
    job = np.repeat(np.arange(n), sizes)
    return share_entries(w, code, val, job, caps, causes)


def share_terms(c: Cost, banks: int) -> tuple:
    """A cost's (column codes, demands) as :func:`share` reads them (:func:`_terms`, kept on
    the cost)."""
    return c.terms if c.terms is not None and c.terms[2] is _CODES else _terms(c, banks)


# ndarray.any / all / min without their Python layer (``numpy._core._methods``): the same
# reductions
_ANY, _ALL, _MIN = np.logical_or.reduce, np.logical_and.reduce, np.minimum.reduce


def share_entries(w: np.ndarray, code: np.ndarray, val: np.ndarray, job: np.ndarray,
                  caps: dict[tuple, float], causes: list[str] | None = None) -> np.ndarray:
    """:func:`share` given its jobs' alone rates ``w`` and every nonzero demand in job order
    and within a job in column order (``code``, ``val``: :func:`share_terms` of each job
    concatenated; ``job``: its job's position). ``sim/share_pack.py`` keeps these arrays from
    one call to the next."""
    n = w.size
    finite = np.isfinite(w)
    if causes is not None:
        causes[:] = [""] * n
    if n == 0 or not finite.any():
        return np.where(finite, 0.0, np.inf)
    if not code.size:
        return np.where(finite, w, np.inf)
    if not finite.all():  # (a job with no streaming work has no nonzero demand anyway)
        f = finite[job]
        code, val, job = code[f], val[f], job[f]
    prod = w[job] * val
    # a slot per code: links' slots first (link i at nl - 1 - i), then the banks'
    nl = len(_LINK_KEYS)
    col = code + nl
    use = np.bincount(col, weights=prod)  # the job-order sums (0 on a slot no job uses)
    cols = np.ones(use.size)
    ls = use[:nl].nonzero()[0]  # the used links' slots (a used column has a sum > 0)
    if ls.size:
        cols[ls] = [caps[_LINK_KEYS[nl - 1 - x]] for x in ls.tolist()]
    near = use > cols * (1.0 - _NEAR)
    if not _ANY(near):  # the first step is d = min(> 1, 1 - 0) = 1: every job alone
        return np.where(finite, w, np.inf)
    ci = near.nonzero()[0]
    keep = near[col]
    # the entries on those columns, their column renumbered 0..
    # (a near column's rank among them, as (cumsum(near) - 1)[...] -- a cumulative sum of a
    # boolean array over every column was ~1/6 of the call)
    ecol = ci.searchsorted(col[keep])
    ejob, eprod, epos, ecode = job[keep], prod[keep], val[keep] > 0, code[keep]
    cc, use = cols[ci], use[ci]
    rem = cc.copy()
    lam = 0.0
    lams = np.zeros(n)
    frozen = ~finite
    act = finite
    while True:
        inc = np.divide(rem, use, out=np.full(use.shape, np.inf), where=use > 1e-12)
        d = min(float(_MIN(inc)), 1.0 - lam)
        lam += d
        rem -= d * use
        if lam >= 1.0 - 1e-12:  # every active job reached its alone rate
            lams[act] = lam
            break
        sat = rem <= 1e-9 * cc
        if _ANY(sat):
            on = sat[ecol] & epos  # entries with a demand on a saturated column
            hit = np.zeros(n, dtype=bool)
            hit[ejob[on]] = True
            hit &= act
            if causes is not None and hit.any():  # the first saturated column of each
                # (a job's entries are in column order: its first saturated entry)
                e = (on & hit[ejob]).nonzero()[0]
                # ejob is in job order (ascending): each job's first entry is where it changes
                # (np.unique(ejob[e], return_index=True) without its sort)
                je = ejob[e]
                chg = np.empty(je.size, dtype=bool)
                chg[0] = True
                np.not_equal(je[1:], je[:-1], out=chg[1:])
                first = chg.nonzero()[0]
                js = je[first]
                for j, x in zip(js.tolist(), ecode[e[first]].tolist()):
                    causes[j] = "hbsm_bank" if x >= 0 else str(_LINK_KEYS[-1 - x][0])
            lams[hit] = lam
            frozen |= hit
        if _ALL(frozen):
            break
        rem = np.maximum(rem, 0.0)
        act = ~frozen
        a = act[ejob]
        use = np.bincount(ecol[a], weights=eprod[a], minlength=ci.size)
    return np.where(finite, lams * w, np.inf)
