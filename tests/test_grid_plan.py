"""``python -m dhp.grid PARAMS --plan`` prints the grid's points without running them (nothing is written)."""

from __future__ import annotations

import yaml

from dhp import grid


def test_plan_prints_every_point_and_runs_nothing(tmp_path, capsys, monkeypatch):
    raw = yaml.safe_load(open(grid.resolve("params/demo.yaml")).read())
    raw["runs_dir"] = str(tmp_path / "runs")
    params = tmp_path / "grid.yaml"
    params.write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(grid, "run_grid", lambda g: (_ for _ in ()).throw(AssertionError("ran the grid")))
    assert grid.main([str(params), "--plan"]) == 0
    out = capsys.readouterr().out
    pts, not_applicable = grid.points(grid.load_params(params))
    assert out.startswith(f"{len(pts)} point(s) of grid ")
    for p in pts:
        assert f"{p.method:24s} {p.judge:32s} {p.mode:10s}" in out and str(p.folder) in out
    assert all(x in out for x in not_applicable)
    assert not (tmp_path / "runs").exists()
