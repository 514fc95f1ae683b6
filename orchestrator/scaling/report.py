"""The evidence (evidence.json) in words and tables: docs/scaling.md's guide and tables and the README's
scaling paragraph, each a block between markers that `python -m orchestrator.scaling.measured --write`
regenerates (and `--check`, which the suite runs, finds stale). No number in them is typed by hand."""

from __future__ import annotations

from pathlib import Path

from orchestrator.scaling import stats
from orchestrator.scaling.confirm import AWAITING, CONFIRMED, MIN_PAIRS, REJECTED
from orchestrator.scaling.evidence import basis_text, clip_text
from orchestrator.scaling.rules import OWN_KEYS
from orchestrator.scaling.ultralytics_math import AUTO_ITERATIONS_THRESHOLD, CLIP_MAX_NORM

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "scaling.md"
README = REPO / "README.md"


WRITER = "python -m orchestrator.scaling.measured --write"


def marker(name: str, writer: str = WRITER) -> tuple[str, str]:
    """A generated block's two lines, the first naming the command that writes it."""
    return (f"<!-- {name}: begin ({writer}) -->", f"<!-- {name}: end -->")


def generated(evidence: dict) -> dict[Path, str]:
    """Each file with a generated block, as it should read."""
    doc = replace_block(DOC.read_text(), "measured", render(evidence), DOC)
    doc = replace_block(doc, "guide", guide(evidence), DOC)
    doc = replace_block(doc, "example", example(), DOC)
    doc = replace_block(doc, "worked", worked_tables(), DOC)
    return {DOC: doc, README: replace_block(README.read_text(), "scaling", readme(evidence), README)}


FAMILY_WORDS = {"SGD": "SGD, MuSGD", "MuSGD": "MuSGD", "Adam": "AdamW, Adam, Adamax, NAdam, RAdam, RMSprop"}
START_WORDS = {"scratch": "from scratch", "pretrained": "fine-tuning"}


def optimizer_words(d: dict, decisions: list[dict]) -> str:
    """Who follows a decision row: its family, less an optimizer with a row of its own in the same cell."""
    own = [o for o, fam in OWN_KEYS.items() if fam == d["family"] and any(
        (x["task"], x["start"], x["family"], x["k"]) == (d["task"], d["start"], o, d["k"]) for x in decisions)]
    return d["family"] if own else FAMILY_WORDS[d["family"]]


def guide(evidence: dict) -> str:
    """docs/scaling.md's first page: what auto passes per optimizer, start and measured k, and what decided it."""
    lines = [
        "`scaling.policy: auto` (the default) passes one rule per optimizer family, start and k (the target's images "
        "per optimizer step over the reference's): the family's default, `linear`, except where a departure from it "
        f"was confirmed on fresh runs by the procedure of section 7K, declared in commit {evidence['declared']} "
        "before those runs. Its hypotheses are the departures 7J took from every saved training, most of them "
        f"seen before any procedure was written; each stands on at least {MIN_PAIRS} fresh seed pairs alone, and "
        "keeps 7J's choice while it awaits them. Intervals are 95 %, paired by seed, over the machine kinds the "
        "pairs ran on (7J point 1); best.pt decides. The gap to the reference is over every saved training.", "",
        "| optimizer | start | k | auto's rule | what it passes | decided by | auto - reference |",
        "|---|---|---|---|---|---|---|"]
    for d in evidence["decisions"]:
        if d["task"] == "detect":
            lines.append(_guide_row(d, evidence["decisions"]))
    figures = evidence["figures"]
    lines += ["",
              "- Between two measured k: the lower one's rule; below the smallest: the default (`linear`); beyond "
              "the largest: its rule, and the plan says it extrapolates.",
              f"- Other tasks: their own rows where measured (section 7I's table: {_other_tasks(evidence)}), else "
              "detect's.",
              f"- MuSGD (what `optimizer=auto` trains above {AUTO_ITERATIONS_THRESHOLD:,} iterations) takes its own "
              "row where 7J found its pairs differed from SGD's (7J point 2) and 7K holds a hypothesis for it; "
              "elsewhere SGD's, and the plan says whether MuSGD was measured there.",
              f"- The device is not in the key: {_device_words(evidence)}",
              f"- The clip at norm {CLIP_MAX_NORM:g} bound on {clip_text(figures['clip'])}; the plan warns below "
              f"{figures['kept_with_steps']} optimizer steps in all, the fewest with which auto's rule kept a "
              "reference from scratch."]
    return "\n".join(lines)


EXAMPLE = """from orchestrator.scaling.scaler import scale
from orchestrator.scaling.types import ReferenceHyp, TargetHardware
from orchestrator.devices import parse_devices

r = scale(ReferenceHyp(optimizer="SGD", batch=16, lr0=0.01),
          TargetHardware(parse_devices("8"), batch_per_device=32), policy="auto")"""


def example() -> str:
    """The scaler called from Python, with what it returns: EXAMPLE is run here, so the text is what it says today."""
    import textwrap

    namespace: dict = {}
    exec(EXAMPLE, namespace)  # this module's own constant: the code the docs show is the code that ran
    r = namespace["r"]
    effective = {k: r.effective[k] for k in ("world_size", "batch_per_device", "accumulate", "images_per_step",
                                             "weight_decay", "lr0")}
    wrap = lambda text: textwrap.fill(text, 100, initial_indent="#  ", subsequent_indent="#  ")  # noqa: E731
    lr0 = next(x for x in r.reasons if x.startswith("lr0"))
    detail = next(x for x in r.details if x.startswith("lr0"))
    return "\n".join(["```python", EXAMPLE, "", f"r.passed     # {r.passed}", f"r.effective  # {effective} ...",
                      "r.reasons    # one line per changed value, e.g.", wrap(lr0),
                      "r.details    # the mechanisms behind them (`yolo-orch plan --explain`), e.g.", wrap(detail), "```"])


def _guide_row(d: dict, decisions: list[dict]) -> str:
    why = "the default, not measured here" if d["basis"] == "default, not measured here" else basis_text(d)
    return (f"| {optimizer_words(d, decisions)} | {START_WORDS[d['start']]} | {d['k']} | **{d['rule']}** | "
            f"{_lr0_words(d)} | {why} | {_iv(d['gap'])} |")


def _lr0_words(d: dict) -> str:
    """What the rule does to lr0 at this k (rules.K_RULES; `none` keeps it, the warmup kept or lengthened)."""
    from orchestrator.scaling.rules import K_RULES, WARMUP_FROM_K, WARMUP_MIN_EPOCHS, Arm

    arm, family = Arm.parse(d["rule"]), OWN_KEYS.get(d["family"], d["family"])
    warmup = "the reference's warmup" if arm.keep_warmup or arm.rule == "none" or d["k"] < WARMUP_FROM_K \
        else f"warmup >= {WARMUP_MIN_EPOCHS:g} epochs"
    if arm.rule == "none":
        return f"lr0 x 1, Ultralytics' own weight decay, {warmup}"
    factor = d["k"] ** K_RULES[arm.rule][family]
    return f"lr0 x {factor:.3g}, weight decay per epoch kept, {warmup}"


def _other_tasks(evidence: dict) -> str:
    tasks = sorted({d["task"] for d in evidence["decisions"]} - {"detect"})
    return ", ".join(tasks)


def _device_words(evidence: dict) -> str:
    welch = [c for c in evidence["comparisons"] if "interaction" in c]
    excl = [c for c in welch if stats.Interval.from_json(c["interaction"]).excludes_zero]
    grouped = [c for c in welch if stats.Interval.from_json(c["interaction_grouped"]).excludes_zero]
    return (f"of {len(welch)} GPU-minus-CPU interactions, the interval of {len(excl)} excludes 0 by section 7I's "
            f"Welch test and of {len(grouped)} as the difference of the machine-grouped estimates; none was reproduced "
            "by a run that switches a mechanism (7I step 6), so no rule differs by device.")


def readme(evidence: dict) -> str:
    """The README's scaling paragraph: auto against the reference and stock Ultralytics at the largest k,
    the machines, and what was declared first."""
    decisions = evidence["decisions"]
    judged = [d["basis"] for d in decisions if "confirmation" in d]
    scratch = [_versus_stock(evidence, d) for d in decisions if (d["task"], d["start"], d["k"]) == ("detect", "scratch", 8)]
    tune = [f"{_short(d, decisions)} **{d['rule']}** {_iv(d['gap'])}" for d in decisions
            if (d["task"], d["start"], d["k"]) == ("detect", "pretrained", 8)]
    return (
        "- **Scaling fidelity** (yolo11n and other tasks' models on generated data; every saved training, paired by "
        f"seed, 95 % intervals over the machine kinds: {machine_words(evidence)}; docs/scaling.md opens with the page "
        "generated from them): `auto` takes one rule per optimizer family, start and k, the same on every device. "
        "From scratch at 8x the images per optimizer step, against the reference: " + "; ".join(scratch)
        + ". Fine-tuning at 8x: " + "; ".join(tune) + f". The procedure that decides (docs/scaling.md 7K, commit "
        f"{evidence['declared']}) was declared before its runs and decides from them alone: of the {len(judged)} "
        "departures from the default that 7J took from trainings mostly seen before any declaration, "
        f"{judged.count(CONFIRMED)} confirmed on fresh seeds, {judged.count(REJECTED)} rejected and "
        f"{judged.count(AWAITING)} awaiting their runs; the default, `linear`, was chosen after the early runs were seen.")


def machine_words(evidence: dict) -> str:
    """'3 CPU models, 4 CPUs whose model the older files did not record, an NVIDIA H100 and an NVIDIA H200'."""
    machines = sorted({c["machine"] for c in evidence["cells"]})
    gpus = [f"an {m}" for m in machines if m.startswith("NVIDIA")]
    unnamed = sum(m.startswith("CPU, model not recorded") for m in machines)
    named = len(machines) - len(gpus) - unnamed
    parts = [f"{named} CPU models", f"{unnamed} CPUs whose model the older files did not record", *gpus]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _short(d: dict, decisions: list[dict]) -> str:
    return {"Adam": "AdamW", "MuSGD": "MuSGD"}.get(d["family"], optimizer_words(d, decisions).replace(", ", " and "))


def _versus_stock(evidence: dict, d: dict) -> str:
    stock = next((c for c in evidence["comparisons"] if (c["task"], c["start"], c["family"], c["k"], c["arm"],
                  c["versus"]) == (d["task"], d["start"], d["family"], d["k"], "none", "reference")), None)
    text = f"{_short(d, evidence['decisions'])} **{d['rule']}** {_iv(d['gap'])}"
    return text + (f" (stock Ultralytics {_iv(stock['best'])})" if stock and d["rule"] != "none" else "")


def replace_block(text: str, name: str, block: str, path: Path, writer: str = WRITER) -> str:
    """text with the lines between the block's markers replaced."""
    begin, end = marker(name, writer)
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: the markers {begin!r} and {end!r} are missing")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + block + "\n" + end + rest.split(end, 1)[1]


def _ivs(named: dict) -> str:
    """'lr0-sqrt +0.020 [...], n = 9, 3 machines; none ...': each named interval, '-' for none."""
    return "; ".join(f"{name} {_iv(iv)}" for name, iv in named.items()) or "-"


def _iv(d: dict | None) -> str:
    return stats.Interval.from_json(d).text() if d else "-"


def summary(evidence: dict) -> list[str]:
    """What the procedures decided, in sentences: each hypothesis's fate on fresh runs (7K), where 7J's test gave
    MuSGD a key of its own, where the last epoch would decide otherwise, and the device interactions excluding 0."""
    fate = {status: [f"{d['task']} {d['start']} {d['family']}{'' if d['family'] in OWN_KEYS else '-family'} at k = "
                     f"{d['k']}: {d['confirmation']['hypothesis']} (fresh: {_iv(d['confirmation']['best'])}; "
                     f"7J on every run: {_iv(d['versus'].get(d['confirmation']['hypothesis']))})"
                     for d in evidence["decisions"] if d["basis"] == status]
            for status in (CONFIRMED, REJECTED, AWAITING)}
    own = [f"{d['task']} {d['start']} at k = {d['k']}" for d in evidence["decisions"] if d.get("musgd", {}).get("own_key")]
    last = [f"{d['task']} {d['start']} {d['family']} at k = {d['k']}: {d['on_last']['rule']}"
            for d in evidence["decisions"] if "on_last" in d]
    device = [f"{c['task']} {c['start']} {c['family']} k = {c['k']} {c['arm']} - {c['versus']}: "
              f"{_iv(c['interaction'])}" for c in evidence["comparisons"] if "interaction" in c
              and stats.Interval.from_json(c["interaction"]).excludes_zero]
    grouped = [f"{c['task']} {c['start']} {c['family']} k = {c['k']} {c['arm']} - {c['versus']}: "
               f"{_iv(c['interaction_grouped'])}" for c in evidence["comparisons"] if "interaction_grouped" in c
               and stats.Interval.from_json(c["interaction_grouped"]).excludes_zero]
    return ["**Decided** (7K): the default everywhere but where a hypothesis was confirmed on fresh runs.",
            *(f"**{status.capitalize()}**: " + ("; ".join(cells) or "none") + "." for status, cells in fate.items()),
            "**7J's test gave MuSGD its own pairs** (7J point 2): " + ("; ".join(own) or "nowhere") + ".",
            "**Where the last epoch would decide otherwise** (7K point 4): " + ("; ".join(last) or "nowhere") + ".",
            "**Device x policy interactions with an interval excluding 0** (7I's Welch test, the one its step 6 "
            "gates on): " + ("; ".join(device) or "none") + ".",
            "**The same, as the difference of the machine-grouped estimates (+-1.96)**: "
            + ("; ".join(grouped) or "none") + "."]


def render(evidence: dict) -> str:
    """docs/scaling.md's generated tables: auto's decisions, MuSGD's own test, the interactions, every cell."""
    lines = summary(evidence) + ["", "auto's rule per measured cell (7K on 7J's exploration; paired differences of "
                                 "best.pt's mAP50-95, or top-1 for classify, with 95 % intervals over the machine "
                                 "kinds, 7J point 1; the last two columns over every saved run):", "",
             "| task | start | family | k | auto | basis | fresh: hypothesis - linear | auto - reference | "
             "alternatives - the default |", "|---|---|---|---|---|---|---|---|---|"]
    for d in evidence["decisions"]:
        c = d.get("confirmation")
        fresh = f"{c['hypothesis']} {_iv(c['best'])}" if c else "-"
        lines.append(f"| {d['task']} | {d['start']} | {d['family']} | {d['k']} | **{d['rule']}** | {d['basis']} | "
                     f"{fresh} | {_iv(d['gap'])} | {_ivs(d['versus'])} |")
    lines += ["", "MuSGD's own pairs in the SGD family's cells (7J point 2: its own key where an alternative beat "
              "`linear` on them, or the MuSGD - SGD interaction excludes 0):", "",
              "| task | start | k | own key | alternatives - linear, MuSGD alone | MuSGD - SGD interaction |",
              "|---|---|---|---|---|---|"]
    for d in evidence["decisions"]:
        if "musgd" in d:
            m = d["musgd"]
            lines.append(f"| {d['task']} | {d['start']} | {d['k']} | {'yes' if m['own_key'] else 'no'} | "
                         f"{_ivs(m['alternatives'])} | {_ivs(m['interaction'])} |")
    lines += ["", "Device x policy interactions (the paired difference on GPUs minus on CPUs, where each kind has "
              "two pairs or more; Welch's on the pairs, 7I step 6, and the difference of the grouped estimates):", "",
              "| task | start | family | k | arms | GPU | CPU | GPU - CPU (Welch) | GPU - CPU (grouped) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in evidence["comparisons"]:
        if "interaction" in c:
            lines.append(f"| {c['task']} | {c['start']} | {c['family']} | {c['k']} | {c['arm']} - {c['versus']} | "
                         f"{_iv(c['by_kind']['gpu'])} | {_iv(c['by_kind']['cpu'])} | {_iv(c['interaction'])} | "
                         f"{_iv(c['interaction_grouped'])} |")
    return "\n".join(lines + [""] + _cell_table(evidence))


def _cell_table(evidence: dict) -> list[str]:
    lines = ["Every cell (per machine kind; seeds as best.pt / last epoch):", "",
             "| task | start | optimizer | k | arm | machine | n | mean best.pt | mean last | gap to reference "
             "(best.pt) | seeds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in evidence["cells"]:
        seeds = ", ".join(f"{s}: {b:.3f}/{last:.3f}" for s, (b, last) in c["seeds"].items())
        lines.append(f"| {c['task']} | {c['start']} | {c['optimizer']} | {c['k']} | {c['arm']} | {c['machine']} | "
                     f"{c['best']['n']} | {c['best']['mean']:.3f} | {c['last']['mean']:.3f} | "
                     f"{_iv(c.get('gap_best'))} | {seeds} |")
    return lines


WORKED_DEVICES = (("1 GPU", "0"), ("2 GPUs", "2"), ("4 GPUs", "4"), ("8 GPUs", "8"), ("TPU v3-8", "tpu:8"))


def worked_tables() -> str:
    """docs/scaling.md section 6: what the scaler passes for two references on 1 to 8 GPUs and a TPU v3-8."""
    from orchestrator.scaling.types import ReferenceHyp

    sgd = ReferenceHyp(optimizer="SGD", world_size=1, batch=16, nbs=64, lr0=0.01, weight_decay=0.0005)
    adamw = ReferenceHyp(optimizer="AdamW", world_size=1, batch=16, nbs=64, lr0=0.001, momentum=0.9, weight_decay=0.05)
    return "\n".join([
        _worked("A. SGD reference (1 GPU, batch 16, nbs 64, lr0 0.01, wd 0.0005); target keeps 16 per device", sgd,
                ["auto", "table", "none"], None),
        _worked("B. Same SGD reference; target uses 32 per device (true large batch)", sgd,
                ["auto", "linear", "table", "none"], 32),
        _worked("C. AdamW reference (1 GPU, batch 16, nbs 64, lr0 0.001, wd 0.05); target uses 32 per device", adamw,
                ["auto", "linear", "none"], 32)]).rstrip()


def _worked(title: str, ref, policies: list[str], per_device: int | None) -> str:
    from orchestrator.devices import parse_devices
    from orchestrator.scaling.scaler import scale
    from orchestrator.scaling.types import TargetHardware

    lines = [f"#### {title}", "", "| devices | policy | batch (total) | per device | nbs | accumulate | images/step | k "
             "| lr0 | weight_decay passed | weight_decay effective | warmup_epochs |", "|" + "---|" * 12]
    for label, spec in WORKED_DEVICES:
        target = TargetHardware(parse_devices(spec), batch_per_device=per_device)
        for policy in policies:
            r = scale(ref, target, policy)
            p, e = r.passed, r.effective
            lines.append(f"| {label} | {policy} | {p['batch']} | {e['batch_per_device']} | {p['nbs']} | {e['accumulate']} "
                         f"| {e['images_per_step']} | {r.k:.3g} | {p['lr0']:.6g} | {p['weight_decay']:.6g} "
                         f"| {e['weight_decay']:.6g} | {p['warmup_epochs']:.6g} |")
    return "\n".join(lines) + "\n"
