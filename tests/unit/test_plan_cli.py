"""`yolo-orch plan --json`: one object per --devices target with exactly the documented keys."""

from __future__ import annotations

import json

from conftest import REPO, run_cli, write_job

from orchestrator.scaling import evidence


def test_plan_json_contract():
    result = run_cli("plan", REPO / "examples" / "quickstart.yaml", "--devices", "cpu", "--devices", "4",
                     "--devices", "tpu:8", "--json")
    assert result.returncode == 0, result.stderr
    plans = json.loads(result.stdout)
    assert [p["devices"] for p in plans] == ["cpu", "4", "tpu:8"]
    for p in plans:
        assert set(p) == {"devices", "policy", "passed", "effective", "reasons", "warnings", "details", "ultralytics"}
        assert {"batch_per_device", "accumulate", "images_per_step", "weight_decay", "lr0"} <= set(p["effective"])
        assert p["passed"]["optimizer"] != "auto"
    assert plans[2]["effective"]["world_size"] == 8


def test_plan_table_and_policy(tmp_path):
    result = run_cli("plan", REPO / "examples" / "quickstart.yaml", "-d", "cpu", "-d", "8", "--policy", "table")
    assert result.returncode == 0, result.stderr
    assert "passed" in result.stdout and "effective" in result.stdout and "why (8, table):" in result.stdout
    bad = run_cli("plan", REPO / "examples" / "quickstart.yaml", "--policy", "cubic")
    assert bad.returncode == 2 and "--policy: unknown policy 'cubic'" in bad.stderr


def test_xla_precision_follows_the_job(tmp_path):
    """`effective.precision` is what the XLA worker will use: bf16 on a TPU unless xla.bf16 is false,
    fp32 on XLA:CPU unless it is true."""
    job = write_job(tmp_path, data={"synth": {"images": 256, "imgsz": 64}})

    def precision(*args: str) -> str:
        r = run_cli("plan", job, "--json", *args, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)[0]["effective"]["precision"]

    assert precision("-d", "tpu:8") == "bf16"
    assert precision("-d", "tpu:8", "--set", "xla.bf16=false") == "fp32"
    assert precision("-d", "xla:cpu") == "fp32"
    assert precision("-d", "xla:cpu", "--set", "xla.bf16=true") == "bf16"


def test_a_job_that_starts_from_weights_is_planned_as_fine_tuning(tmp_path):
    """Weights given (a .pt model, or `pretrained` naming a file) make it fine-tuning: the plan quotes the
    fine-tuning measurements; a yaml model, or a .pt with pretrained false, trains from scratch."""
    import torch

    torch.save({"model": None}, tmp_path / "w.pt")  # a checkpoint's shape; the plan does not load it
    base = {"data": {"synth": {"images": 1024, "imgsz": 64}}, "epochs": 10,
            "hyp": {"optimizer": "SGD", "lr0": 0.01}, "reference": {"batch": 8, "nbs": 8}}

    def lr0_reason(**changes) -> str:
        job = write_job(tmp_path, **base, **changes)
        r = run_cli("plan", job, "--json", "--set", "target.batch=64", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        return next(x for x in json.loads(r.stdout)[0]["reasons"] if x.startswith("lr0"))

    tune = next(d for d in evidence.load()["decisions"]
                if (d["task"], d["start"], d["family"], d["k"]) == ("detect", "pretrained", "SGD", 8))
    assert f"auto takes {tune['rule']}" in lr0_reason(model="w.pt")  # fine-tuning's row, not from scratch's
    assert ") (fine-tuning at k = 8, " in lr0_reason(model="w.pt")
    assert "(fine-tuning at k = 8" in lr0_reason(overrides={"pretrained": "w.pt"})
    assert "from scratch" in lr0_reason(model="w.pt", overrides={"pretrained": False})
    assert "from scratch" in lr0_reason()


def test_verify_plan_says_what_one_cpu_process_cannot_verify(tmp_path):
    """doctor --verify-plan trains one CPU process: for a cpu:2 job it says the torchrun launch is not run;
    it probes the job's own detect model yaml, and a classify job's model is named as not probed."""
    from orchestrator.doctor.checks import PASS, WARN
    from orchestrator.doctor.verify_plan import probe_model, scope_check
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    two = make_plan(load_job(write_job(tmp_path, target={"devices": "cpu:2"}, model="yolo11s.yaml")))
    assert probe_model(two) == "yolo11s.yaml"
    check = scope_check(two, probe_model(two))
    assert check.status == WARN and "not verified: the torchrun launch on cpu:2 (2 devices)" in check.detail
    one = make_plan(load_job(write_job(tmp_path, model="yolo11s.yaml")))
    assert scope_check(one, probe_model(one)).status == PASS
    cls = make_plan(load_job(write_job(tmp_path, model="yolo11n-cls.yaml", data={"synth": {
        "images": 16, "val_images": 8, "classes": 2, "imgsz": 64}})))
    assert probe_model(cls) == "yolo11n.yaml"
    assert "the job's model yolo11n-cls.yaml" in scope_check(cls, "yolo11n.yaml").detail


def test_the_plan_for_one_target_fits_a_screen_and_explain_adds_the_mechanisms(tmp_path):
    """SGD from scratch, reference batch 8, target 64 on one GPU: each changed value one line of reasons,
    the whole plan within 60 lines at 100 columns; --explain adds the mechanisms and every effective value."""
    job = write_job(tmp_path, data={"synth": {"images": 2048, "imgsz": 64}}, epochs=30,
                    hyp={"optimizer": "SGD", "lr0": 0.01}, reference={"batch": 8, "nbs": 8})
    env = {"COLUMNS": "100"}
    brief = run_cli("plan", job, "-d", "0", "--set", "target.batch=64", cwd=tmp_path, env=env)
    assert brief.returncode == 0, brief.stderr
    lines = brief.stdout.splitlines()
    assert len(lines) <= 60 and max(len(line) for line in lines) <= 100
    assert "why (0, auto):" in brief.stdout and "lr0 0.01 kept: auto takes linear" in brief.stdout
    assert "summed loss grows" not in brief.stdout and "(--explain:" in brief.stdout
    full = run_cli("plan", job, "-d", "0", "--set", "target.batch=64", "--explain", cwd=tmp_path, env=env)
    assert "summed loss grows the SGD gradient" in full.stdout and "warmup_iterations" in full.stdout


def test_several_targets_say_what_they_share_once():
    """Issue 60: four targets that keep every value say so once, with the reason (the images per optimizer step
    are the reference's); a warning's explanation given for one target is not repeated for the next."""
    r = run_cli("plan", REPO / "examples" / "quickstart.yaml", "-d", "cpu", "-d", "4", "-d", "8", "-d", "tpu:8",
                env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("nothing changed") == 1
    assert "nothing changed on any target: the total batch 16 makes 16 images per optimizer step, as the reference" \
        in out
    assert out.count("BatchNorm statistics are per device") == 1
    assert "per-device batch 16 -> 2 (the note for 4 above)" in out
    assert "why (cpu, auto)" not in out  # nothing of its own to say


def test_plan_prints_the_data_warnings_and_the_share_of_valid_depth_pixels(tmp_path):
    """Issue 60: a missing depth map and maps that are mostly negative, NaN or inf are said by `plan` (they were
    kept in job.resolved.yaml only); they still train (Ultralytics ignores those pixels), so exit 0."""
    import numpy as np

    data = tmp_path / "depth"
    made = run_cli("data", "synth", "--out", data, "--task", "depth", "--images", "8", "--val-images", "8",
                   cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    maps = sorted((data / "depth" / "train").glob("*.png"))
    maps[0].unlink()  # one train image without its depth map
    for png in maps[1:]:
        metres = np.full((128, 128), -1.0, dtype=np.float32)  # mostly negative: a wrong sign
        metres[:4, :] = 2.0  # 512 pixels with a depth
        metres[4:8, :] = np.nan
        metres[8, :] = np.inf
        np.save(png.with_suffix(".npy"), metres)
        png.unlink()
    job = write_job(tmp_path, model="yolo26n-depth.yaml", data=str(data / "data.yaml"), imgsz=128)
    r = run_cli("plan", job, cwd=tmp_path, env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    assert "the job:" in r.stdout
    assert "! data: 1 of 8 train images have no depth map: Ultralytics skips them" in r.stdout
    assert ("! data: only 3.1 % of the pixels of the checked train depth maps have a depth between 1 mm and max_depth "
            "100 m (93.0 % negative, 3.9 % NaN or inf") in r.stdout, r.stdout
    as_json = json.loads(run_cli("plan", job, "--json", cwd=tmp_path).stdout)[0]
    assert any("only 3.1 %" in w for w in as_json["warnings"])


def test_perspective_takes_what_ultralytics_takes_and_says_what_its_docs_advise():
    """Issue 60: hyp.perspective was capped at 0.001; Ultralytics trains any fraction up to 1."""
    job = REPO / "examples" / "quickstart.yaml"
    r = run_cli("plan", job, "--set", "hyp.perspective=0.3", env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    assert "! hyp.perspective 0.3 is above the 0 to 0.001 Ultralytics' documentation advises" in r.stdout
    assert "hyp.perspective" not in run_cli("plan", job, env={"COLUMNS": "400"}).stdout
    bad = run_cli("plan", job, "--set", "hyp.perspective=1.5")
    assert bad.returncode == 2 and "hyp.perspective: must be less than or equal to 1" in bad.stderr, bad.stderr


def test_the_readme_job_names_every_task_the_model_may_have():
    """Issue 60: the README's job comment listed the tasks without semantic and depth."""
    import re

    from orchestrator.tasks import TASKS

    readme = (REPO / "README.md").read_text()
    listed = re.search(r"the task \(([^)]*)\) is the model's", readme.replace("\n", " ").replace("#", " "))
    assert listed, "the README's job file no longer says where the task comes from"
    named = {word.strip(" ,") for word in listed.group(1).split()}
    assert set(TASKS) <= named, set(TASKS) - named
