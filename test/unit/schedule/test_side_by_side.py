"""side_by_side: runs of structurally equal segment groups (per-head attention chains) found
exactly, and laid out on TPB windows with each group's own ops."""

from types import SimpleNamespace as NS

from m100.passes.schedule.segment import SegmentCfg, StageCfg
from m100.passes.schedule.side_by_side import MIN_GROUPS, _group_on, repeated_runs


def _search(heads: int, odd: int | None = None, cut: set[int] = frozenset()):
    """A search-like object over: a projection, then per head [slice (dma), matmul, softmax +
    matmul (pipeline)], then a concat; head ``odd`` has a matmul of another shape; the heads in
    ``cut`` have their three ops as one pipeline (the search cut them otherwise)."""
    tensors, ops, segs = {}, {}, []

    def t(name, shape):
        tensors[name] = NS(shape=shape, dtype="f16", kind="act")
        return name

    def op(name, unit, ins, out, shape):
        ops[name] = NS(unit=unit, attrs={"m": shape[0]}, epilogue=(), inputs=list(ins),
                       outputs=[t(out, shape)])
        return name

    op("proj", "tcu.matmul", [t("x", (64, 64))], "q", (64, 64))
    segs.append(SegmentCfg((StageCfg("proj", tuple(range(8))),)))
    for h in range(heads):
        r = 32 if h == odd else 64
        op(f"sl{h}", "dma", ["q"], f"qh{h}", (r, 16))
        op(f"mm{h}", "tcu.matmul", [f"qh{h}"], f"s{h}", (r, 64))
        op(f"sm{h}", "cvu.softmax", [f"s{h}"], f"p{h}", (r, 64))
        op(f"pv{h}", "tcu.matmul", [f"p{h}"], f"o{h}", (r, 16))
        segs.append(SegmentCfg((StageCfg(f"sl{h}", (0,)),), "dma"))
        if h in cut:
            segs.append(SegmentCfg((StageCfg(f"mm{h}", (0, 1)), StageCfg(f"sm{h}", (2, 3)),
                                    StageCfg(f"pv{h}", (4, 5, 6, 7))), "pipeline"))
            continue
        segs += [SegmentCfg((StageCfg(f"mm{h}", tuple(range(8)), gc=2),)),
                 SegmentCfg((StageCfg(f"sm{h}", (0, 1, 2, 3)),
                             StageCfg(f"pv{h}", (4, 5, 6, 7))), "pipeline")]
    op("cat", "dma", [f"o{h}" for h in range(heads)], "o", (64, 16 * heads))
    segs.append(SegmentCfg((StageCfg("cat", (0,)),), "dma"))
    return NS(g=NS(tensors=tensors), ops=ops), segs


def _groups(start: int, length: int, k: int) -> list[tuple[int, int]]:
    return [(start + i * length, start + (i + 1) * length) for i in range(k)]


def test_repeated_runs_finds_the_heads_exactly():
    s, segs = _search(6)
    assert repeated_runs(s, segs) == [_groups(1, 3, 6)]
    # a group of another shape ends the run: 2 + 3 equal groups around it are too few
    s, segs = _search(6, odd=2)
    assert MIN_GROUPS == 4 and repeated_runs(s, segs) == []
    s, segs = _search(9, odd=4)  # 4 groups, the odd one, 4 groups
    assert repeated_runs(s, segs) == [_groups(1, 3, 4), _groups(1 + 5 * 3, 3, 4)]
    s, segs = _search(3)
    assert repeated_runs(s, segs) == []


def test_repeated_runs_finds_heads_whose_chain_the_search_cut_otherwise():
    """Session 15: equal heads are one run whatever segments the search cut each head's chain
    into (heads 1 and 3 one pipeline of three ops, the others a matmul and a pipeline of two);
    a head whose ops differ still ends the run."""
    s, segs = _search(6, cut={1, 3})
    assert len(segs) == 1 + 6 * 3 - 2 + 1
    assert repeated_runs(s, segs) == [[(1, 4), (4, 6), (6, 9), (9, 11), (11, 14), (14, 17)]]
    s, segs = _search(6, odd=2, cut={1, 3})
    assert repeated_runs(s, segs) == []
    # a group cut otherwise laid out as the first one: its own dma segment and ops
    s, segs = _search(4, cut={1})
    pool = tuple(range(8))
    layout = [0, SegmentCfg((StageCfg("mm0", (0,)),)),
              SegmentCfg((StageCfg("sm0", (1,)), StageCfg("pv0", (2, 3))), "pipeline")]
    out = _group_on(layout, segs[4:6], pool, 4)
    assert out[0] is segs[4] and [[(st.op, st.tpbs) for st in c.stages] for c in out[1:]] == \
        [[("mm1", (4,))], [("sm1", (5,)), ("pv1", (6, 7))]]


def test_group_on_window_keeps_its_own_ops_and_moves_tpbs():
    s, segs = _search(4)
    pool = tuple(range(8))
    merged = SegmentCfg((StageCfg("mm0", (0,)), StageCfg("sm0", (1,)), StageCfg("pv0", (2, 3))),
                        "pipeline")
    layout = [0, merged]  # the group's dma segment as it is, its compute as one pipeline
    group2 = segs[1 + 2 * 3:1 + 3 * 3]
    out = _group_on(layout, group2, pool, 4)
    assert out[0] is group2[0]
    assert [(st.op, st.tpbs) for st in out[1].stages] == \
        [("mm2", (4,)), ("sm2", (5,)), ("pv2", (6, 7))] and out[1].kind == "pipeline"


def _prefill_graph():
    """A W8A8 prefill layer of 4 heads of 64 at 256 tokens (weights by shape): on 8 TPBs the
    heads' chains are a run that side_by_side tries on windows (6 trials)."""
    from m100.frontend import llm
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.targets.m100.machine import get_machine
    from m100.tools import driver
    cfg = llm.LlamaConfig("t", 256, 4, 4, 512, 128, 1)
    model, _ = llm.build(cfg, "layer", "prefill", context=256, seed=1, quant="w8a8",
                         weights="shape")
    ctx = shared_context()
    module, _ = driver.load_model(model, ctx)
    M100Graph().apply(ctx, module)
    return from_module(module, get_machine("m100").cvu_max_stages).graph


def _full_build(s, trial, ref, keep, at, held):
    """The reference of ``_shorter_at`` (before session 29): the trial built from the first
    segment."""
    return s.sched.shorter(trial, ref, keep)


def test_trials_resumed_at_the_run_are_the_full_builds(monkeypatch):
    """Session 29: side_by_side's trials start from a checkpoint before the run
    (``_shorter_at``). Oracle: the same placement with every trial built from the first segment
    (:func:`_full_build`): each trial's answer (its plan, or None) and the task count after it
    (the search budget's measure, also for trials stopped at their bound), the final plan and
    segments. And the test checks something: trials were resumed at the run."""
    from m100.passes.schedule import placement, resume
    from m100.passes.schedule import side_by_side as sbs
    from m100.targets.m100.machine import get_machine
    m = get_machine("m100")
    resumed, restore = sbs._shorter_at, resume.Checkpoint.restore
    got, restored = {}, []

    def spy(fn, key):
        def f(s, trial, ref, keep, at, held):
            r = fn(s, trial, ref, keep, at, held)
            got[key].append((at, None if r is None else r.to_json(), s.sched.tasks_built))
            return r
        return f

    def restore_spy(self, bld, segs):
        restored.append(self.index)
        return restore(self, bld, segs)

    monkeypatch.setattr(resume.Checkpoint, "restore", restore_spy)
    out = {}
    for key, fn in (("full", _full_build), ("resumed", resumed)):
        monkeypatch.setattr(sbs, "_shorter_at", spy(fn, key))
        got[key] = []
        restored.clear()
        pl = placement.schedule(_prefill_graph(), m, tpbs=8)
        out[key] = (pl.timeline.to_json(), pl.segments)
    runs = {at for at, _, _ in got["resumed"]}
    assert len(got["resumed"]) >= 4 and len(runs) == 1
    # (at the run, or later where the trial's first segments are the plan's: session 31's
    # ``later_points`` keeps checkpoints inside the run too)
    assert sum(i >= min(runs) for i in restored) >= len(got["resumed"]) - 1
    assert got["resumed"] == got["full"]
    assert out["resumed"] == out["full"]
