"""XLA backend end to end on XLA:CPU (single process): compile-once, outputs, validation, resume.

Run: PJRT_DEVICE=CPU python -m pytest tests/test_xla_*.py -q -x

All trainings here use the same tiny model, imgsz, batch and max_boxes, so within this pytest
process the step graph is compiled once (by the first training) and later trainings reuse it
from torch_xla's in-process cache; each compilation costs about a minute on these 2 cores.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("YOLO_OFFLINE", "1")

from orchestrator.xla.trainer import configure_xla_env, main, train_xla, xla_available  # noqa: E402

configure_xla_env()  # before anything initializes torch_xla in this process
XLA_OK, XLA_WHY = xla_available()

pytestmark = [pytest.mark.xla, pytest.mark.slow, pytest.mark.skipif(not XLA_OK, reason=XLA_WHY)]

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "orchestrator" / "xla" / "tiny-det.yaml"
IMGSZ, BATCH, MAX_BOXES = 32, 2, 16
METRIC_KEYS = ["metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)"]


def _args(data_yaml: Path, **over) -> dict:
    a = dict(
        model=str(TINY),
        data=str(data_yaml),
        epochs=1,
        imgsz=IMGSZ,
        batch=BATCH,
        nbs=BATCH,  # accumulate = 1: every step is an optimizer step (one graph)
        optimizer="SGD",
        lr0=0.01,
        lrf=0.01,
        momentum=0.937,
        weight_decay=0.0005,
        warmup_epochs=0,
        warmup_momentum=0.8,
        warmup_bias_lr=0.1,
        cos_lr=False,
        seed=0,
        box=7.5,
        cls=0.5,
        dfl=1.5,
        workers=0,
        plots=False,
        close_mosaic=0,
        val=True,
    )
    a.update(over)
    return a


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory) -> Path:
    from orchestrator.data.synth import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("xla_ds") / "ds", images=16, val_images=8, classes=3, imgsz=64)


@pytest.fixture(scope="module")
def run_a(tmp_path_factory, data_yaml):
    """Asked for 3 epochs; a callback stops it after the first (8 steps of 2 images)."""
    run_dir = tmp_path_factory.mktemp("xla_run_a") / "run"
    seen = {"fit": [], "trainer": None}

    def on_fit_epoch_end(tr):
        seen["fit"].append({"epoch": tr.epoch, "metrics": dict(tr.metrics), "fitness": tr.fitness})
        if tr.epoch == 0:
            tr.stop = True

    def on_train_end(tr):
        seen["trainer"] = tr

    result = train_xla(
        _args(data_yaml, epochs=3),
        run_dir,
        max_boxes=MAX_BOXES,
        callbacks={"on_fit_epoch_end": [on_fit_epoch_end], "on_train_end": [on_train_end]},
    )
    return run_dir, result, seen


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(f)]


def _validate_direct(weights: Path, data_yaml: Path) -> dict:
    """Ultralytics' own validator on a saved checkpoint (the reference)."""
    from ultralytics.models.yolo.detect import DetectionValidator

    v = DetectionValidator(
        save_dir=weights.parent.parent / "val_direct",
        args=dict(model=str(weights), data=str(data_yaml), imgsz=IMGSZ, batch=2 * BATCH, device="cpu", plots=False,
                  rect=True, split="val", verbose=False)
    )
    return v(model=str(weights))


# ------------------------------------------------------------------------ compile-once


def test_compile_once_over_steps_with_different_box_counts(run_a):
    import torch_xla.debug.metrics as met

    _, r, _ = run_a
    steps = r["xla/train_steps"]
    per_step = r["xla/compiles_per_step"]
    boxes = r["xla/batch_boxes"][:steps]
    print(
        f"\nXLA:CPU compile-once: steps={steps} boxes/step={boxes} cumulative compiles/step={per_step} "
        f"compile_steps={r['xla/compile_steps']} compile_count(total, incl. setup)={r['xla/compile_count']} "
        f"compile_time={r['xla/compile_time_s']}s steady_step={r['xla/steady_step_time_s']}s "
        f"step_times={r['xla/step_times_s']}"
    )
    assert steps >= 6
    assert len(set(boxes)) >= 3, boxes  # the batches really have different box counts
    assert r["xla/compile_steps"] == [0]  # only the first step compiled (first XLA work in this process)
    assert all(c == per_step[0] for c in per_step), per_step  # no growth after step 0
    assert r["xla/fallback_ops"] == {}  # no .item() / nonzero / unique fell back to the host
    assert r["xla/steady_steps"] == steps - 1 and r["xla/steady_step_time_s"] > 0
    assert met.metric_data("CompileTime")[0] >= r["xla/compile_count"]


# ------------------------------------------------------------------------ outputs


def test_outputs_in_ultralytics_format(run_a, data_yaml):
    run_dir, r, seen = run_a
    wdir = run_dir / "weights"
    assert (wdir / "best.pt").is_file() and (wdir / "last.pt").is_file()
    assert json.loads((run_dir / "xla_result.json").read_text())["fitness"] == r["fitness"]

    rows = _csv_rows(run_dir / "results.csv")
    assert len(rows) == 1 and rows[0]["epoch"] == "1"
    for col in ["train/box_loss", "train/cls_loss", "train/dfl_loss", *METRIC_KEYS, "val/box_loss",
                "val/cls_loss", "val/dfl_loss", "lr/pg0", "lr/pg1", "lr/pg2"]:
        assert col in rows[0], col
    for col in ["train/box_loss", "train/cls_loss", "train/dfl_loss"]:
        assert 0 < float(rows[0][col]) < 100
    # no warmup: every group at lr0 * lf(0) = lr0
    assert [float(rows[0][f"lr/pg{i}"]) for i in range(3)] == [0.01, 0.01, 0.01]

    ck = torch.load(wdir / "last.pt", map_location="cpu", weights_only=False)
    for key in ["epoch", "best_fitness", "model", "ema", "updates", "optimizer", "scaler", "train_args",
                "train_metrics", "train_results", "date", "version", "stopper", "git", "license", "docs"]:
        assert key in ck, key
    # stripped at the end, as Ultralytics' final_eval does
    assert ck["ema"] is None and ck["optimizer"] is None
    assert next(ck["model"].parameters()).dtype == torch.float16
    assert next(ck["model"].parameters()).device.type == "cpu"
    assert ck["train_args"]["imgsz"] == IMGSZ and ck["train_args"]["optimizer"] == "SGD"
    assert set(METRIC_KEYS) <= set(ck["train_metrics"])

    from ultralytics import YOLO

    model = YOLO(str(wdir / "best.pt"))
    img = next((data_yaml.parent / "images" / "val").glob("*.png"))
    res = model.predict(str(img), imgsz=IMGSZ, device="cpu", verbose=False)
    assert len(res) == 1 and res[0].boxes is not None


def test_stop_from_on_fit_epoch_end_ends_training_cleanly(run_a):
    _, r, seen = run_a
    assert r["epochs_completed"] == 1
    # epoch 0 from training, then the final validation of best.pt reported at epoch 1 (Ultralytics)
    assert [f["epoch"] for f in seen["fit"]] == [0, 1]
    assert set(METRIC_KEYS) <= set(seen["fit"][0]["metrics"]) and seen["fit"][0]["fitness"] is not None
    assert seen["trainer"] is not None and seen["trainer"].stop


# ------------------------------------------------------------------------ validation


def test_final_metrics_equal_validator_on_best_pt(run_a, data_yaml):
    run_dir, r, _ = run_a
    ref = _validate_direct(run_dir / "weights" / "best.pt", data_yaml)
    for k in METRIC_KEYS:
        assert r[k] == pytest.approx(ref[k], abs=1e-9), k
    assert r["fitness"] == pytest.approx(ref["fitness"], abs=1e-9)
    # the epoch metrics written to results.csv come from the same validator on the EMA
    row = _csv_rows(run_dir / "results.csv")[0]
    ref_last = _validate_direct(run_dir / "weights" / "last.pt", data_yaml)
    for k in METRIC_KEYS:
        assert float(row[k]) == pytest.approx(ref_last[k], abs=1e-4), k


def _confident_copy(model: torch.nn.Module) -> torch.nn.Module:
    """Make an untrained detector output confident, mid-sized boxes everywhere (mAP > 0)."""
    head = model.model[-1]
    with torch.no_grad():
        for box, cls in zip(head.cv2, head.cv3):
            box[-1].weight.mul_(0.0)
            b = torch.full((4, head.reg_max), -4.0)
            b[:, 1] = 4.0  # ltrb = 1 stride: boxes 2 strides wide (16/32/64 px)
            box[-1].bias.copy_(b.view(-1))
            cls[-1].bias.fill_(2.0)
    return model


def test_in_training_validation_matches_validator(run_a, data_yaml, tmp_path):
    """The epoch-end path (host EMA copy, validator in training mode) vs the validator on a file,
    on a model that really detects something, so the comparison is not 0 == 0."""
    run_dir, _, seen = run_a
    tr = seen["trainer"]
    ck = torch.load(run_dir / "weights" / "best.pt", map_location="cpu", weights_only=False)
    model = _confident_copy(ck["model"].float())
    ck["model"] = model.half()  # fp16 in the file, and the same fp16-exact weights in memory
    path = tmp_path / "confident.pt"
    torch.save(ck, path)

    tr.cpu_ema.load_state_dict(model.float().state_dict())
    ours, fitness = tr.validate()
    ref = _validate_direct(path, data_yaml)
    print(f"\nin-training validation {ours} fitness={fitness}\nvalidator on file       {ref}")
    assert ref["metrics/mAP50(B)"] > 0 and ref["metrics/recall(B)"] > 0
    for k in METRIC_KEYS:
        assert ours[k] == pytest.approx(ref[k], rel=1e-3, abs=1e-4), k
    assert fitness == pytest.approx(ref["fitness"], rel=1e-3, abs=1e-4)
    assert {"val/box_loss", "val/cls_loss", "val/dfl_loss"} <= set(ours)  # as Ultralytics in training


# ------------------------------------------------------------------------ resume


class _Interrupted(RuntimeError):
    pass


def test_resume_continues_at_next_epoch_with_optimizer_state(tmp_path, data_yaml):
    run_dir = tmp_path / "run_b"
    args = _args(data_yaml, epochs=2, warmup_epochs=1, close_mosaic=1)

    def crash_after_first_epoch(tr):
        if tr.epoch == 0:
            raise _Interrupted("simulated preemption after epoch 1 was saved")

    with pytest.raises(_Interrupted):
        train_xla(args, run_dir, max_boxes=MAX_BOXES, callbacks={"on_fit_epoch_end": [crash_after_first_epoch]})
    last = run_dir / "weights" / "last.pt"
    saved = torch.load(last, map_location="cpu", weights_only=False)
    assert saved["epoch"] == 0 and saved["optimizer"] is not None and saved["ema"] is not None
    first_rows = _csv_rows(run_dir / "results.csv")
    assert [r["epoch"] for r in first_rows] == ["1"]
    # warmup (Ultralytics np.interp): after 8 of 8 warmup steps... epoch 1 ends at ni=7 of nw=8
    lr_bias = float(first_rows[0]["lr/pg2"])
    assert 0.01 < lr_bias < 0.1  # bias lr falling from warmup_bias_lr 0.1 towards lr0

    state = {}

    def on_train_start(tr):
        opt = tr.optimizer
        p = opt.param_groups[0]["params"][0]
        state.update(
            start_epoch=tr.start_epoch,
            updates=tr.ema.updates,
            momentum=opt.state[p]["momentum_buffer"].detach().cpu().clone(),
            lrs=[g["lr"] for g in opt.param_groups],
        )

    epochs = []
    result = train_xla(
        {"data": str(data_yaml), "workers": 0},  # the rest comes from the checkpoint, as Ultralytics
        run_dir,
        max_boxes=MAX_BOXES,
        resume=True,
        callbacks={"on_train_start": [on_train_start], "on_train_epoch_start": [lambda tr: epochs.append(tr.epoch)]},
    )
    saved_mom = saved["optimizer"]["state"][0]["momentum_buffer"].float()
    assert state["start_epoch"] == 1 and epochs == [1]
    assert state["updates"] == saved["updates"] == 8
    assert saved_mom.abs().sum() > 0
    torch.testing.assert_close(state["momentum"], saved_mom, rtol=1e-3, atol=1e-4)  # fp16 in the file
    rows = _csv_rows(run_dir / "results.csv")
    assert [r["epoch"] for r in rows] == ["1", "2"]
    assert float(rows[1]["lr/pg0"]) == pytest.approx(0.01 * 0.505)  # lf(1) for 2 epochs, lrf 0.01
    assert result["epochs_completed"] == 2
    print(f"\nresumed run: compile_steps={result['xla/compile_steps']} steady_step={result['xla/steady_step_time_s']}s")
    assert result["xla/compile_steps"] in ([], [0])
    final = torch.load(last, map_location="cpu", weights_only=False)
    assert final["optimizer"] is None and final["epoch"] == -1  # finished runs are stripped


# ------------------------------------------------------------------------ CLI


def test_cli_in_process(tmp_path, data_yaml, capsys):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps(_args(data_yaml, epochs=1)))
    run_dir = tmp_path / "cli_run"
    rc = main(["--args-json", str(args_file), "--run-dir", str(run_dir), "--max-boxes", str(MAX_BOXES)])
    assert rc == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("{")]
    out = json.loads(lines[-1])
    assert set(METRIC_KEYS) <= set(out) and "fitness" in out
    assert (run_dir / "weights" / "best.pt").is_file() and (run_dir / "results.csv").is_file()


def test_cli_help_subprocess():
    p = subprocess.run(
        [sys.executable, "-m", "orchestrator.xla.trainer", "--help"], capture_output=True, text=True, cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 0
    for flag in ("--args-json", "--run-dir", "--max-boxes", "--bf16", "--resume", "--world-size"):
        assert flag in p.stdout
