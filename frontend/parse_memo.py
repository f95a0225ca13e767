"""xDSL's parser with the plain types of torch-mlir's text parsed once per distinct text.

Why: every generic op of an imported model ends in its function type
(``: (tensor<1x64x56x56xf32>, tensor<64xf32>) -> tensor<1x64x56x56xf32>``) and most of them
repeat: ResNet-50's text has ~1 800 ops and a few hundred distinct function types, yet xDSL lexes
and builds every ``tensor<...>`` anew (about a third of the parse's CPU, which is itself ~1 CPU-s
of ResNet-50's frontend).

What: :class:`MemoParser` is ``xdsl.parser.Parser`` whose ``parse_optional_type``,
``parse_optional_function_type`` and ``parse_optional_attribute`` first match the text at the
current token against a narrow regular form -- a ranked ``tensor<DxDx...xE>`` (static or ``?``
dims) or a scalar ``E`` (``E`` one of the builtin integer / float / index names, not followed by
an identifier character), a function type ``(T, T, ...) -> T`` / ``-> (T, ...)`` of those, and
the repeated property values (``[#linalg.iterator_type<parallel>, ...]``, ``[#map3, #map4]``,
``array<i32: 2, 1>``), a generic op's whole property dictionary without nested braces
(:data:`PROPS_RE`: ``<{fastmath = #arith.fastmath<none>}>``, a ``linalg.generic``'s maps and
iterators; each op gets its own copy of the dict), written with the printer's single spaces. A matched text is parsed by xDSL itself the first time; its result is kept under that
exact text only when xDSL stopped exactly at the match's end (else nothing is kept and every
occurrence is parsed by xDSL). A later occurrence of the same text returns the kept type (types
are immutable values: equal texts parse to equal types) and resumes the lexer after it, as
xDSL's own parse would have left it. Anything not matching the form -- encodings, memrefs,
dialect types, other spacing, comments -- is parsed by xDSL as before, with its own errors.
The memo lives in one parser (one text). ``test/unit/frontend/test_parse_memo.py`` compares the
printed modules (and the error messages) with xDSL's own ``Parser``'s.

And a line reader (session 30): xDSL's lexer was most of what was left (ResNet-50: ~0.4 of a
~0.47 CPU-s parse, ~14 000 tokens). A generic op as torch-mlir prints it on one line --
``%5 = "arith.addf"(%in, %in_1) <{...}> {...} : (f32, f32) -> f32`` (:data:`OP_RE`: results,
operands, properties, attributes, function type; no regions, successors, tuple results or
location) -- is built from the match: the pieces' values from the memo (each piece parsed by
xDSL the first time, kept only if xDSL read exactly that text), a one-integer attribute
dictionary (``{m100.dense_blob = 3 : i64}``) directly, then xDSL's own steps (the op looked up
with the parser's dialect stack, ``resolve_operand`` per operand unless the name is defined with
that type, ``create``, the result registered). The head of an op with regions (:data:`HEAD_RE`)
the same way, its regions and the rest by xDSL's calls in xDSL's order. Anything else -- and an
op whose name is not registered, whose counts differ from its type, with a location -- is left
to xDSL (before anything past the head is read), so its errors name the line and column as
before. R18 / R50's texts: 0.17 / 0.41 -> 0.11 / 0.27 CPU-s, the same printed modules.

And the block argument lists of the linalg bodies (session 34, :data:`ARGS_RE`,
``^bb0(%in: f32, %out: f32):``): their types from the memo, the arguments added and named as
xDSL's ``parse_argument`` adds them (R50: 484 lists, the parse ~0.15 -> ~0.12 CPU-s).
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.irdl import IRDLOperation
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

_ELT = r"(?:[su]?i(?:1|8|16|32|64)|bf16|f16|f32|f64|index)(?![\w$.\-])"
_TENSOR = r"tensor<(?:(?:[0-9]+|\?)x)*" + _ELT.replace(r"(?![\w$.\-])", "") + ">"
_TYPE = f"(?:{_TENSOR}|{_ELT})"
_LIST = rf"\((?:{_TYPE}(?:, {_TYPE})*)?\)"
TYPE_RE = re.compile(_TYPE)
FUNCTION_RE = re.compile(rf"{_LIST} -> (?:{_LIST}|{_TYPE})")
_ITER = r"#linalg\.iterator_type<(?:parallel|reduction)>"
_INT = r"-?[0-9]+"
#: property values that repeat: iterator-type lists, lists of affine-map aliases (the aliases are
#: defined once, before any op), integer dense arrays (operandSegmentSizes, strides, pads)
ATTR_RE = re.compile(rf"\[{_ITER}(?:, {_ITER})*\]|\[#map[0-9]*(?:, #map[0-9]*)*\]"
                     rf"|array<i(?:1|8|16|32|64)(?:: {_INT}(?:, {_INT})*)?>")
_ATTR_START = (MLIRTokenKind.L_SQUARE, MLIRTokenKind.BARE_IDENT)
#: a generic op's whole property dictionary without nested braces (``<{fastmath =
#: #arith.fastmath<none>}>``, a linalg.generic's maps and iterators, a blob placeholder's
#: constant): ResNet-50's text has 1 260 of them, 176 distinct
PROPS_RE = re.compile(r"<\{[^{}]*\}>")
_WS = MLIRLexer._whitespace_regex  # noqa: SLF001 - what the lexer skips before a token
_SSA = r"%(?:[0-9]+|[a-zA-Z$._-][a-zA-Z0-9$._-]*)"  # the lexer's ``percent-ident``
#: a generic op without regions, successors or tuple results, as torch-mlir prints one a line:
#: ``%5 = "arith.addf"(%in, %in_1) <{fastmath = ...}> {attrs} : (f32, f32) -> f32``
OP_RE = re.compile(rf'(?:(?P<res>{_SSA}) = )?"(?P<name>[a-zA-Z0-9_$.\-]+)"'
                   rf'\((?P<args>{_SSA}(?:, {_SSA})*)?\)'
                   rf'(?: (?P<props>{PROPS_RE.pattern}))?(?: (?P<attrs>\{{[^{{}}]*\}}))?'
                   rf' : (?P<ftype>{FUNCTION_RE.pattern})')
#: the head of a generic op whose regions follow (``%3 = "linalg.generic"(%a, %b) <{...}> ({``)
HEAD_RE = re.compile(rf'(?:(?P<res>{_SSA}) = )?"(?P<name>[a-zA-Z0-9_$.\-]+)"'
                     rf'\((?P<args>{_SSA}(?:, {_SSA})*)?\)'
                     rf'(?: (?P<props>{PROPS_RE.pattern}))? (?=\(\{{)')
#: an attribute dictionary of one 64-bit integer (``{m100.dense_blob = 3 : i64}``)
ATTRS_INT_RE = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_$.]*) = (-?[0-9]{1,18}) : i64\}")
#: a block's argument list of :data:`TYPE_RE` types without locations, as torch-mlir prints a
#: linalg body's: ``(%in: f32, %in_1: f32, %out: f32)``
ARGS_RE = re.compile(rf"\((?:{_SSA}: {_TYPE}(?:, {_SSA}: {_TYPE})*)?\)")


class MemoParser(Parser):
    """``Parser`` with :data:`TYPE_RE` / :data:`FUNCTION_RE` types parsed once per text."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._m100_types: dict[str, object] = {}
        self._m100_attrs: dict[str, object] = {}
        self._m100_text = self.lexer.input.content

    def _m100_memo(self, regex: re.Pattern, parse):
        start = self._current_token.span.start
        m = regex.match(self._m100_text, start)
        if m is None:
            return parse()
        key = m.group()
        got = self._m100_types.get(key)
        if got is not None:
            self._resume_from(m.end())
            return got
        got = parse()
        if got is not None and self._current_token.span.start == _WS.match(self._m100_text,
                                                                           m.end()).end():
            self._m100_types[key] = got
        return got

    def parse_optional_type(self):
        tok = self._current_token
        if tok.kind is MLIRTokenKind.BARE_IDENT:
            return self._m100_memo(TYPE_RE, super().parse_optional_type)
        return super().parse_optional_type()

    def parse_optional_attribute(self):
        if self._current_token.kind in _ATTR_START:
            return self._m100_memo(ATTR_RE, super().parse_optional_attribute)
        return super().parse_optional_attribute()

    def parse_optional_properties_dict(self):
        """A property dictionary of :data:`PROPS_RE`'s form parsed once per text, as the types
        are (:meth:`_m100_memo`); each parse returns a fresh dict (xDSL moves a property given
        in the op's attribute dictionary into the dict returned here), the attributes in it are
        shared (immutable)."""
        if self._current_token.kind is MLIRTokenKind.LESS:
            got = self._m100_memo(PROPS_RE, super().parse_optional_properties_dict)
            return dict(got)
        return super().parse_optional_properties_dict()

    def parse_optional_function_type(self):
        if self._current_token.kind is MLIRTokenKind.L_PAREN:
            return self._m100_memo(FUNCTION_RE, super().parse_optional_function_type)
        return super().parse_optional_function_type()

    def _parse_optional_block_arg_list(self, block):
        """A block's argument list of :data:`ARGS_RE`'s form read without the lexer: every
        argument's type from the memo (parsed by xDSL the first time, :meth:`_m100_piece`; one
        that xDSL reads to another length leaves the whole list to xDSL before anything is
        added), then per argument in order ``block.insert_arg`` and the name's registration, as
        xDSL's ``parse_argument`` does them (a name defined twice: xDSL's error at that name);
        the lexer then resumes after the ``)``. Any other list (locations, other types or spacing) is
        xDSL's. R50's text: 484 lists, ~0.045 of a ~0.15 CPU-s parse."""
        tok = self._current_token
        if tok.kind is not MLIRTokenKind.L_PAREN:
            return None
        m = ARGS_RE.match(self._m100_text, tok.span.start)
        if m is None:
            return super()._parse_optional_block_arg_list(block)
        end = m.end()
        at = tok.span.start + 1
        memo, text, src = self._m100_types, self._m100_text, self.lexer.input
        args = []  # (name, its start, type): every type first, nothing added to the block yet
        for piece in text[at:end - 1].split(", ") if end - at > 1 else ():
            name, type_text = piece.split(": ", 1)
            arg_type = self._m100_piece(memo, type_text, at + len(name) + 2,
                                        super().parse_optional_type)
            if arg_type is None:  # xDSL read another length there: all of it to xDSL
                self._resume_from(tok.span.start)
                return super()._parse_optional_block_arg_list(block)
            args.append((name, at, arg_type))
            at += len(piece) + 2
        for name, at, arg_type in args:
            arg = block.insert_arg(arg_type, len(block.args), None)
            self._register_ssa_definition(name[1:], (arg,), Span(at, at + len(name), src))
        self._resume_from(end)
        return block

    def parse_operation(self):
        """A region-less generic op on one line (:data:`OP_RE`) built from its pieces without
        the lexer; any other op -- or one whose pieces xDSL would read otherwise, or that has an
        error -- is parsed by xDSL (:meth:`Parser.parse_operation`, its own errors)."""
        first = self._current_token.span
        m = OP_RE.match(self._m100_text, first.start)
        if m is not None:
            op = self._m100_line_op(m)
            if op is not None:
                return op
            self._resume_from(first.start)
        else:
            m = HEAD_RE.match(self._m100_text, first.start)
            if m is not None:
                op = self._m100_region_op(m, first)
                if op is not None:
                    return op
                self._resume_from(first.start)
        return super().parse_operation()

    def _m100_region_op(self, m: re.Match, first: Span):
        """The op whose head (results, name, operands, properties) :data:`HEAD_RE` matched and
        whose regions follow: the head from the match, the rest by xDSL's own steps in
        ``_parse_generic_operation`` / ``parse_operation`` order (regions, attributes, ``:``,
        function type, location, operands resolved, ``create``, results bound). None (before
        anything is read past the head) to leave it all to xDSL: an unregistered op, properties
        xDSL would read otherwise."""
        result, args = m.group("res", "args")
        head = self._m100_op_props(m)
        if head is None:
            return None
        op_type, props = head
        self._resume_from(m.end())  # at the region list's ``(``
        stack = self._parser_state.dialect_stack
        stack.append(op_type.dialect_name())
        regions = self.parse_region_list()
        attributes = self.parse_optional_attr_dict()
        self.parse_punctuation(":", "function type signature expected")
        func_type_pos = self._current_token.span.start
        func_type = self.parse_function_type()
        location = self.parse_optional_location()
        operands = self.resolve_operands(self._m100_unresolved(args, m.start("args")),
                                         func_type.inputs.data, func_type_pos)
        if issubclass(op_type, IRDLOperation):
            for k in op_type.get_irdl_definition().properties:
                if k in attributes and k not in props:
                    props[k] = attributes.pop(k)
        op = op_type.create(operands=operands, result_types=func_type.outputs.data,
                            properties=props, attributes=attributes, location=location,
                            successors=[], regions=regions)
        stack.pop()
        if result is not None:
            if len(op.results) != 1:
                self.raise_error(f"Operation has {len(op.results)} results, but was given 1 "
                                 "to bind.", at_position=first)
            s = m.start("res")
            self._register_ssa_definition(result[1:], op.results,
                                          Span(s, s + len(result), self.lexer.input))
        return op

    def _m100_op_props(self, m: re.Match):
        """The op class named by the match's ``name`` and its ``props`` group as a fresh dict
        (``{}`` when absent; parsed by xDSL through the memo), or None to leave the op to xDSL:
        an unregistered op, properties xDSL would read otherwise."""
        op_type = self.ctx.get_optional_op(m.group("name"),
                                           dialect_stack=self._parser_state.dialect_stack)
        if op_type is None:
            return None
        props = m.group("props")
        if props is None:
            return op_type, {}
        props = self._m100_piece(self._m100_types, props, m.start("props"),
                                 super().parse_optional_properties_dict)
        return None if props is None else (op_type, dict(props))

    def _m100_unresolved(self, args: str | None, at: int) -> list[UnresolvedOperand]:
        """The operands of the text ``args`` (``%a, %b``, starting at ``at``) as xDSL's
        ``parse_op_args_list`` returns them."""
        out = []
        for n in args.split(", ") if args else ():
            out.append(UnresolvedOperand(Span(at, at + len(n), self.lexer.input), 0))
            at += len(n) + 2
        return out

    def _m100_piece(self, memo: dict, text: str, at: int, parse):
        """The value of the piece ``text`` at ``at``: kept, or parsed there by ``parse`` (xDSL,
        through the memo methods) and kept when xDSL read exactly ``text``; None if not."""
        got = memo.get(text)
        if got is None:
            self._resume_from(at)
            got = parse()
            end = at + len(text)
            if got is None or self._current_token.span.start != _WS.match(self._m100_text,
                                                                          end).end():
                return None
            memo[text] = got
        return got

    def _m100_line_op(self, m: re.Match):
        """The op of :data:`OP_RE`'s match ``m`` as xDSL's ``parse_operation`` builds it (the
        same calls: op lookup, ``resolve_operand`` per operand, ``create``, the result's
        registration), or None to leave it to xDSL (an unregistered op, operand / result counts
        that differ from the type, a location after it)."""
        text, memo = self._m100_text, self._m100_types
        result, args, attrs, ftype = m.group("res", "args", "attrs", "ftype")
        head = self._m100_op_props(m)
        if head is None:
            return None
        op_type, props = head
        if attrs is not None:
            a = ATTRS_INT_RE.fullmatch(attrs)
            if a is not None:  # ``{m100.dense_blob = 3 : i64}``: one per constant
                attrs = {a.group(1): IntegerAttr(int(a.group(2)), i64)}
            else:
                attrs = self._m100_piece(self._m100_attrs, attrs, m.start("attrs"),
                                         super().parse_optional_attr_dict)
                if attrs is None:
                    return None
                attrs = dict(attrs)
        else:
            attrs = {}
        ft = self._m100_piece(memo, ftype, m.start("ftype"), self.parse_optional_function_type)
        if ft is None:
            return None
        ins, outs = ft.inputs.data, ft.outputs.data
        names = args.split(", ") if args else ()
        if len(names) != len(ins) or (result is not None and len(outs) != 1):
            return None
        self._resume_from(m.end())
        tok = self._current_token
        if tok.kind is MLIRTokenKind.BARE_IDENT and tok.text == "loc":
            return None
        operands = []
        at = m.start("args")
        ssa = self.ssa_values
        for n, t in zip(names, ins):
            vals = ssa.get(n[1:])
            if vals is not None and len(vals) == 1 and vals[0].type == t:
                operands.append(vals[0])  # defined, of this type: ``resolve_operand``'s answer
            else:
                operands.append(self.resolve_operand(
                    UnresolvedOperand(Span(at, at + len(n), self.lexer.input), 0), t))
            at += len(n) + 2
        if issubclass(op_type, IRDLOperation):  # xDSL's properties given as attributes
            for k in op_type.get_irdl_definition().properties:
                if k in attrs and k not in props:
                    props[k] = attrs.pop(k)
        op = op_type.create(operands=operands, result_types=outs, properties=props,
                            attributes=attrs)
        if result is not None:
            s = m.start("res")
            self._register_ssa_definition(result[1:], op.results,
                                          Span(s, s + len(result), self.lexer.input))
        return op


__all__ = ["ATTR_RE", "ATTRS_INT_RE", "FUNCTION_RE", "HEAD_RE", "MemoParser", "OP_RE",
           "PROPS_RE", "TYPE_RE"]
