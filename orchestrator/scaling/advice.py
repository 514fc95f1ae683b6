"""The scaler's reasons and warnings, rendered from a policy's decision (rules.Rule): why lr0 and the
weight decay change and what that does to the step (details), what else changes with the images per
optimizer step, where a rule is an approximation or beyond what was measured, and what the target's
hardware changes (per-device BatchNorm, short warmup, TPU, several nodes)."""

from __future__ import annotations

import math
from typing import Any

from orchestrator.scaling import evidence
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.effective import fmt
from orchestrator.scaling.policies import Rule
from orchestrator.scaling.rules import DEVICE_RULE, K_POLICIES, OWN_KEYS, POLICY_ARMS, WARMUP_FROM_K, WARMUP_MIN_EPOCHS
from orchestrator.scaling.stats import Interval

LINEAR_LIMIT_IMAGES = 8192  # linear scaling held up to ~8k images per step on ImageNet (Goyal et al.)


def k_text(rule: Rule) -> str:
    """What the rule scales by: the devices for `table`, else the images per step."""
    t = rule.target
    if rule.name == DEVICE_RULE:
        return f"k = {t.world}/{t.world_ref} = {rule.k:.2f} devices"
    return f"k = {t.images}/{t.images_ref} = {float(t.k_images):.4g} images per step"


def lr_reason(rule: Rule) -> str:
    """The lr0 line's reason ('' where nothing changed): the rule, and for auto the row it rests on."""
    t, lr = rule.target, float(rule.lr_mult)
    if rule.name == DEVICE_RULE:
        return "" if rule.k == 1 and t.growth == 1 else f"table rule lr0 x {rule.k:.4g} ({_devices(t)})"
    if rule.stock:
        if t.k_images == 1 and (t.growth == 1 or rule.family == "Adam"):
            return ""
        why = (f"auto takes stock Ultralytics' values here: {decision_text(rule.decision)}" if rule.decision
               else "policy none: stock Ultralytics' values")
        return f"{why}; {k_text(rule)}"
    if rule.lr_mult == 1 and t.k_images == 1:
        return ""
    how = (f"lr0 x {lr:.4g} = k^{rule.exponent + 1:g} over {float(t.growth):.4g} micro-batches per step"
           if rule.family == "SGD" and t.mean_loss and t.growth != 1 else f"lr0 x {lr:.4g} = k^{rule.exponent:g}")
    if rule.family == "SGD" and lr == 1 and not t.mean_loss:
        how += (" (Ultralytics sums the loss over the images of a step, so the SGD step already grows with the "
                "images per step: the same lr0 is the linear rule)")
    if rule.decision is None:
        return f"{rule.name} rule (forced by policy): {how}, {k_text(rule)}"
    return f"auto takes {rule.applies.label}, {how}: {decision_text(rule.decision)}"


def batch_reason(total_req: int, total: int, images: int, world: int, lowered: bool, source: str,
                 max_b: int | None) -> str:
    b = total // world
    if lowered:
        return (f"per-device batch {total_req // world} ({source}) is above max_batch_per_device "
                f"{max_b}; lowered to {b} per device x {world} devices, accumulation "
                f"({images // total} steps) makes up the planned {images} images per optimizer step")
    return f"{b} per device x {world} devices ({source})"


def nbs_reason(nbs: int, total: int, images: int) -> str:
    acc = um.accumulate(nbs, total)
    return (f"the planned {images} images per step: accumulate {acc} x batch {total}; Ultralytics' weight-decay "
            f"factor batch*accumulate/nbs becomes 1")


def nbs_detail(nbs_ref: int, nbs: int, total: int, world: int) -> str:
    acc, stock = um.accumulate(nbs, total), um.accumulate(nbs_ref, total)
    return (f"nbs: accumulate = max(round({nbs}/{total}), 1) = {acc}; nbs {nbs_ref} would give accumulate {stock} "
            f"({total * stock} images per step)" + (
                "; if Ultralytics halves the batch after an out-of-memory error (first epoch, one process only), "
                "accumulation doubles and keeps the images per step" if world == 1 else ""))


def wd_changed(rule: Rule, wd_eff_ref: float, wd_target: float, images: int, nbs: int) -> str:
    return (f"{wd_reason(rule)}: the optimizer's {fmt(wd_eff_ref)} -> {fmt(wd_target)}; passed / ({images}/{nbs}), "
            "not applied twice")


def wd_kept(rule: Rule, wd_target: float, images: int, nbs: int) -> str:
    """The passed weight decay stays, what the optimizer gets does not."""
    return f"{wd_reason(rule)}; Ultralytics applies {fmt(wd_target)} (x batch*accumulate/nbs = {images}/{nbs})"


def warmup_lengthened(rule: Rule) -> str:
    return (f"gradual warmup of at least {WARMUP_MIN_EPOCHS:g} epochs (Goyal et al. 2017) because {k_text(rule)} "
            f"({'>= ' + format(WARMUP_FROM_K, 'g') if rule.name != DEVICE_RULE else '> 1'})")


def warmup_kept() -> str:
    return f"scaling.warmup keep (the rule would lengthen it to {WARMUP_MIN_EPOCHS:g})"


def reason_lines(ref, passed: dict[str, Any], changed: dict[str, list[str]], kept: dict[str, list[str]]) -> list[str]:
    """One line per passed value that differs from the reference, and per value kept on purpose while
    the images per step change (or whose applied value changes without it)."""
    lines = []
    for key in changed:
        old = getattr(ref, key)
        if passed[key] != old:
            lines.append(f"{key} {fmt(old)} -> {fmt(passed[key])}: {'; '.join(changed[key]) or 'derived'}")
        elif kept[key]:
            lines.append(f"{key} {fmt(old)} kept: {'; '.join(kept[key])}")
    return lines


def _devices(t) -> str:
    return f"k = {t.world}/{t.world_ref} devices"


def wd_reason(rule: Rule) -> str:
    """The head of the weight_decay line's reason."""
    t = rule.target
    if rule.name == DEVICE_RULE:
        return f"table rule effective weight decay x {rule.k:.4g} ({_devices(t)})"
    if rule.stock:
        return "Ultralytics multiplies weight decay by batch*accumulate/nbs"
    return f"{rule.name} keeps the decay per epoch (steps x 1/{rule.k:.4g}, lr0 x {float(rule.lr_mult):.4g})"


def decision_text(decision: evidence.Decision) -> str:
    """Why auto takes its rule, in one phrase: the comparison that decided it (n, the interval the procedure
    used, over how many machine kinds), the measured gap to the reference, the last epoch where it would
    decide otherwise, and for MuSGD whether the row is its own."""
    if decision.row is None:
        return f"the family's default below the measured k ({evidence.SECTION})"
    row = decision.row
    basis = evidence.basis_text(row)
    gap = f", {Interval.from_json(row['gap']).text()} vs the reference" if row["gap"] else ""
    start = "fine-tuning" if row["start"] == "pretrained" else "from scratch"
    where = f"{start} at k = {decision.k_measured:g}" + (", extrapolated beyond" if decision.extrapolated else "")
    last = f"; rests on best.pt: on the last epoch, {row['on_last']['rule']}" if "on_last" in row else ""
    mine = f"; {decision.pooled}" if decision.pooled else (f"; {row['family']}'s own pairs" if row["family"] in OWN_KEYS else "")
    return f"{basis} ({where}{gap}{last}{mine}; {evidence.SECTION})"


def step_detail(rule: Rule) -> str:
    """Why (or whether) the step grows with the batch at a fixed lr0, and what the rule's lr0 makes of it
    (plan --explain); '' where the images per step and the step's growth are the reference's."""
    t, lr = rule.target, float(rule.lr_mult)
    k, growth = float(t.k_images), float(t.growth)
    if t.images == t.images_ref and t.growth == 1:
        return ""
    if rule.family == "Adam":
        return (f"lr0: the {t.opt} update ignores the gradient's scale, so lr0 x {lr:.4g} makes each step x {lr:.4g} "
                f"and, with {k:.4g} x fewer steps, the movement per epoch x {lr / k:.4g}")
    if t.mean_loss:
        return (f"lr0: Ultralytics' classify loss is a mean per micro-batch, multiplied by the world size under DDP and "
                f"added up over accumulation: the {t.opt} step grows with the micro-batches per step (x {growth:.4g}); "
                f"lr0 x {lr:.4g} makes the mean-gradient step x {lr * growth:.4g}")
    return (f"lr0: Ultralytics' summed loss grows the {t.opt} gradient with the images per step (x {growth:.4g}), but "
            f"its clip at norm {um.CLIP_MAX_NORM:g} bound on {evidence.clip_bound()}: the step is lr0 x "
            f"{um.CLIP_MAX_NORM:g} long, so lr0 x {lr:.4g} makes the clipped step x {lr:.4g} and the movement per "
            f"epoch x {lr / k:.4g}")


def table_warning(rule: Rule, images: int, images_ref: int, auto_text: str) -> str:
    """`table` scales by the device count; say by how much the images per step really changed, what
    was measured and what `auto` (`auto_text`) would pass instead."""
    measured = evidence.gaps(rule.family, images / images_ref, DEVICE_RULE) if rule.k == 1 else []
    return (
        f"policy table scales by the device count (k = {rule.k:.2f}), but images per optimizer step go "
        f"{images_ref} -> {images}"
        + (" (Ultralytics' accumulation held them at nbs)" if images == images_ref else "")
        + f": lr0 and weight decay are multiplied by {rule.k:.2f} for a {images / images_ref:.2f}x change in "
        f"images per step"
        + (f" (x {rule.k * images / images_ref:.4g} in mean-gradient terms with SGD's summed loss)"
           if rule.family == "SGD" and images != images_ref else "")
        + (f"; measured on one process, where it keeps lr0 and the optimizer's weight decay: "
           f"{evidence.gaps_text(measured)}"
           if measured else "")
        + f"; {auto_text}"
    )


def few_steps_warning(eff: dict[str, Any], ref_eff: dict[str, Any], k: float) -> list[str]:
    """More images per step at the same epochs means k x fewer optimizer steps in all; below what was
    measured to be enough, say what was lost and offer the epochs that keep the reference's steps."""
    spe, spe_ref = eff.get("optimizer_steps_per_epoch"), ref_eff.get("optimizer_steps_per_epoch")
    if k <= 1 or not spe or not spe_ref:
        return []
    epochs = eff["epochs"]
    steps, steps_ref = spe * epochs, spe_ref * epochs
    kept_with = evidence.kept_with_steps()
    if steps >= kept_with:
        return []
    keep = math.ceil(steps_ref / spe)
    few = evidence.few_steps()
    gap = Interval.from_json(few["gap"])
    return [
        f"{steps:.0f} optimizer steps in all (the reference: {steps_ref:.0f}), fewer than the {kept_with} with "
        f"which auto was measured to keep the outcome. Measured with AdamW at k = 4: in {few['steps']} steps in all, "
        f"auto ended {-gap.mean:.3f} mAP50-95 below the reference's {few['reference']:.3f} (the gap: {gap.text()}); "
        f"trained {few['longer']['epochs']} epochs instead, so with the reference's number of steps again, it ended "
        f"{few['longer']['mean']:.3f}. --set epochs={keep} keeps the reference's steps, at {keep / epochs:.3g}x the cost"
    ]


def _measured_loss(rule: Rule, k: float, start: str, task: str) -> tuple[list[evidence.Gap], evidence.Gap | None,
                                                                     evidence.Gap | None]:
    """The rows at k from this start; where the rule lost more than KEPT_GAP to the reference (pooled),
    its row and the best rule's (else None, None)."""
    rows = [g for g in evidence.rows_at(rule.family, k, start, task, rule.target.opt) if not g.arm.longer]
    mine = next((g for g in rows if g.arm == rule.applies), None)
    if mine is None or mine.gap.mean >= -evidence.KEPT_GAP:
        return rows, None, None
    return rows, mine, max(rows, key=lambda g: g.gap.mean)


def _best_policy_text(mine: evidence.Gap, best: evidence.Gap) -> str:
    return "the best rule measured there" if best is mine else f"the best there, {best.text()}"


def _longer_text(start: str, family: str, k: float, epochs: int) -> str:
    """What more epochs did where they were measured, and the setting that doubles this job's."""
    rows = evidence.longer(start, family, k)
    if not rows:
        return "more epochs were not measured here: compare a longer run against the reference"
    return f"measured with more epochs: {evidence.gaps_text(rows)}: --set epochs={2 * epochs}, at 2x the cost"


def finetune_warnings(rule: Rule, k: float, epochs: int, task: str = "detect") -> list[str]:
    """Fine-tuning (the job starts from weights) at a measured k: where the rule lost more than KEPT_GAP
    to the reference, the gap, the best rule's and what kept it (more epochs); with an Adam-family
    optimizer, the early dip that was measured there, so nobody stops a run for it."""
    out = []
    rows, mine, best = _measured_loss(rule, k, "pretrained", task)
    if mine is not None:
        out.append(f"fine-tuning at k = {k:.4g}: {mine.text()}; " + _best_policy_text(mine, best) + "; "
                   + _longer_text("pretrained", rule.family, k, epochs))
    dip = evidence.finetune_dip(k) if rule.family == "Adam" and rows else None
    if dip:
        out.append(f"measured: {dip}: do not judge this run by its first epochs")
    return out


def scratch_gap_warning(rule: Rule, k: float, epochs: int, task: str = "detect") -> list[str]:
    """From scratch at a measured k where the rule lost more than KEPT_GAP to the reference (pooled): the
    gap, the best rule's (to set, where it kept the outcome), else what more epochs did."""
    _, row, best = _measured_loss(rule, k, "scratch", task)
    if row is None:
        return []
    kept = best.gap.mean >= -evidence.KEPT_GAP
    text = f"from scratch at k = {k:.4g}: {row.text()}; "
    if kept:
        return [text + f"{best.text()} kept it" + (f" (--set scaling.policy={best.arm.label})" if best.arm.label in POLICY_ARMS
                                                   else "")]
    return [text + _best_policy_text(row, best) + "; " + _longer_text("scratch", rule.family, k, epochs)]


def per_step_warnings(
    opt: str, rule: Rule, passed: dict[str, Any], eff: dict[str, Any], ref_eff: dict[str, Any],
    images: int, images_ref: int, start: str = "scratch", task: str = "detect",
) -> list[str]:
    """What changes with the images per optimizer step besides lr0 and weight decay, and where a rule
    is an approximation or beyond what was measured (`start`: from scratch, or fine-tuning)."""
    out = []
    k = images / images_ref
    if rule.name in K_POLICIES and images > LINEAR_LIMIT_IMAGES and k > 1:
        out.append(
            f"{images} images per optimizer step: large-batch rules held up to about {LINEAR_LIMIT_IMAGES} in "
            "Goyal et al.; beyond that expect a gap, or use a smaller batch"
        )
    if rule.decision is not None and rule.decision.extrapolated:
        when = "when fine-tuning" if start == "pretrained" else "from scratch"
        out.append(f"k = {k:.4g} is beyond the measured k <= {rule.decision.k_measured:g} {when} "
                   f"({evidence.SECTION}): auto extrapolates; compare a short run against the reference first")
    if start == "pretrained" and k > 1:
        out += finetune_warnings(rule, k, eff["epochs"], task)
    if rule.wd_mult != 1 and opt in um.COUPLED_L2 and opt not in um.SGD_FAMILY:
        out.append(
            f"{opt} applies weight decay as coupled L2 (torch): the per-epoch rule for weight decay is exact for "
            "SGD and AdamW's decoupled decay; treat the weight_decay change as an approximation"
        )
    if opt == "MuSGD" and k != 1:
        out.append(
            "MuSGD is scaled as SGD-family (its SGD branch steps with the summed gradient); its Muon branch "
            "(0.2 x lr, orthogonalised) ignores the gradient's scale, so its movement per epoch follows lr0 / k"
        )
    if start == "scratch":  # fine-tuning kept its outcome with fewer steps (section 7H): its own warnings above
        out += scratch_gap_warning(rule, k, eff["epochs"], task) + few_steps_warning(eff, ref_eff, k)
    wbl = passed["warmup_bias_lr"]
    if eff["warmup_epochs"] > 0 and passed["lr0"] > wbl > 0 and ref_eff["lr0"] <= wbl:
        out.append(
            f"lr0 {fmt(passed['lr0'])} is above warmup_bias_lr {fmt(wbl)}: during warmup Ultralytics moves the "
            f"bias lr from warmup_bias_lr to lr0, so the bias lr now rises instead of falling"
        )
    return out


def ema_and_clip_details(opt: str, eff: dict[str, Any], ref_eff: dict[str, Any], k: float) -> list[str]:
    """What else changes with the images per step (plan --explain): the EMA's horizon and the clip."""
    if k == 1:
        return []
    spe_t, spe_r = eff.get("optimizer_steps_per_epoch"), ref_eff.get("optimizer_steps_per_epoch")
    horizon = (f": its ramp (tau = {um.EMA_TAU} updates) spans {um.EMA_TAU / spe_r:.3g} epochs at the reference and "
               f"{um.EMA_TAU / spe_t:.3g} here" if spe_t and spe_r else "")
    return [f"images per step x {k:.4g}: Ultralytics' EMA of the weights updates once per optimizer step{horizon}; "
            "clip_grad_norm_(max_norm=10) acts on the summed gradient, whose norm grows with the images per step"
            + (f": it bound on {evidence.clip_bound()}, so the SGD step's length follows lr0 alone" if opt in um.SGD_FAMILY
               else f": the {opt} update ignores that scale")]


def momentum_warning(ref, passed: dict[str, Any], eff: dict[str, Any]) -> list[str]:
    """SGD's momentum after warmup, where the installed release's warmup never lands on it."""
    kept = eff.get("momentum_after_warmup")
    if kept is None or abs(kept - passed["momentum"]) <= 1e-9:
        return []
    nw, short = eff["warmup_iterations"], not ref.formulas.warmup_last_step
    why = (f"Ultralytics {ref.formulas.release} ends warmup one step early (`ni < nw`, 8.4.103-8.4.182)" if short
           else "warmup outlasts the run")
    fix = ("install Ultralytics >= 8.4.183, or set warmup_momentum to momentum" if short
           else "shorten warmup_epochs, or set warmup_momentum to momentum")
    return [f"momentum {fmt(passed['momentum'])} is never reached: {why}, so {passed['optimizer']} keeps momentum "
            f"{fmt(kept)} for the whole run (the ramp from warmup_momentum {fmt(ref.warmup_momentum)} stops short "
            f"of its {nw} warmup steps); {fix}"]


def target_warnings(ref, devices, passed: dict[str, Any], eff: dict[str, Any], ref_eff: dict[str, Any],
                    images: int, sync_bn: bool = False) -> list[str]:
    """What the target's hardware and dataset change whatever the policy."""
    out = []
    warmup, b = passed["warmup_epochs"], passed["batch"] // devices.world_size
    if warmup > um.warmup_epochs_applied(warmup, ref.epochs, ref.formulas.warmup_capped):
        out.append(f"warmup_epochs {fmt(warmup)} is capped by Ultralytics at epochs - 1 = {max(ref.epochs - 1, 0)}")
    if b < ref.batch // ref.world_size and not devices.xla:  # SPMD: BatchNorm sees the whole batch
        if not (sync_bn and devices.distributed):  # the job's sync_bn reduces them over the devices
            fix = "; `sync_bn: true` in the job computes them over all devices" if devices.distributed else ""
            out.append(
                f"per-device batch {ref.batch // ref.world_size} -> {b}: BatchNorm statistics are per device "
                f"(Ultralytics has no SyncBatchNorm) and get noisier with fewer images per device{fix}"
            )
    if ref.dataset_size and eff["images_per_step"] != images:
        out.append(
            f"accumulate is capped at batches_per_epoch*epochs = {eff['batches_per_epoch']}*{ref.epochs} by "
            f"Ultralytics: the dataset is too small for {images} images per step ({eff['images_per_step']} used)"
        )
    nw_t, nw_r = eff.get("warmup_iterations"), ref_eff.get("warmup_iterations")
    if nw_t is not None and nw_r is not None and nw_t < min(nw_r, 100):
        out.append(
            f"warmup is only {nw_t} iterations per device (reference {nw_r}): warmup_epochs count epochs and "
            "each device sees fewer batches per epoch; raise warmup_epochs if the first steps diverge"
        )
    out += momentum_warning(ref, passed, eff)
    if devices.kind == "tpu":
        out.append(
            f"tpu: batch {b} per core x {devices.world_size} cores in one process (SPMD: each step is one device's "
            "step with the whole batch, BatchNorm included); Ultralytics itself has no XLA path: the orchestrator's "
            "XLA worker applies these same Ultralytics formulas"
        )
    if devices.nodes > 1:
        out.append(
            f"{devices.nodes} nodes: Ultralytics launches single-node DDP only; the orchestrator runs torchrun "
            "per node with the same maths"
        )
    return out
