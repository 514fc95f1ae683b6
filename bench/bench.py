#!/usr/bin/env python
"""Benchmarks side by side with plain Ultralytics. Each number is a ratio measured in
one run on one machine. Prints a table and writes JSON.

    python bench/bench.py                          # all sections
    python bench/bench.py --only overhead,cli      # some
    python bench/bench.py --reps 3 --epochs 10     # quicker overhead runs

Sections:
  overhead    quickstart via `yolo-orch submit` vs the same resolved arguments via
              YOLO(...).train in a fresh process; each repetition runs both at the same time,
              a core each (--sequential: one after the other, alternating); median wall time
  cli         cold start of `--help`, `plan`, `submit --dry-run` vs `python -c pass`
  throughput  train images/s (from results.csv) in the same runs as `overhead`
  dp          images/s on cpu vs cpu:2 (gloo) for the same job
  extra       numbers other scripts wrote: sweep vs model.tune, XLA compile counts
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from orchestrator.harness.cli import COMMAND, REPO
from orchestrator.harness.runs import results_rows

QUICKSTART = REPO / "examples" / "quickstart.yaml"
PY = sys.executable

PLAIN = [PY, "-m", "orchestrator.harness.plain", "train"]  # yolo train's work, offline as the worker runs it


def env_for(cache: Path) -> dict:
    env = dict(os.environ, YOLO_ORCH_CACHE=str(cache), WANDB_MODE="disabled", PYTHONPATH=str(REPO))
    return env


def timed(cmd: list[str], env: dict, cwd: Path, cpu: list[float] | None = None) -> float:
    """Wall seconds of `cmd`; appends its CPU seconds (user + sys of it and every descendant it
    waited for: the orchestrator's training process too) to `cpu` when given."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return wall


def train_images_per_s(results_csv: Path, images: int) -> float:
    rows = results_rows(results_csv)
    return images * len(rows) / float(rows[-1]["time"])


def timed_together(cmds: dict[str, list[str]], env: dict, cwd: Path) -> dict[str, tuple[float, float]]:
    """Start every command at once; {name: (wall s, CPU s of it and its waited descendants)}."""
    t = time.perf_counter()
    procs = {subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid: name
             for name, cmd in cmds.items()}
    out = {}
    while procs:
        pid, status, usage = os.wait4(-1, 0)
        if pid not in procs:
            continue
        name = procs.pop(pid)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{name}: {cmds[name]} exited with {os.waitstatus_to_exitcode(status)}")
        out[name] = (time.perf_counter() - t, usage.ru_utime + usage.ru_stime)
    return out


def bench_overhead(reps: int, epochs: int, work: Path, cache: Path, together: bool = True) -> dict:
    """`together`: both sides of a repetition run at the same time, one core each, so they see the
    same machine speed (on the shared development machine it drifts by up to 20 % within minutes);
    otherwise one after the other, the order alternating."""
    from orchestrator.data.cache import make_synth_data
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job

    os.environ["YOLO_ORCH_CACHE"] = str(cache)
    sets = [f"epochs={epochs}", "wandb.mode=disabled"]
    plan = make_plan(load_job(QUICKSTART, sets=sets))
    make_synth_data(plan.data.synth.model_dump(), plan.job.spec.task)  # both sides start from the generated dataset
    images = plan.data.train_images
    env = env_for(cache)
    orch, plain, orch_ips, plain_ips, orch_cpu, plain_cpu = [], [], [], [], [], []
    for rep in range(reps):
        runs, project = work / f"orch{rep}", work / f"plain{rep}"
        cmds = {
            "orch": [*COMMAND, "submit", str(QUICKSTART), "--json",
                     *[a for s in sets for a in ("--set", s)], "--set", f"runs_dir={runs}"],
            "plain": [*PLAIN, json.dumps(dict(plan.train_args, project=str(project), name="run",
                                                       exist_ok=True))],
        }
        if together:
            measured = timed_together(cmds, env, work)
            orch.append(measured["orch"][0])
            orch_cpu.append(measured["orch"][1])
            plain.append(measured["plain"][0])
            plain_cpu.append(measured["plain"][1])
        else:
            for side in ("orch", "plain") if rep % 2 == 0 else ("plain", "orch"):
                (orch if side == "orch" else plain).append(
                    timed(cmds[side], env, work, orch_cpu if side == "orch" else plain_cpu))
        orch_ips.append(train_images_per_s(next(runs.rglob("results.csv")), images))
        plain_ips.append(train_images_per_s(project / "run" / "results.csv", images))
        print(f"  rep {rep + 1}/{reps}: orchestrator {orch[-1]:.1f}s ({orch_cpu[-1]:.1f} CPU s)  "
              f"plain {plain[-1]:.1f}s ({plain_cpu[-1]:.1f} CPU s)", flush=True)
    return {
        "epochs": epochs, "reps": reps, "together": together, "orchestrator_s": orch, "plain_s": plain,
        "median_orchestrator_s": statistics.median(orch), "median_plain_s": statistics.median(plain),
        "ratio": statistics.median(orch) / statistics.median(plain),
        # the machine's speed drifts between repetitions: each rep's two runs are neighbours in time
        "per_rep_ratios": [o / p for o, p in zip(orch, plain)],
        "median_per_rep_ratio": statistics.median(o / p for o, p in zip(orch, plain)),
        "orchestrator_cpu_s": orch_cpu, "plain_cpu_s": plain_cpu,
        "cpu_ratio": statistics.median(orch_cpu) / statistics.median(plain_cpu),
        "throughput": {
            "orchestrator_images_per_s": statistics.median(orch_ips),
            "plain_images_per_s": statistics.median(plain_ips),
            "ratio": statistics.median(orch_ips) / statistics.median(plain_ips),
        },
    }


def bench_cli(n: int, work: Path, cache: Path) -> dict:
    env = env_for(cache)
    exe = COMMAND
    cases = {
        "python -c pass": [PY, "-c", "pass"],
        "yolo-orch --help": [*exe, "--help"],
        "yolo-orch plan": [*exe, "plan", str(QUICKSTART), "-d", "cpu", "-d", "8"],
        "yolo-orch submit --dry-run": [*exe, "submit", str(QUICKSTART), "--dry-run"],
    }
    times = {name: [] for name in cases}
    for _ in range(n):  # interleaved so load changes hit every case alike
        for name, cmd in cases.items():
            times[name].append(timed(cmd, env, work))
    base = statistics.median(times["python -c pass"])
    return {name: {"median_s": statistics.median(t), "vs_python": statistics.median(t) / base}
            for name, t in times.items()}


def bench_dp(epochs: int, work: Path, cache: Path) -> dict:
    env = env_for(cache)
    out = {}
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job

    images = make_plan(load_job(QUICKSTART)).data.train_images
    for devices in ("cpu", "cpu:2"):
        runs = work / f"dp-{devices.replace(':', '')}"
        cmd = [*COMMAND, "submit", str(QUICKSTART), "--devices", devices, "--set", f"epochs={epochs}",
               "--set", "wandb.mode=disabled", "--set", f"runs_dir={runs}", "--json"]
        wall = timed(cmd, env, work)
        summary = json.loads(next(runs.rglob("summary.json")).read_text())
        out[devices] = {"wall_s": wall, "images_per_s": train_images_per_s(next(runs.rglob("results.csv")), images),
                        "mAP50-95": summary["metrics"].get("metrics/mAP50-95(B)")}
    out["speedup"] = out["cpu:2"]["images_per_s"] / out["cpu"]["images_per_s"]
    out["efficiency"] = out["speedup"] / 2
    return out


def bench_extra() -> dict:
    found = {}
    # Written by bench/bench_sweep.py and `python -m bench.xla_step > docs/bench/xla.json`.
    for name, path in {"sweep": REPO / "docs" / "img" / "bench_sweep.json",
                       "xla": REPO / "docs" / "bench" / "xla.json"}.items():
        if path.exists():
            found[name] = json.loads(path.read_text())
    return found


def machine() -> dict:
    import torch

    return {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.cuda.is_available()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="cli,overhead,dp,extra")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sequential", action="store_true",
                    help="overhead: run the two sides one after the other (default: at the same time, a core each)")
    ap.add_argument("--epochs", type=int, default=35, help="epochs for the overhead/throughput runs")
    ap.add_argument("--dp-epochs", type=int, default=5)
    ap.add_argument("--cli-n", type=int, default=10)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "bench" / "results.json")
    args = ap.parse_args()
    only = set(args.only.split(","))
    results: dict = {"machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="yolo-orch-bench-") as tmp:
        work, cache = Path(tmp), Path(tmp) / "cache"
        if "cli" in only:
            print("cli start-up ...", flush=True)
            results["cli"] = bench_cli(args.cli_n, work, cache)
        if "overhead" in only:
            print("overhead (both sides at once; --sequential: one after the other) ...", flush=True)
            results["overhead"] = bench_overhead(args.reps, args.epochs, work, cache, together=not args.sequential)
        if "dp" in only:
            print("data-parallel cpu vs cpu:2 ...", flush=True)
            results["dp"] = bench_dp(args.dp_epochs, work, cache)
    if "extra" in only:
        results.update(bench_extra())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.exists():  # keep sections measured in an earlier run
        previous = json.loads(args.out.read_text())
        results = {**previous, **results}
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    if "overhead" in results:
        plot_overhead(results["overhead"], REPO / "docs" / "img" / "bench_overhead.png")
    print_table(results)
    print(f"wrote {args.out}")


def plot_overhead(o: dict, path: Path) -> None:
    """Wall time per repetition, both sides, so drift and outliers are visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reps = range(1, len(o["orchestrator_s"]) + 1)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(reps, o["orchestrator_s"], "o-", label="yolo-orch submit")
    ax.plot(reps, o["plain_s"], "s--", label="YOLO(...).train, same arguments")
    ax.set_xlabel("repetition (both sides at the same time)" if o.get("together") else
                  "repetition (order alternates)")
    ax.set_ylabel("wall time [s]")
    ax.set_title(f"quickstart, {o['epochs']} epochs: median ratio {o['ratio']:.3f}")
    ax.set_xticks(list(reps))
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def print_table(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="yolo-orch benchmarks (ratios measured side by side)")
    for col in ("measure", "value", "target"):
        t.add_column(col)
    if "overhead" in r:
        o = r["overhead"]
        t.add_row(f"submit vs YOLO.train wall ({o['epochs']} ep, median of {o['reps']})",
                  f"{o['median_orchestrator_s']:.1f}s / {o['median_plain_s']:.1f}s = {o['ratio']:.3f}", "<= 1.02")
        if "median_per_rep_ratio" in o:
            t.add_row("  median of the per-rep ratios", f"{o['median_per_rep_ratio']:.3f}", "<= 1.02")
            t.add_row("  CPU seconds, orchestrator / plain (medians)",
                      f"{statistics.median(o['orchestrator_cpu_s']):.1f} / "
                      f"{statistics.median(o['plain_cpu_s']):.1f} = {o['cpu_ratio']:.3f}", "")
        th = o["throughput"]
        t.add_row("train images/s orchestrator / plain",
                  f"{th['orchestrator_images_per_s']:.1f} / {th['plain_images_per_s']:.1f} = {th['ratio']:.3f}", ">= 1.0")
    for name, c in r.get("cli", {}).items():
        t.add_row(f"cold start: {name}", f"{c['median_s']:.3f}s ({c['vs_python']:.1f}x python)", "< 0.5 s")
    if "dp" in r:
        d = r["dp"]
        t.add_row("images/s cpu:2 / cpu (gloo, 2 cores)",
                  f"{d['cpu:2']['images_per_s']:.1f} / {d['cpu']['images_per_s']:.1f} = {d['speedup']:.2f}",
                  "efficiency " + f"{d['efficiency']:.0%}")
    sweep = (r.get("sweep") or {}).get("summary")
    if sweep:  # bench/bench_sweep.py
        ratio = sweep["median_epoch_ratio"]
        t.add_row("sweep epochs to model.tune's best / tune's own",
                  f"{ratio:.2f} (median); within half in {sweep['reached_in_half']} of {sweep['repeats']}"
                  if ratio is not None else "not reached", "<= 0.5")
        frac = sweep.get("median_searched_epoch_fraction")
        if frac is not None:
            t.add_row("  a searched sweep trial matches tune's best, at this share of tune's epochs",
                      f"{frac:.2f} (median); within half in {sweep['searched_within_half_budget']} of "
                      f"{sweep['repeats']}", "<= 0.5")
    xla = r.get("xla")
    if xla:  # python -m bench.xla_step --json-out docs/bench/xla.json
        t.add_row(f"XLA:CPU compiles per epoch ({xla['model']}, imgsz {xla['imgsz']}, batch {xla['batch']})",
                  f"{xla.get('xla/compiles_per_epoch')}; steady step {xla['xla/steady_step_time_s']} s",
                  "0 after epoch 1")
    Console().print(t)


if __name__ == "__main__":
    main()
