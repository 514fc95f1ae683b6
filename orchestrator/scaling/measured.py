"""The scaling evidence, built from the fidelity benches' saved results (docs/img/bench_*.json) by one
command, and the decisions `auto` takes from it by the procedures declared in docs/scaling.md section 7 (7J
explores every saved run; 7K, confirm.py, judges each hypothesis on the fresh runs alone):

    python -m orchestrator.scaling.measured --write      # evidence.json and docs/scaling.md's tables
    python -m orchestrator.scaling.measured --check      # exit 1 where either is stale (the test runs this)

Each saved training is named by what it trained (its arm), read from its passed values against its
reference's, not by the policy label it ran under: `auto` meant other rules in other releases of this
tool. Differences are paired (same seed, same machine, same optimizer) and pooled over machines.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from orchestrator.scaling import confirm, stats
from orchestrator.scaling.pairing import compare, diffs, score
from orchestrator.tasks import MEAN_LOSS_TASKS
from orchestrator.scaling.rules import ARMS, AUTO_RULES, DEFAULT_RULE, POLICY_ARMS, Arm, arm_of, family_of

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "img"
EVIDENCE = Path(__file__).with_name("evidence.json")

# The saved results that are evidence (the machine each training ran on is read from the file: machine_kind)
SOURCES = (
    "bench_scaling_adamw_cpu.json", "bench_scaling_sgd_h100.json", "bench_scaling_sgd_cpu.json",
    "bench_scaling_classify_cpu.json", "bench_scaling_segment_cpu.json", "bench_scaling_semantic_h200.json",
    "bench_scaling_depth_h200.json", "bench_scaling_k8_adamw_cpu.json", "bench_scaling_k8_musgd_cpu.json",
    "bench_scaling_k8_sgd_cpu.json", "bench_scaling_sgd_k8_h200.json", "bench_scaling_sgd_k8_linear_h200.json",
    "bench_scaling_sgd_k8_h200_s2-7.json", "bench_scaling_sgd_k8_none_h200_s2-4.json",
    "bench_scaling_k8_sgd_cpu_s3-5.json", "bench_finetune_h200.json", "bench_finetune_warmup_cpu.json",
    "bench_finetune_warmup_sgd_k8_cpu.json", "bench_scaling_k8_sgd_cpu_ref_s3-5.json",
    "bench_scaling_k8_musgd_more_cpu.json", "bench_finetune_musgd_k8_cpu.json", "bench_finetune_sgd_k8_30ep_cpu.json",
    "bench_finetune_confirm_k8_cpu.json", "bench_finetune_confirm_sgd_k4_cpu.json", "bench_scaling_confirm_musgd_k8_cpu.json",
)
# docs/scaling.md 7K, declared in commit DECLARED: the departures from the default 7J took as of then, by cell
# (task, start, family or own key, k), each confirmed or rejected (confirm.py) on fresh seeds alone, in the
# results first committed after DECLARED (FRESH; a test checks the list against git's history)
DECLARED = "40a145e"
HYPOTHESES = {("detect", "pretrained", "SGD", 4): "none", ("detect", "pretrained", "SGD", 8): "lr0-sqrt (warmup kept)",
              ("detect", "pretrained", "MuSGD", 8): "lr0-sqrt (warmup kept)", ("detect", "scratch", "MuSGD", 8): "lr0-sqrt"}
FRESH_SEEDS = (10, 11, 12, 13, 14, 15)
FRESH = frozenset({"bench_finetune_confirm_k8_cpu.json", "bench_finetune_confirm_sgd_k4_cpu.json",
                   "bench_scaling_confirm_musgd_k8_cpu.json"})
# The saved results of the fidelity benches that are no evidence of a rule, and why (a test checks that every
# bench_scaling*/bench_finetune* file in docs/img is in SOURCES, FEW_STEPS or here)
LEFT_OUT = {
    "bench_scaling_ddp_cpu.json": "DDP against one process at equal images per step (7D): no rule differs between its arms",
}


def load_trainings(folder: Path = RESULTS) -> tuple[list[dict], dict[str, str]]:
    """Every finished training of the SOURCES present, one dict each, and each file's sha256."""
    rows, digests = [], {}
    for name in SOURCES:
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
            rows.append({**run, "setup": setup, "source": name, "machine": machine_kind(saved, run, name),
                         "optimizer": run["passed"].get("optimizer") or run["optimizer"],
                         "labels": [run["policy"], *aliases[run["optimizer"], run["k"], run["seed"], run["policy"]]]})
    return rows, digests


def machine_kind(saved: dict, run: dict, name: str) -> str:
    """The kind of machine a training ran on, as its file says (7J groups and pairs by it): the GPU it names
    (its host's CPU does not make another kind), else the CPU's model, family and model number (the bench's
    `machine` of each row, less the cores); a file older than that field names no CPU model: a kind of its own."""
    text = run.get("machine") or f"{saved.get('device', '')} {saved.get('note', '')}"
    gpu = re.search(r"NVIDIA [A-Z]+\d+", text)
    if gpu:
        return gpu.group(0)
    if run.get("machine"):
        return re.sub(r", \d+ cores$", "", run["machine"])
    return f"CPU, model not recorded ({name})"


def _setup(saved: dict) -> str:
    """What makes two files' trainings comparable: the task, the start, the data, the epochs, the reference batch."""
    t = saved["task"]
    start = "pretrained" if "pretrained" in t else "scratch"
    return f"{t.get('task', 'detect')}|{start}|{t['images']}|{t['imgsz']}|{t['epochs']}|{t['reference']['batch']}"


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


def comparisons(pairs: dict) -> list[dict]:
    """Every pair of arms measured at one (task, start, family, k), pooled over machines and the family's
    optimizers, with the GPU-minus-CPU and the MuSGD-minus-SGD interactions where both sides have two pairs."""
    out = []
    for (task, start, fam, k), arms in sorted(pairs.items()):
        names = _arm_order(arms)
        for key, optimizers in confirm.views((task, start, fam, k), HYPOTHESES):
            for i, a in enumerate(names[1:], 1):
                for b in names[:i]:
                    pooled = compare(arms, a, b, optimizers=optimizers)
                    if pooled is None:
                        continue
                    row = {"task": task, "start": start, "family": key, "k": k, "arm": a, "versus": b,
                           "best": pooled.as_json(), "last": compare(arms, a, b, "last", optimizers=optimizers).as_json()}
                    row.update(_interaction(arms, a, b, "by_kind", "interaction", DEVICE_SIDES, optimizers))
                    if optimizers is None:
                        row.update(_interaction(arms, a, b, "by_optimizer", "musgd_interaction", MUSGD_SIDES))
                    out.append(row)
    return out


# the two sides of each interaction: (name, the pairs it takes); the first minus the second
DEVICE_SIDES = (("gpu", {"kind": "gpu"}), ("cpu", {"kind": "cpu"}))
MUSGD, SGD_ONLY = frozenset({"MuSGD"}), frozenset({"SGD"})
MUSGD_SIDES = (("MuSGD", {"optimizers": MUSGD}), ("SGD", {"optimizers": SGD_ONLY}))


def _interaction(arms: dict, a: str, b: str, by: str, name: str, sides: tuple,
                 optimizers: frozenset[str] | None = None) -> dict:
    """a - b on one side minus on the other, as the difference of the two machine-grouped estimates, standard
    error the root of the sum of their squares, +-1.96 (7J point 2); nothing where a side has fewer than two
    pairs. The device's (`by_kind`) also keeps 7I's declared test, Welch's on the pairs (`interaction`), the
    one its step 6 gates on; the grouped form is `interaction_grouped` beside it. `optimizers`: the view's (a
    device interaction on SGD's pairs alone where MuSGD has its own key)."""
    if optimizers is not None:
        sides = tuple((side, {"optimizers": optimizers, **filt}) for side, filt in sides)
    est = {side: compare(arms, a, b, **filt) for side, filt in sides}
    if any(iv is None or iv.n < 2 for iv in est.values()):
        return {}
    first, second = est.values()
    grouped = stats.estimate_difference(first, second).as_json()
    if by != "by_kind":
        return {by: {side: iv.as_json() for side, iv in est.items()}, name: grouped}
    pairs = [[d for ds in diffs(arms, a, b, **filt).values() for d in ds] for _, filt in sides]  # 7I: ungrouped
    return {by: {side: iv.as_json() for side, iv in est.items()},
            name: stats.difference_interval(*pairs).as_json(), "interaction_grouped": grouped}


def decisions(pairs: dict) -> list[dict]:
    """7J's exploration: the rule its procedure (docs/scaling.md 7I, 7J) takes from every saved run at each
    measured (task, start, family, k), MuSGD's own row beside SGD's where it has a hypothesis (7K point 2) and
    the MuSGD test of 7J point 2 beside SGD's row; confirm.apply turns it into auto's rules (7K)."""
    out = []
    for (task, start, fam, k), arms in sorted(pairs.items()):
        musgd = _musgd_test(arms) if fam == "SGD" else None
        for key, optimizers in confirm.views((task, start, fam, k), HYPOTHESES):
            row = {"task": task, "start": start, "family": key, "k": k, **_decide(arms, fam, optimizers)}
            out.append({**row, "musgd": musgd} if musgd is not None and key == fam else row)
    return out


def _decide(arms: dict, fam: str, optimizers: frozenset[str] | None = None) -> dict:
    """The rule from these pairs: the default unless an arm auto can pass beat it with an interval above 0;
    of several, the largest lower bound (ties within 0.001: the simpler rule; 7J point 3). best.pt decides;
    where the last epoch would decide otherwise, `on_last` says how (point 4)."""
    default = DEFAULT_RULE[fam]
    rule, versus = _choose(arms, default, "best", optimizers)
    last, versus_last = _choose(arms, default, "last", optimizers)
    gap = compare(arms, rule, "reference", optimizers=optimizers)
    basis = "measured" if rule != default else "default" if _has(arms, default, optimizers) else "default, not measured here"
    row = {"rule": rule, "basis": basis, "gap": gap.as_json() if gap else None,
           "versus": {alt: iv.as_json() for alt, iv in sorted(versus.items())}}
    if last != rule:
        row["on_last"] = {"rule": last, "versus": versus_last[last].as_json() if last in versus_last else None}
    return row


def _choose(arms: dict, default: str, which: str, optimizers: frozenset[str] | None) -> tuple[str, dict]:
    versus = {alt: iv for alt in arms if alt not in ("reference", default)
              and (iv := compare(arms, alt, default, which, optimizers=optimizers))}
    passing = {alt: iv for alt, iv in versus.items() if alt in AUTO_RULES and iv.above_zero}
    if not passing:
        return default, versus
    top = max(iv.lo for iv in passing.values())
    return min((alt for alt, iv in passing.items() if iv.lo >= top - 0.001), key=AUTO_RULES.index), versus


def _has(arms: dict, arm: str, optimizers: frozenset[str] | None) -> bool:
    return any(optimizers is None or key[1] in optimizers for key in arms.get(arm, {}))


def _musgd_test(arms: dict) -> dict | None:
    """7J point 2: does MuSGD get its own key in this SGD-family cell? (a) MuSGD's own pairs put an arm auto
    can pass above `linear` with an interval above 0, or (b) the MuSGD x SGD interaction on an arm minus
    `linear` excludes 0. None where MuSGD has no pairs here (the cell keeps the pooled decision)."""
    default = DEFAULT_RULE["SGD"]
    own = {alt: iv for alt in arms if alt in AUTO_RULES and alt != default
           and (iv := compare(arms, alt, default, optimizers=MUSGD))}
    if not own:
        return None
    interaction = {alt: inter for alt in own if (inter := _interaction(arms, alt, default, "by_optimizer",
                                                                       "musgd_interaction", MUSGD_SIDES))}
    above = any(iv.above_zero for iv in own.values())
    differs = any(stats.Interval.from_json(x["musgd_interaction"]).excludes_zero for x in interaction.values())
    return {"own_key": above or differs, "alternatives": {alt: iv.as_json() for alt, iv in sorted(own.items())},
            "interaction": {alt: x["musgd_interaction"] for alt, x in sorted(interaction.items())}}


FEW_STEPS = ("bench_scaling_fewsteps_cpu.json", "bench_scaling_fewsteps_long_cpu.json")


def few_steps(folder: Path = RESULTS) -> dict:
    """The few-step regime (docs/scaling-campaigns.md 7C): AdamW `auto` at k = 4 on 256 images against its reference
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


def figures(rows: list[dict], decided: list[dict]) -> dict:
    """The measured figures the plan's reasons quote (evidence.py), from the saved trainings: how often the
    clip bound, the fewest optimizer steps with which auto's rule kept the reference from scratch, and the
    Adam-family fine-tuning's early epochs against the reference's."""
    return {"clip": _clip(rows), "kept_with_steps": _kept_with_steps(rows, decided), "finetune_dip": _dip(rows)}


def _clip(rows: list[dict]) -> dict:
    """The share of optimizer steps Ultralytics' clip bound in each SGD-family detect training that measured it."""
    seen = []
    for r in rows:
        c = r.get("clipping")
        c = ast.literal_eval(c) if isinstance(c, str) else c  # the first files kept it as Python's text of a dict
        if c and c.get("fraction") is not None and family_of(r["optimizer"]) == "SGD" and r["setup"].startswith("detect|"):
            seen.append((c["fraction"], r["effective"]["images_per_step"]))
    return {"trainings": len(seen), "min": min(f for f, _ in seen), "max": max(f for f, _ in seen),
            "images_per_step": [min(i for _, i in seen), max(i for _, i in seen)]}


def _kept_with_steps(rows: list[dict], decided: list[dict]) -> int:
    """The fewest optimizer steps in all of a detect training from scratch whose cell's decided rule ended
    within KEPT_GAP of the reference (evidence.KEPT_GAP: the plan warns below it)."""
    from orchestrator.scaling.evidence import KEPT_GAP

    kept = {(d["family"], d["k"], d["rule"]) for d in decided if (d["task"], d["start"]) == ("detect", "scratch")
            and d["gap"] and d["gap"]["mean"] >= -KEPT_GAP}
    return round(min(r["effective"]["optimizer_steps_per_epoch"] * int(r["setup"].split("|")[4]) for r in rows
                     if r["setup"].startswith("detect|scratch") and (family_of(r["optimizer"]), r["k"], r["arm"]) in kept))


def _dip(rows: list[dict], epochs: int = 5) -> dict:
    """Adam-family fine-tuning under auto's rule (linear) at each k: the highest validation of its first
    `epochs` epochs (the k-rules' warmup), against the reference's mean at that epoch."""
    tune = [r for r in rows if r["setup"].startswith("detect|pretrained") and family_of(r["optimizer"]) == "Adam"]
    ref = [r["curve"][epochs - 1] for r in tune if r["k"] == 1]
    out = {"epochs": epochs, "reference": round(sum(ref) / len(ref), 3), "by_k": {}}
    for k in sorted({r["k"] for r in tune if r["k"] > 1}):
        early = [max(r["curve"][:epochs]) for r in tune if r["k"] == k and r["arm"] == DEFAULT_RULE["Adam"]]
        out["by_k"][str(k)] = {"max": round(max(early), 3), "trainings": len(early)}
    return out


def build(folder: Path = RESULTS) -> dict:
    """The evidence file's content: the sources' digests, the cells, the comparisons, auto's decisions (7K on
    7J's exploration)."""
    rows, digests = load_trainings(folder)
    digests.update({name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in FEW_STEPS})
    named = name_arms(rows)
    pairs = _pairs(named)
    decided = confirm.apply(decisions(pairs), pairs, _pairs([r for r in named if r["source"] in FRESH]), HYPOTHESES)
    return {"generated_by": "python -m orchestrator.scaling.measured --write", "sources": digests,
            "declared": DECLARED, "cells": cells(pairs), "comparisons": comparisons(pairs), "decisions": decided,
            "few_steps": few_steps(folder), "figures": figures(named, decided)}


def main(argv: list[str] | None = None) -> int:
    from orchestrator.scaling import evidence, report

    ap = argparse.ArgumentParser(prog="python -m orchestrator.scaling.measured", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write evidence.json and the docs' generated blocks")
    ap.add_argument("--check", action="store_true", help="exit 1 where any differs from the saved results")
    args = ap.parse_args(argv)
    built = build()
    text = json.dumps(built, indent=1) + "\n"
    evidence_stale = _read(EVIDENCE) != text
    if args.write and evidence_stale:
        EVIDENCE.write_text(text)  # first: the docs' example and worked tables run the scaler, which reads it
        evidence.forget()
    docs = report.generated(built)
    stale = [p for p, new in docs.items() if _read(p) != new]
    if args.write:
        for path in stale:
            path.write_text(docs[path])
        written = ([EVIDENCE] if evidence_stale else []) + stale
        print("wrote " + ", ".join(str(p.relative_to(REPO)) for p in written) if written else "up to date")
        return 0
    stale = ([EVIDENCE] if evidence_stale else []) + stale
    if stale:
        print("stale (run python -m orchestrator.scaling.measured --write): "
              + ", ".join(str(p.relative_to(REPO)) for p in stale), file=sys.stderr)
        return 1
    return 0


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


if __name__ == "__main__":
    sys.exit(main())
