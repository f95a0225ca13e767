"""Shared fixtures of the interpreter's unit tests; also puts the ISA's hypothesis strategies
(test/unit/isa/strategies.py) in ``sys.modules`` as ``m100_isa_strategies`` (pytest importlib mode), so a test
module here can ``import m100_isa_strategies as S`` (the isa folder's conftest does the same)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_NAME = "m100_isa_strategies"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _NAME, Path(__file__).parents[1] / "isa" / "strategies.py")
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _mod
    _spec.loader.exec_module(_mod)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
