"""The pods of `yolo-orch k8s` manifests, run here as their controllers would run them (issue 65;
harness/pods.py): each pod's command from the manifest as a local process with the environment its controller
injects (JOB_COMPLETION_INDEX; Kubeflow Trainer's PET_* variables), the pods' stable names resolving to this
machine, this folder as the claim, and a failed container started again after the kubelet's back-off. W&B as
users have it (offline). A two-node `2xcpu:1` Job trains to its end; a pod killed inside epoch 2 and started
again, as restartPolicy OnFailure does, leaves the run finished with each epoch once; a TrainJob's pods do the
same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import DEFAULT_WANDB, TINY_JOB, TINY_MODEL, read_events, started, wandb_epochs, write_job
from orchestrator.harness.cli import run_cli
from orchestrator.harness.pods import PodGroup, job_pods, trainjob_pods
from orchestrator.harness.runs import wait_for
from orchestrator.harness.services import free_port

pytestmark = pytest.mark.slow

IMAGE = "registry.example.com/yolo-orch:0.1"


def _manifests(folder: Path, kind: str, epochs: int, *args: str) -> list[dict]:
    (folder / "tiny-det.yaml").write_text(TINY_MODEL.read_text())
    write_job(folder, TINY_JOB, name="tiny", model="tiny-det.yaml", epochs=epochs,
              target={"devices": "2xcpu:1"}, wandb=DEFAULT_WANDB)
    r = run_cli("k8s", "job.yaml", "--image", IMAGE, "--kind", kind, "--pvc", "work", *args, cwd=folder)
    assert r.returncode == 0, r.stderr
    return list(yaml.safe_load_all(r.stdout.split("\n", 1)[1]))


def _pods(folder: Path, kind: str, epochs: int, env: dict | None = None) -> PodGroup:
    """The manifest's pods, ready to start: a Job's NAME-K.NAME, or a TrainJob's NAME-node-0-K.NAME."""
    port = free_port()
    docs = _manifests(folder, kind, epochs, "--port", str(port))
    name = docs[-1]["metadata"]["name"]
    if kind == "job":
        job = docs[-1]
        pods, limit = job_pods(job), job["spec"]["backoffLimit"]
    else:
        pods, limit = trainjob_pods(docs[-1]), 6
        for pod in pods:
            pod.env["PET_MASTER_PORT"] = str(port)  # the runtime's 29400 may be taken on a shared machine
    hosts = [f"{pod.host}.{name}" for pod in pods]
    return started(PodGroup, pods, folder, hosts, limit, folder / "pod-logs",
                   {"YOLO_ORCH_REGISTRY": "", **(env or {})})


def _node0_run(folder: Path) -> Path:
    (run_dir,) = [p for p in (folder / "runs" / "tiny").iterdir() if p.name.endswith("node0")]
    return run_dir


def _epochs(run_dir: Path) -> list[int]:
    return [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"]


@pytest.mark.parametrize("kind", ["job", "trainjob"])
def test_two_pods_train_a_two_node_run_to_its_end(tmp_path, kind):
    group = _pods(tmp_path, kind, 2)
    group.start()
    pods = group.run(timeout=600)
    assert [p.exits for p in pods] == [[0], [0]], group.describe()
    run_dir = _node0_run(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["epochs_completed"] == 2 and (run_dir / "weights" / "best.pt").is_file()
    assert _epochs(run_dir) == [1, 2] and wandb_epochs(run_dir) == [1, 2]
    assert run_dir.name == "k8s-tiny-node0"  # the run id every restart of the pod continues
    assert "DDP: rank 0/2" in (run_dir / "train.log").read_text() and (run_dir.parent / "k8s-tiny-node1").is_dir()


@pytest.mark.parametrize("kind", ["job", "trainjob"])
def test_a_pod_killed_mid_run_and_started_again_resumes_with_each_epoch_once(tmp_path, kind):
    """Epoch 2 is held 5 s at its start: pod 1 dies there, with every process under it; its peer's training
    fails at its next collective; the kubelet starts both again after its back-off (10 s) and each continues its
    node's run from epoch 1's checkpoint. (A survivor that takes longer than the back-off to notice can be
    joined by the restarted pod at its old rendezvous; the stall watchdog ends that: docs/distributed.md.)"""
    group = _pods(tmp_path, kind, 3, {"YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=5,once=1"})
    group.start()
    assert wait_for(lambda: (tmp_path / "runs" / "tiny").is_dir() and any(
        _epochs(p) for p in (tmp_path / "runs" / "tiny").iterdir()), timeout=300), group.describe()
    group.kill(1)
    pods = group.run(timeout=900)
    assert pods[1].restarts >= 1 and pods[1].exits[0] != 0, group.describe()
    run_dir = _node0_run(tmp_path)
    assert _epochs(run_dir) == [1, 2, 3] and wandb_epochs(run_dir) == [1, 2, 3], group.describe()
    resumes = yaml.safe_load((run_dir / "job.resolved.yaml").read_text()).get("resumes") or []
    assert resumes, "the restarted pod continued its run (a resume record), not a new one"
