"""The chaos sweep's per-seed table (tests/e2e/chaos_table.py)."""

from __future__ import annotations

import json

from tests.e2e import chaos_table


def _report(tmp_path, seed: int, **fields) -> None:
    base = {"seed": seed, "runs": 60, "terminal": 60, "stuck": 0, "duplicates": 0, "gaps": 0, "lost": 0,
            "recoveries": [], "seconds_to_all_terminal": 50.0, "ok": True}
    (tmp_path / f"seed-{seed}.json").write_text(json.dumps({**base, **fields}))


def test_all_seeds_ok(tmp_path, capsys):
    for seed in (1, 2, 10):
        _report(tmp_path, seed)
    assert chaos_table.main([str(tmp_path), "--seeds", "1,2,10"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[1:4]] == ["1", "2", "10"]  # numeric order
    assert "3 seeds: 3 ok, 0 failed" in out


def test_a_stuck_seed_fails_the_sweep(tmp_path, capsys):
    _report(tmp_path, 1)
    _report(tmp_path, 2, terminal=57, stuck=3, ok=False, recoveries=[{"run_id": "r", "action": "reschedule"}])
    assert chaos_table.main([str(tmp_path), "--seeds", "1-2"]) == 1
    out = capsys.readouterr().out
    row = [line.split() for line in out.splitlines() if line.split()[:1] == ["2"]][0]
    assert row[2:4] == ["57", "3"] and row[-1] == "FAIL" and row[-3] == "1"


def test_a_seed_without_report_fails_the_sweep(tmp_path, capsys):
    _report(tmp_path, 1)
    assert chaos_table.main([str(tmp_path), "--seeds", "1-3"]) == 1
    assert "no report for seeds [2, 3]" in capsys.readouterr().out


def test_markdown(tmp_path, capsys):
    _report(tmp_path, 5)
    chaos_table.main([str(tmp_path), "--markdown"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| seed | runs | terminal | stuck |") and out[2].startswith("| 5 | 60 | 60 | 0 |")
