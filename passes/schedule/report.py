"""The schedule report, printed from the plan (:mod:`.plan`): per op unit, TPBs, tile shape, HBSM
bytes, predicted cycles; data movement per CCB DMA engine; critical path."""

from __future__ import annotations

from collections import defaultdict

from .cost import CostModel
from .placement import Placement
from .timeline import critical_path


def op_rows(pl: Placement) -> list[dict]:
    """One row per op of the placement (order of the segments)."""
    tl = pl.timeline
    g_start: dict[str, float] = {}
    g_end: dict[str, float] = {}
    busy: dict[str, float] = defaultdict(float)
    macs: dict[str, int] = defaultdict(int)
    tpbs: dict[str, set[int]] = defaultdict(set)
    for t in tl.tasks:
        if not t.op:
            continue
        g_start[t.op] = min(g_start.get(t.op, t.start), t.start)
        g_end[t.op] = max(g_end.get(t.op, t.end), t.end)
        if t.kind == "compute":
            busy[t.op] += t.cycles
            macs[t.op] += t.macs
            tpbs[t.op].add(t.tpb)
    rows = []
    for si, seg in enumerate(pl.segments):
        for st in seg.stages:
            plan = tl.plans.get(st.op)
            hb = 0
            if plan is not None:
                hb = plan.footprint
            rows.append(dict(segment=si, kind=seg.kind, op=st.op,
                             unit=plan.unit if plan else "dma",
                             tpbs=len(tpbs[st.op]) if tpbs[st.op] else 0,
                             first_tpb=min(tpbs[st.op]) if tpbs[st.op] else -1,
                             split=f"{st.gr}x{st.gc}" if seg.kind != "dma" else "-",
                             bands=st.bands if seg.kind != "dma" else 0,
                             tile=plan.shape_str if plan else "-", hbsm_bytes=hb,
                             start=g_start.get(st.op, 0.0), end=g_end.get(st.op, 0.0),
                             busy=busy[st.op], macs=macs[st.op]))
    return rows


def format_report(pl: Placement, title: str = "") -> str:
    """A text table of the placement plus its critical path and TCU utilization."""
    tl = pl.timeline
    m = pl.machine
    cm = CostModel(m)
    rows = op_rows(pl)
    head = f"{'seg':>3} {'kind':<13} {'op':<14} {'unit':<15} {'TPBs':>4} {'split':>6} " \
           f"{'bands':>5} {'tile':<14} {'HBSM B':>9} {'start':>10} {'end':>10}"
    out = []
    if title:
        out.append(title)
    out.append(f"schedule ({pl.strategy}) on '{m.name}': {len(pl.tpbs)} TPBs available, "
               f"predicted {tl.makespan:.0f} cycles = {tl.makespan / m.clock_hz * 1e6:.1f} us")
    out.append(head)
    out.append("-" * len(head))
    for r in rows:
        out.append(f"{r['segment']:>3} {r['kind']:<13} {r['op']:<14} {r['unit']:<15} "
                   f"{r['tpbs']:>4} {r['split']:>6} {r['bands']:>5} {r['tile']:<14} "
                   f"{r['hbsm_bytes']:>9} {r['start']:>10.0f} {r['end']:>10.0f}")
    used = {t.tpb for t in tl.tasks if t.tpb >= 0 and t.unit == "tcu"}
    total_macs = sum(r["macs"] for r in rows)
    if used and tl.makespan > 0 and total_macs:
        # each op's MACs at the peak of its own operand type (a W8A8 layer mixes int8
        # projections with f16 attention matmuls: one type's peak for all gave > 100 %)
        dt = op_dtypes(pl)
        ideal = sum(r["macs"] / cm.peak_macs_per_cycle(dt.get(r["op"], "f32"))
                    for r in rows if r["macs"])
        util = ideal / (tl.makespan * len(used))
        out.append(f"TCU utilization: {100 * util:.1f}% of the {len(used)} TPBs that compute "
                   f"({total_macs} MACs)")
    dma = [t for t in tl.tasks if t.unit == "dma"]
    if dma:
        per = tl.dma_engine_bytes()
        bc = [t for t in dma if t.tpb_mask]
        out.append("data movement: " + ", ".join(
            f"DMA{e} {per[e] / 1e6:.2f} MB" for e in sorted(per)) +
            f"; {len(bc)} DRB broadcasts ({sum(t.nbytes for t in bc) / 1e6:.2f} MB sent once to "
            f"{sum(len(t.dst_tpbs) for t in bc)} TPB buffers)")
    path = critical_path(tl)
    chain = []
    for t in path:
        lab = f"{t.op}:{t.kind}"
        if not chain or chain[-1][0] != lab:
            chain.append([lab, t.cycles])
        else:
            chain[-1][1] += t.cycles
    out.append("critical path: " + " -> ".join(f"{a} ({b:.0f})" for a, b in chain[:24]) +
               (" ..." if len(chain) > 24 else ""))
    return "\n".join(out)


def op_dtypes(pl: Placement) -> dict[str, str]:
    """Op name -> the element type of its first activation input (its TCU rate)."""
    g = getattr(pl, "graph", None)
    if g is None:
        return {}
    return {o.name: ins[0].dtype for o in g.ops if (ins := g.act_inputs(o))}


__all__ = ["format_report", "op_rows"]
