"""Quantized models (issue 11): post-training quantization accuracy against the float model, and
W8A8 ResNet-18 cycles / TCU utilization against the int8 peak.

    .venv/bin/python bench/quant.py [--inputs 100] [--sim 4] [--hw 64] [--perf-hw 224]
                                    [--only ptq|perf] [--json out.json]

PTQ (``m100.frontend.ptq``, 16 calibration inputs N(0, 1) or random token ids, then ``--inputs``
fresh ones): per model and scheme, the relative L2 error of the output against the float model and
the top-1 agreement (argmax over the last axis, per row: 1 per image, 8 per token sequence),
computed with onnxruntime running the quantized model, and for the first ``--sim`` inputs also
on the compiled program (the interpreter; ``m100 check`` compares the two). Models: ResNet-18
(random weights, ``--hw`` x ``--hw``, 1000 classes), the LLaMA decoder layer and the 1-layer LLaMA
LM of ``test/data`` (int64 token ids in: the Gather on the CSU).

Perf: ResNet-18 ``--perf-hw`` x ``--perf-hw`` W8A8 (PTQ) and f32, compiled for m100 (56 TPBs):
cycles, us, TCU MACs and utilization against the int8 peak of all 56 TCUs (and the f32 run's
against the f32 peak).

QDQ (``--only qdq``): the acceptance model of issue 11, ResNet-18 (random weights, ``--hw``,
``--classes`` outputs) quantized by onnxruntime's ``quantize_static`` (QDQ, per-channel S8S8,
BatchNorm folded by ``quant_pre_process``), compiled for m100 and run on the interpreter for
``--qdq-inputs`` N(0, 1) inputs; every output element compared in LSB of the output's
QuantizeLinear scale with (a) onnxruntime as it runs by default, (b) onnxruntime with
``session.qdqisint8allowed=1`` (every conv an S8S8 integer kernel), (c) the numpy oracle of
onnxruntime's integer kernels (``test/e2e/qdq_oracle.py``: QLinearConv/QGemm requantization,
QLinearAdd); and (a) vs (b) (onnxruntime against itself). The evidence for the differences: the
op types of onnxruntime's optimized graphs (``QLinearConv`` = integer kernel, ``Conv`` /
``FusedConv`` = the f32 fallback), and oracle variants: the ONNX definition of the residual Adds
(``add="onnx"``) instead of QLinearAdd's f32 expression, the ONNX definition of the
GlobalAveragePool (``gap="onnx"``) instead of QLinearGlobalAveragePool's integer sum, and the
TCU's other requant mode (``requant="fixed"``: the exact product rounded half up,
``Machine.tcu_requant = "fixed-half-up"``, docs/isa.md) instead of the f32 product rounded half
to even.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _inputs(model, n, seed):
    from onnx import helper
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = []
    for _ in range(n):
        d = {}
        for i in model.graph.input:
            if i.name in inits:
                continue
            shape = [x.dim_value for x in i.type.tensor_type.shape.dim]
            dt = helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
            d[i.name] = (rng.integers(0, 128, shape) if np.issubdtype(dt, np.integer)
                         else rng.standard_normal(shape)).astype(dt)
        out.append(d)
    return out


def _models(hw):
    import onnx

    from m100.frontend import models
    out = {"resnet18": lambda: models.resnet18(batch=1, hw=hw, num_classes=1000, seed=0)}
    for name in ("llama_layer_small", "llama_lm_small"):
        p = ROOT / "test/data" / f"{name}.onnx"
        if p.exists():
            out[name] = lambda p=p: onnx.load(str(p))
    return out


def _ort(model):
    from m100.frontend.ort_session import ort_session
    return ort_session(model, threads=0)


def _top1(a, b):
    a = a.reshape(-1, a.shape[-1])
    b = b.reshape(-1, b.shape[-1])
    return np.argmax(a, -1) == np.argmax(b, -1)


def ptq_rows(n_inputs: int, n_sim: int, hw: int) -> list[dict]:
    from m100.frontend import ptq
    from m100.tools import driver

    rows = []
    for name, build in _models(hw).items():
        fm = build()
        cal = _inputs(fm, 16, seed=1)
        test = _inputs(fm, n_inputs, seed=2)
        fs = _ort(fm)
        fouts = [fs.run(None, x)[0].astype(np.float64) for x in test]
        for scheme in ("w8a8", "f16"):
            row = {"model": name, "scheme": scheme}
            try:
                t = time.perf_counter()
                qm = ptq.quantize_model(fm, scheme, cal)
                row["quantize_s"] = round(time.perf_counter() - t, 1)
            except Exception as e:  # noqa: BLE001 - reported in the table
                row["error"] = str(e).splitlines()[0][:80]
                rows.append(row)
                continue
            qs = _ort(qm)
            qin = {i.name: i for i in qs.get_inputs()}
            num = den = 0.0
            agree = []
            for x, f in zip(test, fouts):
                feed = {k: v.astype(np.float16) if "float16" in qin[k].type else v
                        for k, v in x.items()}
                q = qs.run(None, feed)[0].astype(np.float64)
                num += float(np.sum((q - f) ** 2))
                den += float(np.sum(f ** 2))
                agree.append(_top1(q, f))
            row["rel_err"] = (num / den) ** 0.5
            row["top1_pct"] = 100.0 * float(np.mean(np.concatenate(agree)))
            if n_sim:
                try:
                    cr = driver.compile(qm)
                    sim_agree, sim_num, sim_den = [], 0.0, 0.0
                    for x, f in list(zip(test, fouts))[:n_sim]:
                        feed = {k: v.astype(np.float16) if "float16" in qin[k].type else v
                                for k, v in x.items()}
                        res = driver.run(cr.program, feed, machine=cr.machine)
                        g = np.asarray(res.outputs[cr.output_names[0]], np.float64).reshape(f.shape)
                        sim_num += float(np.sum((g - f) ** 2))
                        sim_den += float(np.sum(f ** 2))
                        sim_agree.append(_top1(g, f))
                    row["sim_inputs"] = min(n_sim, len(test))
                    row["sim_rel_err"] = (sim_num / sim_den) ** 0.5
                    row["sim_top1_pct"] = 100.0 * float(np.mean(np.concatenate(sim_agree)))
                except Exception as e:  # noqa: BLE001
                    row["sim_error"] = str(e).splitlines()[0][:80]
            rows.append(row)
            print(row, flush=True)
    return rows


def perf_rows(hw: int, schemes=("w8a8", "f32")) -> list[dict]:
    from m100.frontend import models, ptq
    from m100.targets.m100.machine import get_machine
    from m100.tools import driver

    fm = models.resnet18(batch=1, hw=hw, num_classes=1000, seed=0)
    cal = _inputs(fm, 8, seed=1)
    x = _inputs(fm, 1, seed=3)[0]
    rows = []
    for scheme in schemes:
        model = ptq.quantize_model(fm, "w8a8", cal) if scheme == "w8a8" else fm
        t = time.perf_counter()
        cr = driver.compile(model)
        ct = time.perf_counter() - t
        res = driver.run(cr.program, x, machine=cr.machine)
        st = res.stats
        m = get_machine("m100")
        rate = 1.0 if scheme == "w8a8" else m.tcu_rate("f32")
        peak = m.tcu_macs_per_cycle_i8 * m.num_tpbs * rate
        cyc = st["total_cycles"]
        rows.append({"model": f"resnet18 {hw}x{hw}", "scheme": scheme, "compile_s": round(ct, 1),
                     "cycles": round(cyc), "us": round(st["total_us"], 1),
                     "tcu_macs": int(st["tcu_macs"]),
                     "util_pct_of_peak": round(100.0 * st["tcu_macs"] / (cyc * peak), 2),
                     "peak": "int8" if scheme == "w8a8" else "f32"})
        print(rows[-1], flush=True)
    return rows


def _ort_session(model, int8: bool):
    """(session, {op type: count} of its optimized graph)."""
    import tempfile

    import onnx

    from m100.frontend.ort_session import ort_session

    with tempfile.TemporaryDirectory() as d:
        opt = str(Path(d) / "opt.onnx")
        sess = ort_session(model, {"session.qdqisint8allowed": "1"} if int8 else None,
                           optimized_model_path=opt)
        ops: dict[str, int] = {}
        for n in onnx.load(opt).graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return sess, ops


def _lsb_stats(steps) -> dict:
    s = np.concatenate(steps)
    return {"elements": int(s.size), "inputs_not_exact": sum(int(np.any(v)) for v in steps),
            "exact_pct": round(100.0 * float(np.mean(s == 0)), 3),
            "within1_pct": round(100.0 * float(np.mean(s <= 1)), 3), "max_lsb": int(s.max()),
            "hist": {int(k): int(v) for k, v in zip(*np.unique(s, return_counts=True))}}


def qdq_rows(n_inputs: int, hw: int, classes: int, n_oracle: int | None = None) -> list[dict]:
    import sys

    from m100.frontend import quant_models as qm
    from m100.tools import driver

    sys.path.insert(0, str(ROOT / "test" / "e2e"))
    from qdq_oracle import qdq_oracle

    model = qm.qdq_resnet18(hw=hw, num_classes=classes)
    t = time.perf_counter()
    cr = driver.compile(model, machine="m100")
    ct = time.perf_counter() - t
    from m100.targets.m100.isa import Conv2D, MatMul
    tcu = [i for _, i in cr.program.instructions() if isinstance(i, (Conv2D, MatMul))]
    n_int8 = sum(1 for i in tcu if getattr(i.epilogue, "requant", None) is not None)
    convs_in_model = sum(1 for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul"))
    sess, ops_default = _ort_session(model, int8=False)
    sess8, ops_int8 = _ort_session(model, int8=True)
    lsb = driver.output_lsb(model, model.graph.output[0].name)
    rng = np.random.default_rng(123)
    steps = {"ort_default": [], "ort_int8": [], "oracle": [], "oracle_onnx_add": [],
             "oracle_onnx_gap": [], "oracle_fixed_half_up": [], "ort_default_vs_ort_int8": [],
             "ort_int8_vs_oracle": []}
    sim_s = 0.0
    n_oracle = n_inputs if n_oracle is None else min(n_oracle, n_inputs)
    for i in range(n_inputs):
        x = rng.standard_normal((1, 3, hw, hw)).astype(np.float32)
        t = time.perf_counter()
        got = np.asarray(driver.run(cr.program, {"x": x}, machine=cr.machine, mode="functional")
                         .outputs[cr.output_names[0]], np.float64)
        sim_s += time.perf_counter() - t
        a = sess.run(None, {"x": x})[0].astype(np.float64).reshape(got.shape)
        b = sess8.run(None, {"x": x})[0].astype(np.float64).reshape(got.shape)
        def orc(**kw):
            return np.asarray(qdq_oracle(model, x, **kw)[0], np.float64).reshape(got.shape)

        pairs = [("ort_default", a, got), ("ort_int8", b, got), ("ort_default_vs_ort_int8", a, b)]
        if i < n_oracle:  # the numpy oracles cost more than the interpreter: the first n_oracle
            c = orc()
            pairs += [("oracle", c, got), ("oracle_onnx_add", orc(add="onnx"), got),
                      ("oracle_onnx_gap", orc(gap="onnx"), got),
                      ("oracle_fixed_half_up", orc(requant="fixed"), got),
                      ("ort_int8_vs_oracle", c, b)]
        for k, want, have in pairs:
            steps[k].append(np.rint(np.abs(have - want) / lsb).ravel())
    row = {"model": f"QDQ resnet18 {hw}x{hw}, {classes} classes", "inputs": n_inputs,
           "oracle_inputs": n_oracle,
           "compile_s": round(ct, 1), "sim_s_per_input": round(sim_s / max(n_inputs, 1), 1),
           "contractions": convs_in_model, "tcu_instructions": len(tcu),
           "tcu_requant_instructions": n_int8,
           "ort_default_ops": {k: v for k, v in ops_default.items() if "Conv" in k or "Gemm" in k
                               or k in ("QLinearAdd", "Add")},
           "ort_int8_ops": {k: v for k, v in ops_int8.items() if "Conv" in k or "Gemm" in k
                            or k in ("QLinearAdd", "Add")}}
    for k, v in steps.items():
        row[k] = _lsb_stats(v)
    print(row, flush=True)
    return [row]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=100)
    ap.add_argument("--sim", type=int, default=4)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--perf-hw", type=int, default=224)
    ap.add_argument("--qdq-inputs", type=int, default=20)
    ap.add_argument("--qdq-oracle-inputs", type=int, default=None,
                    help="compare with the numpy oracles on the first N inputs only (default all)")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--only", choices=("ptq", "perf", "qdq"))
    ap.add_argument("--perf-schemes", default="w8a8,f32",
                    help="comma-separated schemes of the perf rows (w8a8, f32)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    out = {}
    if a.only in (None, "ptq"):
        out["ptq"] = ptq_rows(a.inputs, a.sim, a.hw)
        print(f"\n{'model':20s} {'scheme':6s} {'rel err':>9s} {'top-1 %':>8s} {'sim err':>9s} "
              f"{'sim top-1 %':>11s}")
        for r in out["ptq"]:
            if "error" in r:
                print(f"{r['model']:20s} {r['scheme']:6s} {r['error']}")
                continue
            se = f"{r['sim_rel_err']:.4f}" if "sim_rel_err" in r else r.get("sim_error", "-")[:9]
            st = f"{r['sim_top1_pct']:.1f}" if "sim_top1_pct" in r else "-"
            print(f"{r['model']:20s} {r['scheme']:6s} {r['rel_err']:9.4f} {r['top1_pct']:8.1f} "
                  f"{se:>9s} {st:>11s}")
    if a.only in (None, "perf"):
        out["perf"] = perf_rows(a.perf_hw, tuple(a.perf_schemes.split(",")))
        print(f"\n{'model':20s} {'scheme':6s} {'cycles':>10s} {'us':>8s} {'util %':>7s} peak")
        for r in out["perf"]:
            print(f"{r['model']:20s} {r['scheme']:6s} {r['cycles']:10d} {r['us']:8.1f} "
                  f"{r['util_pct_of_peak']:7.2f} {r['peak']}")
    if a.only in (None, "qdq"):
        out["qdq"] = qdq_rows(a.qdq_inputs, a.hw, a.classes, a.qdq_oracle_inputs)
        for r in out["qdq"]:
            print(f"\n{r['model']}, {r['inputs']} inputs ({r['ort_int8']['elements']} elements; "
                  f"oracles on the first {r['oracle_inputs']}), "
                  f"{r['tcu_requant_instructions']} of {r['tcu_instructions']} TCU instructions "
                  "int8 with requant")
            print(f"{'compiled vs':28s} {'exact %':>8s} {'<= 1 LSB %':>10s} {'max LSB':>8s} "
                  f"{'inputs not exact':>16s}")
            for k in ("ort_int8", "ort_default", "oracle", "oracle_onnx_add", "oracle_onnx_gap",
                      "oracle_fixed_half_up", "ort_default_vs_ort_int8", "ort_int8_vs_oracle"):
                q = r[k]
                print(f"{k:28s} {q['exact_pct']:8.2f} {q['within1_pct']:10.2f} {q['max_lsb']:8d} "
                      f"{q['inputs_not_exact']:16d}")
            print("onnxruntime's optimized graph, default:", r["ort_default_ops"],
                  " qdqisint8allowed=1:", r["ort_int8_ops"])
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
