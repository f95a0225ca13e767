"""Design-space sweeps: machine fields x schedule options, one compile + interpreter run per point.

A sweep is described by a TOML spec (``docs/research.md``)::

    model = "model.onnx"              # a path (relative to the spec), or "builtin:resnet18"
    model_args = { hw = 64 }          # keyword arguments of a builtin model
    machine = "tiny"                  # the base machine: preset or machine file
    metrics = ["cycles", "latency_us", "tcu_util", "ddr_bytes", "compile_s"]
    samples = 100                     # optional: N random distinct points instead of the product
    seed = 0                          # of the random points
    mode = "timing"                   # interpreter mode per point (timing / full)

    [schedule]                        # fixed schedule options for every point
    tpbs = 0

    [grid]                            # keys machine.<field> / schedule.<option>, lists of values
    "machine.hbsm_bytes" = [32768, 65536]
    "schedule.strategy" = ["data-parallel", "pipeline"]

Every point is one task: build the machine (``Machine.replace``), compile (cached on disk by model
hash, machine fingerprint, options and a fingerprint of the compiler's sources), run the interpreter,
collect the metrics. Points run as Ray tasks when Ray is installed (``ray.init()`` locally, or a
cluster with ``address``), else in a local process pool (said on stderr); a failing point is a row
with its ``error``. ``m100 sweep SPEC.toml -o results.csv`` is the command line.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib
import itertools
import json
import os
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m100.errors import M100Error
from m100.targets.m100.machine import Machine, get_machine

SCHEDULE_KEYS = ("strategy", "tpbs", "clusters", "sync_mode", "seed")
SCHEDULE_DEFAULTS = dict(strategy="auto", tpbs=0, clusters=0, sync_mode="dataflow", seed=0)
DEFAULT_METRICS = ("cycles", "latency_us", "tcu_util", "ddr_bytes", "compile_s")
# every metric a point can report (``metrics`` selects among them; ``error`` is always a column)
METRICS = DEFAULT_METRICS + ("pred_cycles", "tcu_util_used", "instructions", "counters_max",
                             "sim_s", "cached")
SPEC_KEYS = ("model", "model_args", "machine", "metrics", "samples", "seed", "mode", "schedule",
             "grid", "cache")
BUILTINS = {"mlp": "mlp", "convnet": "conv_relu_maxpool", "conv_relu_maxpool": "conv_relu_maxpool",
            "resnet18": "resnet18"}
BACKENDS = ("auto", "ray", "process", "serial")
RAY_START_ATTEMPTS = 3


class SweepError(M100Error):
    """A bad sweep spec or option (one line naming the spec and the key)."""


# --- the spec --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelRef:
    """How a worker gets the model: a file path or a builtin generator with keyword arguments."""

    path: str = ""
    builtin: str = ""
    args: tuple[tuple[str, Any], ...] = ()

    def load(self):
        if self.builtin:
            from m100.frontend import models
            return getattr(models, BUILTINS[self.builtin])(**dict(self.args))
        return self.path

    @property
    def label(self) -> str:
        if self.builtin:
            return self.builtin + "".join(f",{k}={v}" for k, v in self.args)
        return self.path


@dataclass
class SweepSpec:
    model: ModelRef
    machine: Machine
    grid: dict[str, list]
    metrics: tuple[str, ...] = DEFAULT_METRICS
    samples: int = 0
    seed: int = 0
    mode: str = "timing"
    schedule: dict[str, Any] = field(default_factory=dict)
    cache: bool = True
    name: str = "sweep"

    def points(self) -> list[dict[str, Any]]:
        """The grid's cartesian product, or ``samples`` distinct random points of it."""
        keys = list(self.grid)
        sizes = [len(self.grid[k]) for k in keys]
        total = 1
        for n in sizes:
            total *= n
        if not self.samples:
            return [dict(zip(keys, vals, strict=True))
                    for vals in itertools.product(*(self.grid[k] for k in keys))]
        if self.samples > total:
            raise SweepError(f"{self.name}: samples = {self.samples} but the grid has only "
                             f"{total} points")
        import numpy as np
        rng = np.random.default_rng(self.seed)
        out = []
        for flat in sorted(rng.choice(total, size=self.samples, replace=False).tolist()):
            point = {}
            for k, n in zip(reversed(keys), reversed(sizes), strict=True):
                flat, i = divmod(flat, n)
                point[k] = self.grid[k][i]
            out.append({k: point[k] for k in keys})
        return out


def _flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def parse_spec(data: dict, base_dir: str | Path = ".", name: str = "sweep") -> SweepSpec:
    """A :class:`SweepSpec` from the spec's table (TOML parsed), checking every key."""
    base_dir = Path(base_dir)

    def bad(msg: str) -> SweepError:
        return SweepError(f"{name}: {msg}")

    unknown = set(data) - set(SPEC_KEYS)
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(SPEC_KEYS)})")
    if "model" not in data:
        raise bad("the spec needs a 'model' (an .onnx/.mlir path or builtin:<name>)")
    model = data["model"]
    args = data.get("model_args", {})
    if not isinstance(args, dict):
        raise bad("'model_args' must be a table")
    if isinstance(model, str) and model.startswith("builtin:"):
        b = model.split(":", 1)[1]
        if b not in BUILTINS:
            raise bad(f"unknown builtin model '{b}' (builtins: {', '.join(BUILTINS)})")
        ref = ModelRef(builtin=b, args=tuple(sorted(args.items())))
    elif isinstance(model, str):
        if args:
            raise bad("'model_args' is only for builtin:<name> models")
        p = Path(model) if Path(model).is_absolute() else base_dir / model
        if not p.exists():
            raise bad(f"model '{model}': no such file ({p})")
        ref = ModelRef(path=str(p))
    else:
        raise bad("'model' must be a string")
    mspec = data.get("machine", "m100")
    if isinstance(mspec, str) and mspec.endswith((".json", ".toml")) and not Path(mspec).is_absolute():
        mspec = str(base_dir / mspec)
    try:
        machine = get_machine(mspec)
    except M100Error as e:
        raise bad(str(e)) from None
    metrics = tuple(data.get("metrics", DEFAULT_METRICS))
    for m in metrics:
        if m not in METRICS:
            raise bad(f"unknown metric '{m}' (metrics: {', '.join(METRICS)})")
    schedule = dict(data.get("schedule", {}))
    for k in schedule:
        if k not in SCHEDULE_KEYS:
            raise bad(f"unknown schedule option '{k}' (options: {', '.join(SCHEDULE_KEYS)})")
    grid = _flatten(data.get("grid", {}))
    if not grid:
        raise bad("the [grid] table is empty")
    fields = {f.name for f in dataclasses.fields(Machine)}
    for key, values in grid.items():
        kind, _, what = key.partition(".")
        if kind == "machine":
            if what not in fields or what == "name":
                raise bad(f"grid key '{key}': '{what}' is not a machine field "
                          f"(fields: {', '.join(sorted(fields - {'name'}))})")
        elif kind == "schedule":
            if what not in SCHEDULE_KEYS:
                raise bad(f"grid key '{key}': unknown schedule option (options: "
                          f"{', '.join(SCHEDULE_KEYS)})")
        else:
            raise bad(f"grid key '{key}' must start with 'machine.' or 'schedule.'")
        if not isinstance(values, list) or not values:
            raise bad(f"grid key '{key}' needs a non-empty list of values")
    samples = data.get("samples", 0)
    if not isinstance(samples, int) or samples < 0:
        raise bad("'samples' must be a non-negative integer")
    mode = data.get("mode", "timing")
    if mode not in ("timing", "full"):
        raise bad(f"mode '{mode}' must be 'timing' or 'full'")
    return SweepSpec(ref, machine, grid, metrics, samples, int(data.get("seed", 0)), mode,
                     schedule, bool(data.get("cache", True)), name)


def load_spec(path: str | Path) -> SweepSpec:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise SweepError(f"{p}: cannot read the sweep spec: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{p}: not valid TOML: {e}") from None
    return parse_spec(data, p.parent, str(p))


# --- one point (runs in a worker) ------------------------------------------------------------------
_FRONTEND: dict[str, Any] = {}  # model hash -> frontend module, per worker process
_COMPILER_FP: list[str] = []


def compiler_fingerprint() -> str:
    """A hash of the compiler's and the interpreter's sources: a cached compile is reused only by
    the same code."""
    if not _COMPILER_FP:
        h = hashlib.sha256()
        for pkg in ("m100", "m100.passes", "m100.dialects", "m100.targets", "m100.frontend",
                    "m100.tools", "m100.sim"):
            root = Path(importlib.import_module(pkg).__file__).parent
            for f in sorted(root.rglob("*.py")):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
        _COMPILER_FP.append(h.hexdigest()[:16])
    return _COMPILER_FP[0]


def cache_dir() -> Path:
    base = os.environ.get("M100_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "m100")
    return Path(base) / "compile"


def cache_key(model_hash: str, machine: Machine, options: dict[str, Any]) -> str:
    blob = json.dumps(dict(model=model_hash, machine=f"{machine.fingerprint():016x}",
                           options={k: options[k] for k in sorted(options)},
                           compiler=compiler_fingerprint()), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def model_hash(ref: ModelRef) -> str:
    from m100.api import load
    return load(ref.load()).hash


def _frontend(ref: ModelRef, mhash: str):
    if mhash not in _FRONTEND:
        from m100.tools.driver import load_model
        module, _ = load_model(ref.load())
        _FRONTEND[mhash] = module
    return _FRONTEND[mhash]


def _compile_cached(task: dict, machine: Machine, options: dict[str, Any]):
    """(program, compile facts, cached?) for one point, from the disk cache when possible."""
    from m100.targets.m100.program import Program
    from m100.tools import driver

    key = cache_key(task["model_hash"], machine, options)
    folder = cache_dir() if task["cache"] else None
    if folder is not None and (folder / f"{key}.json").exists():
        try:
            facts = json.loads((folder / f"{key}.json").read_text())
            prog = Program.from_bytes((folder / f"{key}.m100").read_bytes(), machine)
            return prog, facts, True
        except (OSError, ValueError, M100Error):
            pass  # a torn or stale entry: compile again and overwrite it
    module = _frontend(task["model"], task["model_hash"])  # shared by the points: not timed
    t0 = time.perf_counter()
    cr = driver.compile(module, machine, options["tpbs"],
                        options["sync_mode"], clusters=options["clusters"],
                        strategy=options["strategy"], seed=options["seed"])
    facts = dict(compile_s=time.perf_counter() - t0,
                 pred_cycles=float(cr.program.metadata.get("predicted_cycles", "nan")),
                 instructions=cr.num_instructions,
                 counters_max=max(cr.counters_per_tpb.values(), default=0))
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = f".{os.getpid()}.tmp"
        (folder / f"{key}.m100{tmp}").write_bytes(cr.program.to_bytes(machine))
        os.replace(folder / f"{key}.m100{tmp}", folder / f"{key}.m100")
        (folder / f"{key}.json{tmp}").write_text(json.dumps(facts))
        os.replace(folder / f"{key}.json{tmp}", folder / f"{key}.json")
    return cr.program, facts, False


def evaluate(task: dict) -> dict[str, Any]:
    """Compile and run one point; never raises (a failure is the row's ``error``)."""
    from m100.tools import driver

    point = task["point"]
    row: dict[str, Any] = dict(point)
    try:
        machine = task["machine"].replace(**{k.split(".", 1)[1]: v for k, v in point.items()
                                             if k.startswith("machine.")})
        options = dict(SCHEDULE_DEFAULTS) | task["schedule"] | {
            k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("schedule.")}
        prog, facts, cached = _compile_cached(task, machine, options)
        t0 = time.perf_counter()
        inputs = driver.random_inputs(prog) if task["mode"] == "full" else {}
        res = driver.run(prog, inputs, mode=task["mode"], machine=machine)
        sim_s = time.perf_counter() - t0
        from m100.api import Run
        run = Run(res, machine, sim_s)
        row.update(run.metrics(), sim_s=sim_s, cached=cached, **facts)
        row["error"] = "; ".join(f"{r.kind}: {r.message}".splitlines()[0]
                                 for r in res.reports[:3])
    except M100Error as e:
        row["error"] = (str(e).strip().splitlines() or [type(e).__name__])[0]
    except Exception as e:  # noqa: BLE001 - an internal error of one point must not stop a sweep
        first = (str(e).strip().splitlines() or [""])[0]
        row["error"] = f"internal error: {type(e).__name__}: {first}"
    return row


# --- running a sweep -------------------------------------------------------------------------------
def _say(msg: str) -> None:
    print(f"m100 sweep: {msg}", file=sys.stderr)


def _progress(total: int, enabled: bool):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    return Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), TextColumn("{task.fields[errors]} errors"),
                    console=Console(stderr=True), disable=not enabled, transient=False)


def _ray_available() -> bool:
    try:
        importlib.import_module("ray")
        return True
    except ImportError:
        return False


def _run_ray(tasks: list[dict], workers: int, address: str | None, tick) -> list[dict]:
    import ray

    started = False
    if not ray.is_initialized():
        kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                  configure_logging=False)
        if address:
            ray.init(address=address, **kw)
        else:
            # a local Ray gives its raylet 30 s to register; on a loaded host that can be too short
            for attempt in range(RAY_START_ATTEMPTS):
                try:
                    ray.init(num_cpus=workers, **kw)
                    break
                except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception on time-out
                    ray.shutdown()
                    if attempt + 1 == RAY_START_ATTEMPTS:
                        raise SweepError(f"the local Ray did not start ({e}); try again, or "
                                         "--backend process") from None
                    _say(f"the local Ray did not start ({e}); trying again")
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(evaluate)
        pending = {remote.remote(t): i for i, t in enumerate(tasks)}
        out: list[dict | None] = [None] * len(tasks)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    out[i] = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a worker that died: the row says so
                    out[i] = dict(tasks[i]["point"], error=f"ray: {type(e).__name__}: "
                                  f"{(str(e).splitlines() or [''])[0]}")
                tick(out[i])
        return out  # type: ignore[return-value]
    finally:
        if started:
            ray.shutdown()


def _run_pool(tasks: list[dict], workers: int, tick) -> list[dict]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    out: list[dict | None] = [None] * len(tasks)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futs = {pool.submit(evaluate, t): i for i, t in enumerate(tasks)}
        for f in as_completed(futs):
            i = futs[f]
            try:
                out[i] = f.result()
            except Exception as e:  # noqa: BLE001 - a worker process that died
                out[i] = dict(tasks[i]["point"], error=f"worker: {type(e).__name__}: {e}")
            tick(out[i])
    return out  # type: ignore[return-value]


def run(spec: SweepSpec | str | Path, *, workers: int = 0, address: str | None = None,
        backend: str = "auto", progress: bool = True, cache: bool | None = None) -> list[dict]:
    """Run every point of ``spec``; one row dict per point, in the order of ``spec.points()``.

    ``backend``: ``auto`` (Ray when installed, else a process pool), ``ray``, ``process`` or
    ``serial`` (in this process). ``workers``: parallel points (default: the CPU count);
    ``address``: a Ray cluster (``ray://host:10001`` or ``auto``), Ray only."""
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend '{backend}' (backends: {', '.join(BACKENDS)})")
    workers = workers or os.cpu_count() or 1
    if backend == "auto":
        if address or _ray_available():
            backend = "ray"
        else:
            backend = "process"
            _say(f"Ray is not installed (pip install 'm100[ray]'): running the points in a "
                 f"local process pool of {workers} workers")
    if backend == "ray" and not _ray_available():
        raise SweepError("Ray is not installed (pip install 'm100[ray]'); use --backend process")
    if address and backend != "ray":
        raise SweepError(f"--address needs the Ray backend, not '{backend}'")
    mhash = model_hash(spec.model)
    base = dict(model=spec.model, model_hash=mhash, machine=spec.machine,
                schedule=spec.schedule, mode=spec.mode,
                cache=spec.cache if cache is None else cache)
    tasks = [dict(base, point=p) for p in spec.points()]
    where = (f"Ray cluster {address}" if address else f"Ray, {workers} local workers") \
        if backend == "ray" else (f"process pool, {workers} workers" if backend == "process"
                                  else "this process")
    _say(f"{len(tasks)} points of {spec.model.label} on {where}")
    with _progress(len(tasks), progress) as bar:
        tid = bar.add_task("sweep", total=len(tasks), errors=0)
        errors = [0]

        def tick(row: dict) -> None:
            errors[0] += bool(row.get("error"))
            bar.update(tid, advance=1, errors=errors[0])

        if backend == "ray":
            rows = _run_ray(tasks, workers, address, tick)
        elif backend == "process":
            rows = _run_pool(tasks, workers, tick)
        else:
            rows = []
            for t in tasks:
                rows.append(evaluate(t))
                tick(rows[-1])
    return [_columns(spec, r) for r in rows]


def _columns(spec: SweepSpec, row: dict) -> dict:
    out = {k: row.get(k) for k in spec.grid}
    for m in spec.metrics:
        out[m] = row.get(m)
    out["error"] = row.get("error") or ""
    return out


def write_csv(rows: list[dict], path: str | Path) -> None:
    if not rows:
        raise SweepError("no rows to write")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def frame(rows: list[dict]):
    """The rows as a pandas DataFrame."""
    import pandas as pd
    return pd.DataFrame(rows)


def sweep(spec: SweepSpec | str | Path | dict, **kw):
    """The Python API of ``m100 sweep``: a DataFrame with one row per point. ``spec`` may also be
    the spec's table as a dict (paths relative to the current directory)."""
    if isinstance(spec, dict):
        spec = parse_spec(spec)
    return frame(run(spec, **kw))


def pareto(df, minimize: list[str]):
    """A boolean Series: the rows no other error-free row beats on every ``minimize`` column
    (<= everywhere and < somewhere). Rows with an error are never on the front."""
    import numpy as np
    ok = (df["error"].fillna("") == "") if "error" in df else np.ones(len(df), bool)
    vals = df[minimize].to_numpy(dtype=float)
    front = np.zeros(len(df), bool)
    idx = np.flatnonzero(np.asarray(ok))
    for i in idx:
        v = vals[i]
        others = vals[idx]
        dominated = np.any(np.all(others <= v, axis=1) & np.any(others < v, axis=1))
        front[i] = not dominated
    import pandas as pd
    return pd.Series(front, index=df.index)


__all__ = ["BACKENDS", "DEFAULT_METRICS", "METRICS", "ModelRef", "SweepError", "SweepSpec",
           "cache_key", "compiler_fingerprint", "evaluate", "frame", "load_spec", "pareto",
           "parse_spec", "run", "sweep", "write_csv"]
