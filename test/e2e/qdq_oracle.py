"""numpy oracle of onnxruntime's integer QDQ kernels (tests of issue 11; see qdq_oracle)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def ort_int8(model, feeds: dict):
    """``model`` run by onnxruntime (one thread) with its int8 kernels: QDQ groups become
    QLinearConv / QLinearAdd / QLinearGlobalAveragePool (``session.qdqisint8allowed``)."""
    from m100.frontend.ort_session import ort_session

    s = ort_session(model, {"session.qdqisint8allowed": "1"})
    return s.run(None, feeds)[0]


def qdq_oracle(model, x, requant: str = "f32", add: str = "ort", gap: str = "ort"):
    """The QDQ model evaluated in numpy as onnxruntime's integer kernels compute it (QLinearConv /
    QGemm: exact integer accumulation, f32 multiplier ``f32(f32(xs * ws) / ys)``, f32 product, round
    half even, + zp, saturate) for every Conv/Gemm; other ops on the f32 dequantized values, then
    QuantizeLinear ``round_half_even(f32(x / s)) + zp``. ``requant="fixed"``: the contractions'
    requantization in the TCU's ``fixed-half-up`` mode (docs/isa.md section 5: the same f32
    multiplier held exactly as ``mult / 2**shift``, the *exact* product ``acc * mult`` rounded half
    up by the shift) instead of the f32 product rounded half to even (``f32-rne``, the M100's).

    ``add="ort"``: a quantized Add (DQ, DQ, same shapes -> Add -> Q) as onnxruntime's QLinearAdd
    (MLAS AVX2: ``round_half_even(fma(a, ra, fma(b, rb, zc - fma(ra, za, rb * zb))))`` in f32 with
    ``ra = sa / sc``, ``rb = sb / sc``, passes/graph/lower_quantized_add.py); ``add="onnx"``: the
    ONNX definition (f32 add of the dequantized values, then QuantizeLinear).
    ``gap="ort"``: GlobalAveragePool -> Q as QLinearGlobalAveragePool (exact integer sum of
    ``q - zp``, times ``f32(s_in / f32(s_out * N))`` in f32, round half even; what
    lower-quantized-avgpool compiles); ``gap="onnx"``: the f32 mean of the dequantized values,
    then QuantizeLinear."""
    from m100.targets.m100.numerics import fma_f32

    f32 = np.float32
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env = {model.graph.input[0].name: x}

    def attr(n, k, d=None):
        for a in n.attribute:
            if a.name == k:
                return onnx.helper.get_attribute_value(a)
        return d

    def val(name):
        return init[name] if name in init else env[name]

    def deq(v):  # a ("q", int array, scale, zp, axis) -> f32 values
        _, q, s, z, ax = v
        if np.ndim(s):
            shp = [1] * q.ndim
            shp[ax] = -1
            s, z = np.reshape(s, shp), np.reshape(z, shp)
        return ((q.astype(f32) - np.asarray(z, f32)) * np.asarray(s, f32)).astype(f32)

    def fl(v):
        if isinstance(v, tuple) and v[0] not in ("q", "acc"):
            raise NotImplementedError(f"a {v[0]} value read by an op other than QuantizeLinear")
        return deq(v) if isinstance(v, tuple) and v[0] == "q" else v

    for n in model.graph.node:
        op, ins = n.op_type, list(n.input)
        if op == "DequantizeLinear":
            q = val(ins[0])
            z = val(ins[2]) if len(ins) > 2 else np.zeros_like(val(ins[1]), np.int64)
            out = ("q", np.asarray(q).astype(np.int64), val(ins[1]), np.asarray(z, np.int64),
                   attr(n, "axis", 1))
        elif op == "QuantizeLinear":
            s, z = f32(val(ins[1])), int(val(ins[2]))
            v = env[ins[0]]
            if isinstance(v, tuple) and v[0] == "qadd":
                _, (qa, sa, za), (qb, sb, zb) = v
                ra, rb = f32(f32(sa) / s), f32(f32(sb) / s)
                fixed = f32(f32(z) - fma_f32(ra, f32(za), f32(rb * f32(zb))))
                y = np.rint(fma_f32(qa.astype(f32), ra, fma_f32(qb.astype(f32), rb, fixed))) - z
            elif isinstance(v, tuple) and v[0] == "gap":
                _, acc, s_in, npix = v
                sc = f32(f32(s_in) / f32(s * f32(npix)))
                y = np.rint((acc.astype(f32) * sc).astype(f32))
            elif isinstance(v, tuple) and v[0] == "acc":
                _, acc, m_in, ch = v
                m = ((m_in).astype(f32) / s).astype(f32)
                shp = [1] * acc.ndim
                shp[ch] = -1
                if requant == "fixed":
                    mant, ex = np.frexp(m.astype(np.float64))  # m = mant * 2**ex, mant in [.5, 1)
                    mult = (mant * 2.0 ** 31).astype(np.int64)  # exact: m has 24 bits
                    sh = (31 - ex).astype(np.int64)
                    assert np.all(mult.astype(np.float64) == mant * 2.0 ** 31) and np.all(sh > 0)
                    p = acc.astype(np.int64) * mult.reshape(shp)
                    y = (p + (np.int64(1) << (sh.reshape(shp) - 1))) >> sh.reshape(shp)
                else:
                    y = np.rint((acc.astype(f32) * m.reshape(shp)).astype(f32))
            else:
                y = np.rint((fl(v).astype(f32) / s).astype(f32))
            out = np.clip(y + z, -128, 127).astype(np.int8)
        elif op in ("Conv", "Gemm"):
            xv, wv = env[ins[0]], env[ins[1]]
            bv = env[ins[2]] if len(ins) > 2 else ("q", np.zeros(1, np.int64), 1.0, 0, 0)
            if not all(isinstance(v, tuple) and v[0] == "q" for v in (xv, wv, bv)):
                raise NotImplementedError(f"{op} {n.name}: not a QDQ int8/int32 contraction")
            xq = xv[1] - xv[3]
            wq = wv[1] - np.reshape(wv[3], (-1,) + (1,) * (wv[1].ndim - 1))
            if op == "Conv":
                st, p = attr(n, "strides", [1, 1])[0], attr(n, "pads", [0, 0, 0, 0])
                xp = np.pad(xq, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
                F, C, kh, kw = wq.shape
                oh, ow = (xp.shape[2] - kh) // st + 1, (xp.shape[3] - kw) // st + 1
                acc = np.zeros((xq.shape[0], F, oh, ow), np.int64)
                for i in range(kh):
                    for j in range(kw):
                        acc += np.einsum("nchw,fc->nfhw",
                                         xp[:, :, i:i + st * oh:st, j:j + st * ow:st], wq[:, :, i, j])
                acc += bv[1].reshape(1, -1, 1, 1)
                ch = 1
            else:
                assert attr(n, "transB", 0) == 1
                acc = xq @ wq.T + bv[1]
                ch = 1
            m_in = (f32(xv[2]) * np.asarray(wv[2], f32).reshape(-1)).astype(f32)
            out = ("acc", acc, m_in, ch)
        elif op == "Add" and add == "ort" and all(
                isinstance(env[i], tuple) and env[i][0] == "q" and np.ndim(env[i][2]) == 0
                for i in ins) and env[ins[0]][1].shape == env[ins[1]][1].shape:
            out = ("qadd",) + tuple((env[i][1], env[i][2], int(env[i][3])) for i in ins)
        elif op == "Add":
            out = (fl(env[ins[0]]) + fl(env[ins[1]])).astype(f32)
        elif op == "Relu":
            out = np.maximum(fl(env[ins[0]]), f32(0))
        elif op == "MaxPool":
            v = fl(env[ins[0]])
            k, st = attr(n, "kernel_shape")[0], attr(n, "strides", [1, 1])[0]
            p = attr(n, "pads", [0, 0, 0, 0])
            vp = np.pad(v, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])), constant_values=-np.inf)
            oh, ow = (vp.shape[2] - k) // st + 1, (vp.shape[3] - k) // st + 1
            out = np.full((v.shape[0], v.shape[1], oh, ow), -np.inf, f32)
            for i in range(k):
                for j in range(k):
                    out = np.maximum(out, vp[:, :, i:i + st * oh:st, j:j + st * ow:st])
        elif op == "GlobalAveragePool" and gap == "ort" and isinstance(env[ins[0]], tuple):
            _, q, s_in, z_in, _ax = env[ins[0]]
            acc = (q - np.int64(z_in)).sum(axis=(2, 3), keepdims=True)
            out = ("gap", acc, s_in, q.shape[2] * q.shape[3])
        elif op == "GlobalAveragePool":
            out = fl(env[ins[0]]).mean(axis=(2, 3), keepdims=True, dtype=f32)
        elif op == "Flatten":
            v = env[ins[0]]
            out = ("q",) + (v[1].reshape(v[1].shape[0], -1),) + v[2:] if isinstance(v, tuple) \
                else v.reshape(v.shape[0], -1)
        else:
            raise NotImplementedError(op)
        env[n.output[0]] = out
    return [fl(env[o.name]) for o in model.graph.output]
