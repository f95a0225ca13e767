"""``passes/graph/cse_weights.cse`` makes xDSL's CSE decisions: the printed module after it equals
the printed module after xDSL's ``CommonSubexpressionElimination`` (the oracle) on constants that
are equal, equal in type and length but not in bytes, equal in bytes but not in type, splats,
and ops reading them; on a whole imported model too."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

from m100.context import make_context
from m100.frontend import load_mlir_text
from m100.passes.graph.cse_weights import cse


def _hex(a: np.ndarray) -> str:
    return '"0x' + a.astype("<f4").tobytes().hex().upper() + '"'


def _text(rng) -> str:
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = a.copy()
    b[3, 7] += 1.0  # same type and length as a, one element differs (the last bytes)
    c = a.copy()
    c[0, 0] += 1.0  # differs in the first bytes
    d = rng.standard_normal((64, 8)).astype(np.float32)
    e = d.copy()
    e[32, 4] += 1.0  # the same ends as d (cse_weights.SAMPLE bytes each): a hash collision
    t, u = "tensor<4x8xf32>", "tensor<64x8xf32>"
    consts = [(_hex(a), t), (_hex(a), t), (_hex(b), t), (_hex(c), t), (_hex(a), "tensor<8x4xf32>"),
              (_hex(a), t), ("1.000000e+00", t), ("1.000000e+00", t), ("2.000000e+00", t),
              (_hex(d), u), (_hex(e), u), (_hex(d), u)]
    lines = [f'    %c{i} = "arith.constant"() <{{value = dense<{v}> : {ty}}}> : () -> {ty}'
             for i, (v, ty) in enumerate(consts)]
    # ops reading them: equal operands merge once their constants have merged
    for i, (x, y) in enumerate([(0, 1), (1, 0), (0, 1), (2, 3), (5, 0), (6, 7), (0, 2)]):
        lines.append(f'    %s{i} = "arith.addf"(%c{x}, %c{y}) <{{fastmath = #arith.fastmath<none>}}>'
                     f' : ({t}, {t}) -> {t}')
    for i, (x, y) in enumerate([(9, 10), (11, 10)], start=7):
        lines.append(f'    %s{i} = "arith.addf"(%c{x}, %c{y}) <{{fastmath = #arith.fastmath<none>}}>'
                     f' : ({u}, {u}) -> {u}')
    outs = ", ".join(f"%s{i}" for i in range(9))
    res = ", ".join(["tensor<8x4xf32>"] + [t] * 7 + [u] * 2)
    lines.append(f'    "func.return"(%c4, {outs}) : ({res}) -> ()')
    return ('"builtin.module"() ({\n  "func.func"() <{function_type = () -> (' + res +
            '), sym_name = "f"}> ({\n' + "\n".join(lines) + "\n  }) : () -> ()\n}) : () -> ()\n")


def _fresh_constants(module):
    """Every dense constant's value a new object of its own (the parser shares equal ones):
    equal constants then differ in identity only, as in an imported model."""
    from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr

    for op in module.walk():
        v = op.properties.get("value") if op.name == "arith.constant" else None
        if isinstance(v, DenseIntOrFPElementsAttr):
            op.properties["value"] = DenseIntOrFPElementsAttr(
                v.type, BytesAttr(bytes(bytearray(v.data.data))))


def _both(module, ctx):
    theirs, ours = module.clone(), module.clone()
    CommonSubexpressionElimination().apply(ctx, theirs)
    cse(ctx, ours)
    return str(theirs), str(ours)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_module_as_xdsl_cse(seed):
    ctx = make_context()
    module = load_mlir_text(_text(np.random.default_rng(seed)), ctx)
    _fresh_constants(module)
    theirs, ours = _both(module, ctx)
    assert ours == theirs
    # the oracle merged what it should: constants a, a, a -> one, the splats 1, 1 -> one, d, d
    # -> one; b, c (a's type and length), a's bytes as 8x4, e (d's type, length and ends) stay;
    # the unread splat 2 goes (dead); adds of (a, a) x4 -> one, (d, e) x2 -> one, (b, c),
    # (1, 1), (a, b) stay
    assert ours.count("arith.constant") == 7 and ours.count("arith.addf") == 5


def test_same_module_as_xdsl_cse_on_an_imported_model():
    from m100.frontend import models
    from m100.tools import driver

    ctx = make_context()
    module, _ = driver.load_model(models.resnet18(hw=32), ctx)
    theirs, ours = _both(module, ctx)
    assert ours == theirs
