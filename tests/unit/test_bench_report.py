"""bench/bench_scaling.py --report on the saved results the docs quote: several files merge into one
table, each optimizer's gaps against its own references, and the merged file says which commands made it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAVED = REPO / "docs" / "img"


def _bench():
    import bench_scaling  # bench/bench_scaling.py (pyproject: pytest's pythonpath)

    return bench_scaling


def test_merging_two_saved_tables_keeps_each_optimizers_reference():
    bench = _bench()
    sgd = json.loads((SAVED / "bench_scaling_sgd_cpu.json").read_text())
    adamw = json.loads((SAVED / "bench_scaling_adamw_cpu.json").read_text())
    merged = bench.merge([sgd, adamw])
    assert merged["summary"]["SGD"] == bench.summarize(sgd["runs"])["SGD"]  # the statistics of this version
    assert merged["summary"]["AdamW"] == bench.summarize(adamw["runs"])["AdamW"]
    assert merged["commands"] == [sgd["command"], adamw["command"]]
    assert len(merged["runs"]) == len(sgd["runs"]) + len(adamw["runs"])


def test_report_prints_the_merged_table_and_writes_it_only_where_asked(tmp_path):
    files = [str(SAVED / "bench_scaling_sgd_cpu.json"), str(SAVED / "bench_scaling_adamw_cpu.json")]
    before = [Path(f).read_bytes() for f in files]
    out = subprocess.run([sys.executable, "bench/bench_scaling.py", "--report", *files], cwd=REPO,
                         capture_output=True, text=True, check=True)
    assert "SGD: reference (k = 1)" in out.stdout and "AdamW: reference (k = 1)" in out.stdout
    assert [Path(f).read_bytes() for f in files] == before
    merged = tmp_path / "merged.json"
    subprocess.run([sys.executable, "bench/bench_scaling.py", "--report", *files, "--out", str(merged)], cwd=REPO,
                   capture_output=True, text=True, check=True)
    assert set(json.loads(merged.read_text())["summary"]) == {"SGD", "AdamW"}


def test_runs_of_other_epochs_are_their_own_cells_when_merged():
    """A file trained for more epochs (what keeps the outcome) merges as its own rows, not into the cell
    of the same policy at the first file's epochs."""
    bench = _bench()
    saved = json.loads((SAVED / "bench_scaling_k8_adamw_cpu.json").read_text())
    longer = {**saved, "task": {**saved["task"], "epochs": 60},
              "runs": [r for r in saved["runs"] if (r["k"], r["policy"]) == (8, "auto")]}
    merged = bench.merge([saved, longer])
    cells = merged["summary"]["AdamW"]["cells"]
    assert cells["k8-auto"] == bench.summarize(saved["runs"])["AdamW"]["cells"]["k8-auto"]
    assert cells["k8-auto, 60 epochs"]["n"] == len(longer["runs"])
    again = bench.merge([merged, longer])["summary"]["AdamW"]["cells"]  # labelled rows are not labelled twice
    assert again["k8-auto, 60 epochs"]["n"] == 2 * len(longer["runs"])


def test_each_row_names_the_machine_that_trained_it():
    machine = _bench().machine("cpu")
    assert machine.endswith(" cores") and "unknown" not in machine


def test_the_gap_is_paired_by_seed_with_its_interval():
    """Each cell's gap is the mean of (run - the reference of the same seed and machine), with a 95 % interval."""
    saved = json.loads((SAVED / "bench_scaling_k8_sgd_cpu.json").read_text())
    cell = _bench().summarize(saved["runs"])["SGD"]["cells"]["k8-linear"]
    ref = {r["seed"]: r["final"] for r in saved["runs"] if r["k"] == 1}
    diffs = [r["final"] - ref[r["seed"]] for r in saved["runs"] if (r["k"], r["policy"]) == (8, "linear")]
    assert cell["gap_to_reference"]["n"] == 3 and cell["gap_to_reference"]["mean"] == round(sum(diffs) / 3, 4)
    lo, hi = cell["gap_to_reference"]["ci95"]
    assert lo < cell["gap_to_reference"]["mean"] < hi and cell["last_mean"] is not None

