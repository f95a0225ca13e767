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
The memo lives in one parser (one text). ``ENABLED = False`` parses everything with xDSL;
``test/unit/frontend/test_parse_memo.py`` compares the printed modules both ways.
"""

from __future__ import annotations

import re

from xdsl.parser import Parser
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

#: switch off to parse every type with xDSL's parser alone (tests compare both)
ENABLED = True

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


class MemoParser(Parser):
    """``Parser`` with :data:`TYPE_RE` / :data:`FUNCTION_RE` types parsed once per text."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._m100_types: dict[str, object] = {}
        self._m100_text = self.lexer.input.content

    def _m100_memo(self, regex: re.Pattern, parse):
        if not ENABLED:
            return parse()
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
        if ENABLED and self._current_token.kind is MLIRTokenKind.LESS:
            got = self._m100_memo(PROPS_RE, super().parse_optional_properties_dict)
            return dict(got)
        return super().parse_optional_properties_dict()

    def parse_optional_function_type(self):
        if self._current_token.kind is MLIRTokenKind.L_PAREN:
            return self._m100_memo(FUNCTION_RE, super().parse_optional_function_type)
        return super().parse_optional_function_type()


__all__ = ["ATTR_RE", "ENABLED", "FUNCTION_RE", "MemoParser", "PROPS_RE", "TYPE_RE"]
