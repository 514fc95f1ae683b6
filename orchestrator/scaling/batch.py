"""The batch arithmetic: the target's total batch, the images per optimizer step a policy plans, and
the batch/nbs split that gives exactly those images."""

from __future__ import annotations

from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.rules import STOCK_IMAGES
from orchestrator.scaling.types import ReferenceHyp, TargetHardware


def nearest_totals(total: int, world: int) -> str:
    lo = (total // world) * world
    hi = lo + world
    return f"{lo} or {hi}" if lo >= world else f"{hi}"


def target_batch(ref: ReferenceHyp, target: TargetHardware, problems: list[str]) -> tuple[int, str]:
    world = target.devices.world_size
    if target.batch is not None and target.batch_per_device is not None:
        problems.append("target: give batch (total) or batch_per_device, not both")
        return 0, ""
    for name in ("batch", "batch_per_device", "max_batch_per_device"):
        v = getattr(target, name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            problems.append(f"target.{name}: {v!r} must be an integer >= 1 (AutoBatch is not scaled)")
    if problems:
        return 0, ""
    if target.batch is not None:
        total, why = target.batch, "target.batch"
        if total % world:
            problems.append(
                f"target.batch: {total} is not divisible by {world} devices; "
                f"nearest valid: {nearest_totals(total, world)}"
            )
    elif target.batch_per_device is not None:
        total, why = target.batch_per_device * world, "target.batch_per_device"
    else:
        total, why = (ref.batch // ref.world_size) * world, "the reference's per-device batch"
    return total, why


def plan_images(policy: str, images_ref: int, total: int, nbs_ref: int) -> int:
    """Images per optimizer step the target will use."""
    if policy in STOCK_IMAGES:
        return total * um.accumulate(nbs_ref, total)  # what stock Ultralytics does with the reference nbs
    if images_ref % total == 0:
        return images_ref  # accumulation can hold it exactly
    # nearest multiple of the total batch (ties: the smaller one, the conservative lr)
    lo = max(images_ref // total, 1) * total
    hi = lo + total
    return lo if (images_ref - lo) <= (hi - images_ref) or images_ref < total else hi


def split(
    images: int, total: int, world: int, max_b: int | None, nbs_ref: int, keep_nbs: bool
) -> tuple[int, int, bool]:
    """(total batch to pass, nbs to pass, lowered?) so that batch * accumulate == images exactly.

    nbs is the reference's when ``keep_nbs`` and it already gives ``images`` for this batch; otherwise
    nbs = images. Then Ultralytics' weight-decay factor batch*accumulate/nbs is exactly 1 (the passed
    weight_decay is the effective one), and if Ultralytics halves the batch after a CUDA OOM (first epoch,
    one process only) its accumulation doubles and keeps the same images per step.

    When nbs = images and images is a multiple of batch, accumulate = max(round(images / batch), 1)
    = images / batch: the quotient is an exact integer (IEEE division of integers whose quotient is a
    representable integer is exact), so round() has nothing to round.
    """
    b = total // world
    lowered = False
    if max_b is not None and b > max_b:
        per_dev_images = images // world  # images is a multiple of total = b * world
        b = max(d for d in range(1, max_b + 1) if per_dev_images % d == 0)
        total = b * world
        lowered = True
    if keep_nbs and not lowered and total * um.accumulate(nbs_ref, total) == images:
        nbs = nbs_ref
    else:
        nbs = images
    assert total * um.accumulate(nbs, total) == images, (total, nbs, images)
    return total, nbs, lowered
