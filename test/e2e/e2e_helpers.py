"""Shared helpers of the end-to-end tests: small models written once, the program mutator."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from m100.targets.m100.program import Program

LIGHT = None


def light_model(name: str):
    """A light model of the onnx wheel (``light_resnet50`` ...) with random weights."""
    import onnx

    from m100.frontend.models import randomize_light_model
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")
    return randomize_light_model(onnx.load(path))


def tiny_w8a8_prefill_layer(batch: int, tokens: int = 8):
    """The tiny LLaMA's W8A8 prefill layer (weights as constants, seed 4) and a feed of its
    inputs (``x`` ~ N(0, 4) in f16, the RoPE tables of positions ``0 .. tokens - 1``):
    ``(config, model, feed)``."""
    from m100.frontend import llm
    cfg = llm.config("tiny")
    rng = np.random.default_rng(11)
    cos, sin = llm.rope_tables(cfg, list(range(tokens)))
    feed = {"x": (rng.standard_normal((batch * tokens, cfg.hidden)) * 2).astype(np.float16),
            "cos": cos.astype(np.float16), "sin": sin.astype(np.float16)}
    model, _ = llm.build(cfg, "layer", "prefill", context=tokens, batch=batch, seed=4,
                         quant="w8a8")
    return cfg, model, feed


def monitor_sites(program: Program) -> list[tuple[int, int, int]]:
    """(stream key, position, monitor index) of every monitor in the program."""
    return [(key, pos, k) for key in sorted(program.streams)
            for pos, inst in enumerate(program.streams[key])
            for k in range(len(inst.sync.monitors))]


def mutate(program: Program, site: tuple[int, int, int], how: str) -> Program:
    """A copy of ``program`` with the monitor at ``site`` dropped (``how="drop"``) or its
    expected value lowered by one (``how="lower"``)."""
    key, pos, k = site
    inst = program.streams[key][pos]
    mons = list(inst.sync.monitors)
    if how == "drop":
        del mons[k]
    else:
        mons[k] = dataclasses.replace(mons[k], expected=mons[k].expected - 1)
    new = dataclasses.replace(inst, sync=dataclasses.replace(inst.sync, monitors=tuple(mons)))
    streams = {kk: list(v) for kk, v in program.streams.items()}
    streams[key][pos] = new
    return dataclasses.replace(program, streams=streams)


def same_outputs(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def op_graph(tensors, ops):
    """A scheduler ``OpGraph`` of ``tensors`` (``Tensor`` argument tuples) and ``ops`` (``(name,
    unit, kind, inputs, outputs, params)``), with the ``Lowering`` of each op that has a kind."""
    from m100.passes.schedule.graph import Op, OpGraph, Tensor
    from m100.passes.schedule.ir_facts import Lowering

    g = OpGraph([Tensor(*t) for t in tensors])
    low = {}
    for name, unit, kind, ins, outs, params in ops:
        g.add_op(Op(name, unit, tuple(ins), tuple(outs)))
        if kind:
            low[name] = Lowering(kind, params=params)
    return g, low
