"""`runs`, `logs` and `resume` on hand-made registries (no training): whole run ids at 80 columns,
plain text when the log is piped, and no writing through a symbolic link planted in a run dir."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_cli
from orchestrator.harness.runs import walk_to
from orchestrator.registry import Registry

NO_ENV_REGISTRY = {"YOLO_ORCH_REGISTRY": ""}


def make_run(runs: Path, run_id: str, state: str = "finished", job: str = "a-rather-long-job-name") -> Path:
    run_dir = runs / job / run_id
    run_dir.mkdir(parents=True)
    with Registry.open(runs) as reg:
        reg.add_run(run_id, job=job, run_dir=run_dir, devices="0,1,2,3", epochs=30, pid=0)
        walk_to(reg, run_id, state, epochs_done=12, metrics={"metrics/mAP50-95(B)": 0.5123})
    return run_dir


def test_runs_table_keeps_whole_ids_at_80_columns(tmp_path):
    runs = tmp_path / "runs"
    ids = [f"20261124-0900{i:02d}-ab{i:02d}" for i in range(3)]
    for run_id in ids:
        make_run(runs, run_id)
    terminal = run_cli("runs", "--runs-dir", runs, cwd=tmp_path, env={**NO_ENV_REGISTRY, "COLUMNS": "80",
                                                                      "FORCE_COLOR": "1", "NO_COLOR": ""})
    assert terminal.returncode == 0, terminal.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", terminal.stdout)
    rows = [line for line in text.splitlines() if "2026" in line and "Runs (" not in line]
    assert len(rows) == 3 and all(any(run_id in row for row in rows) for run_id in ids), text
    assert max(len(line) for line in text.splitlines()) <= 80, text
    piped = run_cli("runs", "--runs-dir", runs, cwd=tmp_path, env={**NO_ENV_REGISTRY, "COLUMNS": ""})
    assert all(run_id in piped.stdout for run_id in ids) and "a-rather-long-job-name" in piped.stdout


def test_piped_logs_are_plain_text(tmp_path):
    runs = tmp_path / "runs"
    run_dir = make_run(runs, "20261124-090000-cafe")
    (run_dir / "train.log").write_bytes(b"\x1b[34m\x1b[1mtrain:\x1b[0m start\n"
                                        b"  1/3: 0% 0/8\r  1/3: 50% 4/8\r  1/3: 100% 8/8\n"
                                        b"\x1b[K        all  0.5\n")
    r = run_cli("logs", "20261124-090000", "--runs-dir", runs, cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "train: start\n  1/3: 100% 8/8\n        all  0.5\n"


def test_resume_refuses_a_symlinked_log(tmp_path):
    runs = tmp_path / "runs"
    run_dir = make_run(runs, "20261124-090000-beef", state="killed")
    (run_dir / "weights").mkdir()
    (run_dir / "weights" / "last.pt").write_bytes(b"x")
    outside = tmp_path / "profile"
    outside.write_text("keep me\n")
    (run_dir / "train.log").symlink_to(outside)
    r = run_cli("resume", "20261124-090000-beef", "--runs-dir", runs, cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 2 and "train.log: a symbolic link in the run directory" in r.stderr, r.stderr
    assert outside.read_text() == "keep me\n"
    listed = json.loads(run_cli("runs", "--runs-dir", runs, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY).stdout)
    assert listed[0]["state"] == "killed"  # the refusal claimed nothing


def test_resume_refuses_a_run_directory_from_a_newer_layout_in_one_line(tmp_path):
    """job.resolved.yaml carries schema_version (rundir.SCHEMA_VERSION); one written by a newer yolo-orch
    is refused at once, by name, and nothing is claimed. A file without it (written before versions were
    kept) is read as version 1."""
    from orchestrator.rundir import SCHEMA_VERSION, load_resolved

    runs = tmp_path / "runs"
    run_dir = make_run(runs, "20261124-090000-f00d", state="killed")
    (run_dir / "weights").mkdir()
    (run_dir / "weights" / "last.pt").write_bytes(b"x")
    (run_dir / "job.resolved.yaml").write_text(f"schema_version: {SCHEMA_VERSION + 1}\nrun_id: x\n")
    r = run_cli("resume", "20261124-090000-f00d", "--runs-dir", runs, cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert f"schema_version {SCHEMA_VERSION + 1} is not one this yolo-orch reads" in r.stderr
    listed = json.loads(run_cli("runs", "--runs-dir", runs, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY).stdout)
    assert listed[0]["state"] == "killed"
    (run_dir / "job.resolved.yaml").write_text("run_id: x\njob: {name: t, epochs: 1}\n"
                                               "plan: {devices: cpu, train_args: {epochs: 1}}\n")
    assert load_resolved(run_dir).run_id == "x"


def test_the_resolved_document_says_its_layout_version(tmp_path):
    from conftest import REPO
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan
    from orchestrator.rundir import SCHEMA_VERSION

    doc = make_plan(load_job(REPO / "examples" / "quickstart.yaml")).resolved_document("r", tmp_path, "disabled")
    assert list(doc.to_dict().items())[0] == ("schema_version", SCHEMA_VERSION) and SCHEMA_VERSION == 1
