"""Design-space sweep benchmark: a sweep spec run with `m100.sweep`, its table, and the Pareto plot.

    .venv/bin/python bench/dse_sweep.py [--spec bench/specs/resnet18_dse.toml] [--workers 2]
        [--backend auto|ray|process|serial] [--csv out/bench/dse_sweep.csv]
        [--plot docs/figures/resnet18_dse_pareto.png] [--json out.json]

Prints the number of points and errors, the Pareto front of latency vs on-chip memory (TPBs x
HBSM bytes) and the fastest point per TPB count; writes the CSV (one row per point), the JSON of
the front and a PNG: every point, the front highlighted, colored by TPB count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def analyse(df):
    """(ok rows with tpbs / onchip_mib columns, Pareto mask over ok)."""
    from m100 import sweep
    base = 4  # tpbs_per_cluster of the m100 unless the grid changes it
    ok = df[df.error.fillna("") == ""].copy()
    tpc = ok["machine.tpbs_per_cluster"] if "machine.tpbs_per_cluster" in ok else base
    ok["tpbs"] = ok["machine.clusters"] * tpc
    ok["onchip_mib"] = ok.tpbs * ok["machine.hbsm_bytes"] / 2**20
    return ok, sweep.pareto(ok, ["latency_us", "onchip_mib"])


def plot(ok, front, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    sc = ax.scatter(ok.onchip_mib, ok.latency_us, c=ok.tpbs, cmap="viridis", s=22, alpha=0.8)
    f = ok[front].sort_values("onchip_mib")
    ax.step(f.onchip_mib, f.latency_us, where="post", color="tab:red", lw=1.5)
    ax.scatter(f.onchip_mib, f.latency_us, facecolors="none", edgecolors="tab:red", s=70,
               label="Pareto front")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("on-chip memory = TPBs x HBSM (MiB)")
    ax.set_ylabel("latency (us, interpreter)")
    ax.set_title(title)
    fig.colorbar(sc, ax=ax, label="TPBs")
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "bench" / "specs" / "resnet18_dse.toml"))
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--address", help="Ray cluster address")
    ap.add_argument("--samples", type=int, help="override the spec's samples")
    ap.add_argument("--csv", default="out/bench/dse_sweep.csv")
    ap.add_argument("--plot", help="write the Pareto PNG here")
    ap.add_argument("--json", help="write the Pareto front as JSON here")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    from m100 import sweep
    spec = sweep.load_spec(args.spec)
    if args.samples is not None:
        spec.samples = args.samples
    t0 = time.time()
    rows = sweep.run(spec, workers=args.workers, address=args.address, backend=args.backend,
                     progress=not args.no_progress)
    wall = time.time() - t0
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    sweep.write_csv(rows, args.csv)
    df = sweep.frame(rows)
    ok, front = analyse(df)
    print(f"{len(df)} points ({len(df) - len(ok)} with an error) in {wall:.0f} s; CSV {args.csv}")
    for err in sorted(set(df.error[df.error != ""]))[:5]:
        print(f"  error: {err[:150]}")
    cols = ["tpbs", "machine.hbsm_bytes", "machine.ddr_bandwidth", "machine.clock_hz",
            "schedule.strategy", "latency_us", "tcu_util", "onchip_mib"]
    cols = [c for c in cols if c in ok]
    f = ok[front].sort_values("onchip_mib")
    print("\nPareto front (latency vs on-chip memory):")
    print(f[cols].to_string(index=False))
    print("\nfastest point per TPB count:")
    print(ok.loc[ok.groupby("tpbs").latency_us.idxmin(), cols].to_string(index=False))
    if args.plot:
        plot(ok, front, args.plot, f"{spec.model.label}: {len(ok)} points")
        print(f"\nplot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(points=len(df), errors=int(len(df) - len(ok)),
                                                   wall_s=wall,
                                                   front=f[cols].to_dict(orient="records")),
                                              indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
