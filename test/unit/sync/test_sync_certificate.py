"""sync-insert's certificate (``certificate.py``): the checker sees a missing monitor; its text
(compact JSON, one top-level key per line) reads back as the value it was given.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402

from m100.passes.backend.sync_insert import insert_sync  # noqa: E402
from m100.sim.certificate import verify_instructions as verify_certificate  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

TINY = get_machine("tiny")


# ------------------------------------------------------------------------------------------------
# the certificate
# ------------------------------------------------------------------------------------------------
def test_certificate_detects_a_missing_monitor():
    prog = progs.random_program(3, n=18)
    res = insert_sync(prog, TINY)
    cert = res.certificate
    assert cert["format"] == "m100-sync-certificate" and cert["edges"]
    e = cert["edges"][0]
    j = e["to"]
    q = list(res.instructions)
    q[j] = dataclasses.replace(q[j], sync=dataclasses.replace(q[j].sync, monitors=()))
    assert verify_certificate(q, cert)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda kids: st.lists(kids, max_size=5) | st.tuples(kids, kids)
    | st.dictionaries(st.text(max_size=6), kids, max_size=5),
    max_leaves=40)

def _canonical(value) -> str:
    import json
    return json.dumps(value, sort_keys=True)  # NaN/inf as json writes them, tuples as lists

def _reads_back(value) -> str:
    import json

    from m100.passes.backend.sync_insert.certificate import dumps
    text = dumps(value)
    assert _canonical(json.loads(text)) == _canonical(value)
    if isinstance(value, dict) and value:  # "{", a line per key in sorted order, "}"
        lines = text.split("\n")
        assert lines[0] == "{" and lines[-1] == "}" and len(lines) == len(value) + 2
        assert [json.loads("{" + ln.rstrip(",") + "}").popitem()[0] for ln in lines[1:-1]] == \
            sorted(value)
    return text

@settings(max_examples=300, deadline=None)
@given(_json)
@example({"a": [1, -2, 3.5, float("nan"), float("inf"), -float("inf"), True, None, "é\n\"x"],
          "b": {}, "c": [], "d": [[], {}, [[1]]], "e": (1, "t")})
def test_certificate_text_reads_back(value):
    _reads_back(value)

def test_certificate_text_of_real_certificates_and_errors():
    import json

    from m100.passes.backend.sync_insert.certificate import dumps
    for seed in range(3):
        cert = insert_sync(progs.random_program(seed, n=18), TINY).certificate
        assert json.loads(_reads_back(cert)) == cert
    # non-str keys (not a certificate): json's compact text; values json can not encode: its error
    assert json.loads(dumps({2: [1], 1: {None: 3}})) == {"1": {"null": 3}, "2": [1]}
    for bad in ({"a": [np.int64(1)]}, {1: 0, "x": 0}):
        with pytest.raises(TypeError):
            dumps(bad)
