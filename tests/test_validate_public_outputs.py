"""`sim validate --public -o FILE` writes only beside FILE: the report and its llama.cpp bands, never the shipped
calibration/llamacpp_bands.yaml (which only the default run rewrites, with docs/fidelity.md). The benchmark itself
(minutes) is stubbed: what is checked is where the command writes."""

from __future__ import annotations

import os

from click.testing import CliRunner

from sim.cli import main


def _stub(monkeypatch):
    import sim.fidelity.llamacpp as llamacpp
    import sim.fidelity.report as report
    import sim.fidelity.run as run

    monkeypatch.setattr(run, "benchmark", lambda root, domains, workers: ([("llama.cpp", [], None)], []))
    monkeypatch.setattr(run, "notes", lambda root: {})
    monkeypatch.setattr(run, "HEADLINE", ())
    monkeypatch.setattr(report, "markdown", lambda results, command, notes, headline: "# report\n")
    monkeypatch.setattr(llamacpp, "bands", lambda rs: {"tg": [0.5, 1.5]})


def test_a_report_written_elsewhere_keeps_its_bands_beside_it(tmp_path, monkeypatch):
    _stub(monkeypatch)
    root = tmp_path / "root"
    (root / "calibration").mkdir(parents=True)
    out = tmp_path / "elsewhere" / "fid.md"
    out.parent.mkdir()
    r = CliRunner().invoke(main, ["validate", "--public", "--root", str(root), "-o", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    assert out.read_text() == "# report\n" and (out.parent / "llamacpp_bands.yaml").exists()
    assert os.listdir(root / "calibration") == []


def test_the_default_run_rewrites_the_shipped_report_and_bands(tmp_path, monkeypatch):
    _stub(monkeypatch)
    (tmp_path / "calibration").mkdir()
    (tmp_path / "docs").mkdir()
    r = CliRunner().invoke(main, ["validate", "--public", "--root", str(tmp_path), "--quiet"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "docs" / "fidelity.md").exists()
    assert "tg:" in (tmp_path / "calibration" / "llamacpp_bands.yaml").read_text()
