"""``frontend.parse_memo.MemoParser`` parses exactly what xDSL's parser parses (the oracle: xDSL's
own ``Parser`` on the same text, put in its place), and answers repeated type texts from its
memo."""

from __future__ import annotations

import io
from pathlib import Path

import onnx
import pytest
from xdsl.printer import Printer

from m100.frontend import FrontendError, models, onnx_to_linalg_text, parse_memo
from m100.frontend.mlir_load import load_mlir_text, shared_context

DATA = Path(__file__).resolve().parents[2] / "data"


def _generic(module) -> str:
    s = io.StringIO()
    Printer(stream=s, print_generic_format=True).print_op(module)
    return s.getvalue()


def _with_xdsls_parser(fn):
    """``fn()`` with xDSL's own ``Parser`` where ``load_mlir_text`` takes ``MemoParser``."""
    from xdsl.parser import Parser

    kept = parse_memo.MemoParser
    parse_memo.MemoParser = Parser
    try:
        return fn()
    finally:
        parse_memo.MemoParser = kept


def _both(text: str):
    """(xDSL's parse, this parser's) of ``text``."""
    def parse():
        return load_mlir_text(text, shared_context(), verify=False)
    return [_with_xdsls_parser(parse), parse()]


@pytest.mark.parametrize("which", ["convnet", "llama_layer"])
def test_imported_text_parses_the_same(which):
    model = models.conv_relu_maxpool() if which == "convnet" else \
        onnx.load(str(DATA / "llama_layer_small.onnx"))
    text = onnx_to_linalg_text(model)
    plain, memo = _both(text)
    assert _generic(plain) == _generic(memo)
    assert plain.is_structurally_equivalent(memo)


HAND = """
#map = affine_map<(d0) -> (d0)>
#map1 = affine_map<(d0) -> (0)>
func.func @f(%a: tensor<?x4xf32>, %b: tensor<f32>, %c: tensor<4xi16>, %d: i1, %e: tensor<4xsi8>,
             %m: memref<4xf32>, %x: tensor<4xf32, "enc">) -> (tensor<?x4xf32>, tensor<f32>) {
  %0:2 = "test.op"(%a, %b) : (tensor<?x4xf32>, tensor<f32>) -> (tensor<?x4xf32>, tensor<f32>)
  %1:2 = "test.op"(%a, %b) : (tensor<?x4xf32>, tensor<f32>) -> (tensor<?x4xf32>, tensor<f32>)
  %2 = "test.op"(%c, %d) : (tensor<4xi16>, i1) -> tensor<4xi16>
  %3 = "test.op"(%c, %d) : (tensor<4xi16>,   i1) -> tensor<4xi16>
  %4 = "test.op"(%c, %d) : (tensor<4xi16>, i1) -> // a comment inside the type
      tensor<4xi16>
  %5 = "test.op"(%e, %m, %x) : (tensor<4xsi8>, memref<4xf32>, tensor<4xf32, "enc">) -> i1
  "test.op"() : () -> ()
  %7 = "test.op"() : () -> index
  %8 = "test.op"() : () -> index
  %9 = "test.op"(%d) : (i1) -> i16
  %10 = "test.op"(%d) : (i1) -> i1
  %11 = "test.op"(%d) : (i1) -> bf16
  "test.op"() <{a = [#map, #map1], b = array<i32: 2, -1>, c = [#linalg.iterator_type<parallel>,
      #linalg.iterator_type<reduction>], d = array<i64>}> : () -> ()
  "test.op"() <{a = [#map, #map1], b = array<i32: 2, -1>, c = [#linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>], d = array<i64>}> : () -> ()
  "test.op"() <{a = [#map,#map1], b = array<i32: 2, -1, 3>, e = array<i8: 1>}> : () -> ()
  %12 = "test.op"() <{v = dense<"0x00000000"> : tensor<2x2xf32>, w = 3 : i64}> : () -> f32
  %13 = "test.op"() <{v = dense<"0x00000000"> : tensor<2x2xf32>, w = 3 : i64}> : () -> f32
  %14 = "test.op"() <{v = dense<"0x00000000"> : tensor<2x2xf32>, w = 3 : i64}> {x = 1} : () -> f32
  %15 = "test.op"() <{v = dense<"0x00000000"> : tensor<2x2xf32>, w = 4 : i64}> : () -> f32
  %16 = "test.op"() <{}> : () -> f32
  %17 = "test.op"() <{}> : () -> f32
  %18 = "test.op"() <{v = {k = 1}}> : () -> f32
  %19 = "test.op"() <{v = {k = 1}}> : () -> f32
  %20 = "arith.cmpf"(%12, %13) <{fastmath = #arith.fastmath<none>}> {predicate = 1 : i64} : (f32, f32) -> i1
  %21 = "arith.cmpf"(%12, %13) <{fastmath = #arith.fastmath<none>}> {predicate = 2 : i64} : (f32, f32) -> i1
  func.return %0#0, %0#1 : tensor<?x4xf32>, tensor<f32>
}
"""


def test_hand_written_forms_parse_the_same():
    """Scalars whose names prefix each other (i1 / i16), dynamic and 0-d tensors, encodings,
    memrefs, odd spacing and a comment inside a function type, empty lists, multiple results."""
    plain, memo = _both(HAND)
    assert _generic(plain) == _generic(memo)
    f = [o for o in memo.walk() if o.name == "test.op"]
    # the same text twice: one type object from the memo
    assert f[0].results[0].type is f[1].results[0].type
    assert [str(o.results[0].type) for o in f if o.results] == \
        [str(o.results[0].type) for o in plain.walk() if o.name == "test.op" and o.results]
    props = [o.properties for o in f if "a" in o.properties]
    assert props[0]["a"] is props[1]["a"] and props[0]["b"] is props[1]["b"]
    assert props[0]["a"] == props[2]["a"] and props[0]["b"] != props[2]["b"]
    # a whole property dictionary parsed once per text: shared attributes, a dict per op
    v = [o.properties for o in f if "v" in o.properties]
    assert len(v) == 6 and v[0] is not v[1] and v[0]["v"] is v[1]["v"] is v[2]["v"]
    assert v[2]["w"] is v[0]["w"] and v[3]["w"] != v[0]["w"] and v[3]["v"] == v[0]["v"]
    v[0]["v"] = v[0]["w"]  # an op's property replaced: the other ops keep theirs
    assert v[1]["v"] is v[2]["v"] and v[1]["v"] != v[0]["v"]
    e = [o.properties for o in f if o.results and str(o.results[0].type) == "f32"
         and not o.properties]
    assert len(e) == 2 and e[0] is not e[1]
    # a property given in the attribute dictionary goes into the op's own properties (xDSL
    # moves it into the dict the parse returned: the memo's dict must not be that one)
    cmp = [o.properties["predicate"].value.data for o in memo.walk() if o.name == "arith.cmpf"]
    assert cmp == [1, 2]


#: ops the line reader builds (``OP_RE``, ``HEAD_RE``) next to ones it leaves to xDSL
LINES = """
"builtin.module"() ({
  %0 = "test.op"() {m100.dense_blob = 3 : i64} : () -> i32
  %1 = "test.op"(%0, %0) {m100.dense_blob = -3 : i64} : (i32, i32) -> i32
  %2 = "test.op"(%5, %1) : (i32, i32) -> i32
  %3 = "test.op"(%1, %2) <{v = 1 : i64}> ({
  ^bb0(%in: i32, %out_1: i32):
    %4 = "test.op"(%in, %out_1, %1) : (i32, i32, i32) -> i32
    "test.op"(%4) : (i32) -> ()
  }, {
    %n = "test.op"() ({
    }) : () -> i32
    "test.op"(%n) : (i32) -> ()
  }) {z = 2 : i64} : (i32, i32) -> i32
  %5 = "test.op"() : () -> i32
  %6 = "test.op"() : () -> i32 loc(unknown)
  %7 = "test.op"() : () -> i32
  loc(unknown)
  %8 = "test.op"() {x = 1 : i32, y = "s"} : () -> i32
  %9 = "test.op"() {x = 1 : i32, y = "s"} : () -> i32
  %n = "test.op"() : () -> i64
  %11 = "arith.cmpf"(%12, %12) {fastmath = #arith.fastmath<none>, predicate = 1 : i64} : (f32, f32) -> i1
  %12 = "test.op"() : () -> f32
  %13:2 = "test.op"() : () -> (i32, i32)
  "test.op"(%13#1) : (i32) -> ()
  %14 = "test.op"(%13) : (i32) -> i32
  %15 = "test.op"(%3) ({
  ^bb0(%x: i32):
    "test.op"(%x, %3) : (i32, i32) -> ()
  }) : (i32) -> i32
  "test.op"() [^bb1] : () -> ()
^bb1:
  %16 = "test.op"() : () -> (i32)
}) : () -> ()
"""


def test_line_reader_builds_what_xdsl_builds():
    """Results, operands (defined, forward, block arguments, tuple results), properties,
    attribute dictionaries (the one-integer form and others, a property given as an attribute),
    nested region ops (a name defined in a region and again after it), a location on the line and on the next line, a successor: the same module
    (generic text, structure, value names) as xDSL's parse; and the reader did build most ops."""
    built = []
    orig = parse_memo.MemoParser._m100_line_op, parse_memo.MemoParser._m100_region_op

    def count(i):
        def f(self, *a):
            op = orig[i](self, *a)
            built.append(op is not None)
            return op
        return f
    parse_memo.MemoParser._m100_line_op, parse_memo.MemoParser._m100_region_op = count(0), count(1)
    try:
        plain, memo = _both(LINES)
    finally:
        parse_memo.MemoParser._m100_line_op, parse_memo.MemoParser._m100_region_op = orig
    assert _generic(plain) == _generic(memo)  # (not structurally equivalent even to itself)
    assert [r.name_hint for o in plain.walk() for r in o.results] == \
        [r.name_hint for o in memo.walk() for r in o.results]
    assert built.count(True) >= 18 and built.count(False) >= 1  # the location on its line
    assert [str(o.location) for o in plain.walk()] == [str(o.location) for o in memo.walk()]
    assert [len(r.blocks) for o in plain.walk() for r in o.regions] == \
        [len(r.blocks) for o in memo.walk() for r in o.regions]


@pytest.mark.parametrize("bad", [
    '%0 = "test.op"() : () -> i32\n%1 = "test.op"(%0) : (i64) -> i32',
    '%0 = "test.op"() : () -> i32\n%0 = "test.op"() : () -> i32',
    '%0 = "test.op"(%1) : (i32) -> i32\n%1 = "test.op"() : () -> i64',
    '"nope.op"() : () -> ()',
    '%0 = "nope.op"() ({\n}) : () -> i32',
    '%0 = "test.op"() : () -> ()',
    '%0 = "test.op"() : () -> (i32, i32)',
    '%0 = "test.op"() : () -> i32\n%1 = "test.op"(%0) : () -> i32',
    '%0 = "test.op"() ({\n}) : () -> (i32, i32)',
    '%0 = "test.op"() ({\n}) : () -> ()',
    '%0 = "test.op"() : () -> i32\n%1 = "test.op"(%0) ({\n}) : (i64) -> i32',
    '%0 = "test.op"() : () -> i32\n%1 = "test.op"(%0) ({\n}) : () -> i32',
    '%0 = "test.op"() ({\n}) {a = } : () -> i32',
    '%0 = "test.op"() {a = 1 : i64, a = 2 : i64} : () -> i32',
    '%0 = "test.op"() {x = 99999999999999999999 : i64} : () -> i32',
    '%0 = "test.op"() {m100.dense_blob = 999999999999999999 : i64} : () -> i32\n%0 = "test.op"() : () -> i32',
    '%0 = "test.op"(%a) : (i32) -> i32\n%a = "test.op"() : () -> i32\n%b = "test.op"(%a) : (i64) -> i32',
    '%0 = "test.op"() : () -> tensor<4xf33>',
    '%0 = "test.op"() : () -> tensor<4xf32',
    '%0 = "test.op"() : () -> tensor<4xf32>\n%1 = "test.op"() : () -> tensor<4xf32>>',
    '%0 = "test.op"() : (tensor<4xf32>) ->',
    '"test.op"() <{a = [#map7, #map7]}> : () -> ()\n"test.op"() <{a = [#map7, #map7]}> : () -> ()',
    '#map = affine_map<(d0) -> (d0)>\n"test.op"() <{a = array<i32: 99999999999>}> : () -> ()',
    '"test.op"() <{a = 1, a = 2}> : () -> ()\n"test.op"() <{a = 1, a = 2}> : () -> ()',
    '"test.op"() <{a = 1}> : () -> ()\n"test.op"() <{a = 1}> : () -> (',
    '"test.op"() <{a = 1}> : () -> ()\n"test.op"() <{a = 1}>> : () -> ()',
])
def test_errors_are_xdsls(bad):
    def message():
        with pytest.raises(FrontendError) as e:
            load_mlir_text(bad, shared_context(), verify=False)
        return str(e.value)
    assert _with_xdsls_parser(message) == message()


def test_repeated_types_are_parsed_once(monkeypatch):
    """xDSL's function-type parse runs once per distinct text of the form."""
    from xdsl.parser import Parser

    calls = []
    orig = Parser.parse_optional_function_type

    def counted(self):
        if self._current_token.text == "(":
            calls.append(self._current_token.span.start)
        return orig(self)

    monkeypatch.setattr(Parser, "parse_optional_function_type", counted)
    text = onnx_to_linalg_text(models.conv_relu_maxpool())
    m = load_mlir_text(text, shared_context(), verify=False)
    ops = [o for o in m.walk() if o.name.startswith(("linalg.", "arith.", "tensor."))]
    texts = [parse_memo.FUNCTION_RE.match(text, p) for p in calls]
    assert all(t is not None for t in texts)
    assert len(calls) == len({t.group() for t in texts}) < len(ops)


#: block argument lists: the read form (plain types, no locations, single spaces), an empty list,
#: one argument, repeated and new types, and forms left to xDSL (a location, a memref, an
#: encoding, other spacing)
BLOCK_ARGS = """
"builtin.module"() ({
  %0 = "test.op"() ({
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    "test.op"(%in, %in_1, %out) : (f32, f32, f32) -> ()
  }, {
  ^bb0(%x: tensor<2x?xf32>, %y: index, %z: i1):
    "test.op"(%x, %y, %z) : (tensor<2x?xf32>, index, i1) -> ()
  }, {
  ^bb0():
    "test.op"() : () -> ()
  }, {
  ^bb0(%a: f32):
    "test.op"(%a) : (f32) -> ()
  }, {
  ^bb3(%a: f32 loc(unknown), %b: f16):
    "test.op"(%a, %b) : (f32, f16) -> ()
  }, {
  ^bb0(%m: memref<4xf32>, %e: tensor<4xf32, "enc">):
    "test.op"(%m, %e) : (memref<4xf32>, tensor<4xf32, "enc">) -> ()
  }, {
  ^bb0(%s:f32,  %t: bf16):
    "test.op"(%s, %t) : (f32, bf16) -> ()
  }) : () -> i32
}) : () -> ()
"""


def test_block_arguments_read_as_xdsl_reads_them():
    """The same module (generic text, argument names and types, locations) as xDSL's parse, and
    the reader took the lists of its form (4 of the 7 here)."""
    taken = []
    orig = parse_memo.Parser._parse_optional_block_arg_list

    def spy(self, block):
        taken.append(self._current_token.span.start)
        return orig(self, block)
    parse_memo.Parser._parse_optional_block_arg_list = spy
    try:
        plain, memo = _both(BLOCK_ARGS)
        fallback = len(taken) - 7  # xDSL's parse (the oracle) goes there for all 7 lists
    finally:
        parse_memo.Parser._parse_optional_block_arg_list = orig
    assert _generic(plain) == _generic(memo)
    args = [[(a.name_hint, str(a.type), str(a.location)) for a in b.args]
            for m in (plain, memo) for o in m.walk() for r in o.regions for b in r.blocks]
    assert args[:len(args) // 2] == args[len(args) // 2:]
    assert fallback == 3


@pytest.mark.parametrize("bad", [
    '%0 = "test.op"() ({\n^bb0(%a: f32, %a: f32):\n  "test.op"() : () -> ()\n}) : () -> i32',
    '%a = "test.op"() : () -> i32\n%0 = "test.op"() ({\n^bb0(%a: f32):\n  "test.op"() : () -> ()\n'
    '}) : () -> i32',
    '%0 = "test.op"() ({\n^bb0(%a: f32, %b: tensor<4xf32>)\n  "test.op"() : () -> ()\n})'
    ' : () -> i32',
    '%0 = "test.op"() ({\n^bb0(%a: f32):\n  "test.op"(%a) : (f16) -> ()\n}) : () -> i32',
])
def test_block_argument_errors_are_xdsls(bad):
    test_errors_are_xdsls(bad)
