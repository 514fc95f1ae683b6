"""`yolo-orch kaggle build`: kernel-metadata.json, the runner script, the resolved job, and
that no secret ever lands in the folder."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import TINY_JOB, build, bundle_of, cli_env, kaggle_job, run_cli
from fake_kaggle import FAKE_KEY

from orchestrator.kaggle import metadata as md

# ---------------------------------------------------------------- metadata


def test_slugs_and_titles_round_trip():
    assert md.slugify("YOLO orch: Tiny_job!") == "yolo-orch-tiny-job"
    for name in ("tiny", "my.job_v2", "x" * 64):
        for session in (1, 2, 13):
            slug = md.kernel_slug(name, session)
            assert 3 <= len(slug) <= md.SLUG_MAX
            assert md.slugify(md.title_for(slug)) == slug
            assert md.base_slug(slug) == md.kernel_slug(name, 1)
    assert md.kernel_slug("tiny", 2) == "yolo-orch-tiny-s2"


def test_kernel_metadata_defaults_and_validation():
    meta = md.kernel_metadata("alice", "yolo-orch-tiny", dataset_sources=["alice/wheels", "alice/wheels"])
    assert meta["machine_shape"] == "TpuV5E8"
    assert meta["enable_internet"] is False and meta["is_private"] is True
    assert meta["kernel_type"] == "script" and meta["language"] == "python"
    assert meta["dataset_sources"] == ["alice/wheels"]
    assert "docker_image" not in meta and "enable_tpu" not in meta
    assert md.validate_kernel_metadata(meta) == []
    bad = dict(meta, title="Something Else", docker_image="gcr.io/kaggle-images/python")
    bad.pop("enable_internet")
    problems = " | ".join(md.validate_kernel_metadata(bad))
    assert "slugifies" in problems and "docker_image" in problems and "enable_internet" in problems


def test_dataset_metadata_validation():
    meta = md.dataset_metadata("alice", "yolo-orch-wheels", "yolo-orch wheels")
    assert md.validate_dataset_metadata(meta) == []
    assert meta["licenses"] == [{"name": "other"}]
    assert any("title" in p for p in md.validate_dataset_metadata(dict(meta, title="tiny")))
    assert any("id" in p for p in md.validate_dataset_metadata(dict(meta, id="alice/Bad_Slug")))


# ---------------------------------------------------------------- build


def test_build_writes_a_ready_kernel_folder(tmp_path):
    res, out = build(tmp_path)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["job.resolved.yaml", "kernel-metadata.json", "run_kaggle.py"]
    meta = json.loads((out / "kernel-metadata.json").read_text())
    assert meta["id"] == "alice/yolo-orch-tiny" and md.slugify(meta["title"]) == "yolo-orch-tiny"
    assert meta["code_file"] == "run_kaggle.py" and (out / meta["code_file"]).is_file()
    assert meta["machine_shape"] == "TpuV5E8"
    assert meta["enable_internet"] is False
    assert "docker_image" not in meta
    assert meta["dataset_sources"] == ["alice/yolo-orch-wheels"]  # synth data: generated in the kernel
    assert meta["kernel_sources"] == []
    assert md.validate_kernel_metadata(meta) == []
    assert info["devices"] == "tpu:8" and info["world_size"] == 8

    runner = (out / "run_kaggle.py").read_text()
    tree = ast.parse(runner)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"torch", "torch_xla", "ultralytics", "orchestrator"}  # stdlib only: probes run in children
    assert "--no-index" in runner and "--find-links" in runner and "--constraint" in runner
    assert "UserSecretsClient" in runner and "Add-ons > Secrets" in runner
    bundle = bundle_of(out)
    assert bundle["kernel"] == "alice/yolo-orch-tiny" and bundle["world_size"] == 8
    assert bundle["data"] == {"kind": "synth", "synth": TINY_JOB["data"]["synth"]}
    assert bundle["model"]["name"] == "tiny-det.yaml" and "Detect" in bundle["model"]["text"]
    assert bundle["kaggle"]["session_hours"] == 9.0 and bundle["kaggle"]["margin_minutes"] == 20.0
    resolved = yaml.safe_load((out / "job.resolved.yaml").read_text())
    assert resolved["plan"]["devices"] == "tpu:8" and resolved["plan"]["launcher"] == "xla"
    assert resolved["plan"]["train_args"]["batch"] == bundle["resolved"]["plan"]["train_args"]["batch"]
    assert resolved["run_id"] == bundle["run_id"]


def test_build_options_and_job_block(tmp_path):
    job = kaggle_job(tmp_path, kaggle={"machine_shape": "TpuV6E8", "session_hours": 12, "wheels_dataset": "bob/wheels"})
    res, out = build(tmp_path, "--internet", "--margin-minutes", "30", "--resume-from", "alice/yolo-orch-tiny",
                     "--run-id", "r1", job=job)
    assert res.returncode == 0, res.stderr
    meta = json.loads((out / "kernel-metadata.json").read_text())
    assert meta["machine_shape"] == "TpuV6E8" and meta["enable_internet"] is True
    assert meta["id"] == "alice/yolo-orch-tiny-s2"  # the next session is its own kernel
    assert meta["kernel_sources"] == ["alice/yolo-orch-tiny"]
    assert meta["dataset_sources"] == ["bob/wheels"]
    bundle = bundle_of(out)
    assert bundle["session"] == 2 and bundle["resume_from"] == "alice/yolo-orch-tiny" and bundle["run_id"] == "r1"
    assert bundle["resolved"]["kaggle"]["kernel"] == bundle["kernel"] == "alice/yolo-orch-tiny-s2"
    assert bundle["kaggle"]["session_hours"] == 12 and bundle["kaggle"]["margin_minutes"] == 30


def test_xla_settings_come_from_the_jobs_xla_section(tmp_path):
    """One XLA path: the kernel trains with the precision and box limit the plan shows for the
    target (the job's `xla:` section, bf16 on a TPU when unset), and the flags override them."""
    res, out = build(tmp_path)
    assert res.returncode == 0, res.stderr
    bundle = bundle_of(out)
    assert bundle["bf16"] is True and bundle["max_boxes"] == 32
    assert bundle["resolved"]["plan"]["scaling"]["effective"]["precision"] == "bf16"
    res, out = build(tmp_path, "--no-bf16", "--max-boxes", "64")
    assert res.returncode == 0, res.stderr
    bundle = bundle_of(out)
    assert bundle["bf16"] is False and bundle["max_boxes"] == 64
    assert bundle["resolved"]["plan"]["scaling"]["effective"]["precision"] == "fp32"
    assert bundle["resolved"]["job"]["xla"] == {"max_boxes": 64, "bf16": False}
    res, out = build(tmp_path, job=kaggle_job(tmp_path, kaggle={"bf16": True}))
    assert res.returncode == 2 and "moved to the job's `xla:` section" in res.stderr and "Traceback" not in res.stderr
    res, out = build(tmp_path, "--max-boxes", "0")
    assert res.returncode == 2 and "xla.max_boxes" in res.stderr


def test_build_data_yaml_needs_a_kaggle_dataset(tmp_path):
    from orchestrator.data.synth import generate_dataset

    data_yaml = generate_dataset(tmp_path / "ds", images=16, val_images=2, classes=2, imgsz=32, seed=0)
    job = kaggle_job(tmp_path, data=str(data_yaml))
    res, out = build(tmp_path, job=job)
    assert res.returncode == 2
    assert "kaggle.dataset" in res.stderr and "--data-dataset" in res.stderr
    res, out = build(tmp_path, "--data-dataset", "alice/shapes", job=job)
    assert res.returncode == 0, res.stderr
    meta = json.loads((out / "kernel-metadata.json").read_text())
    assert meta["dataset_sources"] == ["alice/yolo-orch-wheels", "alice/shapes"]
    data = bundle_of(out)["data"]
    assert data["kind"] == "yaml" and data["dataset"] == "alice/shapes"
    assert "path" not in data["config"]
    assert not Path(data["config"]["train"]).is_absolute()  # relocatable under /kaggle/input


def test_build_rejects_bad_input_with_one_line_each(tmp_path):
    res, _ = build(tmp_path, "--devices", "0,1")
    assert res.returncode == 2 and "--devices" in res.stderr
    res, _ = build(tmp_path, "--devices", "tpu:16")
    assert res.returncode == 2 and "8 TPU cores" in res.stderr
    res, _ = build(tmp_path, "--resume-from", "not a ref")
    assert res.returncode == 2 and "--resume-from" in res.stderr
    res, _ = build(tmp_path, "--session-hours", "0")
    assert res.returncode == 2 and "kaggle.session_hours" in res.stderr
    job = kaggle_job(tmp_path, model="yolo11n.yaml", target={"devices": "cpu", "batch": 16})
    res, out = build(tmp_path, job=job)  # a CPU target becomes the TPU's 8 cores, with a warning
    assert res.returncode == 0, res.stderr
    assert "using tpu:8" in res.stderr and json.loads(res.stdout)["devices"] == "tpu:8"


def test_owner_from_kaggle_json_never_prints_the_key(tmp_path):
    config = tmp_path / "cfg"
    config.mkdir()
    (config / "kaggle.json").write_text(json.dumps({"username": "carol", "key": FAKE_KEY}))
    job = kaggle_job(tmp_path)
    res = run_cli("kaggle", "build", job, "--out", tmp_path / "k", cwd=tmp_path,
                  env={"KAGGLE_CONFIG_DIR": str(config), "KAGGLE_USERNAME": ""})
    assert res.returncode == 0, res.stderr
    assert "carol/yolo-orch-tiny" in res.stdout
    assert FAKE_KEY not in res.stdout + res.stderr
    res = run_cli("kaggle", "build", job, "--out", tmp_path / "k2", cwd=tmp_path,
                  env={"KAGGLE_CONFIG_DIR": str(tmp_path / "none"), "KAGGLE_USERNAME": ""})
    assert res.returncode == 2 and res.stderr.strip().startswith("--owner")


def test_secrets_never_enter_the_bundle(tmp_path):
    wandb_key = "wandb-secret-" + "7" * 28
    env = {"WANDB_API_KEY": wandb_key, "KAGGLE_KEY": FAKE_KEY, "KAGGLE_USERNAME": "alice",
           "KAGGLE_API_TOKEN": "KGAT_fake_token_abcdef123456"}
    job = kaggle_job(tmp_path, wandb={"mode": "online", "project": "p"})
    res, out = build(tmp_path, "--internet", env=env, job=job)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["wandb_mode"] == "online"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 3
    for path in files:
        data = path.read_bytes()
        for secret in env.values():
            if len(secret) > 8:
                assert secret.encode() not in data, f"{secret[:6]}... leaked into {path.name}"
    for secret in (wandb_key, FAKE_KEY):
        assert secret not in res.stdout + res.stderr
    runner = (out / "run_kaggle.py").read_text()
    assert 'get_secret("WANDB_API_KEY")' in runner  # read at run time inside Kaggle instead


def test_online_wandb_without_internet_falls_back_offline(tmp_path):
    job = kaggle_job(tmp_path, wandb={"mode": "online"})
    res, out = build(tmp_path, job=job)
    assert res.returncode == 0
    assert json.loads(res.stdout)["wandb_mode"] == "offline"
    assert "needs internet" in res.stderr


def test_build_imports_no_torch(tmp_path):
    job = kaggle_job(tmp_path)
    probe = (
        "import sys\nfrom typer.testing import CliRunner\nfrom orchestrator.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['kaggle', 'build', {str(job)!r}, '--owner', 'alice', '--out', "
        f"{str(tmp_path / 'k')!r}, '--json'])\nassert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ultralytics', 'torch_xla')))\n"
    )
    res = subprocess.run([sys.executable, "-c", probe], env=cli_env(), capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("[]")


@pytest.mark.parametrize("flag", ["--help"])
def test_kaggle_help_lists_the_commands(flag):
    res = run_cli("kaggle", flag)
    assert res.returncode == 0
    for name in ("build", "wheels", "push", "status", "pull", "quota"):
        assert name in res.stdout
