"""The torchrun launcher, multi-node options and the Slurm script: pure command building (fast, no training)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import run_cli, write_job
from orchestrator.launch import torchrun
from orchestrator.launch.slurm import SlurmOptions, sbatch_script
from orchestrator.devices import parse_devices
from orchestrator.errors import UserError


def test_single_node_is_standalone(tmp_path):
    cmd = torchrun.build_command(tmp_path, nproc_per_node=2)
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in cmd and "--nnodes=1" in cmd and "--nproc-per-node=2" in cmd
    assert "--max-restarts=0" in cmd
    assert cmd[-3:] == ["-m", "orchestrator.worker.ddp", str(tmp_path)]
    assert not any(a.startswith(("--master", "--rdzv", "--node-rank")) for a in cmd)


def test_multi_node_static_rendezvous(tmp_path):
    cmd = torchrun.build_command(tmp_path, nproc_per_node=4, nnodes=2, node_rank=1, rdzv_endpoint="node0:29400")
    for arg in ("--nnodes=2", "--node-rank=1", "--master-addr=node0", "--master-port=29400", "--nproc-per-node=4"):
        assert arg in cmd
    assert "--standalone" not in cmd and not any(a.startswith("--rdzv") for a in cmd)


def test_multi_node_c10d_rendezvous(tmp_path):
    cmd = torchrun.build_command(tmp_path, nproc_per_node=8, nnodes=4, node_rank=3, rdzv_endpoint="[fe80::1]:29400",
                                 rdzv_backend="c10d", rdzv_id="job-7")
    for arg in ("--nnodes=4", "--node-rank=3", "--rdzv-backend=c10d", "--rdzv-endpoint=fe80::1:29400", "--rdzv-id=job-7"):
        assert arg in cmd


def test_command_is_rebuilt_from_the_resolved_job(tmp_path):
    launch = {"node_rank": 1, "rdzv_endpoint": "h:1234", "rdzv_backend": "static"}
    doc = {"job": {"name": "j", "epochs": 1}, "plan": {"devices": "2x4", "train_args": {"epochs": 1}, "launch": launch}}
    (tmp_path / "job.resolved.yaml").write_text(yaml.safe_dump(doc))
    cmd = torchrun.command(tmp_path)
    assert "--nproc-per-node=4" in cmd and "--nnodes=2" in cmd and "--node-rank=1" in cmd and "--master-addr=h" in cmd
    doc["plan"] = {"devices": "cpu:3", "train_args": {"epochs": 1}}
    (tmp_path / "job.resolved.yaml").write_text(yaml.safe_dump(doc))
    cmd = torchrun.command(tmp_path)
    assert "--standalone" in cmd and "--nproc-per-node=3" in cmd


@pytest.mark.parametrize("devices,launcher", [("cpu", "local"), ("0", "local"), ("cuda:1", "local"),
                                               ("cpu:2", "torchrun"), ("0,1", "torchrun"), ("4", "torchrun"),
                                               ("2x4", "torchrun"), ("2xcpu:1", "torchrun"), ("tpu:8", "xla")])
def test_launcher_for(devices, launcher):
    assert parse_devices(devices).backend == launcher


def test_launch_options_validation():
    two = parse_devices("2x4")
    assert torchrun.launch_options(parse_devices("cpu:2")) == {}
    assert torchrun.launch_options(two, 1, "h:29500") == {"node_rank": 1, "rdzv_endpoint": "h:29500",
                                                            "rdzv_backend": "static"}
    assert torchrun.launch_options(two, require=False) == {}  # dry run
    cases = [
        (dict(devices=two), "spans 2 nodes"),
        (dict(devices=two, node_rank=2, rdzv_endpoint="h:1"), "outside 0..1"),
        (dict(devices=two, node_rank=0, rdzv_endpoint="nohost"), "not HOST:PORT"),
        (dict(devices=two, node_rank=0, rdzv_endpoint="h:70000"), "not HOST:PORT"),
        (dict(devices=two, node_rank=0, rdzv_endpoint="h:1", rdzv_backend="etcd"), "--rdzv-backend"),
        (dict(devices=parse_devices("cpu"), node_rank=1), "one process"),
        (dict(devices=parse_devices("0,1"), node_rank=1), "single node"),
    ]
    for kwargs, text in cases:
        with pytest.raises(UserError) as exc:
            torchrun.launch_options(**kwargs)
        assert text in str(exc.value), (kwargs, str(exc.value))


def test_slurm_script_starts_one_torchrun_per_node(tmp_path):
    text = sbatch_script("det", tmp_path / "my job.yaml", parse_devices("2x4"), ["epochs=3"],
                         SlurmOptions(partition="gpu", account="proj", time="02:00:00", workdir=tmp_path, python="/py"))
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --time=02:00:00",
                 "#SBATCH --cpus-per-task=32"):
        assert line in text.splitlines()
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--kill-on-bad-exit=1" in srun
    assert "'\"'\"'" in srun or "my job.yaml" in srun  # the path with a space survives the double quoting
    assert '--node-rank "$SLURM_NODEID" --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT"' in srun
    if shutil.which("bash"):
        subprocess.run(["bash", "-n"], input=text, text=True, check=True)
        # what the node's shell finally runs: expand the inner command with fake Slurm variables
        inner = subprocess.run(["bash", "-c", srun.replace("srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c", "echo")],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert inner.startswith("exec /py -m orchestrator submit")
        assert f"{tmp_path}/my job.yaml" in inner
    cpu = sbatch_script("det", tmp_path / "j.yaml", parse_devices("3xcpu:2"), [], SlurmOptions(workdir=tmp_path))
    assert "#SBATCH --nodes=3" in cpu and "--gpus-per-node" not in cpu and "#SBATCH --cpus-per-task=2" in cpu


def test_a_single_node_slurm_script_requeues_itself_and_resumes_its_run(tmp_path):
    """The run id is the Slurm job's (kept by a requeue), submit resumes it when it exists, Slurm
    signals USR1 before the limit and the script requeues the job; on several nodes too (each node's
    run gets its node's suffix from submit)."""
    text = sbatch_script("det", tmp_path / "j.yaml", parse_devices("cpu:2"), [], SlurmOptions(workdir=tmp_path, warn_s=90))
    lines = text.splitlines()
    for line in ("#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=B:USR1@90", "trap requeue USR1",
                 'export YOLO_ORCH_RUN_ID="${YOLO_ORCH_RUN_ID:-slurm-$SLURM_JOB_ID}"'):
        assert line in lines, line
    srun = next(line for line in lines if line.startswith("srun "))
    assert srun.endswith(" &") and '--run-id "$YOLO_ORCH_RUN_ID" --resume-existing' in srun
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    off = sbatch_script("det", tmp_path / "j.yaml", parse_devices("cpu:2"), [], SlurmOptions(workdir=tmp_path, requeue=False))
    assert "--requeue" not in off and "--signal" not in off and "--run-id" not in off
    multi = sbatch_script("det", tmp_path / "j.yaml", parse_devices("2xcpu:2"), [], SlurmOptions(workdir=tmp_path))
    srun = next(line for line in multi.splitlines() if line.startswith("srun "))
    assert '--node-rank "$SLURM_NODEID"' in srun and '--run-id "$YOLO_ORCH_RUN_ID" --resume-existing' in srun


def test_cli_slurm_and_submit_options(tmp_path):
    job = write_job(tmp_path)
    out = run_cli("slurm", job, "-d", "2x4", "--partition", "gpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("#!/bin/bash") and "#SBATCH --nodes=2" in out.stdout
    dry = run_cli("submit", job, "-d", "2x4", "--dry-run", "--json", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert (plan["launcher"], plan["world_size"]) == ("torchrun", 8)
    dry = run_cli("submit", job, "-d", "2x4", "--dry-run", "--json", "--node-rank", "1", "--rdzv-endpoint", "n0:29500",
                  cwd=tmp_path)
    assert json.loads(dry.stdout)["launch"] == {"node_rank": 1, "rdzv_endpoint": "n0:29500", "rdzv_backend": "static"}
    bad = run_cli("submit", job, "-d", "2x4", cwd=tmp_path)
    assert bad.returncode == 2 and "--node-rank" in bad.stderr and not (tmp_path / "runs").exists()
    bad = run_cli("submit", job, "-d", "cpu", "--node-rank", "1", cwd=tmp_path)
    assert bad.returncode == 2 and "one process" in bad.stderr


def test_parse_devices_multi_node_cpu():
    spec = parse_devices("2xcpu:3")
    assert (spec.kind, spec.nodes, spec.per_node, spec.world_size, spec.ultralytics_device()) == ("cpu", 2, 3, 6, "cpu")


def test_a_ranks_record_is_torchruns_environment_read_once(monkeypatch):
    """Issue 61: torchrun's environment is read in one place (rundir.Ranks); alone, the defaults of one process."""
    from orchestrator.rundir import Ranks, is_primary, rank

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    alone = Ranks.here()
    assert alone == Ranks() and alone.primary and not alone.under_torchrun and not alone.spans_nodes
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("GROUP_RANK", "1")
    second_node = Ranks.here()
    assert second_node == Ranks(rank=3, local_rank=1, world_size=4, local_world_size=2, node_rank=1)
    assert second_node.under_torchrun and second_node.spans_nodes and not second_node.primary
    assert rank() == 3 and not is_primary()
