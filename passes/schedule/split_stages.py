"""Split a CVU stage DAG that is longer than one pipeline (``machine.cvu_max_stages``).

An elementwise generic whose body needs more stages than one ``tpb.cvu`` instruction holds
(composed math such as asinh, a long fused activation) becomes several CVU ops: walking the stages
in order, a stage whose not-yet-cut sub-DAG is larger than the limit cuts its largest children;
each cut value is computed by its own op into an intermediate tensor of the output's shape, which
the consumers read as an extra input (identity map). Values are never recomputed, so the numbers are
those of the unsplit DAG.
"""
from __future__ import annotations

from m100.targets.m100.isa import Ref, RefKind, Stage

from .graph import ScheduleError


def split(stages: tuple[Stage, ...], limit: int) -> list[tuple[int, list[int]]]:
    """Cut points: [(root stage, its member stages in order)], producers before consumers; the
    last entry is the final result's."""
    n = len(stages)
    cut: set[int] = set()
    members: list[set[int]] = []
    for i, st in enumerate(stages):
        kids = [a.index for a in st.args if a.kind is RefKind.STAGE]

        def size(ks: list[int]) -> set[int]:
            s = {i}
            for k in ks:
                if k not in cut:
                    s |= members[k]
            return s

        s = size(kids)
        for k in sorted(set(kids), key=lambda k: -len(members[k])):
            if len(s) <= limit:
                break
            cut.add(k)
            s = size(kids)
        if len(s) > limit:  # pragma: no cover - every child cut leaves one stage
            raise ScheduleError("internal: a CVU stage DAG could not be split")
        members.append(s)
    roots = sorted(cut) + [n - 1]
    return [(r, sorted(members[r])) for r in roots]


def remap(stages: tuple[Stage, ...], part: list[int]) -> tuple[tuple[Stage, ...], list[tuple[str, int]]]:
    """The stages of one part with refs renumbered, and its inputs in order: ``("in", i)`` an
    input of the original op, ``("cut", k)`` the value of cut stage ``k`` (another part's root)."""
    pos = {k: j for j, k in enumerate(part)}
    ins: list[tuple[str, int]] = []

    def inp(key: tuple[str, int]) -> Ref:
        if key not in ins:
            ins.append(key)
        return Ref(RefKind.INPUT, ins.index(key))

    out = []
    for k in part:
        st = stages[k]
        args = []
        for a in st.args:
            if a.kind is RefKind.STAGE:
                args.append(Ref(RefKind.STAGE, pos[a.index]) if a.index in pos else inp(("cut", a.index)))
            elif a.kind is RefKind.INPUT:
                args.append(inp(("in", a.index)))
            else:
                args.append(a)
        out.append(Stage(st.op, tuple(args), axis=st.axis, fparam=st.fparam, iparams=st.iparams))
    return tuple(out), ins
