"""Random ONNX graphs for differential testing of the whole stack against onnxruntime.

The generator (:func:`random_graph`) builds small, valid ONNX models with ``onnx.helper`` from a
stream of choices, so the same code serves hypothesis (``HypothesisChoices``: every choice is a
``data.draw``, so failures shrink to a minimal model) and plain seeded runs (``RandomChoices``, for
benches and the CLI below). :func:`differential` compiles one graph for a machine, runs it on the
reference interpreter and compares it with onnxruntime; the outcome is ``pass``, ``refused`` (a clean
"not supported": an :class:`~m100.errors.M100Error` whose message is one line) or ``fail`` (a numeric
mismatch, an interpreter report, a traceback-worthy exception, or a multi-line error).

The generator, its families and ops: :mod:`m100.tools.fuzz_graph`.

Integer graphs (exact comparison, 8/16-bit wrap-around, unsigned types) come from
:mod:`m100.tools.fuzz_int`; :func:`differential` compares integer and bool outputs bit-exactly.
Float16 graphs (``--family f16``, :func:`f16_graph`) are the float family's graphs converted as
``m100 compile --quantize f16`` does (``frontend.ptq.to_f16``: initializers, inputs and outputs
f16), compared with the f16 tolerance of ``m100 check`` (``compare.F16_TOL``): the program
computes a fused elementwise tree in f32 and rounds once at the store, onnxruntime runs f16
subgraphs in f32 with casts of its own.

W8A8 chains (``--family quant``, :mod:`m100.tools.fuzz_quant`): the LLM's quantized projections,
SiLU gate and ``silu(g) * u`` quantize at ``M = 1`` and up, with run-time weights.
The heads (``--family heads``, :func:`~m100.tools.fuzz_graph.random_heads_graph`): a projection's
output sliced on the last axis, each part read by its own MatMul; or the causal attention chain
(:mod:`m100.tools.fuzz_attention`: ``q_j @ kT_j`` with ``kT`` / ``v`` written by the program,
4-8 heads sharing TPBs, mask, softmax, ``@ v_j``, ``wo``), which ``--family attention`` and
``--family quant-attention`` (its W8A8 form, a third of the quant family's graphs) draw alone.

Two oracles: onnxruntime first; where its outputs (float, or integer outputs of a graph with
float inputs: a quantize after float arithmetic) are off ONNX's own numpy reference
evaluator (``onnx.reference``, every node rounded in its output type as the definitions say) by
more than the tolerance, the reference evaluator decides (:func:`definition_run`): onnxruntime
runs an f16 subgraph in f32 when one of its ops lacks an f16 kernel, which before a discontinuous
op (``Mod``) is not the ONNX result. Such a pass says so in its detail.

CLI (a seeded campaign, prints the op mix, refusal reasons and failures; writes failing models)::

    python -m m100.tools.fuzz_onnx --count 200 --seed 0 --machines tiny,m100 --out out/fuzz
    python -m m100.tools.fuzz_onnx --family int --count 200
    python -m m100.tools.fuzz_onnx --family f16 --count 200
    python -m m100.tools.fuzz_onnx --family quant --count 200
    python -m m100.tools.fuzz_onnx --family heads --count 200
    python -m m100.tools.fuzz_onnx --family quant-attention --count 60   # (or attention: float)
"""

from __future__ import annotations

import argparse
import collections
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from m100.tools.fuzz_graph import FuzzGraph, RandomChoices, random_graph, random_heads_graph

#: comparison: |got - want| <= ATOL * max(1, max|want|) + RTOL * |want| (f32, summation order)
RTOL = 1e-3
ATOL = 1e-4


# --- differential run -------------------------------------------------------------------------------
@dataclass
class Outcome:
    status: str  # "pass" | "refused" | "fail"
    machine: str
    detail: str = ""  # refusal message or failure description
    max_abs: float = 0.0


def _reason(msg: str) -> str:
    """A short category for a refusal message (for counting)."""
    import re

    m = msg.split(": ", 1)[-1] if "@" in msg or "op #" in msg else msg
    m = re.sub(r"'[^']*'", "'…'", m)
    m = re.sub(r"\[[^\]]*\]|\d+", "N", m)
    return m[:90]


def differential(fg: FuzzGraph, machines: Sequence[str] = ("tiny", "m100"), *,
                 rtol: float = RTOL, atol: float = ATOL, seed: int = 0) -> list[Outcome]:
    """Compile ``fg`` for each machine, run it on the interpreter, compare with onnxruntime.
    The ONNX model is imported once (torch-mlir) and the module compiled per machine."""
    from m100.errors import M100Error
    from m100.frontend.mlir_load import shared_context
    from m100.tools import driver

    names = [i.name for i in fg.model.graph.input]
    feeds = [fg.inputs[n] for n in names]
    want = oracle_run(fg.model, feeds)  # the oracle must accept every generated model
    out: list[Outcome] = []
    try:
        module, _ = driver.load_model(fg.model, shared_context())
    except M100Error as e:
        msg = str(e)
        st = "refused" if "\n" not in msg.strip() else "fail"
        return [Outcome(st, m, msg) for m in machines]
    for mach in machines:
        try:
            cr = driver.compile(module.clone(), machine=mach, seed=seed)
        except M100Error as e:
            msg = str(e)
            if "\n" in msg.strip():
                out.append(Outcome("fail", mach, f"multi-line error: {msg}"))
            else:
                out.append(Outcome("refused", mach, msg))
            continue
        except Exception:  # noqa: BLE001 - a traceback is a failure of the compiler
            out.append(Outcome("fail", mach, "exception:\n" + traceback.format_exc(limit=8)))
            continue
        try:
            syms = [s.name for s in cr.program.symbols if s.role == "input"]
            res = driver.run(cr.program, dict(zip(syms, feeds, strict=True)))
        except Exception:  # noqa: BLE001
            out.append(Outcome("fail", mach, "run exception:\n" + traceback.format_exc(limit=8)))
            continue
        if res.reports:
            out.append(Outcome("fail", mach, "interpreter: " + "; ".join(map(str, res.reports[:3]))))
            continue
        flow = driver.check_dataflow(cr)  # every read reads the tensor the compiler meant
        if flow:
            out.append(Outcome("fail", mach, "; ".join(flow[:3])))
            continue
        got = [res.outputs[o.name] for o in fg.model.graph.output] \
            if all(o.name in res.outputs for o in fg.model.graph.output) else \
            list(res.outputs.values())  # (an output the program renamed: in program order)
        bad, worst = compare_outputs(got, want, rtol, atol, fg.slack)
        note = ""
        if bad and (any(np.asarray(w).dtype.kind == "f" for w in want) or
                    any(np.asarray(v).dtype.kind == "f" for v in feeds)):
            # two oracles: where onnxruntime is off the ONNX definition itself, the definition
            # (ONNX's numpy reference evaluator) decides (see :func:`definition_run`)
            ref = definition_run(fg.model, feeds, want, rtol, atol, fg.slack)
            if ref is not None:
                bad, worst = compare_outputs(got, ref, rtol, atol, fg.slack)
                note = "onnxruntime off the ONNX definition; compared with onnx.reference"
        out.append(Outcome("fail" if bad else "pass", mach, "; ".join(bad) or note, worst))
    return out


def compare_outputs(got: Sequence, want: Sequence, rtol: float = RTOL, atol: float = ATOL,
                    slack: float = 0.0) -> tuple[list[str], float]:
    """The differences of ``got`` from ``want`` (one line per output that differs: integers and
    bools bit-exact in the ONNX output type, floats within ``atol * max(1, max|want|) + rtol *
    |want| + slack`` (``FuzzGraph.slack``) where ``want`` is finite; a non-finite ``want`` element (the definition overflows:
    ``x * 2e4`` in f16, then ``fmod(inf, w)``) must be the same class in ``got`` -- NaN, or the
    same infinity -- and any other non-finite ``got`` fails) and the largest float difference."""
    from m100.tools.onnx_backend import _as_onnx_dtype

    bad: list[str] = []
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.size != w.size:
            bad.append(f"output {i}: {g.size} elements, want {w.size}")
            continue
        if w.dtype.kind in "iub":  # integers and bools: bit-exact, in the ONNX output type
            g = _as_onnx_dtype(g, w.dtype).reshape(w.shape)
            wrong = int((g != w).sum())
            if g.dtype != w.dtype or wrong:
                bad.append(f"output {i}: {wrong} of {w.size} {w.dtype} elements differ "
                           f"(got {g.dtype})")
            continue
        w = np.asarray(w, np.float64)
        g = np.asarray(g, np.float64)
        g = g.reshape(w.shape)
        fin = np.isfinite(w)
        # non-finite where the definition is: the same class (NaN == NaN, inf == inf of its sign)
        odd = int((~fin & ~((np.isnan(w) & np.isnan(g)) | (g == w))).sum())
        wf, gf = w[fin], g[fin]
        tol = atol * max(1.0, float(np.abs(wf).max(initial=0.0))) + rtol * np.abs(wf) + slack
        d = np.abs(gf - wf)
        worst = max(worst, float(d.max(initial=0.0)))
        if odd or not np.isfinite(gf).all() or (d > tol).any():
            bad.append(f"output {i}: max abs error {d.max(initial=0.0):.3g} (|want| max "
                       f"{np.abs(wf).max(initial=0.0):.3g})"
                       + (f", {odd} non-finite elements of want differ" if odd else ""))
    return bad, worst


def definition_run(model, feeds: Sequence[np.ndarray], ort_out: Sequence, rtol: float = RTOL,
                   atol: float = ATOL, slack: float = 0.0) -> list[np.ndarray] | None:
    """The outputs of ONNX's numpy reference evaluator (every node computed and rounded in its
    own output type, as the operator definitions say) when onnxruntime's ``ort_out`` is off them
    by more than the tolerance, else None (no dispute: onnxruntime stays the oracle).

    Why: onnxruntime runs an f16 subgraph in f32 where one of its ops has no f16 kernel
    (``InsertedPrecisionFreeCast``), so intermediate values are not rounded to f16. Before a
    discontinuous op that is not the ONNX result: ``Mod(fmod=1)(Mul(x, 1000), w)`` in f16 then
    ``Softmax`` was 0.19 off the definition (fuzz f16 seed 1303 #3), the compiled program 5e-4."""
    from onnx.reference import ReferenceEvaluator

    names = [i.name for i in model.graph.input]
    try:
        ref = list(ReferenceEvaluator(model).run(None, dict(zip(names, feeds, strict=True))))
    except Exception:  # noqa: BLE001 - an op the evaluator lacks: no second opinion
        return None
    dispute, _ = compare_outputs(ref, ort_out, rtol, atol, slack)
    return ref if dispute else None


def tolerance(fg: FuzzGraph) -> dict[str, float]:
    """The float tolerance of ``fg``'s outputs: ``m100 check``'s f16 tolerance when an output is
    float16 (f16 graphs, f16 W8A8 chains), else the f32 one."""
    from onnx import TensorProto

    from m100.tools.compare import F16_TOL

    if any(o.type.tensor_type.elem_type == TensorProto.FLOAT16 for o in fg.model.graph.output):
        return {"rtol": F16_TOL, "atol": F16_TOL}
    return {"rtol": RTOL, "atol": ATOL}


def f16_graph(fg: FuzzGraph) -> FuzzGraph:
    """``fg`` in float16: the model through ``frontend.ptq.to_f16``, its float inputs rounded to
    f16 (integer inputs, e.g. Gather indices, as they are)."""
    from m100.frontend.ptq import to_f16

    ins = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in fg.inputs.items()}
    return FuzzGraph(to_f16(fg.model), ins, list(fg.ops))


def oracle_run(model, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime (CPU, one thread) on ``model``; where it does not implement an op for a type
    (e.g. Max on int16), ONNX's numpy reference evaluator, written from the operator definitions."""
    from m100.tools.onnx_backend import onnxruntime_run

    try:
        return onnxruntime_run(model, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own NOT_IMPLEMENTED types
        if "NOT_IMPLEMENTED" not in str(e) and "Could not find an implementation" not in str(e):
            raise
    from onnx.reference import ReferenceEvaluator

    names = [i.name for i in model.graph.input]
    return list(ReferenceEvaluator(model).run(None, dict(zip(names, feeds, strict=True))))


def save_failure(fg: FuzzGraph, directory, tag: str = "last_failure") -> Path:
    """Write the model and its inputs (``<tag>.onnx``, ``<tag>.npz``); return the model path."""
    import onnx

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(fg.model, d / f"{tag}.onnx")
    np.savez(d / f"{tag}.npz", **fg.inputs)
    return d / f"{tag}.onnx"


@dataclass
class Campaign:
    graphs: int = 0
    ops: collections.Counter = field(default_factory=collections.Counter)
    status: collections.Counter = field(default_factory=collections.Counter)
    refusals: collections.Counter = field(default_factory=collections.Counter)
    failures: list[tuple[int, Outcome, str]] = field(default_factory=list)
    disputes: list[tuple[int, str, str]] = field(default_factory=list)  # decided by onnx.reference

    def add(self, idx: int, fg: FuzzGraph, outs: list[Outcome]) -> None:
        self.graphs += 1
        self.ops.update(fg.ops)
        for o in outs:
            self.status[o.status] += 1
            if o.status == "refused":
                self.refusals[_reason(o.detail)] += 1
            elif o.status == "fail":
                self.failures.append((idx, o, fg.describe()))
            elif o.detail:  # a pass where onnxruntime was off the definition
                self.disputes.append((idx, o.machine, fg.describe()))

    def table(self) -> str:
        lines = [f"graphs {self.graphs}, runs {sum(self.status.values())}: "
                 + ", ".join(f"{k} {v}" for k, v in sorted(self.status.items()))]
        lines.append("op mix: " + ", ".join(f"{k} {v}" for k, v in self.ops.most_common()))
        lines.append("refusals:")
        lines += [f"  {v:5d}  {k}" for k, v in self.refusals.most_common(25)]
        if self.disputes:
            lines.append(f"onnxruntime off the ONNX definition, decided by onnx.reference: "
                         f"{len(self.disputes)}")
            lines += [f"  #{i} {m}: {d}" for i, m, d in self.disputes[:10]]
        lines.append(f"failures: {len(self.failures)}")
        lines += [f"  #{i} {o.machine}: {o.detail.splitlines()[0] if o.detail else ''} | {d}"
                  for i, o, d in self.failures[:30]]
        return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m m100.tools.fuzz_onnx", description=__doc__.split(
        "\n")[0])
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--machines", default="tiny,m100")
    ap.add_argument("--max-ops", type=int, default=4)
    ap.add_argument("--family", choices=("float", "int", "f16", "quant", "heads", "attention",
                                         "quant-attention"),
                    default="float",
                    help="float graphs (tolerance), integer graphs (exact; m100.tools.fuzz_int), "
                         "the float graphs in f16 (the f16 tolerance), W8A8 chains "
                         "(m100.tools.fuzz_quant), the heads' column parts and causal attention "
                         "chains (fuzz_graph.random_heads_graph; float tolerance), or the "
                         "attention chains alone: float, W8A8 (m100.tools.fuzz_attention)")
    ap.add_argument("--out", default="out/fuzz", help="failing models are written here")
    a = ap.parse_args(argv)
    camp = Campaign()
    for i in range(a.count):
        from m100.tools.fuzz_attention import random_attention_graph
        from m100.tools.fuzz_int import random_int_graph
        from m100.tools.fuzz_quant import random_quant_attention_graph, random_quant_graph

        gen = {"int": random_int_graph, "quant": random_quant_graph,
               "heads": random_heads_graph, "attention": random_attention_graph,
               "quant-attention": random_quant_attention_graph}.get(a.family, random_graph)
        fg = gen(RandomChoices(a.seed * 1_000_003 + i), a.max_ops)
        if a.family == "f16":
            fg = f16_graph(fg)
        outs = differential(fg, a.machines.split(","), **tolerance(fg))
        camp.add(i, fg, outs)
        if any(o.status == "fail" for o in outs):
            save_failure(fg, a.out, f"seed{a.seed}_{i}")
        print(f"#{i} " + " ".join(f"{o.machine}:{o.status}" for o in outs) + f" | {fg.describe()}",
              flush=True)
    print(camp.table())
    return 1 if camp.failures else 0


if __name__ == "__main__":
    sys.exit(main())
