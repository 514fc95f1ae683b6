"""Ray for real (issue 62): a cluster of two nodes on this machine, each a raylet of its own with 1 CPU, in a
network namespace where only loopback is (harness.services.RayCluster); `yolo-orch submit --launcher ray`
runs inside it, as a user's shell on the head node would, with RAY_ADDRESS set and W&B as users have it
(offline).

A `2xcpu:1` run reserves both nodes (one bundle each) and trains to its end; the worker node killed after
epoch 1 (its raylet and every process under it, as a lost machine) ends with the run finished on the node
left, re-planned with its images per step kept, each epoch once; Ctrl-C leaves no rank and no reservation; a
sweep's two workers run one on each node."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DEFAULT_WANDB, TINY_JOB, read_events, started, wandb_epochs, write_job
from orchestrator.harness.cli import cli_env, run_cli, start_cli, submit_json
from orchestrator.harness.runs import wait_first_epoch, wait_for
from orchestrator.harness.services import RayCluster
from orchestrator.rundir import load_resolved

# one Ray cluster at a time on this machine (`ray stop` ends every raylet here): one test worker runs them all
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module")
def cluster() -> RayCluster:
    cluster = started(RayCluster, 2)
    yield cluster
    cluster.stop()


def _job(tmp_path: Path, epochs: int, **changes) -> Path:
    return write_job(tmp_path, TINY_JOB, epochs=epochs, target={"devices": "2xcpu:1", "launcher": "ray"},
                     wandb=DEFAULT_WANDB, **changes)


def _env(cluster: RayCluster, **extra: str) -> dict:
    return cluster.env({"YOLO_ORCH_REGISTRY": "", **extra})


def _epochs(run_dir: Path) -> list[int]:
    return [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"]


def _cluster_free(cluster: RayCluster) -> dict:
    """The cluster's placement groups and free CPUs, as a new driver sees them."""
    code = ("import json, ray; ray.init(log_to_driver=False); "
            "print(json.dumps({'groups': [g['state'] for g in ray.util.placement_group_table().values()], "
            "'cpus': ray.available_resources().get('CPU', 0)}))")
    out = subprocess.run([*cluster.prefix, str(Path(cluster.ray).parent / "python"), "-c", code],
                         capture_output=True, text=True, env=cli_env(_env(cluster)), timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_two_node_run_trains_to_its_end_on_both_nodes(cluster, tmp_path):
    out = submit_json(_job(tmp_path, 2), cwd=tmp_path, env=_env(cluster), prefix=cluster.prefix)
    run_dir = Path(out["run_dir"])
    assert out["state"] == "finished", (run_dir / "train.log").read_text()[-3000:]
    nodes = json.loads((run_dir / "ray" / "attempt-1.json").read_text())["nodes"]
    assert len({n["node_id"] for n in nodes}) == 2  # one bundle on each node
    assert _epochs(run_dir) == [1, 2] and wandb_epochs(run_dir) == [1, 2]
    assert load_resolved(run_dir).plan.devices == "2xcpu:1"


def test_a_lost_node_ends_with_the_run_finished_on_the_node_left_replanned(cluster, tmp_path):
    """Epoch 2 is held 15 s at its start: the worker node dies after epoch 1 was saved, inside epoch 2; no
    replacement comes within ray.replacement_wait (5 s here, the default's 120 s being for autoscalers)."""
    job = _job(tmp_path, 3, ray={"replacement_wait": 5})
    proc = start_cli("submit", job, "--json", cwd=tmp_path, prefix=cluster.prefix,
                     env=_env(cluster, YOLO_ORCH_FAULT_SLEEP="epoch=2,seconds=15,once=1"))
    run_dir = wait_first_epoch(tmp_path / "runs", proc)
    cluster.kill_node(1)
    out, err = proc.communicate(timeout=600)
    cluster.add_node()  # for the tests after this one
    result = json.loads(out)
    log = (run_dir / "train.log").read_text()
    assert result["state"] == "finished", err[-3000:] + log[-3000:]
    resolved = load_resolved(run_dir)
    kept = resolved.plan.images_per_step
    assert (f"a node was lost: re-planned from 2xcpu:1 to 1xcpu:1 ({kept} images per optimizer step, kept)"
            in log), log[-3000:]
    assert resolved.plan.devices == "1xcpu:1" and resolved.plan.batch_per_device == 8  # was 4 on each of 2
    assert resolved.resumes[-1].previous_devices == "2xcpu:1" and resolved.resumes[-1].replanned
    assert _epochs(run_dir) == [1, 2, 3] and wandb_epochs(run_dir) == [1, 2, 3]
    assert any(e["event"] == "replanned" for e in read_events(run_dir))
    assert len(list((run_dir / "ray").glob("attempt-*.json"))) == 2


def test_ctrl_c_stops_every_rank_and_frees_the_reservation(cluster, tmp_path):
    job = _job(tmp_path, 5)
    proc = start_cli("submit", job, cwd=tmp_path, prefix=cluster.prefix,
                     env=_env(cluster, YOLO_ORCH_FAULT_SLEEP="epoch=2,seconds=60"))
    run_dir = wait_first_epoch(tmp_path / "runs", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    ranks = subprocess.run(["pgrep", "-f", f"orchestrator.worker.* {run_dir}"], capture_output=True, text=True)
    assert ranks.stdout == "", ranks.stdout
    assert wait_for(lambda: _cluster_free(cluster)["cpus"] == 2.0, timeout=60), _cluster_free(cluster)
    assert "CREATED" not in _cluster_free(cluster)["groups"]


def test_a_sweeps_workers_run_on_the_cluster(cluster, tmp_path):
    """Two workers, one on each node (each reserves the base job's one CPU), on the study's default SQLite
    file (one machine here: PostgreSQL across machines); the two enqueued trials: one complete, one pruned."""
    from conftest import write_sweep

    sweep = write_sweep(tmp_path, budget={"n_trials": 2})
    r = run_cli("sweep", sweep, "--launcher", "ray", "--workers", "2", "--json", cwd=tmp_path, env=_env(cluster),
                prefix=cluster.prefix, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["worker_exit_codes"] == [0, 0] and summary["reached"], summary
    assert "2 Ray worker(s)" in r.stderr
    logs = list((tmp_path / "runs" / "sweeps").rglob("workers/*.log"))
    assert len(logs) == 2 and all(log.stat().st_size for log in logs)
    assert all(Path(t["run_dir"]).is_relative_to(tmp_path / "runs") for t in summary["trials"])  # the sweep's runs_dir


def test_a_lost_node_replaced_within_the_wait_keeps_the_run_on_as_many_nodes(cluster, tmp_path):
    """The worker node killed inside epoch 2 and another started at once (an autoscaler's replacement): within
    ray.replacement_wait the cluster offers two nodes again, so the run goes on on 2xcpu:1, not re-planned."""
    job = _job(tmp_path, 3, ray={"replacement_wait": 120})
    proc = start_cli("submit", job, "--json", cwd=tmp_path, prefix=cluster.prefix,
                     env=_env(cluster, YOLO_ORCH_FAULT_SLEEP="epoch=2,seconds=15,once=1"))
    run_dir = wait_first_epoch(tmp_path / "runs", proc)
    cluster.kill_node(1)
    cluster.add_node()
    out, err = proc.communicate(timeout=600)
    log = (run_dir / "train.log").read_text()
    assert json.loads(out)["state"] == "finished", err[-3000:] + log[-3000:]
    assert "the cluster gave another" in log and "re-planned" not in log, log[-3000:]
    assert load_resolved(run_dir).plan.devices == "2xcpu:1" and _epochs(run_dir) == [1, 2, 3]
    second = json.loads((run_dir / "ray" / "attempt-2.json").read_text())["nodes"]
    first = json.loads((run_dir / "ray" / "attempt-1.json").read_text())
    # (the bundle on the killed node may be either rank: Ray orders a placement group's bundles by its own choice)
    assert len(first["lost"]) == 1 and first["lost"][0]["node_id"] not in {n["node_id"] for n in second}


def test_a_sweep_worker_lost_with_its_node_has_its_trial_retried_by_the_other(cluster, tmp_path):
    """Both trials hold 10 s at the start of epoch 2; the node of one worker is killed then: its trial ends FAIL
    by its heartbeat, and the worker left runs the retry; the study reaches its two trials."""
    from conftest import write_sweep

    sweep = write_sweep(tmp_path, budget={"n_trials": 2})
    proc = start_cli("sweep", sweep, "--launcher", "ray", "--workers", "2", "--json", cwd=tmp_path,
                     prefix=cluster.prefix, env=_env(cluster, YOLO_ORCH_FAULT_SLEEP="epoch=2,seconds=10"))
    assert wait_for(lambda: len([e for e in (tmp_path / "runs").glob("*/*/events.jsonl") if _epochs(e.parent)]) == 2,
                    timeout=300)
    cluster.kill_node(1)
    out, err = proc.communicate(timeout=900)
    cluster.add_node()
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["reached"] and sorted(summary["worker_exit_codes"]) == [0, 75], summary
    failed = [t for t in summary["trials"] if t["state"] == "FAIL"]
    assert len(failed) == 1 and any(t["retry_of"] == failed[0]["number"] for t in summary["trials"]), summary


def test_a_training_that_fails_on_nodes_still_there_goes_on_within_ray_max_failures(cluster, tmp_path):
    """One rank killed (SIGKILL) inside epoch 2, its node alive: a failure, not a loss; ray.max_failures 1 lets
    the run go on from epoch 2 on the same two nodes."""
    from orchestrator.harness.processes import command_line, processes_naming, signal_pid

    job = _job(tmp_path, 3, ray={"max_failures": 1})
    proc = start_cli("submit", job, "--json", cwd=tmp_path, prefix=cluster.prefix,
                     env=_env(cluster, YOLO_ORCH_FAULT_SLEEP="epoch=2,seconds=15,once=1"))
    run_dir = wait_first_epoch(tmp_path / "runs", proc)
    lines = {pid: command_line(pid) or "" for pid in processes_naming(str(run_dir))}
    ranks = [pid for pid, line in lines.items()
             if "orchestrator.worker.ddp" in line and "torch.distributed.run" not in line]
    assert len(ranks) == 2, list(lines.values())
    signal_pid(ranks[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    log = (run_dir / "train.log").read_text()
    assert json.loads(out)["state"] == "finished", err[-3000:] + log[-3000:]
    assert "a training failed (exit" in log and "ray.max_failures 1/1" in log, log[-3000:]
    assert load_resolved(run_dir).plan.devices == "2xcpu:1" and _epochs(run_dir) == [1, 2, 3]



def test_a_node_lost_in_the_final_validation_leaves_the_run_finished(cluster, tmp_path):
    """Every epoch recorded, the final validation of best.pt held 20 s, the worker node killed then: nothing is
    left to train, so the runner closes the run as finished by itself (no resume), as `resume` would."""
    job = _job(tmp_path, 2, ray={"replacement_wait": 5})
    proc = start_cli("submit", job, "--json", cwd=tmp_path, prefix=cluster.prefix,
                     env=_env(cluster, YOLO_ORCH_FAULT_SLEEP_FINAL="seconds=20"))
    runs = tmp_path / "runs"
    assert wait_for(lambda: any(_epochs(e.parent) == [1, 2] for e in runs.glob("*/*/events.jsonl")), timeout=300)
    time.sleep(3)  # inside the held final validation
    cluster.kill_node(1)
    out, err = proc.communicate(timeout=600)
    cluster.add_node()
    result = json.loads(out)
    assert result["state"] == "finished", err[-3000:]
    assert "all 2 epochs were recorded before it stopped" in result["summary"]["note"]
    run_dir = Path(result["run_dir"])
    assert _epochs(run_dir) == [1, 2] and wandb_epochs(run_dir) == [1, 2]
