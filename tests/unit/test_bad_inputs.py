"""The bad-input corpus (tests/unit/bad_inputs/cases.yaml): malformed job and sweep files and CLI
invocations. Each must exit 2 with a message naming the field, no traceback, without importing the training
stack (torch, Ultralytics) or a tracker, and leave no run directory, registry or dataset behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import cli_env

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
CASES = yaml.safe_load((CORPUS / "cases.yaml").read_text())["cases"]
HEAVY = {"torch", "ultralytics", "torchvision", "cv2", "mlflow", "wandb"}  # the training stack, the trackers
BIG_BYTES = 50 * 2**20


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "huge_job.yaml"
    with path.open("wb") as f:
        line = b"# padding padding padding padding padding padding padding padding padding\n"
        f.write(b"name: huge\n")
        f.write(line * (BIG_BYTES // len(line) + 1))
    assert path.stat().st_size >= BIG_BYTES
    return path


# The test cache's Ultralytics releases (test_release_matrix's pip installs, thousands of files that no command
# writes): walking them twice a case cost about 0.3 s of each case's 0.8 s on the worker that had installed them
READ_ONLY = ("ultralytics-releases",)


def _snapshot(folder: Path) -> set[str]:
    if not folder.exists():
        return set()
    found = set()
    for path in folder.iterdir():
        found.add(path.name)
        if path.name not in READ_ONLY and path.is_dir() and not path.is_symlink():
            found |= {str(p.relative_to(folder)) for p in path.rglob("*")}
    return found


def test_corpus_size():
    kinds = {c["args"][0] for c in CASES}
    files = [p for p in CORPUS.rglob("*") if p.is_file() and p.name != "cases.yaml"]
    assert len(CASES) >= 40 and len(files) >= 40
    assert {"submit", "sweep", "plan", "resume"} <= kinds
    assert sum(c["args"][0] == "sweep" for c in CASES) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_input(case, tmp_path, big_file, isolated_cache):
    args = [a.format(dir=CORPUS, tmp=tmp_path, big=big_file, huge_int="9" * 5000) for a in case["args"]]
    env = cli_env({"YOLO_ORCH_REGISTRY": "", "COLUMNS": "200", **case.get("env", {})})
    cache_before = _snapshot(Path(isolated_cache))
    # -X importtime: Python names every module it imports; a refusal must not import the heavy ones (what
    # made it slow: speed itself is measured in benches, not asserted on a shared machine)
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "orchestrator", *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    stderr = "\n".join(line for line in r.stderr.splitlines() if not line.startswith("import time:"))
    assert r.returncode == 2, f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {stderr}"
    assert "Traceback" not in r.stdout + stderr, stderr
    for expected in case["expect"]:
        assert expected in stderr, f"{expected!r} not in stderr:\n{stderr}"
    assert not imported & HEAVY, f"imported {sorted(imported & HEAVY)}"
    assert _snapshot(tmp_path) == set(), f"created {sorted(_snapshot(tmp_path))}"
    assert _snapshot(Path(isolated_cache)) - cache_before == set() or all(
        "ultralytics-config" in p for p in _snapshot(Path(isolated_cache)) - cache_before)


def test_no_input_writes_outside_the_runs_folder(tmp_path, monkeypatch):
    """Belt and braces behind the name pattern: create_run refuses a run dir outside runs_dir even if
    a name got through, and sanitize_run_name maps anything to one safe path component."""
    from orchestrator.jobspec.job import sanitize_run_name

    for text in ("../../etc", "/etc/passwd", "a/../../b", "..", ".", "", "x" * 500, "名前/../x", "a\x00b"):
        name = sanitize_run_name(text)
        assert name and "/" not in name and ".." not in name and "\x00" not in name and len(name) <= 64
        assert (tmp_path / name).resolve().parent == tmp_path.resolve()
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    from conftest import write_job
    from orchestrator import runner
    from orchestrator.plan import make_plan
    from orchestrator.errors import UserError
    from orchestrator.jobspec.loader import load_job

    plan = make_plan(load_job(write_job(tmp_path)))
    plan.job.spec.__dict__["name"] = "../../escape"  # bypass validation on purpose
    with pytest.raises(UserError, match="would write outside"):
        runner.create_run(plan, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "runs" / "registry.db").exists()


def test_thousands_of_problems_print_one_screen(tmp_path):
    """30,000 unknown override keys: exit 2 with at most 50 lines, the last saying how many more."""
    keys = "\n".join(f"  unknown_key_{i}: 1" for i in range(30_000))
    job = tmp_path / "job.yaml"
    job.write_text(f"name: many\nmodel: yolo11n.yaml\ndata: {{synth: {{images: 16}}}}\noverrides:\n{keys}\n")
    r = subprocess.run([sys.executable, "-m", "orchestrator", "submit", str(job), "--dry-run"], cwd=tmp_path,
                       env=cli_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 50 and lines[0].startswith("overrides.unknown_key_0: not an Ultralytics train argument")
    assert lines[-1] == "... and 29951 more problems of the same kinds"
