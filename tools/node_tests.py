"""The ONNX backend node tests through the whole m100 stack, classified; writes ``docs/ops.md``.

Every node test case of the ``onnx`` wheel (onnx >= 1.23 builds them in memory from
``onnx.backend.test.case.node``) goes through :class:`m100.tools.onnx_backend.M100Backend`
(``driver.compile`` -> program -> interpreter), exactly as ``onnx.backend.test.BackendTest`` runs
it: ``prepare(model)``, then ``run(inputs)`` per data set, compared with the runner's own
``assert_similar_outputs`` at the case's tolerance. Each case gets one outcome:

* ``pass``        -- every output of every data set within tolerance;
* ``unsupported`` -- a clean refusal: an :class:`~m100.errors.M100Error` whose message is one line;
* ``mismatch``    -- it compiled and ran but a number (or shape/dtype) is wrong: a bug;
* ``error``       -- anything else (a traceback, a multi-line message, an interpreter report, a
  timeout): a bug.

Only ``pass`` and ``unsupported`` are acceptable (``test/unit/tools/test_node_tests.py``).

    python -m m100.tools.node_tests                       # all 1 884 cases, table per op
    python -m m100.tools.node_tests --ops Relu,Gemm -v    # only the cases of these ops
    python -m m100.tools.node_tests --json out/node.json --write-docs docs/ops.md -j 2
    python -m m100.tools.node_tests --rerun out/node.json --json out/node.json --write-docs docs/ops.md

``--write-docs`` (a full run only) regenerates ``docs/ops.md``: per op, the count of cases that
pass / are refused / do anything else, and the refusal messages. A case belongs to the op of its
node (``*_expanded*`` cases, the op's function body, to the op they expand).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

OUTCOMES = ("pass", "unsupported", "mismatch", "error")
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")
DEFAULT_TIMEOUT = 120.0


@dataclass
class CaseResult:
    name: str
    op: str
    outcome: str
    message: str = ""
    seconds: float = 0.0
    #: part of the acceptance metric: not an ``*_expanded`` case and every graph input and output a
    #: tensor (no sequence / optional / map); see :func:`in_metric`
    metric: bool = True


def collect(ops: Iterable[str] | None = None) -> list:
    """The node test cases (``onnx.backend.test.case.test_case.TestCase``), sorted by name;
    only the cases of ``ops`` (op types) when given."""
    from onnx.backend.test.case import node as node_pkg

    import warnings

    import numpy as np

    wanted = set(ops) if ops is not None else None
    seen, out = set(), []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        all_cases = node_pkg.collect_testcases()
    for tc in all_cases:
        if tc.model is None or tc.name in seen:
            continue
        seen.add(tc.name)
        out.append(tc)
    ops_of = case_ops(out)
    if wanted is not None:
        out = [tc for tc in out if ops_of[tc.name] in wanted]
    return sorted(out, key=lambda t: t.name)


def case_ops(cases: Sequence) -> dict[str, str]:
    """case name -> the op it tests (the node's op; an expanded case gets its base case's op)."""
    ops = {tc.name: tc.model.graph.node[0].op_type for tc in cases
           if not _EXPANDED.search(tc.name) and len(tc.model.graph.node) == 1}
    out = {}
    for tc in cases:
        base = _EXPANDED.sub("", tc.name)
        if base in ops:
            out[tc.name] = ops[base]
        elif tc.name in ops:
            out[tc.name] = ops[tc.name]
        else:  # an expanded case without its base, or a multi-node case: its first node
            out[tc.name] = tc.model.graph.node[0].op_type if tc.model.graph.node else "?"
    return out


def tensor_only(tc) -> bool:
    """Every graph input and output of the case's model is a tensor (no sequence, optional, map or
    sparse tensor type)."""
    g = tc.model.graph
    return all(v.type.WhichOneof("value") == "tensor_type" for v in list(g.input) + list(g.output))


def in_metric(tc) -> bool:
    """The acceptance metric's population (issue 12): the non-expanded, tensor-only cases."""
    return not _EXPANDED.search(tc.name) and tensor_only(tc)


METRIC_DEFINITION = (
    "the **non-expanded, tensor-only** cases: `*_expanded` / `*_expanded_verN` cases (an op's ONNX "
    "function body, the op is counted by its own case) are left out, and so are cases with a "
    "sequence, optional, map or sparse-tensor graph input or output")


class _Timeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ANN001
    raise _Timeout()


def run_case(tc, backend=None, timeout: float | None = DEFAULT_TIMEOUT, **prepare_kwargs) -> tuple[str, str]:
    """(outcome, message) of one node test case through ``backend`` (default M100Backend)."""
    import numpy as np
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from m100.errors import M100Error
    from m100.tools.onnx_backend import M100Backend

    backend = backend or M100Backend
    use_alarm = timeout and hasattr(signal, "SIGALRM")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            rep = backend.prepare(tc.model, "CPU", **prepare_kwargs)
            outs_per_set = []
            for inputs, _ in tc.data_sets:
                outs_per_set.append(list(rep.run([_normalize_tensor(x) for x in inputs])))
        except M100Error as e:
            msg = str(e)
            if "\n" in msg.strip() or not msg.strip():
                return "error", f"{type(e).__name__} with a multi-line/empty message: {msg[:300]!r}"
            return "unsupported", msg
        except _Timeout:
            return "error", f"timeout after {timeout:g} s"
        except Exception as e:  # noqa: BLE001 - every other failure is a bug, reported as such
            return "error", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        finally:
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
        for (_, refs), outs in zip(tc.data_sets, outs_per_set):
            refs = [_normalize_tensor(x) for x in refs]
            try:
                with np.errstate(all="ignore"):
                    Runner.assert_similar_outputs(refs, outs, rtol=tc.rtol, atol=tc.atol)
            except AssertionError as e:
                lines = [ln for ln in str(e).splitlines() if ln.strip()]
                return "mismatch", " | ".join(lines[:4])[:400]
            except Exception as e:  # noqa: BLE001
                return "mismatch", f"{type(e).__name__}: {str(e)[:300]}"
        return "pass", ""
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, old)


def _worker(args):
    tc, op, timeout, kwargs = args
    t0 = time.perf_counter()
    outcome, msg = run_case(tc, timeout=timeout, **kwargs)
    return CaseResult(tc.name, op, outcome, msg, time.perf_counter() - t0, in_metric(tc))


def run_all(cases: Sequence, jobs: int = 1, timeout: float = DEFAULT_TIMEOUT, verbose: bool = False,
            **kwargs) -> list[CaseResult]:
    ops = case_ops(cases)
    work = [(tc, ops[tc.name], timeout, kwargs) for tc in cases]
    results: list[CaseResult] = []
    if jobs > 1:
        import multiprocessing as mp
        with mp.get_context("fork").Pool(jobs, maxtasksperchild=50) as pool:
            it = pool.imap(_worker, work, chunksize=1)
            for r in it:
                results.append(r)
                _progress(r, len(results), len(work), verbose)
    else:
        for w in work:
            r = _worker(w)
            results.append(r)
            _progress(r, len(results), len(work), verbose)
    return results


def _progress(r: CaseResult, i: int, n: int, verbose: bool) -> None:
    if verbose or r.outcome in ("mismatch", "error"):
        print(f"[{i}/{n}] {r.outcome:11s} {r.name} ({r.seconds:.1f}s) {r.message[:200]}",
              file=sys.stderr, flush=True)


def per_op(results: Sequence[CaseResult]) -> dict[str, Counter]:
    table: dict[str, Counter] = {}
    for r in results:
        table.setdefault(r.op, Counter())[r.outcome] += 1
    return dict(sorted(table.items()))


def totals(results: Sequence[CaseResult]) -> Counter:
    return Counter(r.outcome for r in results)


def metric(results: Sequence[CaseResult]) -> tuple[int, int]:
    """(passing, all) cases of the acceptance metric's population (:func:`in_metric`)."""
    pop = [r for r in results if r.metric]
    return sum(r.outcome == "pass" for r in pop), len(pop)


def metric_line(results: Sequence[CaseResult]) -> str:
    p, n = metric(results)
    return f"metric (non-expanded, tensor-only): {p} of {n} pass ({100.0 * p / max(n, 1):.1f} %)"


def render_table(results: Sequence[CaseResult]) -> str:
    rows = [("op", "cases", *OUTCOMES, "metric pass/cases")]
    for op, c in per_op(results).items():
        pm, nm = metric([r for r in results if r.op == op])
        rows.append((op, str(sum(c.values())), *(str(c[o]) for o in OUTCOMES), f"{pm}/{nm}"))
    t = totals(results)
    pm, nm = metric(results)
    rows.append(("total", str(len(results)), *(str(t[o]) for o in OUTCOMES), f"{pm}/{nm}"))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(wi) for c, wi in zip(r, w)) for r in rows) + "\n" + \
        metric_line(results)


def _short_reason(msg: str) -> str:
    """A refusal message without the per-case parts (file names, value names, shapes)."""
    m = re.sub(r"<onnx model>:?\s*", "", msg)
    m = re.sub(r"'[^']*'", "'…'", m)
    m = re.sub(r"\d+", "N", m)
    return m[:140]


def render_docs(results: Sequence[CaseResult], meta: dict) -> str:
    t = totals(results)
    table = per_op(results)
    supported = [op for op, c in table.items() if c["pass"]]
    mp, mn = metric(results)
    lines = [
        "# Operators: the ONNX node tests through the whole stack",
        "",
        "Generated by `python -m m100.tools.node_tests --write-docs docs/ops.md` (do not edit by hand).",
        "Every node test case of the `onnx` wheel (onnx "
        f"{meta.get('onnx', '?')}) is compiled with `m100 compile`'s function "
        f"(machine `{meta.get('machine', 'm100')}`, all TPBs, dataflow sync) and run on the interpreter "
        "through `m100.tools.onnx_backend.M100Backend`, then compared with the case's expected outputs "
        "at the case's tolerance (rtol 1e-3, atol 1e-7 unless the case says otherwise).",
        *(["", f"This table merges a full run with a later re-run of {meta['rerun']} (`--rerun JSON "
            "--ops ...`); the other cases' outcomes are those of the full run."] if meta.get("rerun") else []),
        "",
        "Outcomes: **pass**; **not supported** = a clean one-line refusal (an `M100Error`) at compile "
        "time; **other** = a numeric mismatch, a traceback, an interpreter report or a timeout (a bug; "
        "the test suite fails on any). A case belongs to the op of its node; `*_expanded` cases "
        "(the op's ONNX function body) count for the op they expand.",
        "",
        f"Acceptance metric (issue 12): **{mp} of {mn} = {100.0 * mp / max(mn, 1):.1f} %** of "
        f"{METRIC_DEFINITION}. Column *metric* below: passing / all cases of that population per op.",
        "",
        "Shape parameters: an integer graph input that ONNX defines as a shape/axes parameter (Reduce "
        "`axes`, Reshape/Expand `shape`, Slice `starts/ends/axes/steps`, Tile `repeats`, Split `split`, "
        "Squeeze/Unsqueeze `axes`, ...; `m100.tools.onnx_backend.SHAPE_PARAMS`) is bound to the case's "
        "value before compilation (one program per distinct value, like a shape tensor of other "
        "inference compilers); real models have these as constants. Every other input goes through the "
        "program.",
        "",
        f"Totals: **{len(results)} cases, {t['pass']} pass, {t['unsupported']} not supported, "
        f"{t['mismatch'] + t['error']} other** ({t['mismatch']} mismatches, {t['error']} errors); "
        f"{len(supported)} of {len(table)} ops pass at least one case.",
        "",
        "## Ops with at least one passing case",
        "",
        "| op | cases | pass | not supported | other | metric |",
        "|---|---|---|---|---|---|",
    ]
    for op in supported:
        c = table[op]
        pm, nm = metric([r for r in results if r.op == op])
        lines.append(f"| {op} | {sum(c.values())} | {c['pass']} | {c['unsupported']} | "
                     f"{c['mismatch'] + c['error']} | {pm}/{nm} |")
    lines += ["", "## Ops without a passing case", "",
              "| op | cases | not supported | other | metric cases | most common reason |",
              "|---|---|---|---|---|---|"]
    for op, c in table.items():
        if c["pass"]:
            continue
        reasons = Counter(_short_reason(r.message) for r in results
                          if r.op == op and r.outcome != "pass")
        why = reasons.most_common(1)[0][0].replace("|", "\\|") if reasons else ""
        lines.append(f"| {op} | {sum(c.values())} | {c['unsupported']} | "
                     f"{c['mismatch'] + c['error']} | {metric([r for r in results if r.op == op])[1]} "
                     f"| {why} |")
    lines += ["", "## Most common refusals", "", "| cases | message (numbers -> N, names -> '…') |",
              "|---|---|"]
    reasons = Counter(_short_reason(r.message) for r in results if r.outcome == "unsupported")
    for why, n in reasons.most_common(25):
        lines.append(f"| {n} | {why.replace('|', chr(92) + '|')} |")
    bad = [r for r in results if r.outcome in ("mismatch", "error")]
    if bad:
        lines += ["", "## Other outcomes (bugs)", "", "| case | outcome | message |", "|---|---|---|"]
        for r in bad:
            lines.append(f"| {r.name} | {r.outcome} | {r.message[:160].replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m m100.tools.node_tests", description=__doc__.split("\n")[0])
    ap.add_argument("--ops", help="comma-separated op types (default: every op)")
    ap.add_argument("-k", dest="pattern", help="only cases whose name matches this regex")
    ap.add_argument("--machine", default="m100")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case")
    ap.add_argument("--json", help="write every case's outcome here")
    ap.add_argument("--write-docs", metavar="MD", help="write the op table (docs/ops.md); full run only")
    ap.add_argument("--rerun", metavar="JSON",
                    help="take the outcomes of a previous full run (its --json) and run again only "
                    "its mismatch/error cases (after fixing them), or with --ops / -k every selected "
                    "case (after changing those ops); the table is the merged result")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    selected = args.ops or args.pattern
    all_cases = collect(None if args.rerun else (args.ops.split(",") if args.ops else None))
    cases = all_cases
    if args.rerun and args.ops:
        wanted, op_of = set(args.ops.split(",")), case_ops(all_cases)
        cases = [tc for tc in cases if op_of[tc.name] in wanted]
    if args.pattern:
        cases = [tc for tc in cases if re.search(args.pattern, tc.name)]
    if args.write_docs and selected and not args.rerun:
        ap.error("--write-docs needs a full run (no --ops / -k) or --rerun of one")
    previous: dict[str, CaseResult] = {}
    if args.rerun:
        with open(args.rerun) as f:
            previous = {c["name"]: CaseResult(**c) for c in json.load(f)["cases"]}
        if set(previous) != {tc.name for tc in all_cases}:
            ap.error(f"{args.rerun} is not a run of the same cases")
        for tc in all_cases:  # JSON of runs before the metric existed: recompute the flag
            previous[tc.name].metric = in_metric(tc)
        if not selected:
            cases = [tc for tc in cases if previous[tc.name].outcome not in ("pass", "unsupported")]
    t0 = time.perf_counter()
    results = run_all(cases, args.jobs, args.timeout, args.verbose, machine=args.machine)
    wall = time.perf_counter() - t0
    if previous:
        previous.update({r.name: r for r in results})
        results = sorted(previous.values(), key=lambda r: r.name)
    print(render_table(results))
    print(f"{len(results)} cases in {wall:.0f} s wall, {sum(r.seconds for r in results):.0f} s in cases")
    import onnx
    meta = {"onnx": onnx.__version__, "machine": args.machine}
    if args.rerun and selected:
        meta["rerun"] = ", ".join(f"`{x}`" for x in (args.ops, args.pattern) if x)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "cases": [asdict(r) for r in results]}, f, indent=1)
    if args.write_docs:
        with open(args.write_docs, "w") as f:
            f.write(render_docs(results, meta))
    t = totals(results)
    return 1 if t["mismatch"] or t["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
