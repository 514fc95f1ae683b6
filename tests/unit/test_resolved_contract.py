"""job.resolved.yaml checked whole when a run is continued (rundir/contract.py), and the run
folder's readers that must never fail: a hand-edited contract is refused in one line, exit 2, the
file and the registry row as they were; `show` reads any events.jsonl; W&B's own links in wandb/ do
not block a resume while a link planted anywhere else still does. No training: plans made in-process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_cli
from orchestrator.harness.runs import walk_to
from orchestrator.registry import Registry
from orchestrator.rundir.contract import LAUNCHERS, contract_problems

NO_ENV_REGISTRY = {"YOLO_ORCH_REGISTRY": ""}


def planned_run(runs: Path, run_id: str = "20261127-090000-c0de", state: str = "killed") -> Path:
    """A run directory as `submit` writes it (the quickstart's real plan), killed after epoch 1."""
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    run_dir = runs / "quickstart" / run_id
    (run_dir / "weights").mkdir(parents=True)
    make_plan(load_job(REPO / "examples" / "quickstart.yaml")).resolved_document(run_id, run_dir, "offline") \
        .save(run_dir)
    (run_dir / "weights" / "last.pt").write_bytes(b"x")
    with Registry.open(runs) as reg:
        reg.add_run(run_id, job="quickstart", run_dir=run_dir, devices="cpu", epochs=35, pid=0)
        walk_to(reg, run_id, state, epochs_done=1)
    return run_dir


def test_the_launchers_the_contract_accepts_are_the_launch_registry():
    from orchestrator.launch import BACKENDS

    assert set(LAUNCHERS) == set(BACKENDS)


EDITS = [  # (where, value, what the one line says)
    (("plan", "train_args", "epochs"), "x", "plan.train_args.epochs: 'x' is not an integer"),
    (("plan", "launcher"), "rm -rf /", "plan.launcher: 'rm -rf /' is not a launcher"),
    (("schema_version",), 0, "schema_version: 0 is outside 1 to 1"),
    (("schema_version",), "one", "schema_version: 'one' is not a layout version"),
    (("job",), None, "job: missing or not a mapping"),
    (("job", "epochs"), "six", "job.epochs: 'six' is not an integer"),
    (("job", "epochs"), 1, "job.epochs: 1 disagrees with plan.train_args.epochs 35"),
    (("plan", "train_args", "project"), "/tmp/elsewhere", "plan.train_args.project: set by the training process"),
    (("plan", "train_args", "lr0"), -1, "plan.train_args.lr0: -1 is below 0"),
    (("wandb_mode",), "loud", "wandb_mode: 'loud' is not one of"),
    # issue 60: code a run folder names, and hand edits the job spec or the plan would have refused
    (("callbacks",), ["os:system"], "callbacks: 'os:system' is not a hook a run may name"),
    (("callbacks",), "os:system", "callbacks: 'os:system' is not a list of hooks"),
    (("oom",), [1], "oom: [1] is not a mapping"),
    (("job", "oom_retries"), "two", "job.oom_retries: must be a valid integer"),
    (("job", "export"), "onnx", "job.export"),
    (("job", "export"), {"formats": ["pdf"]}, "job.export.formats.0: must be"),
    (("job", "tensorboard"), "maybe", "job.tensorboard: must be a valid boolean"),
    (("job", "xla"), [1], "job.xla"),
    (("job", "task"), "semantic", "job.model: yolo11n.yaml is a detect model, but the job's task is semantic"),
    (("job", "integrations"), "mlflow", "job.integrations"),
    (("job", "name"), "../../x", "job.name"),
    (("job", "mlflow"), "yes", "job.mlflow"),
    (("job", "stall_timeout"), -5, "job.stall_timeout: must be greater than or equal to 0"),
    (("run_id",), "20990101-000000-beef", "run_id: '20990101-000000-beef' is not this run's id"),
    (("run_dir",), "/etc", "run_dir: '/etc' is not this run's folder"),
    (("plan", "train_args", "imgsz"), [64, 64], "plan.train_args.imgsz: [64, 64] disagrees with job.imgsz 128"),
    (("plan", "train_args", "optimizer"), "Adamm", "plan.train_args.optimizer: must be"),
    (("plan", "train_args", "device"), "cuda:0", "plan.train_args.device: 'cuda:0' is not what plan.devices"),
    (("plan", "train_args", "mosaic"), "lots", "plan.train_args.mosaic: must be a valid number"),
    (("plan", "train_args", "close_mosaic"), "x", "plan.train_args.close_mosaic"),
]


@pytest.mark.parametrize("where,value,message", EDITS, ids=[".".join(map(str, e[0])) + "=" + str(e[1]) for e in EDITS])
def test_resume_refuses_a_hand_edited_contract_in_one_line_and_changes_nothing(tmp_path, where, value, message):
    runs = tmp_path / "runs"
    run_dir = planned_run(runs)
    doc = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    node = doc
    for key in where[:-1]:
        node = node[key]
    if value is None:
        del node[where[-1]]
    else:
        node[where[-1]] = value
    (run_dir / "job.resolved.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    before = (run_dir / "job.resolved.yaml").read_bytes()
    r = run_cli("resume", run_dir.name, "--runs-dir", runs, cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert message in r.stderr, r.stderr
    if where == ("schema_version",):
        assert "newer version" not in r.stderr
    assert (run_dir / "job.resolved.yaml").read_bytes() == before
    with Registry.open(runs) as reg:
        assert reg.get(run_dir.name).state == "killed"


def test_the_contract_as_written_passes():
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    for example in sorted((REPO / "examples").glob("quickstart*.yaml")):
        doc = make_plan(load_job(example)).resolved_document("r", Path("/tmp/r"), "offline").to_dict()
        assert contract_problems(json.loads(json.dumps(doc))) == [], example.name


@pytest.mark.parametrize("line", [b"[1, 2]", b"[" * 100_000 + b"]" * 100_000, b'{"event": "epoch", "metrics": [1]}',
                                  b'{"event": "epoch", "epoch": 2, "metrics": {"metrics/mAP50-95(B)": "x"}}'],
                         ids=["a-list", "deeply-nested", "metrics-a-list", "a-metric-not-a-number"])  # pytest 9.1 writes
# a bytes parameter into the id, which reaches the CLI's environment (PYTEST_CURRENT_TEST) and passed its size limit
def test_show_reads_any_events_file(tmp_path, line):
    runs = tmp_path / "runs"
    run_dir = planned_run(runs)
    (run_dir / "events.jsonl").write_bytes(b'{"event": "epoch", "epoch": 1, "metrics": {}}\n' + line + b"\n")
    for args in (("show", run_dir.name), ("show", run_dir.name, "--json")):
        r = run_cli(*args, "--runs-dir", runs, cwd=tmp_path, env=NO_ENV_REGISTRY)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def _wandb_links(run_dir: Path) -> None:
    """The three links wandb.init made in wandb/ (before the logger turned them off), as W&B makes them."""
    inner = run_dir / "wandb" / "offline-run-20261127_090000-c0de"
    (inner / "logs").mkdir(parents=True)
    for name in ("debug.log", "debug-internal.log"):
        (inner / "logs" / name).write_text("w&b\n")
        os.symlink(f"offline-run-20261127_090000-c0de/logs/{name}", run_dir / "wandb" / name)
    os.symlink("offline-run-20261127_090000-c0de", run_dir / "wandb" / "latest-run")


def test_w_and_b_own_links_do_not_block_a_resume_but_a_planted_one_does(tmp_path):
    from orchestrator.errors import UserError
    from orchestrator.runner import refuse_symlinks

    run_dir = planned_run(tmp_path / "runs")
    _wandb_links(run_dir)
    refuse_symlinks(run_dir)  # W&B's own: accepted
    outside = tmp_path / "profile"
    outside.write_text("keep me\n")
    (run_dir / "wandb" / "debug.log").unlink()
    os.symlink(outside, run_dir / "wandb" / "debug.log")  # W&B's name, pointing out of the run
    os.symlink("../../../../profile", run_dir / "wandb" / "offline-run-x")
    with pytest.raises(UserError) as refused:
        refuse_symlinks(run_dir)
    assert [p.split(":")[0].rsplit("/", 1)[-1] for p in refused.value.problems] == ["debug.log", "offline-run-x"]


def test_w_and_b_attempt_folders_of_both_modes_are_read_oldest_first(tmp_path):
    from orchestrator.worker.wandb_history import attempt_files

    for name in ("offline-run-20261127_090500-r1", "run-20261127_090100-r1", "offline-run-20261127_090300-r2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"run-{name[-2:]}.wandb").write_bytes(b":W&B")
    assert [p.parent.name for p in attempt_files(tmp_path, "r1")] == ["run-20261127_090100-r1",
                                                                     "offline-run-20261127_090500-r1"]


def test_the_one_hook_a_run_folder_may_name_is_the_sweep_trial_reporter():
    from orchestrator.rundir.contract import RUN_FOLDER_HOOKS
    from orchestrator.sweep import trial_callback

    assert RUN_FOLDER_HOOKS == (trial_callback.TRIAL_CALLBACK,)
    module, _, function = trial_callback.TRIAL_CALLBACK.partition(":")
    assert module == trial_callback.__name__ and callable(getattr(trial_callback, function))


def test_the_training_process_imports_no_hook_a_run_folder_names(tmp_path):
    """Past the contract (a file read some other way), the worker's own attach refuses it too."""
    from orchestrator.rundir import load_resolved
    from orchestrator.worker.callbacks import attach_named

    run_dir = planned_run(tmp_path / "runs")
    resolved = load_resolved(run_dir)
    resolved.callbacks = ["os:system"]
    with pytest.raises(RuntimeError, match="not a hook a run folder may name"):
        attach_named(object(), run_dir, resolved)


def test_a_resume_of_the_run_as_planned_passes_the_recheck(tmp_path):
    from orchestrator.plan.recheck import recheck
    from orchestrator.rundir import load_resolved

    run_dir = planned_run(tmp_path / "runs")
    recheck(load_resolved(run_dir), run_dir.name, run_dir)
