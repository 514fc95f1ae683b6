"""The scaling evidence, built from the fidelity benches' saved results (docs/img/bench_*.json) by one
command, and the decisions `auto` takes from it by the procedure declared in docs/scaling.md section 7:

    python -m orchestrator.scaling.measured --write      # evidence.json and docs/scaling.md's tables
    python -m orchestrator.scaling.measured --check      # exit 1 where either is stale (the test runs this)

Each saved training is named by what it trained (its arm), read from its passed values against its
reference's, not by the policy label it ran under: `auto` meant other rules in other releases of this
tool. Differences are paired (same seed, same machine, same optimizer) and pooled over machines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from orchestrator.scaling import stats
from orchestrator.tasks import MEAN_LOSS_TASKS
from orchestrator.scaling.rules import ARMS, AUTO_RULES, DEFAULT_RULE, POLICY_ARMS, Arm, arm_of, family_of

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "img"
EVIDENCE = Path(__file__).with_name("evidence.json")
DOC = REPO / "docs" / "scaling.md"
BEGIN, END = "<!-- measured: begin (python -m orchestrator.scaling.measured --write) -->", "<!-- measured: end -->"

# The saved results that are evidence, and the machine of files older than the per-row `machine` field
SOURCES = {
    "bench_scaling_adamw_cpu.json": "CPU, 2 cores (2026-11-24)",
    "bench_scaling_sgd_h100.json": "NVIDIA H100",
    "bench_scaling_sgd_cpu.json": "CPU, 2 cores (2026-11-24)",
    "bench_scaling_classify_cpu.json": "CPU, 2 cores (2026-11-24)",
    "bench_scaling_segment_cpu.json": "CPU, 2 cores (2026-11-25)",
    "bench_scaling_semantic_h200.json": "",
    "bench_scaling_depth_h200.json": "",
    "bench_scaling_k8_adamw_cpu.json": "",
    "bench_scaling_k8_musgd_cpu.json": "",
    "bench_scaling_k8_sgd_cpu.json": "",
    "bench_scaling_sgd_k8_h200.json": "NVIDIA H200; Intel(R) Xeon(R) Processor (family 6, model 207), 16 cores",
    "bench_scaling_sgd_k8_linear_h200.json": "",
    "bench_scaling_sgd_k8_h200_s2-7.json": "",
    "bench_scaling_sgd_k8_none_h200_s2-4.json": "",
    "bench_scaling_k8_sgd_cpu_s3-5.json": "",
    "bench_finetune_h200.json": "NVIDIA H200",
    "bench_finetune_warmup_cpu.json": "",
    "bench_finetune_warmup_sgd_k8_cpu.json": "",
    "bench_scaling_k8_sgd_cpu_ref_s3-5.json": "",
}


def load_trainings(folder: Path = RESULTS) -> tuple[list[dict], dict[str, str]]:
    """Every finished training of the SOURCES present, one dict each, and each file's sha256."""
    rows, digests = [], {}
    for name, machine in SOURCES.items():
        path = folder / name
        if not path.exists():
            continue
        data = path.read_bytes()
        digests[name] = hashlib.sha256(data).hexdigest()
        saved = json.loads(data)
        setup, aliases = _setup(saved), defaultdict(list)  # a training reported under a second label too
        for run in saved["runs"]:
            if "same_training_as" in run:
                aliases[run["optimizer"], run["k"], run["seed"], run["same_training_as"]].append(run["policy"])
        for run in saved["runs"]:
            if run.get("final") is None or "same_training_as" in run or "passed" not in run:
                continue  # unfinished, or reported under its first label
            rows.append({**run, "setup": setup, "source": name, "machine": run.get("machine") or machine,
                         "optimizer": run["passed"].get("optimizer") or run["optimizer"],
                         "labels": [run["policy"], *aliases[run["optimizer"], run["k"], run["seed"], run["policy"]]]})
    return rows, digests


def _setup(saved: dict) -> str:
    """What makes two files' trainings comparable: the task, the start, the data, the epochs, the reference batch."""
    t = saved["task"]
    start = "pretrained" if "pretrained" in t else "scratch"
    return f"{t.get('task', 'detect')}|{start}|{t['images']}|{t['imgsz']}|{t['epochs']}|{t['reference']['batch']}"


def device_kind(machine: str) -> str:
    return "gpu" if "NVIDIA" in machine else "cpu"


def name_arms(rows: list[dict]) -> list[dict]:
    """Each training with its arm, from its passed values against its setup's reference (k = 1)."""
    refs = {(r["setup"], r["optimizer"]): r for r in rows if r["k"] == 1}
    named = []
    for r in rows:
        ref = refs.get((r["setup"], r["optimizer"]))
        if ref is None:
            continue  # no reference to read the rule from
        arm = Arm("reference") if r["k"] == 1 else _arm(r, ref)
        if arm is not None:  # "auto, 20 epochs": a rule trained for more epochs, as the bench labelled it
            named.append({**r, "arm": replace(arm, epochs=Arm.parse(r["policy"]).epochs).label})
    return named


def _arm(r: dict, ref: dict) -> Arm | None:
    """A mean-loss task's SGD step grows with the micro-batches, not the images (scaler._step_growth): its
    passed lr0 says nothing of the rule in detect's terms, so its trainings keep their policy's name."""
    if r["setup"].split("|")[0] in MEAN_LOSS_TASKS:
        return next((Arm(label) for label in r["labels"] if label in POLICY_ARMS), None)
    return arm_of(family_of(r["optimizer"]), r["k"], _ratio(r, ref, "lr0", "passed"), _ratio(r, ref, "weight_decay", "effective"),
                  r["passed"]["warmup_epochs"] > ref["passed"]["warmup_epochs"])


def _ratio(row: dict, ref: dict, key: str, where: str) -> float:
    return row[where][key] / ref[where][key]


def score(row: dict, which: str) -> float:
    """best: the validation of best.pt (the bench's `final`); last: the last epoch's validation."""
    return row["final"] if which == "best" else row["curve"][-1]


def _key(row: dict) -> tuple:
    """What a comparison pools over machines and optimizers of one family: task, start, family, k."""
    task, start = row["setup"].split("|")[:2]
    return task, start, family_of(row["optimizer"]), row["k"]


def _pairs(rows: list[dict]) -> dict[tuple, dict[str, dict[tuple, dict]]]:
    """{(task, start, family, k): {arm: {(setup, optimizer, machine, seed): row}}}; the reference rows
    (k = 1) are filed under each k of their setup, so every arm pairs with them."""
    out: dict[tuple, dict[str, dict[tuple, dict]]] = defaultdict(lambda: defaultdict(dict))
    ks = defaultdict(set)
    for r in rows:
        if r["k"] > 1:
            ks[r["setup"], r["optimizer"]].add(r["k"])
    for r in rows:
        for k in (ks[r["setup"], r["optimizer"]] if r["k"] == 1 else [r["k"]]):
            out[_key({**r, "k": k})][r["arm"]][r["setup"], r["optimizer"], r["machine"], r["seed"]] = r
    return out


def cells(pairs: dict) -> list[dict]:
    """Per (task, start, family, k, arm, optimizer, machine): n, each seed (best.pt and last epoch), the
    means, and the paired gap to the reference of the same seeds."""
    out = []
    for (task, start, fam, k), arms in sorted(pairs.items()):
        for arm in _arm_order(arms):
            groups = defaultdict(dict)
            for key, r in arms[arm].items():
                groups[key[1:3]][key] = r  # (optimizer, machine)
            for (opt, machine), runs in sorted(groups.items()):
                seeds = sorted(runs.items(), key=lambda item: item[0][3])
                out.append({"task": task, "start": start, "family": fam, "k": k, "arm": arm, "optimizer": opt,
                            "machine": machine, "seeds": {str(key[3]): [score(r, "best"), score(r, "last")]
                                                          for key, r in seeds},
                            "best": stats.mean_interval([score(r, "best") for r in runs.values()]).as_json(),
                            "last": stats.mean_interval([score(r, "last") for r in runs.values()]).as_json(),
                            **(_gaps(runs, arms["reference"]) if arm != "reference" and "reference" in arms else {})})
    return out


def _arm_order(arms: dict) -> list[str]:
    """The reference first, then the arms in policies.ARMS order, then any other (longer runs) by name."""
    return [a for a in ("reference", *ARMS) if a in arms] + sorted(set(arms) - {"reference", *ARMS})


def _gaps(runs: dict, ref: dict) -> dict:
    """The runs' gap to the reference of the same setup, optimizer, machine and seed (best.pt, last epoch)."""
    pairs = [(r, ref[key]) for key, r in runs.items() if key in ref]
    if not pairs:
        return {}
    return {f"gap_{w}": stats.mean_interval([score(a, w) - score(b, w) for a, b in pairs]).as_json()
            for w in ("best", "last")}


def compare(arms: dict, a: str, b: str, which: str = "best", kind: str | None = None) -> stats.Interval | None:
    """arm a minus arm b, paired by (setup, optimizer, machine, seed), pooled; on one kind of device if given."""
    diffs = _diffs(arms, a, b, which, kind)
    return stats.mean_interval(diffs) if diffs else None


def _diffs(arms: dict, a: str, b: str, which: str = "best", kind: str | None = None) -> list[float]:
    """arm a minus arm b, one value per (setup, optimizer, machine, seed) both have; on one kind of device if given."""
    return [score(arms[a][key], which) - score(arms[b][key], which) for key in arms.get(a, {})
            if key in arms.get(b, {}) and (kind is None or device_kind(key[2]) == kind)]


def comparisons(pairs: dict) -> list[dict]:
    """Every pair of arms measured at one (task, start, family, k), pooled, with the per-kind
    differences and their interaction (GPU minus CPU) where both kinds have two pairs or more."""
    out = []
    for (task, start, fam, k), arms in sorted(pairs.items()):
        names = _arm_order(arms)
        for i, a in enumerate(names[1:], 1):
            for b in names[:i]:
                pooled = compare(arms, a, b)
                if pooled is None:
                    continue
                row = {"task": task, "start": start, "family": fam, "k": k, "arm": a, "versus": b,
                       "best": pooled.as_json(), "last": compare(arms, a, b, "last").as_json()}
                row.update(_interaction(arms, a, b))
                out.append(row)
    return out


def _interaction(arms: dict, a: str, b: str) -> dict:
    by_kind = {kind: _diffs(arms, a, b, kind=kind) for kind in ("gpu", "cpu")}
    if min(len(v) for v in by_kind.values()) < 2:
        return {}
    return {"by_kind": {kind: stats.mean_interval(v).as_json() for kind, v in by_kind.items()},
            "interaction": stats.difference_interval(by_kind["gpu"], by_kind["cpu"]).as_json()}


def decisions(pairs: dict) -> list[dict]:
    """auto's rule at each measured (task, start, family, k), by the declared procedure (docs/scaling.md 7):
    the family's default rule unless an alternative auto can apply beat it in the pooled paired comparison
    (best.pt, same seed and machine) with a 95 % interval above 0; then the best such alternative."""
    out = []
    for (task, start, fam, k), arms in sorted(pairs.items()):
        default = DEFAULT_RULE[fam]
        versus = {alt: compare(arms, alt, default) for alt in arms if alt not in ("reference", default)}
        beat = {alt: iv for alt, iv in versus.items() if iv and iv.lo is not None and iv.lo > 0 and alt in AUTO_RULES}
        rule = max(beat, key=lambda alt: beat[alt].mean) if beat else default
        gap = compare(arms, rule, "reference")
        out.append({"task": task, "start": start, "family": fam, "k": k, "rule": rule,
                    "basis": "measured" if beat else ("default" if default in arms else "default, not measured here"),
                    "gap": gap.as_json() if gap else None,
                    "versus": {alt: iv.as_json() for alt, iv in sorted(versus.items()) if iv}})
    return out


FEW_STEPS = ("bench_scaling_fewsteps_cpu.json", "bench_scaling_fewsteps_long_cpu.json")


def few_steps(folder: Path = RESULTS) -> dict:
    """The few-step regime (docs/scaling.md 7C): AdamW `auto` at k = 4 on 256 images against its reference
    (paired), its optimizer steps in all, and the same at 4x the epochs (no reference trained that long)."""
    saved, longer = (json.loads((folder / name).read_text()) for name in FEW_STEPS)
    runs = saved["runs"]
    ref = {r["seed"]: r for r in runs if r["optimizer"] == "AdamW" and r["k"] == 1}
    auto = [r for r in runs if (r["optimizer"], r["k"], r["policy"]) == ("AdamW", 4, "auto")]
    steps = auto[0]["effective"]["optimizer_steps_per_epoch"] * saved["task"]["epochs"]
    return {"gap": stats.mean_interval([r["final"] - ref[r["seed"]]["final"] for r in auto]).as_json(),
            "steps": round(steps), "reference": round(sum(r["final"] for r in ref.values()) / len(ref), 4),
            "longer": {"epochs": longer["task"]["epochs"],
                       "mean": round(sum(r["final"] for r in longer["runs"]) / len(longer["runs"]), 4)}}


def build(folder: Path = RESULTS) -> dict:
    """The evidence file's content: the sources' digests, the cells, the comparisons, auto's decisions."""
    rows, digests = load_trainings(folder)
    digests.update({name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in FEW_STEPS})
    pairs = _pairs(name_arms(rows))
    return {"generated_by": "python -m orchestrator.scaling.measured --write", "sources": digests,
            "cells": cells(pairs), "comparisons": comparisons(pairs), "decisions": decisions(pairs),
            "few_steps": few_steps(folder)}


def _iv(d: dict | None) -> str:
    return stats.Interval.from_json(d).text() if d else "-"


def summary(evidence: dict) -> list[str]:
    """What the procedure decided, in sentences: where an alternative replaced the default, and the device
    interactions whose interval excludes 0."""
    moved = [f"{d['task']} {d['start']} {d['family']}-family at k = {d['k']}: {d['rule']} "
             f"({d['rule']} - {DEFAULT_RULE[d['family']]} {_iv(d['versus'][d['rule']])})"
             for d in evidence["decisions"] if d["basis"] == "measured"]
    device = [f"{c['task']} {c['start']} {c['family']} k = {c['k']} {c['arm']} - {c['versus']}: "
              f"{_iv(c['interaction'])}" for c in evidence["comparisons"] if "interaction" in c
              and c["interaction"]["ci95"] and (c["interaction"]["ci95"][0] > 0 or c["interaction"]["ci95"][1] < 0)]
    return ["**Decided**: the family's default everywhere but " + ("; ".join(moved) or "nowhere") + ".",
            "**Device x policy interactions with an interval excluding 0**: " + ("; ".join(device) or "none") + "."]


def render(evidence: dict) -> str:
    """docs/scaling.md's generated tables: auto's decisions, the device interactions, every cell."""
    lines = summary(evidence) + ["", "auto's rule per measured cell (the procedure above; paired differences of "
                                 "best.pt's mAP50-95, or top-1 for classify, with 95 % intervals):", "",
             "| task | start | family | k | auto | basis | auto - reference | alternatives - the default |",
             "|---|---|---|---|---|---|---|---|"]
    for d in evidence["decisions"]:
        alts = "; ".join(f"{a} {_iv(v)}" for a, v in d["versus"].items()) or "-"
        lines.append(f"| {d['task']} | {d['start']} | {d['family']} | {d['k']} | **{d['rule']}** | {d['basis']} | "
                     f"{_iv(d['gap'])} | {alts} |")
    lines += ["", "Device x policy interactions (the paired difference on GPUs minus on CPUs, where each kind has "
              "two pairs or more):", "", "| task | start | family | k | arms | GPU | CPU | GPU - CPU |",
              "|---|---|---|---|---|---|---|---|"]
    for c in evidence["comparisons"]:
        if "interaction" in c:
            lines.append(f"| {c['task']} | {c['start']} | {c['family']} | {c['k']} | {c['arm']} - {c['versus']} | "
                         f"{_iv(c['by_kind']['gpu'])} | {_iv(c['by_kind']['cpu'])} | {_iv(c['interaction'])} |")
    lines += ["", "Every cell (per machine; seeds as best.pt / last epoch):", "",
              "| task | start | optimizer | k | arm | machine | n | mean best.pt | mean last | gap to reference "
              "(best.pt) | seeds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in evidence["cells"]:
        seeds = ", ".join(f"{s}: {b:.3f}/{last:.3f}" for s, (b, last) in c["seeds"].items())
        lines.append(f"| {c['task']} | {c['start']} | {c['optimizer']} | {c['k']} | {c['arm']} | {c['machine']} | "
                     f"{c['best']['n']} | {c['best']['mean']:.3f} | {c['last']['mean']:.3f} | "
                     f"{_iv(c.get('gap_best'))} | {seeds} |")
    return "\n".join(lines)


def replace_tables(doc: str, evidence: dict) -> str:
    """doc with the text between the BEGIN and END markers replaced by render(evidence)."""
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: the markers {BEGIN!r} and {END!r} are missing")
    head, rest = doc.split(BEGIN, 1)
    return head + BEGIN + "\n" + render(evidence) + "\n" + END + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestrator.scaling.measured", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write evidence.json and docs/scaling.md's tables")
    ap.add_argument("--check", action="store_true", help="exit 1 where either differs from the saved results")
    args = ap.parse_args(argv)
    built = build()
    evidence = json.dumps(built, indent=1) + "\n"
    doc = DOC.read_text()
    new_doc = replace_tables(doc, built)
    stale = [str(p.relative_to(REPO)) for p, old, new in ((EVIDENCE, _read(EVIDENCE), evidence), (DOC, doc, new_doc))
             if old != new]
    if args.write:
        EVIDENCE.write_text(evidence)
        DOC.write_text(new_doc)
        print("wrote " + ", ".join(stale) if stale else "up to date")
        return 0
    if stale:
        print("stale (run python -m orchestrator.scaling.measured --write): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


if __name__ == "__main__":
    sys.exit(main())
