"""The process's memory policy while the interpreter or the compiler runs.

What: :func:`small_pages` -- a context in which numpy does not advise the kernel to back its
arrays with transparent huge pages; the advice numpy had before is restored after the block
(also on an exception; blocks nest).

Why: numpy ``madvise``s every allocation of 4 MB or more as ``MADV_HUGEPAGE`` (numpy >= 1.20 on
Linux >= 4.6), and on a machine whose transparent huge pages are ``madvise`` (the default of
most distributions, and this project's machine) the kernel then backs each of those arrays'
2 MB ranges by a huge page at its first touch -- zeroing all 2 MB under that one fault. The
interpreter's big temporaries are short-lived int64 index and clock arrays (fancy indexing, the
race sweep's pair arrays, the timed run's cost derivations), freed and mapped afresh many times
per run; a huge page's fault was measured far dearer than its 512 small pages' faults here
(``perf``: ``clear_page_erms`` under ``do_huge_pmd_anonymous_page``): a ResNet-50 first full
run spent 0.35-1.06 CPU-s in the kernel with the advice and ~0.1 without (session 35). The
advice only changes which pages back an array, never its bytes: a run's results are the same.
A compile (``driver.compile``, ``compile_least``) runs in it too: m100-graph's new weight arrays
(transposed, batch-norm-scaled; ~100 MB on ResNet-50) took 0.48 CPU-s of system time in 44 k
faults with the advice, 0.11 in 64 k without (the forked torch-mlir child inherits the setting).

Pre: none (numpy without ``_set_madvise_hugepage`` -- not a CPython build of numpy's, or a
future numpy that drops it -- makes the context a no-op). Post: numpy's advice is what it was
before the block. The interpreter's data spaces are not numpy allocations (``sim/mempool.py``
maps them) and are not affected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

try:  # numpy >= 2: numpy._core; numpy 1.x: numpy.core
    from numpy._core.multiarray import _set_madvise_hugepage as _set_advice
except ImportError:  # pragma: no cover - numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage as _set_advice
    except ImportError:
        _set_advice = None


def huge_page_advice() -> bool | None:
    """Whether numpy advises huge pages for its big arrays now (None: numpy can not say)."""
    if _set_advice is None:  # pragma: no cover - see the module's docstring
        return None
    old = _set_advice(False)
    _set_advice(old)
    return bool(old)


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """numpy's huge-page advice off for the block, its old value restored after."""
    if _set_advice is None:  # pragma: no cover - see the module's docstring
        yield
        return
    old = _set_advice(False)
    try:
        yield
    finally:
        _set_advice(old)
