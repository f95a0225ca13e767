"""Import ``strategies.py`` next to this file under a unique module name (pytest importlib mode)."""

import importlib.util
import sys
from pathlib import Path

_NAME = "m100_isa_strategies"


def load():
    if _NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("strategies.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = mod
        spec.loader.exec_module(mod)
    return sys.modules[_NAME]


load()  # test modules here can then `import m100_isa_strategies as S`
