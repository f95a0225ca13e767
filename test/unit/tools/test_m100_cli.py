"""`m100 machines` shows each preset's numbers and fingerprint as machine.py defines them."""

from __future__ import annotations

import json

from m100.targets.m100.machine import PRESETS
from m100.tools.m100_cli import main


def test_table_has_one_row_per_preset_with_its_fingerprint(capsys):
    assert main(["machines"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [r.split()[0] for r in rows] == list(PRESETS)
    for row, m in zip(rows, PRESETS.values(), strict=True):
        cells = row.split()
        assert cells[1] == str(m.clusters)
        assert cells[2] == str(m.clusters * m.tpbs_per_cluster)
        assert cells[-1] == f"0x{m.fingerprint():016x}"


def test_json_round_trips_every_field(capsys):
    assert main(["machines", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == list(PRESETS)
    for d, m in zip(data, PRESETS.values(), strict=True):
        assert int(d.pop("fingerprint"), 16) == m.fingerprint()
        assert d.pop("num_tpbs") == m.num_tpbs
        assert d == m.to_dict()


def test_flow_commands_give_one_line_errors_for_missing_files(capsys, tmp_path):
    # the commands themselves are tested end to end in test/e2e/
    for argv in (["compile", str(tmp_path / "no.onnx"), "-o", str(tmp_path / "p.m100")],
                 ["run", str(tmp_path / "no.m100")], ["check", str(tmp_path / "no.onnx")]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("m100: error: ") and str(tmp_path / "no.") in err
        assert len(err.splitlines()) == 1
