"""What a new user and an adversary broke (issue 35), each checked on the real command line: files
overwritten or written through devices and links, reads without a bound or blocked by a FIFO,
secrets and shell lines in generated scripts, GPU words read wrong. As root, as CI runs."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import build, kaggle_job, run_cli, write_job, write_sweep
from orchestrator.errors import UserError
from orchestrator.harness.runs import walk_to

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line_exit_2(result, *expected: str) -> None:
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    for text in expected:
        assert text in result.stderr, f"{text!r} not in\n{result.stderr}"


@pytest.fixture
def dataset(tmp_path) -> Path:
    from orchestrator.data.synth import generate_dataset

    return generate_dataset(tmp_path / "ds", images=8, val_images=4, classes=2, imgsz=32, seed=0)


def _train(tmp_path, data: Path, *extra: str, env: dict | None = None):
    return run_cli("train", "model=yolo11n.yaml", f"data={data}", "epochs=1", "imgsz=32", *extra, cwd=tmp_path,
                   env=env)


# ---------------------------------------------------------------- files overwritten, devices replaced

def test_train_save_never_overwrites_nor_writes_through_a_device_a_link_or_a_folder(tmp_path, dataset):
    existing = tmp_path / "base.yaml"
    existing.write_text("name: mine\n")
    before = _digest(existing)
    _one_line_exit_2(_train(tmp_path, dataset, "--save", existing, "--dry-run"), f"--save: {existing} exists",
                     "--force")
    assert _digest(existing) == before
    _one_line_exit_2(_train(tmp_path, dataset, "--save", "/dev/null", "--dry-run", "--force"),
                     "--save: /dev/null is a device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    _one_line_exit_2(_train(tmp_path, dataset, "--save", tmp_path, "--dry-run"), "is a directory")
    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "elsewhere.yaml")
    _one_line_exit_2(_train(tmp_path, dataset, "--save", link, "--dry-run", "--force"), "is a symbolic link")
    assert not (tmp_path / "elsewhere.yaml").exists()
    _one_line_exit_2(_train(tmp_path, dataset, "--save", tmp_path / "no" / "x.yaml", "--dry-run"),
                     "its folder", "does not exist")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    _one_line_exit_2(_train(tmp_path, dataset, "--save", fifo, "--dry-run", "--force"), "is a FIFO")
    replaced = _train(tmp_path, dataset, "--save", existing, "--dry-run", "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert yaml.safe_load(existing.read_text())["name"] == "train"


def test_kaggle_build_out_refuses_files_devices_and_half_built_folders(tmp_path):
    job = kaggle_job(tmp_path)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    for out, expected in ((a_file, "is not a folder"), (Path("/dev/null"), "is not a folder")):
        res = run_cli("kaggle", "build", job, "--out", out, "--owner", "alice", "--force", cwd=tmp_path)
        _one_line_exit_2(res, f"--out: {out}", expected)
    assert a_file.read_text() == "mine\n" and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    folder = tmp_path / "kernel"
    (folder / "run_kaggle.py").mkdir(parents=True)  # a folder where the runner goes
    res = run_cli("kaggle", "build", job, "--out", folder, "--owner", "alice", "--force", cwd=tmp_path)
    _one_line_exit_2(res, "run_kaggle.py is a directory")
    assert sorted(p.name for p in folder.iterdir()) == ["run_kaggle.py"]  # nothing half-built


def test_kaggle_build_into_an_existing_kernel_folder_needs_force(tmp_path):
    res, out = build(tmp_path)
    assert res.returncode == 0, res.stderr
    assert oct(out.stat().st_mode & 0o777) == "0o755"
    before = {p.name: _digest(p) for p in out.iterdir()}
    again = run_cli("kaggle", "build", kaggle_job(tmp_path), "--out", out, "--owner", "alice", cwd=tmp_path)
    _one_line_exit_2(again, "kernel-metadata.json exists; pass --force", "run_kaggle.py exists")
    assert {p.name: _digest(p) for p in out.iterdir()} == before
    forced = run_cli("kaggle", "build", kaggle_job(tmp_path), "--out", out, "--owner", "alice", "--force",
                     cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no staging folder left beside


def test_a_foreign_sqlite_file_is_not_taken_for_a_registry(tmp_path):
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE customers (name TEXT)")
    con.execute("INSERT INTO customers VALUES ('ada')")
    con.commit()
    con.close()
    before = _digest(other)
    res = run_cli("runs", "--registry", other, cwd=tmp_path)
    _one_line_exit_2(res, "an SQLite database of other tables (customers), not a yolo-orch registry", "untouched")
    assert _digest(other) == before and not Path(f"{other}-wal").exists()


# ---------------------------------------------------------------- unbounded reads and hangs

@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_label_file_that_is_a_fifo_or_a_device_is_one_line_at_once(tmp_path, dataset, kind):
    label = sorted((dataset.parent / "labels" / "train").glob("*.txt"))[0]
    label.unlink()
    os.mkfifo(label) if kind == "fifo" else label.symlink_to("/dev/zero")
    job = write_job(tmp_path, data=str(dataset))
    start = time.monotonic()
    res = run_cli("plan", job, cwd=tmp_path, timeout=60)
    _one_line_exit_2(res, f"data: {label}: cannot be read as a label file",
                     "a FIFO, not a regular file" if kind == "fifo" else "a device, not a regular file")
    assert time.monotonic() - start < 20


def test_a_huge_label_file_and_a_fifo_image_list_are_refused(tmp_path, dataset, monkeypatch):
    from orchestrator.jobspec import dataset as ds

    label = sorted((dataset.parent / "labels" / "train").glob("*.txt"))[0]
    monkeypatch.setattr(ds, "MAX_LABEL_BYTES", 64)
    label.write_text("0 0.5 0.5 0.1 0.1\n" * 10)
    lines, why = ds._label_lines(str(label))
    assert lines == [] and "is more than" in why
    fifo = tmp_path / "list.txt"
    os.mkfifo(fifo)
    problems: list[str] = []
    assert ds._list_images(fifo, "train", problems) == []
    assert problems and "a FIFO, not a regular file" in problems[0]


def test_a_job_file_that_is_a_fifo_without_a_writer_ends_in_one_line(tmp_path):
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    res = run_cli("plan", fifo, cwd=tmp_path, timeout=60)
    _one_line_exit_2(res, "nothing came through this pipe", "a FIFO nobody writes to?")
    assert time.monotonic() - start < 30


def test_a_job_file_through_a_fifo_with_a_writer_is_read(tmp_path):
    source = write_job(tmp_path, filename="source.yaml")
    fifo = tmp_path / "job.yaml"
    os.mkfifo(fifo)

    def writer():
        time.sleep(1.0)  # the reader opens first, as `<(...)` and `cat x >fifo` race
        with open(fifo, "w") as f:
            f.write(source.read_text())

    threading.Thread(target=writer, daemon=True).start()
    res = run_cli("plan", fifo, "--json", cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)


def test_an_error_line_quotes_only_a_short_escaped_excerpt(tmp_path):
    secret = "root:$6$" + "s3cr3tHash" * 10 + ":20000:0:99999:7:::"
    shadow = tmp_path / "shadow"
    shadow.write_text(f"{secret}\nbin:*:20000:0:99999:7:::\n\"a key\\nwith a newline\": 1\n")
    job = tmp_path / "job.yaml"
    job.symlink_to(shadow)
    res = run_cli("plan", job, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert secret not in res.stderr and "s3cr3tHash" * 4 not in res.stderr
    assert "'a key\\nwith a newline': unknown key" in res.stderr
    assert all(len(line) < 120 for line in res.stderr.splitlines())


# ---------------------------------------------------------------- secrets and shell lines in generated scripts

@pytest.mark.parametrize("url", ["postgresql://user@db/sweeps?password=S3CRET",
                                 "postgresql://user@db/sweeps?sslpassword=S3CRET",
                                 "postgresql://user:S3CRET@db/sweeps"])
def test_a_sweep_array_never_carries_a_storage_secret(tmp_path, url):
    res = run_cli("slurm", write_sweep(tmp_path), "--workers", "2", "--storage", url, cwd=tmp_path)
    _one_line_exit_2(res, "--storage:", "holds a password or another secret")
    assert "S3CRET" not in res.stdout + res.stderr


@pytest.mark.parametrize("args, expected", [
    (["--time", "1:00:00\ntouch /tmp/x"], "--time: '1:00:00\\ntouch /tmp/x' is not a Slurm time"),
    (["--time", "abc"], "--time: 'abc' is not a Slurm time"),
    (["--time", "-5"], "--time: '-5' is not a Slurm time"),
    (["--port", "70000"], "--port: 70000 is not a TCP port"),
    (["--port", "-1"], "--port: -1 is not a TCP port"),
    (["--cpus-per-task", "-1"], "--cpus-per-task: must be between 1 and 4096 (got -1)"),
    (["--cpus-per-task", "0"], "--cpus-per-task: must be between 1 and 4096 (got 0)"),
    (["--time", "5", "--warn-seconds", "300"], "--warn-seconds: 300 s is not before the time limit (5 = 300 s)"),
    (["--partition", "gpu\n#SBATCH --wrap=x"], "--partition: 'gpu\\n#SBATCH --wrap=x' is not a Slurm name"),
    (["--account", "a b"], "--account: 'a b' is not a Slurm name"),
    (["--sbatch", "--qos=high\necho owned"], "--sbatch: '--qos=high\\necho owned' is not one sbatch option"),
    (["--python", "/usr/bin/python3\nid"], "--python: '/usr/bin/python3\\nid' holds a line break"),
])
def test_every_slurm_option_is_checked_before_it_enters_the_script(tmp_path, args, expected):
    res = run_cli("slurm", write_job(tmp_path), *args, cwd=tmp_path)
    _one_line_exit_2(res, expected)
    assert res.stdout == ""


@pytest.mark.parametrize("value, seconds", [("30", 1800), ("1:30", 90), ("2:00:00", 7200), ("1-0", 86400),
                                            ("1-2:30", 95400), ("0-0:0:30", 30), ("UNLIMITED", None), ("0", None)])
def test_slurm_time_forms(value, seconds):
    from orchestrator.jobspec.slurm import time_limit_seconds

    assert time_limit_seconds(value) == seconds


def test_good_slurm_options_still_make_a_script(tmp_path):
    res = run_cli("slurm", write_job(tmp_path), "--time", "2-00:00:00", "--partition", "gpu,gpu-long", "--account",
                  "lab_1", "--sbatch=--qos=high", "--cpus-per-task", "4", "--port", "29501", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for line in ("#SBATCH --time=2-00:00:00", "#SBATCH --partition=gpu,gpu-long", "#SBATCH --account=lab_1",
                 "#SBATCH --qos=high", "#SBATCH --cpus-per-task=4", 'MASTER_PORT="${MASTER_PORT:-29501}"'):
        assert line in res.stdout


# ---------------------------------------------------------------- GPU words

@pytest.mark.parametrize("word, devices", [("device=0,1,2,3", "0,1,2,3"), ("device=[0,1]", "0,1"),
                                           ("device=0", "0"), ("device=cuda:1", "cuda:1"), ("device=cpu", "cpu"),
                                           ("device=CPU", "cpu")])
def test_ultralytics_device_words_are_read_as_ultralytics_reads_them(tmp_path, dataset, word, devices):
    res = _train(tmp_path, dataset, word, "--dry-run", "--json", env=NO_GPU)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["devices"] == devices


def test_a_gpu_asked_for_on_a_machine_without_one_is_refused_before_anything_is_written(tmp_path, dataset):
    save = tmp_path / "job.yaml"
    _one_line_exit_2(_train(tmp_path, dataset, "device=0", "--save", save, env=NO_GPU),
                     "target.devices: '0' asks for GPUs, but this machine shows none")
    assert not save.exists() and not (tmp_path / "runs").exists()
    job = write_job(tmp_path, filename="tiny.yaml")
    res = run_cli("submit", job, "--devices", "0", cwd=tmp_path, env=NO_GPU)
    _one_line_exit_2(res, "target.devices: '0' asks for GPUs")
    assert not (tmp_path / "runs").exists()
    res = run_cli("submit", job, "--devices", "0,1", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": "GPU-aaaa"})
    _one_line_exit_2(res, "target.devices: '0,1' needs GPU 1, but this machine shows 1")
    assert run_cli("submit", job, "--devices", "0", "--dry-run", cwd=tmp_path, env=NO_GPU).returncode == 0
    assert run_cli("plan", job, "-d", "8", cwd=tmp_path, env=NO_GPU).returncode == 0  # planning for elsewhere


@pytest.mark.parametrize("value", ["", "0", "0,1", "GPU-5f2e,GPU-77ab", "MIG-1a2b,MIG-3c4d,MIG-1a2b",
                                   "1gpu2,2ampere", "0,-1,2", "0,0", "GPU-a,0", " 1, 2", "nvidia0", "3,1"])
def test_visible_gpus_counts_as_torch_does(monkeypatch, value):
    import torch.cuda

    from orchestrator.devices import visible_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert visible_gpus() == torch.cuda._parse_visible_devices()


# ---------------------------------------------------------------- what passes plan and dies later; tracebacks

def test_sixty_thousand_class_names_are_not_an_alias_bomb(tmp_path, dataset):
    import yaml as pyyaml

    cfg = pyyaml.safe_load(dataset.read_text())
    cfg["names"], cfg["nc"] = {i: f"c{i}" for i in range(60_000)}, 60_000
    dataset.write_text(pyyaml.safe_dump(cfg))
    res = run_cli("plan", write_job(tmp_path, data=str(dataset)), "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-500:]
    assert "alias" not in res.stderr


@pytest.mark.parametrize("field", ["model", "data", "hyp", "hyp.preset", "runs_dir"])
def test_a_name_longer_than_the_filesystem_allows_is_one_line(tmp_path, field):
    res = run_cli("plan", write_job(tmp_path), "--set", f"{field}={'a' * 300}.yaml", cwd=tmp_path)
    _one_line_exit_2(res, f"{field}: a name in this path is longer than 255 bytes")


def test_a_long_path_given_to_a_flag_is_one_line(tmp_path):
    res = run_cli("runs", "--runs-dir", tmp_path / ("r" * 300), cwd=tmp_path)
    _one_line_exit_2(res, "a name in this path is longer than the filesystem allows")


def test_two_commands_claiming_one_run_id_at_once(tmp_path, monkeypatch):
    from orchestrator import runner

    job_dir = tmp_path / "runs" / "tiny"
    (job_dir / "r1").mkdir(parents=True)  # the other command's mkdir won the race
    with pytest.raises(UserError, match="run r1 was created by another command at the same moment"):
        runner.claim_run_dir(job_dir, "r1")
    ids = iter(["r1", "r2"])  # a new id that drew the same digits in the same second: the next one is taken
    monkeypatch.setattr(runner, "new_run_id", lambda: next(ids))
    assert runner.claim_run_dir(job_dir, None) == ("r2", job_dir / "r2")


@pytest.mark.parametrize("planted", ["stacks", "heartbeat", "results.csv", "heartbeat/rank0.json",
                                     "stacks/rank0.txt"])
def test_a_symlink_anywhere_a_run_writes_is_refused_before_a_resume(tmp_path, planted):
    from orchestrator.runner import refuse_symlinks

    run_dir = tmp_path / "run"
    target = tmp_path / "elsewhere"
    target.mkdir()
    (run_dir / "heartbeat").mkdir(parents=True)
    (run_dir / "stacks").mkdir()
    link = run_dir / planted
    if link.is_dir():
        link.rmdir()
    link.symlink_to(target)
    with pytest.raises(UserError, match="a symbolic link in the run directory"):
        refuse_symlinks(run_dir)


def test_the_worker_never_writes_stacks_through_a_link(tmp_path):
    from orchestrator.worker.heartbeat import Heartbeat

    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "rank0.txt").symlink_to(tmp_path / "profile")
    with pytest.raises(OSError):
        Heartbeat(tmp_path, 0)
    assert not (tmp_path / "profile").exists()


# ---------------------------------------------------------------- confusing, each a small fix

def test_a_run_id_in_use_by_a_running_run_is_not_sent_to_resume(tmp_path):
    from orchestrator.registry import Registry

    with Registry.open(tmp_path / "runs") as reg:
        reg.add_run("r1", job="tiny", run_dir=tmp_path / "runs" / "tiny" / "r1", pid=os.getpid())
        walk_to(reg, "r1", "running")
    res = run_cli("submit", write_job(tmp_path), "--run-id", "r1", cwd=tmp_path)
    _one_line_exit_2(res, "--run-id: run r1 exists (running); it is still going: `yolo-orch logs r1 --follow`")
    assert "resume" not in res.stderr


def test_sweep_files_with_non_ascii_names_get_studies_of_their_own():
    from orchestrator.sweep.loader import _default_study

    names = {_default_study(Path(f"{stem}.yaml")) for stem in ("学習", "学習2", "süß", "süss", "lr-sweep")}
    assert len(names) == 5 and "lr-sweep" in names
    assert all(len(n) <= 48 and n.isascii() for n in names)


def test_runs_points_at_registries_beside_the_default_one(tmp_path):
    from orchestrator.registry import Registry

    with Registry.open(tmp_path / "y") as reg:  # `yolo-orch train ... project=y`
        reg.add_run("r1", job="train")
        walk_to(reg, "r1", "finished")
    res = run_cli("runs", cwd=tmp_path)
    assert res.returncode == 0 and "yolo-orch runs --runs-dir y" in res.stdout


def test_exist_ok_is_said_to_be_ignored(tmp_path, dataset):
    res = _train(tmp_path, dataset, "exist_ok=True", "--dry-run")
    assert res.returncode == 0 and "warning: exist_ok=True ignored: every run gets its own folder" in res.stderr


def test_the_batchnorm_warning_knows_the_jobs_sync_bn(tmp_path):
    job = write_job(tmp_path)
    plans = {}
    for sync in ("false", "true"):
        res = run_cli("plan", job, "-d", "cpu:2", "--set", f"sync_bn={sync}", "--set", "target.batch=4", "--json",
                      cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        plans[sync] = " ".join(json.loads(res.stdout)[0]["warnings"])
    assert "`sync_bn: true` in the job computes them over all devices" in plans["false"]
    assert "BatchNorm statistics are per device" not in plans["true"]
