"""tools/gen_pass_docs.py renders index, docstring and options of each pass."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.passes import ModulePass

from m100.tools.gen_pass_docs import main, render


@dataclass(frozen=True)
class TileThings(ModulePass):
    """Tile things into smaller things.

    Why: they fit. Options: ``tile-size`` (elements), ``dry-run``.
    """

    name = "tile-things"
    tile_size: int = 32
    dry_run: bool = False
    mode: str | None = None

    def apply(self, ctx, op):
        pass


def test_render_sections_and_options():
    text = render({"tile-things": TileThings})
    lines = text.splitlines()
    assert lines[0] == "# m100 passes"
    row = next(line for line in lines if line.startswith("| [`tile-things`]"))
    assert "| Tile things into smaller things. |" in row
    assert "## tile-things" in lines
    assert "Why: they fit. Options: ``tile-size`` (elements), ``dry-run``." in lines
    assert "| `tile-size` | `int` | `32` |" in lines
    assert "| `dry-run` | `bool` | `false` |" in lines
    assert "| `mode` | `str\\|None` | `none` |" in lines


def test_page_lists_every_registered_pass(tmp_path):
    from m100.passes.registry import all_passes

    out = tmp_path / "passes.md"
    assert main(["-o", str(out)]) == 0
    text = out.read_text()
    for name in all_passes():
        assert f"\n## {name}\n" in text
