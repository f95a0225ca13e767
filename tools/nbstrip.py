"""Strip the outputs and execution counts of notebooks in place (they are stored without outputs).

    python -m m100.tools.nbstrip notebooks/*.ipynb
"""

from __future__ import annotations

import sys


def strip(path: str) -> bool:
    """Strip ``path`` in place; True when it changed."""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count = [], None
            changed = True
    if changed:
        nbformat.write(nb, path)
    return changed


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    for p in paths:
        if strip(p):
            print(f"nbstrip: stripped {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
