"""Repeated chains side by side: a run of structurally equal groups of segments (the per-head
attention chains of an LLM prefill: ``matmul -> +mask -> softmax -> matmul`` once per query head)
placed on disjoint windows of the TPB pool, round robin, instead of one group after the other on
all of it.

Why: the search costs each segment in isolation and gives it the TPBs that make it shortest
alone, so every head's chain runs on the whole pool with small tiles (LLaMA2-7B prefill at 1024
tokens: ~50 k cycles a head on 56 TPBs, its MACs ~10 k at the peak): per-tile latencies, DMA setup
and the pipeline's fill and drain are paid 32 times over. On a quarter of the pool each chain is
slower alone but several of them overlap. Tensors between segments go through memory (or the kept
activations of :mod:`.keep`, which the build re-chooses), so where a segment runs changes no data
path; the plan is kept only if its whole timeline is shorter (``Scheduler.shorter``), so this can
only shorten the prediction.

How: :func:`repeated_runs` finds runs of at least :data:`MIN_GROUPS` consecutive groups whose
ops are equal position by position (units, attributes, shapes; not the names nor the stage
configurations), their data movement at the same places; a chain of compute segments each
reading the one before counts as its ops, however the search cut it (session 15: W8A8 heads of
four ops, ``matmul -> softmax -> matmul -> quantize``, came out as one pipeline for some heads
and three ops + one for others). A run of chains that read no weights
in their contractions and use more than half the pool (:func:`_whole_pool_chain`) is tried with
each window count ``w`` of :data:`WINDOWS`: the compute of the first group is searched again on
the first ``len(pool) // w`` TPBs (a :class:`~.placement.Search` on that window sharing the main
search's costs; a pipeline longer than the window becomes its ops one after the other; all of a
group's compute one pipeline where it is one connected chain and costs less so), and group ``i``
takes that layout with its own op names on window ``i % w``; data-movement segments stay as they
are. The shortest whole plan is kept. Measured (predicted cycles of the schedule): the W8A8
prefill layer at 1024 tokens with 8 heads of 128 (hidden 1024): 1.516 M -> 1.366 M (2 windows
of 28 TPBs).

**Feeders set aside** (session 17, :func:`feeders`, :func:`_aside`): when the segments right
before a run are single CVU ops that write, in groups, what the run's groups read (q's RoPE in
groups of heads, ``llm.PREFILL_Q_GROUP``: each group of heads reads only its group's layout),
they are tried on the last :data:`ASIDE` TPBs of the pool and the run's groups on windows of the
rest, each group right after the feeders it reads (a segment waits for the one before it on its
TPBs, and the DMA engines take transfers in the order they are built: on the whole pool, or
all built first, the feeders hold back every group until the last of them ends). The order of
the trial is checked to be topological (:func:`_topological`); kept only if the whole plan is
shorter.

**Resumed at the run** (session 29, :func:`_shorter_at`): every trial keeps the segments before
the run (before its feeders, set aside) as they are, so it asks for a checkpoint there and starts
from the one the latest trial took (:mod:`.resume`: the same plan and task count as a build from
the first segment); a checkpoint that does not fit (other kept activations in the prefix, a
bound the prefix reaches) is not used.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from .graph import ScheduleError
from .list_schedule import BoundExceeded
from .later_points import later_points
from .segment import SegmentCfg

#: print each trial (run, windows, makespan before -> after) to stderr
_DEBUG = bool(os.environ.get("M100_DEBUG_SIDE_BY_SIDE"))
#: a run of fewer equal groups is left alone
MIN_GROUPS = 4
#: the longest group (segments) looked for
MAX_GROUP = 8
#: window counts tried (pool // w TPBs each); () switches this off (A/B measurements)
WINDOWS = (2, 4, 8)
#: TPBs set aside for a run's feeders (:func:`feeders`), tried in turn; () switches this off
ASIDE = (4, 8)
#: each window layout is also tried with its pipelines' bands divided by these (at least one
#: band per TPB row): the window's search costs a chain alone, with both DMA engines to itself,
#: and so prefers many small bands -- each a q load and an output store -- which ``w`` chains
#: running at once then queue on the engines (LLaMA2-7B at 1024 tokens, the mask's iotas
#: resident: 96 bands of 11 rows a head, 3.97 M cycles on 2 windows; the whole plan decides)
FEWER_BANDS = (1, 2, 4, 8)


def _op_sig(s, name: str) -> tuple:
    """The structure of an op: unit, attributes, epilogue, input/output shapes and dtypes."""
    g, op = s.g, s.ops[name]
    return (op.unit, tuple(sorted((k, repr(v)) for k, v in op.attrs.items()
                                  if not isinstance(v, str))),
            op.epilogue,
            tuple((g.tensors[t].shape, g.tensors[t].dtype, g.tensors[t].kind)
                  for t in op.inputs + op.outputs))


def _sig(s, cfg: SegmentCfg) -> tuple:
    """The structure of a segment: kind, and per stage the op's structure (:func:`_op_sig`); no
    names, and not the stage configuration (the groups are searched again: equal ops cut into
    equal segments is what matters)."""
    return (cfg.kind,) + tuple(_op_sig(s, st.op) for st in cfg.stages)


def _chained(s, prev: SegmentCfg, cfg: SegmentCfg) -> bool:
    """Both segments compute and ``cfg``'s first op reads an output of ``prev``'s last op."""
    if prev.kind == "dma" or cfg.kind == "dma":
        return False
    return bool(set(s.ops[cfg.stages[0].op].inputs) & set(s.ops[prev.stages[-1].op].outputs))


def _blocks(s, segs: list[SegmentCfg]) -> list[tuple[int, int, tuple]]:
    """``(start, end, signature)`` of each block of ``segs``: a data-movement segment alone, or a
    maximal run of compute segments each of which reads the result of the one before it -- ONE
    chain however the search cut it into segments (session 15: a head's ``matmul -> softmax ->
    matmul -> quantize`` came out as one pipeline for some heads and a pipeline of three plus
    the quantize alone for others, and the equal heads were not recognized). A chain's
    signature is its ops' structures in order (:func:`_op_sig`), not their segments' kinds
    (a chain of one segment too)."""
    spans: list[list[int]] = []
    for i, cfg in enumerate(segs):
        if spans and _chained(s, segs[i - 1], cfg):
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
    out = []
    for a, b in spans:
        if segs[a].kind == "dma":
            out.append((a, b, _sig(s, segs[a])))
        else:
            out.append((a, b, ("chain",) + tuple(_op_sig(s, st.op) for c in segs[a:b]
                                                 for st in c.stages)))
    return out


def repeated_runs(s, segs: list[SegmentCfg]) -> list[list[tuple[int, int]]]:
    """The groups ``[(start, end), ...]`` (segment ranges, consecutive) of each maximal run of
    >= :data:`MIN_GROUPS` equal groups of :func:`_blocks` that contain compute (not only data
    movement), left to right, not overlapping. Equal groups have equal ops in the same order
    and their data movement at the same places; their compute may be cut into segments
    differently."""
    blocks = _blocks(s, segs)
    sigs = [b[2] for b in blocks]
    n = len(blocks)
    out = []
    i = 0
    while i < n:
        best = None
        for L in range(1, MAX_GROUP + 1):
            if not any(segs[j].kind != "dma" for blk in blocks[i:min(n, i + L)]
                       for j in range(blk[0], blk[1])):
                continue
            k = 1
            while i + (k + 1) * L <= n and sigs[i + k * L:i + (k + 1) * L] == sigs[i:i + L]:
                k += 1
            if k >= MIN_GROUPS and (best is None or k * L > best[1] * best[2]):
                best = (i, L, k)
        if best is None:
            i += 1
            continue
        b0, L, k = best
        out.append([(blocks[b0 + gi * L][0], blocks[b0 + (gi + 1) * L - 1][1])
                    for gi in range(k)])
        i = b0 + L * k
    return out


def _window_layout(s, group: list[SegmentCfg], window: tuple[int, ...]
                   ) -> list[SegmentCfg | int] | None:
    """The best layout of ``group`` on ``window``: a list of its data-movement segments (as they
    are, by index into the group) and configurations of its compute on the window, either each
    compute segment searched again or, where the group's compute segments are contiguous and
    their ops form one connected chain of at most ``max_stages`` ops, one pipeline of all of them
    (the mask add of an attention head then streams between its matmul and softmax instead of
    going through memory), whichever the search costs lower; None when nothing fits."""
    from .placement import Search
    sub = Search(s.g, s.cm.machine, window, seed=s.seed, max_stages=s.max_stages, iters=s.iters,
                 prefetch_share=s.sched.prefetch_share)
    sub.sched, sub.cache, sub.errors, sub.shared = s.sched, s.cache, s.errors, s.shared
    sub.fuse_tcu = s.fuse_tcu
    out: list[SegmentCfg | int] = []
    total = 0.0
    for j, cfg in enumerate(group):
        if cfg.kind == "dma":
            out.append(j)
            continue
        ops = [s.ops[st.op] for st in cfg.stages]
        try:
            best, c = sub.segment_best(ops)
            out.append(best)
            total += c
        except ScheduleError:
            if len(ops) == 1:
                return None
            for op in ops:  # a pipeline longer than the window: its ops one after the other
                try:
                    best, c = sub.best_data_parallel(op)
                except ScheduleError:
                    return None
                out.append(best)
                total += c
    comp = [j for j, cfg in enumerate(group) if cfg.kind != "dma"]
    ops = [s.ops[st.op] for j in comp for st in group[j].stages]
    if len(comp) > 1 and comp == list(range(comp[0], comp[-1] + 1)) and \
            len(ops) <= s.max_stages and sub.connected(ops):
        try:
            merged, c = sub.best_pipeline(ops)
        except ScheduleError:
            return out
        if c < total:
            return [j for j in range(comp[0])] + [merged] + \
                [j for j in range(comp[-1] + 1, len(group))]
    return out


def _fewer_bands(s, layout: list[SegmentCfg | int]):
    """``(d, layout)`` for each divisor ``d`` of :data:`FEWER_BANDS`: the layout with the bands
    of each pipeline divided by ``d`` (``d = 1``: as it is), while every stage keeps at least
    one band per TPB row; a causal chain's stages cut by work anew (``search.work_cut``)."""
    from .search import work_cut
    seen = set()
    for d in FEWER_BANDS:
        out: list[SegmentCfg | int] = []
        for item in layout:
            if isinstance(item, int) or len(item.stages) < 2:
                out.append(item)
                continue
            nb = item.stages[0].bands // d
            if d > 1 and (any(st.bands != item.stages[0].bands for st in item.stages) or
                          nb < max(st.gr for st in item.stages)):
                out.append(item)
                continue
            names = {st.op for st in item.stages}
            out.append(replace(item, stages=tuple(
                replace(st, bands=nb, wcut=work_cut(s.g, s.cm.machine, names, st.op, nb))
                if d > 1 else st for st in item.stages)))
        key = tuple(out)
        if key not in seen:
            seen.add(key)
            yield d, out


def _moved(cfg0: SegmentCfg, ops: list[str], pool: tuple[int, ...], shift: int) -> SegmentCfg:
    """``cfg0`` (a configuration on the first window) for the ops ``ops`` (one per stage, in
    order) on the window ``shift`` TPBs further along ``pool``."""
    at = {t: i for i, t in enumerate(pool)}
    stages = tuple(replace(st0, op=o, tpbs=tuple(pool[at[t] + shift] for t in st0.tpbs))
                   for st0, o in zip(cfg0.stages, ops, strict=True))
    return SegmentCfg(stages, cfg0.kind)


def _group_on(layout: list[SegmentCfg | int], group: list[SegmentCfg], pool: tuple[int, ...],
              shift: int) -> list[SegmentCfg]:
    """Group ``group`` (structurally equal to the one ``layout`` was made for) laid out the same
    way on the window ``shift`` TPBs along ``pool``: its own data movement (in order: the
    layout's data-movement items are those of the first group, whose compute may have been cut
    into other segments), the layout's compute configurations with its own op names."""
    ops = iter([st.op for cfg in group if cfg.kind != "dma" for st in cfg.stages])
    dmas = iter([cfg for cfg in group if cfg.kind == "dma"])
    out = []
    for item in layout:
        if isinstance(item, int):
            out.append(next(dmas))
        else:
            out.append(_moved(item, [next(ops) for _ in item.stages], pool, shift))
    return out


def _whole_pool_chain(s, group: list[SegmentCfg], n: int) -> bool:
    """A group this applies to: no contraction of it has a weight operand (an attention chain of
    activations, not a layer with its own weights, which every window would stream again; a
    constant the elementwise ops read, the causal mask, is read per head anyway), and some
    compute segment of it runs on more than half of the pool now (the chains the search spreads
    over the whole machine; decode's per-head GEMVs are on a few TPBs each already)."""
    wide = False
    for cfg in group:
        if cfg.kind == "dma":
            continue
        for st in cfg.stages:
            op = s.ops[st.op]
            if op.unit.startswith("tcu") and any(s.g.tensors[t].kind == "weight"
                                                 for t in op.inputs):
                return False
        wide |= len({t for st in cfg.stages for t in st.tpbs}) > n // 2
    return wide


def side_by_side(s, segs: list[SegmentCfg], tl, keep: str, pool: tuple[int, ...]):
    """``(segs, tl)`` with each run of :func:`repeated_runs` on windows of the pool where the
    whole plan gets shorter (module docstring); the input unchanged otherwise."""
    n = len(pool)
    # right to left: a changed run (a merged pipeline has fewer segments) moves no run before it
    for run in reversed(repeated_runs(s, segs)):
        start, end, k = run[0][0], run[-1][1], len(run)
        group0 = segs[run[0][0]:run[0][1]]
        if not _whole_pool_chain(s, group0, n):
            continue
        best = None
        held: dict = {}  # a plan holding a checkpoint before the run (:func:`_shorter_at`)
        for w in WINDOWS:
            if n % w or k < w:
                continue
            size = n // w
            layout = _window_layout(s, group0, pool[:size])
            if layout is None:
                if _DEBUG:
                    print(f"side_by_side: run at {start} ({k} groups), {w} windows: no layout",
                          file=sys.stderr)
                continue
            for d, lay in _fewer_bands(s, layout):
                trial = segs[:start]
                for gi, (a, b) in enumerate(run):
                    trial += _group_on(lay, segs[a:b], pool, (gi % w) * size)
                trial += segs[end:]
                ref = tl if best is None else best[1]
                tl2 = _shorter_at(s, trial, ref, keep, start, held)
                if _DEBUG:
                    print(f"side_by_side: run at {start} ({k} groups), {w} windows, bands / {d}: "
                          f"{ref.makespan:.0f} -> {'-' if tl2 is None else round(tl2.makespan)}",
                          file=sys.stderr)
                if tl2 is not None:
                    best = (trial, tl2)
        for a in ASIDE:
            trial = _aside(s, segs, run, pool, a, tl if best is None else best[1], keep, held)
            if trial is not None:
                best = trial
        if best is not None:
            segs, tl = best
    return segs, tl


def trial_points(s, segs: list[SegmentCfg]) -> set[int]:
    """The segments before which :func:`side_by_side`'s trials would resume (each run's first,
    its feeders' first): a build of the plan before it keeps a checkpoint there, so that the
    first trial resumes too (``refine.keep_activations``). ``s``: a scheduler or search (its
    ``g`` and ``ops``). A superset: runs :func:`_whole_pool_chain` would leave alone count."""
    out = set()
    for run in repeated_runs(s, segs):
        out.add(run[0][0])
        feed = feeders(s, segs, run[0][0], run[-1][1])
        if feed:
            out.add(feed[0])
    return out


def _shorter_at(s, trial: list[SegmentCfg], ref, keep: str, at: int, held: dict):
    """``s.sched.shorter(trial, ref, keep)`` for a trial whose first ``at`` segments are those
    of the plan before the run (module doc, "Resumed at the run"): the build asks for a
    checkpoint before segment ``at`` and starts from the one ``held[at]`` holds, the plan
    the latest trial built (to its end or to its bound: a stopped build's plan keeps the
    checkpoints it took); the first trial from ``ref``'s (:func:`trial_points`). The same
    answer and task count as ``s.sched.shorter(trial, ref, keep)`` (a build from the first
    segment; ``test_side_by_side``)."""
    try:
        tl2 = s.sched.build(trial, bound=ref.makespan, keep=keep, base=held.get(at, ref),
                            checkpoints={at} | later_points(s, trial, at))
    except BoundExceeded as e:
        if at in e.plan.checkpoints:
            held[at] = e.plan
        return None
    except ScheduleError:
        return None
    if at in tl2.checkpoints:
        held[at] = tl2
    return tl2 if tl2.makespan < ref.makespan else None


def _topological(s, segs: list[SegmentCfg]) -> bool:
    """Does every op of ``segs`` come after the producers of its inputs (the plan builder
    waits for a tensor's writers built so far: a reader built before them would not wait)?"""
    at = {st.op: i for i, cfg in enumerate(segs) for st in cfg.stages}
    prod = s.sched.producers
    return all(at.get(prod[t].name, -1) <= i for i, cfg in enumerate(segs) for st in cfg.stages
               for t in s.ops[st.op].inputs if t in prod)


def _root(g, t: str) -> str:
    """The tensor whose memory ``t``'s bytes are (through writer maps, views, column views)."""
    if t in g.wmap:
        t = g.wmap[t][0]
    if t in g.views:
        t = g.views[t][0]
    if t in g.cviews:
        t = g.cviews[t][0]
    return t


def feeders(s, segs: list[SegmentCfg], start: int, end: int) -> list[int]:
    """The segments that feed the run ``segs[start:end]`` in groups: the single-op data-parallel
    CVU segments right before it (data movement between them aside) whose results' memory the
    run reads, when they write at least two such tensors (q's RoPE in groups of heads,
    ``llm.PREFILL_Q_GROUP``: each group of heads reads only its group's); else []."""
    g = s.g
    reads = {_root(g, t) for cfg in segs[start:end] if cfg.kind != "dma"
             for st in cfg.stages for t in s.ops[st.op].inputs}
    out = []
    for i in range(start - 1, -1, -1):
        cfg = segs[i]
        if cfg.kind == "dma":
            continue
        op = s.ops[cfg.stages[0].op]
        if cfg.kind != "data-parallel" or len(cfg.stages) != 1 or \
                not op.unit.startswith("cvu") or _root(g, op.outputs[0]) not in reads:
            break
        out.append(i)
    roots = {_root(g, s.ops[segs[i].stages[0].op].outputs[0]) for i in out}
    return out[::-1] if len(roots) >= 2 else []


def _aside(s, segs: list[SegmentCfg], run: list[tuple[int, int]], pool: tuple[int, ...],
           a: int, ref, keep: str, held: dict):
    """``(trial, plan)`` of the run's feeders (:func:`feeders`) on the last ``a`` TPBs of the
    pool and its groups side by side on windows of the rest, when the whole plan is shorter
    than ``ref``; else None. Why: the feeders write in groups (q's RoPE of each group of heads)
    and each group of the run waits only for its own; on all TPBs the feeders hold every TPB
    until the last of them ends (a segment waits for the one before it on its TPBs), so no
    group can start before all are written. Set aside, they run beside the first groups."""
    from .placement import Search
    start, end, k = run[0][0], run[-1][1], len(run)
    feed = feeders(s, segs, start, end)
    n = len(pool)
    if not feed or a >= n // 2:
        return None
    side, rest = pool[n - a:], pool[:n - a]
    sub = Search(s.g, s.cm.machine, side, seed=s.seed, max_stages=s.max_stages, iters=s.iters,
                 prefetch_share=s.sched.prefetch_share)
    sub.sched, sub.cache, sub.errors, sub.shared = s.sched, s.cache, s.errors, s.shared
    head = list(segs[:start])
    try:
        for i in feed:
            head[i], _ = sub.best_data_parallel(s.ops[segs[i].stages[0].op])
    except ScheduleError:
        return None
    # the feeders' part of the plan in chunks, one per tensor they write (a chunk: its feeders
    # and the data movement that reads what they wrote; data movement reading none of it goes
    # to the first chunk), and the chunk each group of the run reads last: the groups go right
    # after it, so their transfers are created (and list-scheduled on the DMA engines) before
    # the next chunk's, which fill the gaps
    g = s.g
    first = feed[0]
    chunks: list[list[SegmentCfg]] = []
    croot: dict[str, int] = {}
    made: dict[str, int] = {}  # tensor -> the chunk that writes it
    for i in range(first, start):
        ops = [s.ops[st.op] for st in segs[i].stages]
        if i in feed:
            r = _root(g, ops[0].outputs[0])
            if r not in croot:
                croot[r] = len(chunks)
                chunks.append([])
            c = croot[r]
        else:
            c = max((made[t] for o in ops for t in o.inputs if t in made), default=0)
        for o in ops:
            for t in o.outputs:
                made[t] = c
        if not chunks:
            return None
        chunks[c].append(head[i])
    need = []
    for ga, gb in run:
        reads = {_root(g, t) for cfg in segs[ga:gb] if cfg.kind != "dma"
                 for st in cfg.stages for t in s.ops[st.op].inputs}
        need.append(max((croot[r] for r in reads if r in croot), default=0))
    if need != sorted(need):
        return None
    group0 = segs[run[0][0]:run[0][1]]
    best = None
    for w in (1,) + WINDOWS:
        if len(rest) % w or k < w:
            continue
        size = len(rest) // w
        layout = _window_layout(s, group0, rest[:size])
        if layout is None:
            continue
        for d, lay in _fewer_bands(s, layout):
            trial = head[:first]
            gi = 0
            for c, chunk in enumerate(chunks):
                trial += chunk
                while gi < k and need[gi] == c:
                    ga, gb = run[gi]
                    trial += _group_on(lay, segs[ga:gb], rest, (gi % w) * size)
                    gi += 1
            trial += segs[end:]
            if not _topological(s, trial):
                if _DEBUG:
                    print(f"side_by_side: run at {start}: {a} TPBs aside, not in graph order",
                          file=sys.stderr)
                break
            r = ref if best is None else best[1]
            tl2 = _shorter_at(s, trial, r, keep, first, held)
            if _DEBUG:
                print(f"side_by_side: run at {start} ({k} groups), {a} TPBs aside for "
                      f"{len(feed)} feeders, {w} windows, bands / {d}: {r.makespan:.0f} -> "
                      f"{'-' if tl2 is None else round(tl2.makespan)}", file=sys.stderr)
            if tl2 is not None:
                best = (trial, tl2)
    return best


__all__ = ["side_by_side", "repeated_runs", "MIN_GROUPS", "WINDOWS"]
