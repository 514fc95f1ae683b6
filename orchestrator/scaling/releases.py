"""What changed between the Ultralytics releases yolo-orch accepts, in the formulas the scaler models.

Found by reading the releases' own source (each is a small pure-Python wheel: `pip download --no-deps
ultralytics==X`), the boundaries bisected, not sampled (docs/scaling.md, "Formulas by release", has
the lines). `ultralytics_math.py` models the newest row; for an installed release of another row the
plan says what differs (`differences`) instead of claiming what that release does not do.
"""

from __future__ import annotations

from dataclasses import dataclass

# The oldest release the worker runs on: it imports `unwrap_model` (ultralytics/utils/torch_utils.py),
# which 8.3.196 added; 8.3.0 dies at start with an ImportError.
OLDEST_WORKING = (8, 3, 196)
OLDEST_MARKER = ("utils/torch_utils.py", "def unwrap_model")
ACCEPTED = ">=8.3.196,<8.5"  # pyproject.toml's ultralytics requirement (a unit test keeps them equal)
MODELLED = (8, 4, 183)  # ultralytics_math.py's formulas are those of this release and later (to the pin, 8.4.190)


@dataclass(frozen=True)
class Change:
    since: tuple[int, int, int]  # the first release with the new behaviour
    what: str  # the formula before it, as the plan's warning says it
    where: str  # the source line (engine/trainer.py) that changed
    modelled: bool = False  # the scaler follows the installed release here (else the plan warns)
    marker: str = ""  # text ultralytics/engine/trainer.py holds from `since` on and not before (the tests bisect by it)


CHANGES = (
    Change((8, 4, 0), "optimizer=auto picks SGD (lr 0.01, momentum 0.9) above 10,000 iterations and AdamW (the lr "
                      "fit) at or below",
           "build_optimizer: name, lr, momentum = (\"SGD\", 0.01, 0.9) if iterations > 10000 else (\"AdamW\", lr_fit, 0.9)",
           modelled=True, marker="from ultralytics.optim import MuSGD"),
    Change((8, 4, 8), "optimizer=auto picks SGD (lr 0.01, momentum 0.9) above 10,000 iterations and MuSGD (the lr "
                      "fit) at or below", "build_optimizer: (\"SGD\", 0.01, 0.9) if iterations > 10000 else (\"MuSGD\", lr_fit, 0.9)",
           modelled=True, marker='("MuSGD", 0.01, 0.9) if iterations > 10000 else ("AdamW", lr_fit, 0.9)'),
    Change((8, 4, 103), "warmup lasts at least 100 iterations (nw = max(round(warmup_epochs * nb), 100)) and is not "
                        "capped at epochs - 1", "_do_train: nw = max(round(self.args.warmup_epochs * nb), 100)",
           marker="def _get_warmup_iterations"),
    Change((8, 4, 177), "accumulate is not capped at batches_per_epoch * epochs",
           "_setup_train: self.accumulate = min(self.accumulate, len(self.train_loader) * self.epochs) (absent)",
           marker="self.accumulate = min(self.accumulate, len(self.train_loader) * self.epochs)"),
    Change((8, 4, 183), "warmup ramps accumulate from 1 to nbs / batch (not to the capped accumulate)",
           "_do_train: np.interp(ni, xi, [1, self.args.nbs / self.batch_size])", marker="acc0 = self.accumulate"),
)


def parse(version: str) -> tuple[int, int, int] | None:
    parts = version.split(".")[:3]
    try:
        major, minor, patch = (int("".join(ch for ch in p if ch.isdigit()) or "x") for p in parts)
    except ValueError:
        return None
    return major, minor, patch


def text(release: tuple[int, int, int]) -> str:
    return ".".join(map(str, release))


def differences(version: str) -> list[str]:
    """What the installed release does differently from the formulas the plan models (the newest
    row), one line each; [] for a release of the newest row or an unreadable version."""
    release = parse(version)
    if release is None:
        return []
    return [f"Ultralytics {version} (before {text(change.since)}): {change.what}; the plan's values model "
            f"{text(MODELLED)} and later" for change in CHANGES if release < change.since and not change.modelled]


def auto_picks(version: str) -> tuple[str, str]:
    """What optimizer=auto picks (above 10,000 iterations, at or below) in the installed release."""
    release = parse(version) or MODELLED
    if release < (8, 4, 0):
        return "SGD", "AdamW"
    return ("SGD", "MuSGD") if release < (8, 4, 8) else ("MuSGD", "AdamW")


def refusal(version: str, optimizer: str | None = None, accepted: str = ACCEPTED) -> str | None:
    """Why the installed release cannot run this training (None: it can)."""
    release = parse(version)
    if release is None:
        return None
    if release < OLDEST_WORKING:
        return (f"ultralytics {version} is installed; yolo-orch's training process needs {text(OLDEST_WORKING)} or later "
                f"(it imports unwrap_model, added then; accepted: {accepted}): pip install 'ultralytics{accepted}'")
    if release[:2] > (8, 4):
        return (f"ultralytics {version} is installed; yolo-orch accepts {accepted} (the releases it models and tests): "
                f"pip install 'ultralytics{accepted}'")
    if optimizer == "MuSGD" and release < (8, 4, 0):
        return (f"hyp.optimizer: MuSGD came with Ultralytics 8.4.0; the installed {version} has SGD, Adam, Adamax, "
                "AdamW, NAdam, RAdam, RMSProp")
    return None
