"""XLA backend end to end on XLA:CPU (single process): compile-once, outputs, validation, resume,
CLI, bf16.

Run: PJRT_DEVICE=CPU python -m pytest tests/*/test_xla_*.py -q -x

All XLA work runs in ONE child process (this file run as a script, ``--drive DIR``), like the
orchestrator's launcher runs the backend. Two reasons: torch_xla must be initialized before the
first autograd backward of a process (the engine sizes its per-device queues once; a CPU
backward from an earlier test would make every XLA backward fail an internal assert), and all
trainings here share one step graph (same tiny model, imgsz, batch, max_boxes), which torch_xla
compiles once per process and then reuses (about a minute per compilation on these 2 cores).
The child writes ``report.json`` plus checkpoints; the tests below check them, running
Ultralytics' validator / predictor on the CPU in the pytest process.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("YOLO_OFFLINE", "1")

from orchestrator.worker.xla.run import xla_available  # noqa: E402

XLA_OK, XLA_WHY = xla_available()

TINY = ROOT / "tests" / "assets" / "tiny-det.yaml"
IMGSZ, BATCH, MAX_BOXES = 32, 2, 16
METRIC_KEYS = ["metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)"]
DRIVER_TIMEOUT_S = 900


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


class _Interrupted(RuntimeError):
    pass


# ================================================================================ driver (child)


def _drive(out: Path) -> None:
    """All XLA trainings, in this (fresh) process; writes out/report.json."""
    from orchestrator.worker.xla.run import configure_xla_env, train_xla

    configure_xla_env()
    import torch_xla
    import torch_xla.debug.metrics as met

    torch_xla.device()  # runtime up before any autograd backward in this process
    from orchestrator.data.synth import generate_dataset

    data_yaml = generate_dataset(out / "ds", images=16, val_images=8, classes=3, imgsz=64)
    report: dict = {"data_yaml": str(data_yaml), "timings_s": {}}

    def timed(name, fn):
        t = time.perf_counter()
        try:
            return fn()
        finally:
            report["timings_s"][name] = round(time.perf_counter() - t, 1)

    # --- A: asked for 3 epochs, a callback stops it after the first (8 steps of 2 images)
    fit, holder = [], {}

    def on_fit_epoch_end(tr):
        fit.append({"epoch": tr.epoch, "metrics": dict(tr.metrics), "fitness": tr.fitness})
        if tr.epoch == 0:
            tr.stop = True

    result_a = timed(
        "run_a",
        lambda: train_xla(
            _args(data_yaml, epochs=3),
            out / "run_a",
            max_boxes=MAX_BOXES,
            callbacks={"on_fit_epoch_end": [on_fit_epoch_end], "on_train_end": [lambda tr: holder.update(tr=tr)]},
        ),
    )
    tr = holder["tr"]
    report["a"] = {"result": result_a, "fit": fit, "stopped": bool(tr.stop)}

    # --- the epoch-end validation path (host EMA copy, validator in training mode) on a model
    # that detects something; the test compares it with the validator on the same weights' file
    ck = torch.load(out / "run_a" / "weights" / "best.pt", map_location="cpu", weights_only=False)
    model = _confident_copy(ck["model"].float())
    ck["model"] = model.half()  # fp16 in the file and the same fp16-exact weights in memory
    torch.save(ck, out / "confident.pt")
    tr.cpu_ema.load_state_dict(model.float().state_dict())
    ours, fitness = tr.validate()
    report["confident"] = {"metrics": ours, "fitness": fitness}

    # --- B: interrupted after epoch 1 (warmup epoch), then resumed
    run_b = out / "run_b"

    def crash_after_first_epoch(tr):
        if tr.epoch == 0:
            report["b_first_steps"] = tr.step_log.summary()  # warmup epoch: its graphs
            raise _Interrupted("simulated preemption after epoch 1 was saved")

    try:
        timed(
            "run_b_interrupted",
            lambda: train_xla(
                _args(data_yaml, epochs=2, warmup_epochs=1, close_mosaic=1),
                run_b,
                max_boxes=MAX_BOXES,
                callbacks={"on_fit_epoch_end": [crash_after_first_epoch]},
            ),
        )
        report["b_interrupted"] = False
    except _Interrupted:
        report["b_interrupted"] = True
    (out / "last_interrupted.pt").write_bytes((run_b / "weights" / "last.pt").read_bytes())

    state, epochs = {}, []

    def on_train_start(tr):
        opt = tr.optimizer
        p = opt.param_groups[0]["params"][0]
        state.update(
            start_epoch=tr.start_epoch,
            updates=tr.ema.updates,
            lrs=[g["lr"] for g in opt.param_groups],
        )
        torch.save(opt.state[p]["momentum_buffer"].detach().cpu(), out / "resumed_momentum.pt")

    result_b = timed(
        "run_b_resume",
        lambda: train_xla(
            {"data": str(data_yaml), "workers": 0},  # the rest comes from the checkpoint, as Ultralytics
            run_b,
            max_boxes=MAX_BOXES,
            resume=True,
            callbacks={
                "on_train_start": [on_train_start],
                "on_train_epoch_start": [lambda tr: epochs.append(tr.epoch)],
            },
        ),
    )
    report["b"] = {"result": result_b, "state": state, "epochs": epochs}

    # --- the same graph again, in another run directory: no compilation
    again = timed("again", lambda: train_xla(_args(data_yaml, epochs=1), out / "again", max_boxes=MAX_BOXES))
    report["again"] = {"result": json.loads(json.dumps(again, default=str))}

    # --- accumulation: nbs 5 / batch 2 -> accumulate round(2.5) = 2, weight decay 5e-4*2*2/5
    acc = {}

    def on_train_start_acc(tr):
        acc.update(accumulate=tr.accumulate, wd=[g["weight_decay"] for g in tr.optimizer.param_groups])

    result_acc = timed(
        "accumulate",
        lambda: train_xla(
            _args(data_yaml, nbs=5),
            out / "acc",
            max_boxes=MAX_BOXES,
            callbacks={
                "on_train_start": [on_train_start_acc],
                "on_train_end": [lambda tr: acc.update(updates=tr.ema.updates)],
            },
        ),
    )
    report["acc"] = {"result": result_acc, **acc}

    # --- bf16 (a new graph), with shape-changing options that the backend must switch off
    report["bf16"] = {
        "result": timed(
            "bf16",
            lambda: train_xla(
                _args(data_yaml, multi_scale=0.5, rect=True), out / "bf16", max_boxes=MAX_BOXES, bf16=True
            ),
        )
    }
    report["compile_count_total"] = int(met.metric_data("CompileTime")[0])
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))


# ================================================================================ tests (parent)

# one test process runs the module, so `drive` (about 150 s on a Zen 3) is made once (tests/unit/test_xdist_groups.py)
pytestmark = [pytest.mark.xla, pytest.mark.slow, pytest.mark.skipif(not XLA_OK, reason=XLA_WHY),
              pytest.mark.xdist_group("xla_train")]


@pytest.fixture(scope="module")
def drive(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("xla_drive")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.setdefault("PJRT_DEVICE", "CPU")
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--drive", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
    )
    (out / "driver.log").write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
    if p.returncode != 0 or not (out / "report.json").exists():
        pytest.fail(f"XLA driver failed (rc={p.returncode}); log {out / 'driver.log'}:\n{p.stderr[-4000:]}")
    report = json.loads((out / "report.json").read_text())
    report["driver_wall_s"] = round(time.perf_counter() - t, 1)
    print(f"\nXLA driver: {report['driver_wall_s']}s, phases {report['timings_s']}, "
          f"compilations in the process: {report['compile_count_total']}")
    return out, report


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(f)]


def _validate_direct(weights: Path, data_yaml: str) -> dict:
    """Ultralytics' own validator on a saved checkpoint (the reference)."""
    from ultralytics.models.yolo.detect import DetectionValidator

    v = DetectionValidator(
        save_dir=weights.parent / f"val_direct_{weights.stem}",
        args=dict(model=str(weights), data=data_yaml, imgsz=IMGSZ, batch=2 * BATCH, device="cpu", plots=False,
                  rect=True, split="val", verbose=False),
    )
    return v(model=str(weights))


def test_compile_once_over_steps_with_different_box_counts(drive):
    _, rep = drive
    r = rep["a"]["result"]
    steps = r["xla/train_steps"]
    per_step = r["xla/compiles_per_step"]
    boxes = r["xla/batch_boxes"][:steps]
    print(
        f"\nXLA:CPU compile-once: steps={steps} boxes/step={boxes} cumulative compiles/step={per_step} "
        f"compile_steps={r['xla/compile_steps']} compile_count(process, incl. setup)={r['xla/compile_count']} "
        f"compile_time={r['xla/compile_time_s']}s steady_step={r['xla/steady_step_time_s']}s "
        f"step_times={r['xla/step_times_s']}"
    )
    assert steps >= 6
    assert len(set(boxes)) >= 3, boxes  # the batches really have different box counts
    assert r["xla/compile_steps"] == [0]  # only the first step compiled (first training in the process)
    assert all(c == per_step[0] for c in per_step), per_step  # no growth after step 0
    assert r["xla/fallback_ops"] == {}  # no .item() / nonzero / unique fell back to the host
    assert r["xla/steady_steps"] == steps - 1 and r["xla/steady_step_time_s"] > 0


def test_outputs_in_ultralytics_format(drive):
    out, rep = drive
    run_dir, r = out / "run_a", rep["a"]["result"]
    wdir = run_dir / "weights"
    assert (wdir / "best.pt").is_file() and (wdir / "last.pt").is_file()
    assert json.loads((run_dir / "xla_result.json").read_text())["fitness"] == r["fitness"]

    rows = _csv_rows(run_dir / "results.csv")
    assert len(rows) == 1 and rows[0]["epoch"] == "1"
    for col in ["train/box_loss", "train/cls_loss", "train/dfl_loss", *METRIC_KEYS, "val/box_loss",
                "val/cls_loss", "val/dfl_loss", "lr/pg0", "lr/pg1", "lr/pg2"]:
        assert col in rows[0], col
    for col in ["train/box_loss", "train/cls_loss", "train/dfl_loss"]:
        assert 0 <= float(rows[0][col]) < 100
    assert float(rows[0]["train/cls_loss"]) > 0
    assert [float(rows[0][f"lr/pg{i}"]) for i in range(3)] == [0.01, 0.01, 0.01]  # no warmup: lr0 * lf(0)

    ck = torch.load(wdir / "last.pt", map_location="cpu", weights_only=False)
    for key in ["epoch", "best_fitness", "model", "ema", "updates", "optimizer", "scaler", "train_args",
                "train_metrics", "train_results", "date", "version", "stopper", "git", "license", "docs"]:
        assert key in ck, key
    assert ck["ema"] is None and ck["optimizer"] is None  # stripped at the end, as final_eval does
    p0 = next(ck["model"].parameters())
    assert p0.dtype == torch.float16 and p0.device.type == "cpu"
    assert ck["train_args"]["imgsz"] == IMGSZ and ck["train_args"]["optimizer"] == "SGD"
    assert set(METRIC_KEYS) <= set(ck["train_metrics"])

    from ultralytics import YOLO

    model = YOLO(str(wdir / "best.pt"))
    img = next((Path(rep["data_yaml"]).parent / "images" / "val").glob("*.png"))
    res = model.predict(str(img), imgsz=IMGSZ, device="cpu", verbose=False)
    assert len(res) == 1 and res[0].boxes is not None


def test_stop_from_on_fit_epoch_end_ends_training_cleanly(drive):
    _, rep = drive
    a = rep["a"]
    assert a["result"]["epochs_completed"] == 1 and a["stopped"]
    # epoch 0 from training, then the final validation of best.pt reported at epoch 1 (as Ultralytics)
    assert [f["epoch"] for f in a["fit"]] == [0, 1]
    assert set(METRIC_KEYS) <= set(a["fit"][0]["metrics"]) and a["fit"][0]["fitness"] is not None


def test_final_metrics_equal_validator_on_best_pt(drive):
    out, rep = drive
    r = rep["a"]["result"]
    ref = _validate_direct(out / "run_a" / "weights" / "best.pt", rep["data_yaml"])
    for k in METRIC_KEYS:
        assert r[k] == pytest.approx(ref[k], abs=1e-9), k
    assert r["fitness"] == pytest.approx(ref["fitness"], abs=1e-9)
    # the epoch metrics in results.csv come from the same validator, run on the EMA at epoch end
    row = _csv_rows(out / "run_a" / "results.csv")[0]
    ref_last = _validate_direct(out / "run_a" / "weights" / "last.pt", rep["data_yaml"])
    for k in METRIC_KEYS:
        assert float(row[k]) == pytest.approx(ref_last[k], abs=1e-4), k


def _ultralytics_training_mode_validation(weights: Path, data_yaml: str) -> dict:
    """Ultralytics' in-training validation (DetectionValidator called with a trainer) on CPU,
    without XLA: the loader from DetectionTrainer.get_dataloader, the model as the 'EMA'."""
    from copy import copy
    from types import SimpleNamespace

    from ultralytics.models.yolo.detect import DetectionTrainer, DetectionValidator

    model = torch.load(weights, map_location="cpu", weights_only=False)["model"].float()
    tr = DetectionTrainer(overrides=dict(model=str(weights), data=data_yaml, imgsz=IMGSZ, batch=BATCH, device="cpu",
                                         plots=False, workers=0, save_dir=str(weights.parent / "ul_train_val")))
    tr.model = model
    model.args = tr.args
    loader = tr.get_dataloader(tr.data["val"], batch_size=2 * BATCH, rank=-1, mode="val")
    validator = DetectionValidator(loader, save_dir=weights.parent / "ul_train_val", args=copy(tr.args))
    fake_trainer = SimpleNamespace(
        ema=SimpleNamespace(ema=model), device=torch.device("cpu"), data=tr.data, amp=False, world_size=1,
        loss_items={k: torch.zeros(()) for k in ("box_loss", "cls_loss", "dfl_loss")},
        stopper=SimpleNamespace(possible_stop=False), epoch=0, epochs=1,
        label_loss_items=lambda loss, prefix: {f"{prefix}/{k}": float(v) for k, v in loss.items()},
    )
    return validator(fake_trainer)


def test_in_training_validation_matches_validator(drive):
    """Epoch-end path (host EMA copy, validator in training mode) on a model that detects
    something, so the comparison is not 0 == 0.

    It equals Ultralytics' own in-training validation of the same weights (same code path, no
    XLA) and, within Ultralytics' own in-training vs file gap, the validator run on the file."""
    out, rep = drive
    ours, fitness = rep["confident"]["metrics"], rep["confident"]["fitness"]
    ul_train = _ultralytics_training_mode_validation(out / "confident.pt", rep["data_yaml"])
    ref = _validate_direct(out / "confident.pt", rep["data_yaml"])
    print(f"\nours (XLA trainer, epoch-end) {ours} fitness={fitness}"
          f"\nUltralytics in-training      {ul_train}\nUltralytics validator on file {ref}")
    assert ref["metrics/mAP50(B)"] > 0 and ref["metrics/recall(B)"] > 0
    for k in [*METRIC_KEYS, "val/box_loss", "val/cls_loss", "val/dfl_loss"]:
        assert ours[k] == pytest.approx(ul_train[k], rel=1e-6, abs=1e-9), k  # both rounded to 5 decimals
    assert fitness == pytest.approx(ul_train["fitness"], rel=1e-6, abs=1e-9)
    for k in ["metrics/precision(B)", "metrics/recall(B)"]:
        assert ours[k] == pytest.approx(ref[k], abs=1e-5), k
    for k in ["metrics/mAP50(B)", "metrics/mAP50-95(B)"]:
        assert ours[k] == pytest.approx(ref[k], rel=0.05, abs=1e-5), k


def test_resume_continues_at_next_epoch_with_optimizer_state(drive):
    out, rep = drive
    run_dir = out / "run_b"
    assert rep["b_interrupted"]
    saved = torch.load(out / "last_interrupted.pt", map_location="cpu", weights_only=False)
    assert saved["epoch"] == 0 and saved["optimizer"] is not None and saved["ema"] is not None

    b = rep["b"]
    assert b["state"]["start_epoch"] == 1 and b["epochs"] == [1]
    assert b["state"]["updates"] == saved["updates"] == 8
    saved_mom = saved["optimizer"]["state"][0]["momentum_buffer"].float()
    assert saved_mom.abs().sum() > 0
    resumed_mom = torch.load(out / "resumed_momentum.pt")
    torch.testing.assert_close(resumed_mom, saved_mom, rtol=1e-3, atol=1e-4)  # fp16 in the file

    rows = _csv_rows(run_dir / "results.csv")
    assert [r["epoch"] for r in rows] == ["1", "2"]
    # epoch 1 was warmup (np.interp over nw=8 steps; its last step ni=7): bias lr falling 0.1 -> lr0
    assert float(rows[0]["lr/pg2"]) == pytest.approx(0.1 + 7 / 8 * (0.01 - 0.1))
    assert float(rows[0]["lr/pg0"]) == pytest.approx(7 / 8 * 0.01)
    # epoch 2 (resumed, ni == nw): every group at lr0 * lf(1) with the linear schedule, lrf 0.01
    assert [float(rows[1][f"lr/pg{i}"]) for i in range(3)] == pytest.approx([0.01 * 0.505] * 3)
    r = b["result"]
    assert r["epochs_completed"] == 2
    print(f"\nresumed run: compile_steps={r['xla/compile_steps']} steady_step={r['xla/steady_step_time_s']}s")
    assert r["xla/compile_steps"] in ([], [0])
    final = torch.load(run_dir / "weights" / "last.pt", map_location="cpu", weights_only=False)
    assert final["optimizer"] is None and final["epoch"] == -1  # finished runs are stripped


def test_accumulation_to_nbs_and_weight_decay_scaling(drive):
    """Ultralytics: accumulate = max(round(nbs / batch), 1), weight decay * batch * accumulate / nbs,
    an optimizer step (and EMA update) every `accumulate` iterations."""
    _, rep = drive
    acc = rep["acc"]
    assert acc["accumulate"] == 2  # round(5 / 2) = 2
    assert acc["wd"] == pytest.approx([0.0005 * 2 * 2 / 5, 0.0, 0.0])  # weights, norm layers, biases
    assert acc["updates"] == 4  # 8 iterations / 2
    r = acc["result"]
    print(f"\naccumulate=2: compile_steps={r['xla/compile_steps']} steady_step={r['xla/steady_step_time_s']}s")
    # graphs with and without an optimizer step; the latter may already be cached from run A
    assert r["xla/compile_steps"] in ([0], [0, 1])
    assert r["xla/fallback_ops"] == {}


def test_the_same_graph_in_another_run_directory_compiles_nothing(drive):
    out, rep = drive
    result = rep["again"]["result"]
    assert set(METRIC_KEYS) <= set(result) and "fitness" in result
    assert result["xla/compile_steps"] == []  # same graph as run A: served from the cache
    assert (out / "again" / "weights" / "best.pt").is_file() and (out / "again" / "results.csv").is_file()


def test_bf16_autocast_trains_with_one_graph(drive):
    """bf16 is a new graph (compiled once); shape-changing options are switched off."""
    out, rep = drive
    r = rep["bf16"]["result"]
    print(f"\nbf16: compile_steps={r['xla/compile_steps']} steady_step={r['xla/steady_step_time_s']}s")
    assert r["xla/bf16"] is True and r["xla/train_steps"] == 8
    assert r["xla/compile_steps"] == [0]
    row = _csv_rows(out / "bf16" / "results.csv")[0]
    losses = [float(row[k]) for k in ("train/box_loss", "train/cls_loss", "train/dfl_loss")]
    assert all(x == x and 0 <= x < 100 for x in losses) and losses[1] > 0
    ck = torch.load(out / "bf16" / "weights" / "last.pt", map_location="cpu", weights_only=False)
    assert ck["train_args"]["amp"] == "bf16" and ck["train_args"]["multi_scale"] == 0.0
    assert ck["train_args"]["rect"] is False


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--drive":
        _drive(Path(sys.argv[2]))
    else:
        sys.exit("usage: python tests/e2e/test_xla_train.py --drive OUT_DIR")
