"""The M100 machine description: every hardware number the compiler and the interpreter use.

This is the single source of hardware parameters (like mlir-aie's AIETargetModel). Passes, the cost
model, the encoder and the interpreter ask a :class:`Machine` for sizes; a literal such as the HBSM
size or the number of banks anywhere else is a bug.

Numbers come from the M100 paper where published ("paper") and are this project's defaults otherwise
("model"); see ``shared/M100.md``. Presets:

* ``m100``      : the full NPU, 14 clusters x 4 TPBs = 56 TPBs.
* ``m100-12c``  : 12 clusters (the paper's experiments).
* ``tiny``      : 1 cluster, 2 TPBs, 64 KiB HBSM, 16 counters (fast tests).

A machine can be loaded from a JSON or TOML override file::

    {"base": "m100", "name": "m100-8c", "clusters": 8}

Every machine has a stable :meth:`Machine.fingerprint` (a 64-bit hash of all its fields) that a
program file records, so a binary is never run on a machine it was not compiled for.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from m100.errors import M100Error

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


class MachineError(M100Error, ValueError):
    """A machine name or override file that does not describe a valid machine."""


@dataclass(frozen=True)
class Machine:
    """All hardware parameters of one M100 configuration (immutable)."""

    name: str = "m100"

    # --- hierarchy (paper) -------------------------------------------------------------------
    clusters: int = 14
    tpbs_per_cluster: int = 4
    clock_hz: float = 1.5e9  # model

    # --- HBSM, per TPB (paper) ---------------------------------------------------------------
    hbsm_bytes: int = 2 * MIB
    hbsm_banks: int = 32
    hbsm_bank_width: int = 32  # bytes per bank per cycle; also the interleave granule
    hbsm_ports: int = 8  # requester ports, round-robin arbitration
    hbsm_latency: int = 20  # cycles

    # --- sync unit (model) -------------------------------------------------------------------
    su_counters: int = 64  # counters per TPB
    su_counter_bits: int = 32
    remote_update_latency: int = 16  # cycles, intra-cluster (model)
    remote_update_latency_inter: int = 48  # cycles, across clusters (model)

    # --- tensor walker (paper semantics; level budget is model) -----------------------------
    twu_max_levels: int = 6
    twu_field_bits: int = 32  # width of Initial/Step/Final registers (model)

    # --- TCU (paper) ---------------------------------------------------------------------------
    tcu_rows: int = 8  # 8 x 64 MAC array ...
    tcu_cols: int = 64
    tcu_dot: int = 4  # ... each MAC a 4-element dot product per cycle
    tcu_tile_m: int = 32  # 32x32 @ 32x64 in 32 cycles: the natural TCU tile
    tcu_row_granule: int = 8  # paper: 8 x 64 MACs (an operand of < tcu_tile_m rows pads to this)
    tcu_tile_k: int = 32
    tcu_tile_n: int = 64
    tcu_act_bytes_per_cycle: int = 32
    tcu_weight_bytes_per_cycle: int = 64
    tcu_pipeline_latency: int = 24  # cycles from first operand to first result (model)
    # MAC rate relative to int8 (model): fp16/bf16 1/4, fp32 1/16, int4 weights dequantised on the fly
    tcu_rate_i8: float = 1.0
    tcu_rate_i4: float = 1.0
    tcu_rate_f16: float = 0.25
    tcu_rate_bf16: float = 0.25
    tcu_rate_f32: float = 1.0 / 16
    # requantization of the integer epilogue (``isa.Requant``; docs/isa.md section 5), one of
    # :data:`TCU_REQUANT_MODES` (model; the M100 decision of issue 11):
    #   "f32-rne"       the real multiplier is an f32 value ``m = multiplier * 2**-shift``:
    #                   ``round_half_even(f32(f32(acc) * m)) + zero_point``, saturated -- ONNX
    #                   QuantizeLinear of the f32 product, as onnxruntime's integer kernels (MLAS
    #                   requantize) compute it
    #   "fixed-half-up" the exact product ``acc * multiplier`` shifted right by ``shift``, rounding
    #                   half up (a gemmlowp-style fixed-point multiplier)
    tcu_requant: str = "f32-rne"
    # CVU stages the TCU's non-linear output pipeline may run after a dequantization
    # (``isa.MatMul.post``, docs/isa.md; model, session 15: the paper gives the TCU an activation
    # pipeline before the HBSM write, not its depth). 0: none -- what follows a dequantized matmul
    # is a CVU op (``from_ir/tcu_post``). At most ``cvu_max_stages`` (encoded like a CVU op's)
    tcu_post_stages: int = 8

    # --- CVU / DTDU (model) -----------------------------------------------------------------
    cvu_bytes_per_cycle: int = 64  # per pipeline stage
    cvu_stage_latency: int = 8
    cvu_max_stages: int = 8
    dtdu_bytes_per_cycle: int = 64

    # --- CSU (model) ----------------------------------------------------------------------------
    csu_overhead_cycles: int = 2000
    csu_max_requesters: int = 4  # TPBs that may request the cluster CPU at once
    csu_bytes_per_cycle: int = 16  # scalar/vector routine throughput on the cluster CPU

    # --- memory system and interconnect (paper unless noted) ---------------------------------
    ddr_bytes: int = 64 * GIB
    ddr_bandwidth: float = 273e9  # bytes/s, 8 LPDDR5X channels
    ddr_latency: int = 200  # cycles (model)
    axi_masters: int = 2
    axi_bandwidth: float = 128e9  # bytes/s per AXI master
    ccb_sram_bytes: int = 32 * MIB
    ccb_sram_banks: int = 4
    ccb_sram_interleave: int = 4 * KIB
    ccb_dma_engines: int = 2
    ccb_cores: int = 4
    ccb_sram_bandwidth: float = 256e9  # bytes/s (model)
    mesh_bandwidth: float = 256e9  # bytes/s per node pair
    mesh_inter_cluster_bandwidth: float = 64e9  # bytes/s between TPBs of different clusters (model)
    drb_bandwidth: float = 256e9  # bytes/s aggregate
    icb_bits_per_cycle: int = 64
    dma_setup_cycles: int = 32  # model
    # transfers a CCB DMA engine may have in flight (model; lead decision, session 11: 2, as an
    # AXI master with outstanding reads). A transfer is in flight from the start of its setup to
    # the end of its data. The setups of one engine stay serial (one descriptor at a time,
    # ``dma_setup_cycles`` each) and its data phases follow each other in program order; the
    # fixed latency after a setup (``ddr_latency``, ``hbsm_latency``) of one transfer overlaps
    # the latency and the data phase of the transfers still in flight. A transfer that reads
    # bytes an in-flight transfer of its engine writes is not issued before that one ends (the
    # engine compares the byte ranges). 1: every transfer waits for the previous one's end
    # (sessions 1-10). Per transfer of a back-to-back stream the engine then needs
    # ``max(data, dma_setup_cycles, (setup + latency + data) / dma_outstanding)`` cycles
    dma_outstanding: int = 2
    mem_align: int = 64  # DDR / CCB SRAM buffer alignment in bytes (model: one LPDDR5X burst)

    # ------------------------------------------------------------------------------------------
    @property
    def num_tpbs(self) -> int:
        return self.clusters * self.tpbs_per_cluster

    def cluster_of(self, tpb: int) -> int:
        self.check_tpb(tpb)
        return tpb // self.tpbs_per_cluster

    def check_tpb(self, tpb: int) -> None:
        if not 0 <= tpb < self.num_tpbs:
            raise MachineError(f"TPB {tpb} does not exist on machine '{self.name}' "
                               f"({self.num_tpbs} TPBs)")

    @property
    def all_tpbs_mask(self) -> int:
        return (1 << self.num_tpbs) - 1

    def tcu_padded_rows(self, m: int) -> int:
        """Rows the TCU computes for an operand of ``m`` rows: whole natural tiles
        (``tcu_tile_m``), or, for fewer rows than one tile, whole row granules
        (``tcu_row_granule``: the paper's array is 8 rows x 64 columns of MACs, so a GEMV's one
        row costs what 8 rows cost, not what 32 do). The cost model and the interpreter both
        charge ``tcu_padded_rows(m) * K_padded * N_padded`` MACs at the peak rate."""
        if m < self.tcu_tile_m:
            return -(-m // self.tcu_row_granule) * self.tcu_row_granule
        return -(-m // self.tcu_tile_m) * self.tcu_tile_m

    @property
    def tcu_macs_per_cycle_i8(self) -> int:
        """Peak int8 MACs per cycle (8 x 64 x 4 = 2048 on the M100)."""
        return self.tcu_rows * self.tcu_cols * self.tcu_dot

    def tcu_rate(self, dtype_name: str) -> float:
        """MAC rate of a dtype relative to int8 (``i8``, ``i4``, ``f16``, ``bf16``, ``f32``)."""
        try:
            return float(getattr(self, f"tcu_rate_{dtype_name}"))
        except AttributeError:
            raise MachineError(f"the TCU has no rate for dtype '{dtype_name}'") from None

    def tcu_macs_per_cycle(self, dtype_name: str) -> float:
        return self.tcu_macs_per_cycle_i8 * self.tcu_rate(dtype_name)

    def bytes_per_cycle(self, bandwidth: float) -> float:
        """Convert a bandwidth in bytes/s into bytes per NPU clock cycle."""
        return bandwidth / self.clock_hz

    @property
    def ddr_bytes_per_cycle(self) -> float:
        return self.bytes_per_cycle(self.ddr_bandwidth)

    # --- the CCB DMA engine (one definition: the interpreter's ``sim/timing.py`` and
    # ``sim/dma_ahead.py``, the plan's ``CostModel`` and ``passes/schedule/dma_queue.py``) ---------
    def dma_fixed_latency(self, ddr: bool, hbsm: bool) -> int:
        """The cycles of a CCB DMA before its data streams: ``dma_setup_cycles``, then
        ``ddr_latency`` if an end is DDR and ``hbsm_latency`` if an end is an HBSM (the latency
        after the setup runs beside the transfers in flight, ``dma_outstanding``)."""
        return self.dma_setup_cycles + (self.ddr_latency if ddr else 0) \
            + (self.hbsm_latency if hbsm else 0)

    def dma_stream_period(self, cycles: float, fixed: float) -> float:
        """The engine cycles per transfer of a back-to-back stream of equal transfers of
        ``cycles`` each (``fixed`` of them before the data, :meth:`dma_fixed_latency`): with
        ``D = dma_outstanding`` transfers in flight, setups serial and data phases in queue order,
        ``max(data, dma_setup_cycles, cycles / D)`` with ``data = cycles - fixed`` -- the steady
        state of the engine's recurrence (``test/unit/schedule/test_dma_queue.py`` derives it
        from the recurrence); ``cycles`` at depth 1."""
        D = self.dma_outstanding
        if D == 1 or cycles <= 0:
            return cycles
        return max(cycles - fixed, float(self.dma_setup_cycles), cycles / D)

    @property
    def hbsm_bytes_per_cycle(self) -> int:
        return self.hbsm_banks * self.hbsm_bank_width

    def hbsm_bank(self, address: int) -> int:
        return (address // self.hbsm_bank_width) % self.hbsm_banks

    @property
    def su_counter_max(self) -> int:
        return (1 << self.su_counter_bits) - 1

    # --- identity -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> int:
        """A stable 64-bit hash of every field (name included), recorded in program files. A
        field added later (:data:`FINGERPRINT_SINCE`) is hashed only when it differs from the
        value every machine had before it existed, so a machine that keeps that value keeps its
        fingerprint (program files and compile caches stay valid)."""
        d = {k: v for k, v in self.to_dict().items()
             if k not in FINGERPRINT_SINCE or v != FINGERPRINT_SINCE[k]}
        blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        return int.from_bytes(hashlib.sha256(blob).digest()[:8], "little")

    def with_overrides(self, **overrides: Any) -> Machine:
        """A copy with some fields replaced; each value is checked on its own (type, range)
        before the machine as a whole (:meth:`validate`)."""
        known = {f.name for f in dataclasses.fields(self)}
        for key, value in overrides.items():
            if key not in known:
                raise MachineError(f"unknown machine parameter '{key}' "
                                   f"(known: {', '.join(sorted(known))})")
            check_field(key, value)
        m = dataclasses.replace(self, **overrides)
        m.validate()
        return m

    def replace(self, **overrides: Any) -> Machine:
        """A copy with some fields changed, checked like an override file
        (``get_machine("tiny").replace(hbsm_bytes=32 * KIB)``); same as :meth:`with_overrides`."""
        return self.with_overrides(**overrides)

    def validate(self) -> None:
        """Every field in its range (:data:`FIELD_LIMITS`), then the relations between fields."""
        for f in dataclasses.fields(self):
            try:
                check_field(f.name, getattr(self, f.name))
            except MachineError as e:
                raise MachineError(f"machine '{self.name}': {e}") from None
        if self.hbsm_bytes % (self.hbsm_banks * self.hbsm_bank_width):
            raise MachineError(f"machine '{self.name}': hbsm_bytes must be a multiple of "
                               "hbsm_banks * hbsm_bank_width")
        if self.tcu_tile_m % self.tcu_row_granule:
            raise MachineError(f"machine '{self.name}': tcu_row_granule must divide tcu_tile_m")
        if self.tcu_post_stages > self.cvu_max_stages:
            raise MachineError(f"machine '{self.name}': tcu_post_stages must be at most "
                               "cvu_max_stages (its stages are encoded like a CVU op's)")
        if self.num_tpbs > 64:
            raise MachineError(f"machine '{self.name}': at most 64 TPBs fit a TPB mask")

    # --- carrying a machine in IR and program files ---------------------------------------------
    def is_preset(self) -> bool:
        """True when this machine is exactly the preset of its name."""
        return PRESETS.get(self.name) == self

    def spec(self) -> str:
        """The machine as compact JSON, ``{"base": PRESET, "name": ..., <fields that differ>}``
        (the closest preset as base); :func:`machine_from_spec` gives the same machine back. This
        is what the IR (``tpb.program``) and program files carry for a machine that is not a
        preset, so that a program never depends on a machine file being around."""
        mine = self.to_dict()

        def diff(base: Machine) -> dict[str, Any]:
            return {k: v for k, v in mine.items() if k != "name" and base.to_dict()[k] != v}

        base = min(PRESETS, key=lambda n: len(diff(PRESETS[n])))  # first preset wins a tie
        return json.dumps({"base": base, "name": self.name, **diff(PRESETS[base])},
                          sort_keys=True, separators=(",", ":"))


# Allowed values of every field: (type, lowest, highest). int fields take Python ints only (no
# bools, no floats), float fields finite real numbers (ints allowed). The bounds are what the
# encoding, the cost model and the interpreter can represent, far beyond any real configuration.
_INT = int
_FLOAT = float
FIELD_LIMITS: dict[str, tuple[type, float, float]] = {
    "clusters": (_INT, 1, 64), "tpbs_per_cluster": (_INT, 1, 64),
    "clock_hz": (_FLOAT, 1e6, 1e11),
    "hbsm_bytes": (_INT, 1 * KIB, 1 * GIB), "hbsm_banks": (_INT, 1, 1024),
    "hbsm_bank_width": (_INT, 1, 4096), "hbsm_ports": (_INT, 1, 1024),
    "hbsm_latency": (_INT, 1, 1 << 20),
    "su_counters": (_INT, 1, 1 << 16), "su_counter_bits": (_INT, 1, 64),
    "remote_update_latency": (_INT, 1, 1 << 20), "remote_update_latency_inter": (_INT, 1, 1 << 20),
    "twu_max_levels": (_INT, 1, 16), "twu_field_bits": (_INT, 8, 64),
    "tcu_rows": (_INT, 1, 1 << 12), "tcu_cols": (_INT, 1, 1 << 12), "tcu_dot": (_INT, 1, 1 << 12),
    "tcu_tile_m": (_INT, 1, 1 << 16), "tcu_tile_k": (_INT, 1, 1 << 16),
    "tcu_row_granule": (_INT, 1, 1 << 16),
    "tcu_tile_n": (_INT, 1, 1 << 16),
    "tcu_act_bytes_per_cycle": (_INT, 1, 1 << 20), "tcu_weight_bytes_per_cycle": (_INT, 1, 1 << 20),
    "tcu_pipeline_latency": (_INT, 1, 1 << 20), "tcu_post_stages": (_INT, 0, 64),
    "tcu_rate_i8": (_FLOAT, 1e-6, 1e3), "tcu_rate_i4": (_FLOAT, 1e-6, 1e3),
    "tcu_rate_f16": (_FLOAT, 1e-6, 1e3), "tcu_rate_bf16": (_FLOAT, 1e-6, 1e3),
    "tcu_rate_f32": (_FLOAT, 1e-6, 1e3),
    "cvu_bytes_per_cycle": (_INT, 1, 1 << 20), "cvu_stage_latency": (_INT, 1, 1 << 20),
    "cvu_max_stages": (_INT, 1, 64), "dtdu_bytes_per_cycle": (_INT, 1, 1 << 20),
    "csu_overhead_cycles": (_INT, 1, 1 << 30), "csu_max_requesters": (_INT, 1, 64),
    "csu_bytes_per_cycle": (_INT, 1, 1 << 20),
    "ddr_bytes": (_INT, 1 * MIB, 1 << 40), "ddr_bandwidth": (_FLOAT, 1e6, 1e15),
    "ddr_latency": (_INT, 1, 1 << 20), "axi_masters": (_INT, 1, 64),
    "axi_bandwidth": (_FLOAT, 1e6, 1e15), "ccb_sram_bytes": (_INT, 1 * KIB, 1 << 32),
    "ccb_sram_banks": (_INT, 1, 1024), "ccb_sram_interleave": (_INT, 1, 1 << 20),
    "ccb_dma_engines": (_INT, 1, 64), "ccb_cores": (_INT, 1, 64),
    "ccb_sram_bandwidth": (_FLOAT, 1e6, 1e15), "mesh_bandwidth": (_FLOAT, 1e6, 1e15),
    "mesh_inter_cluster_bandwidth": (_FLOAT, 1e6, 1e15), "drb_bandwidth": (_FLOAT, 1e6, 1e15),
    "icb_bits_per_cycle": (_INT, 1, 1 << 16), "dma_setup_cycles": (_INT, 1, 1 << 20),
    "dma_outstanding": (_INT, 1, 64),
    "mem_align": (_INT, 1, 1 << 20),
}


#: fields added after program files recorded fingerprints -> the value machines had implicitly
#: before (:meth:`Machine.fingerprint` leaves such a field out while it has that value)
FINGERPRINT_SINCE: dict[str, Any] = {"tcu_post_stages": 8}

#: the TCU requant modes (``Machine.tcu_requant``)
TCU_REQUANT_MODES = ("f32-rne", "fixed-half-up")
#: fields whose value is one of a fixed set of strings
FIELD_CHOICES: dict[str, tuple[str, ...]] = {"tcu_requant": TCU_REQUANT_MODES}


def check_field(key: str, value: Any) -> None:
    """Raise :class:`MachineError` unless ``value`` is a valid value of machine field ``key``."""
    if key in FIELD_CHOICES:
        if not isinstance(value, str) or value not in FIELD_CHOICES[key]:
            raise MachineError(f"machine parameter '{key}' must be one of "
                               f"{', '.join(FIELD_CHOICES[key])}, got {value!r}")
        return
    if key == "name":
        if not isinstance(value, str) or not value or len(value.encode()) > 255 \
                or not value.isprintable():
            raise MachineError(f"machine parameter 'name' must be a non-empty printable string "
                               f"of at most 255 bytes, got {value!r}")
        return
    kind, lo, hi = FIELD_LIMITS[key]
    if kind is _INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MachineError(f"machine parameter '{key}' must be an integer, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MachineError(f"machine parameter '{key}' must be a finite number, got {value!r}")
    if not lo <= value <= hi:
        fmt = (lambda x: str(int(x))) if kind is _INT else (lambda x: f"{x:g}")
        raise MachineError(f"machine parameter '{key}' = {value!r} is out of range "
                           f"[{fmt(lo)}, {fmt(hi)}]")


def _tiny() -> Machine:
    return Machine(name="tiny", clusters=1, tpbs_per_cluster=2, hbsm_bytes=64 * KIB, su_counters=16,
                   ccb_sram_bytes=1 * MIB, ddr_bytes=1 * GIB)


PRESETS: dict[str, Machine] = {
    "m100": Machine(),
    "m100-12c": Machine(name="m100-12c", clusters=12),
    "tiny": _tiny(),
}

DEFAULT_MACHINE = "m100"


def machine_from_dict(data: Any, where: str, default_name: str | None = None) -> Machine:
    """A machine from ``{"base": PRESET, field: value, ...}`` (a machine file's or a spec's
    contents); errors name ``where``."""
    if not isinstance(data, dict):
        raise MachineError(f"{where}: a machine description must be a table/object")
    data = dict(data)
    base = data.pop("base", DEFAULT_MACHINE)
    if not isinstance(base, str) or base not in PRESETS:
        raise MachineError(f"{where}: unknown base machine {base!r} (presets: {', '.join(PRESETS)})")
    if default_name is not None:
        data.setdefault("name", default_name)
    try:
        return PRESETS[base].with_overrides(**data)
    except MachineError as e:
        raise MachineError(f"{where}: {e}") from None


def machine_from_spec(spec: str) -> Machine:
    """The machine of :meth:`Machine.spec` text."""
    try:
        data = json.loads(spec)
    except json.JSONDecodeError as e:
        raise MachineError(f"machine spec is not JSON: {e}") from None
    return machine_from_dict(data, "machine spec")


def load_machine_file(path: str | Path) -> Machine:
    """Load a machine from a JSON or TOML file: ``base`` (a preset name) plus overrides."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise MachineError(f"{p}: cannot read machine file: {e.strerror}") from None
    except UnicodeDecodeError:
        raise MachineError(f"{p}: not a machine file (not UTF-8 text)") from None
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(
            text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, ValueError) as e:
        raise MachineError(f"{p}: not a valid {'TOML' if p.suffix == '.toml' else 'JSON'} "
                           f"machine file: {e}") from None
    return machine_from_dict(data, str(p), p.stem)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a machine parameter can take")


def get_machine(name_or_path: str | Machine | None = None) -> Machine:
    """A preset by name, a machine file by path, or the default machine for ``None``."""
    if isinstance(name_or_path, Machine):
        return name_or_path
    if name_or_path is None:
        return PRESETS[DEFAULT_MACHINE]
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    if name_or_path.endswith((".json", ".toml")):
        return load_machine_file(name_or_path)
    raise MachineError(f"unknown machine '{name_or_path}' (presets: {', '.join(PRESETS)}; "
                       "or a .json/.toml override file)")


def machine_ref(machine: str | Machine | None) -> str:
    """A name the compiler's passes and IR can carry for ``machine`` (they name machines by string).

    A string is returned unchanged; a :class:`Machine` equal to a preset gives the preset's name;
    any other machine is written once to a machine file named by its fingerprint under the m100
    cache directory (``$M100_CACHE_DIR``, default ``~/.cache/m100``) and that file's path is
    returned, so ``get_machine(machine_ref(m)) == m`` in every process of the host.
    """
    if machine is None:
        return DEFAULT_MACHINE
    if isinstance(machine, str):
        return machine
    machine.validate()
    for name, preset in PRESETS.items():
        if preset == machine:
            return name
    base = os.environ.get("M100_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "m100")
    folder = Path(base) / "machines"
    path = folder / f"{machine.name}-{machine.fingerprint():016x}.json"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(machine.to_dict(), base=DEFAULT_MACHINE), indent=1) + "\n")
        os.replace(tmp, path)  # atomic: parallel sweep workers may write the same file
    return str(path)


def machine_by_fingerprint(fp: int) -> Machine | None:
    for m in PRESETS.values():
        if m.fingerprint() == fp:
            return m
    return None


for _m in PRESETS.values():
    _m.validate()

__all__ = ["Machine", "MachineError", "PRESETS", "DEFAULT_MACHINE", "FIELD_LIMITS", "FIELD_CHOICES",
           "FINGERPRINT_SINCE",
           "TCU_REQUANT_MODES", "check_field", "get_machine", "load_machine_file", "machine_by_fingerprint", "machine_from_dict",
           "machine_from_spec", "machine_ref"]
