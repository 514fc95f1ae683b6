"""What changed between the Ultralytics releases yolo-orch accepts, in the formulas the scaler models.

Found by reading the releases' own source (each is a small pure-Python wheel: `pip download --no-deps
ultralytics==X`), the boundaries bisected, not sampled; docs/scaling.md ("Formulas by release") has the
lines. `formulas_for(version)` gives the installed release's row, which ultralytics_math takes as
arguments; tests/e2e/test_releases_source.py checks every boundary on the wheels, and
tests/e2e/test_release_matrix.py the plan against each release's real trainer.
"""

from __future__ import annotations

from dataclasses import dataclass

# The oldest release the worker runs on: it overrides the trainer's `_setup_train(self)` and
# `_setup_ddp(self)` and reads `trainer.world_size`, the forms 8.3.200 introduced (before, world_size was
# an argument of each: 8.3.196 trains to `AttributeError: ... no attribute 'world_size'`), and imports
# `unwrap_model`, which 8.3.196 added (8.3.0 dies at start with an ImportError).
OLDEST_WORKING = (8, 3, 200)
OLDEST_MARKER = ("engine/trainer.py", "def _setup_train(self):")
ACCEPTED = ">=8.3.200,<8.5"  # pyproject.toml's ultralytics requirement (a unit test keeps them equal)
NEWEST = (8, 4, 190)  # the pin (requirements/base.txt): the newest release modelled and tested
# The oldest release each launcher of several devices works on (the matrix test runs them at the boundary):
# (release, why not before)
LAUNCHER_MINIMUM = {
    "torchrun": ((8, 3, 229), "yolo-orch's ranks validate on every rank, as Ultralytics does from 8.3.218 (before, "
                              "only rank 0 did and the ranks hang at the first epoch's end), and 8.3.229 fixed its "
                              "distributed validation sampler for a val set smaller than the batch (before: ValueError "
                              "on rank 1)"),
    "xla": ((8, 4, 135), "the XLA backend builds on Ultralytics' E2ELoss (8.4.1) and "
                         "DetectionValidator._check_max_det (8.4.135)"),
}
# The oldest release that trains each task that came after 8.3.200: (release, the file and text that mark it,
# bisected on the wheels; tests/e2e/test_releases_source.py checks both sides of each boundary).
TASK_MINIMUM = {
    "semantic": ((8, 4, 52), "cfg/__init__.py", '"semantic"'),  # SemanticDataset, yolo26-sem.yaml
    "depth": ((8, 4, 104), "cfg/__init__.py", '"depth"'),  # DepthDataset, yolo26-depth.yaml
}
# The oldest release that builds a model family (by the model's file name): YOLO26's yamls came with 8.4.0.
FAMILY_MINIMUM = {"yolo26": ((8, 4, 0), "cfg/models/26/yolo26.yaml")}


@dataclass(frozen=True)
class Change:
    since: tuple[int, int, int]  # the first release with the new form
    before: str  # what the releases before it do
    where: str  # the line (engine/trainer.py) before it
    marker: str  # text engine/trainer.py holds from `since` on (to the pin) and not in the release before


CHANGES = (
    Change((8, 4, 0), "optimizer=auto: SGD (lr 0.01) above 10,000 iterations, AdamW (lr fit) at or below; no MuSGD",
           'name, lr, momentum = ("SGD", 0.01, 0.9) if iterations > 10000 else ("AdamW", lr_fit, 0.9)',
           "from ultralytics.optim import MuSGD"),
    Change((8, 4, 3), "optimizer=auto: SGD (lr 0.01) above 10,000 iterations, MuSGD (lr fit) at or below",
           'name, lr, momentum = ("SGD", 0.01, 0.9) if iterations > 10000 else ("MuSGD", lr_fit, 0.9)',
           '("MuSGD", 0.01'),
    Change((8, 4, 3), "warmup starts the first param group's lr at warmup_bias_lr, whichever group it is",
           "np.interp(ni, xi, [self.args.warmup_bias_lr if j == 0 else 0.0, ...])", 'x.get("param_group") == "bias"'),
    Change((8, 4, 8), "optimizer=auto: MuSGD (lr 0.01 above 10,000 iterations, the lr fit at or below)",
           'name, lr, momentum = ("MuSGD", 0.01 if iterations > 10000 else lr_fit, 0.9)',
           '("MuSGD", 0.01, 0.9) if iterations > 10000 else ("AdamW", lr_fit, 0.9)'),
    Change((8, 4, 103), "warmup: at least 100 iterations, not capped at epochs - 1, its last step included",
           "nw = max(round(self.args.warmup_epochs * nb), 100) if self.args.warmup_epochs > 0 else -1; if ni <= nw:",
           "def _get_warmup_iterations"),
    Change((8, 4, 177), "accumulate not capped at batches_per_epoch * epochs",
           "self.accumulate = max(round(self.args.nbs / self.batch_size), 1) (no cap)",
           "self.accumulate = min(self.accumulate, len(self.train_loader) * self.epochs)"),
    Change((8, 4, 183), "warmup stops one step short (ni < nw), so accumulate stays below its ramp's end, which is "
                        "nbs / batch (past a capped accumulate)",
           "if ni < nw: self.accumulate = max(1, int(np.interp(ni, xi, [1, self.args.nbs / self.batch_size]).round()))",
           "acc0 = self.accumulate"),
)


@dataclass(frozen=True)
class Formulas:
    """One release's formulas where the releases differ (ultralytics_math takes them as arguments)."""

    release: str = "8.4.190"
    auto_picks: tuple[str, str] = ("MuSGD", "AdamW")  # optimizer=auto above 10,000 iterations, at or below
    warmup_floor: int = 0  # nw = max(round(warmup_epochs * nb), floor): 100 before 8.4.103
    warmup_capped: bool = True  # warmup_epochs capped at epochs - 1 (8.4.103 on)
    warmup_last_step: bool = True  # step nw is a warmup step (`ni <= nw`); not in 8.4.103-8.4.182 (`ni < nw`)
    accumulate_capped: bool = True  # accumulate capped at batches_per_epoch * epochs (8.4.177 on)
    ramp_to_capped: bool = True  # warmup's accumulate ramp ends at the capped accumulate (8.4.183 on), else nbs/batch


def parse(version: str) -> tuple[int, int, int] | None:
    parts = version.split(".")[:3]
    try:
        major, minor, patch = (int("".join(ch for ch in p if ch.isdigit()) or "x") for p in parts)
    except ValueError:
        return None
    return major, minor, patch


def text(release: tuple[int, int, int]) -> str:
    return ".".join(map(str, release))


def auto_picks(version: str) -> tuple[str, str]:
    """What optimizer=auto picks (above 10,000 iterations, at or below) in the installed release."""
    release = parse(version) or NEWEST
    if release < (8, 4, 0):
        return "SGD", "AdamW"
    if release < (8, 4, 3):
        return "SGD", "MuSGD"
    return ("MuSGD", "MuSGD") if release < (8, 4, 8) else ("MuSGD", "AdamW")


def formulas_for(version: str) -> Formulas:
    """The installed release's formulas; an unreadable version is taken for the pin's."""
    r = parse(version) or NEWEST
    return Formulas(release=version, auto_picks=auto_picks(version), warmup_floor=100 if r < (8, 4, 103) else 0,
                    warmup_capped=r >= (8, 4, 103), warmup_last_step=not (8, 4, 103) <= r < (8, 4, 183),
                    accumulate_capped=r >= (8, 4, 177), ramp_to_capped=r >= (8, 4, 183))


def untested(version: str) -> list[str]:
    """A warning for an accepted release newer than the newest tested one (its formulas are taken for the
    pin's until `doctor --verify-plan` says otherwise)."""
    release = parse(version)
    if release is None or release <= NEWEST or release[:2] > NEWEST[:2]:
        return []
    return [f"Ultralytics {version} is newer than the newest release yolo-orch tests ({text(NEWEST)}): the plan "
            f"uses {text(NEWEST)}'s formulas; `yolo-orch doctor --verify-plan JOB` checks them against this release's "
            "trainer"]


def refusal(version: str, optimizer: str | None = None, launcher: str = "local", devices: str = "",
            accepted: str = ACCEPTED, task: str | None = None, model: str | None = None) -> str | None:
    """Why the installed release cannot run this training (None: it can)."""
    release = parse(version)
    if release is None:
        return None
    if release < OLDEST_WORKING:
        return (f"ultralytics {version} is installed; yolo-orch's training process needs {text(OLDEST_WORKING)} or later "
                f"(it hooks into the trainer as that release shaped it; accepted: {accepted}): pip install "
                f"'ultralytics{accepted}'")
    if release[:2] > (8, 4):
        return (f"ultralytics {version} is installed; yolo-orch accepts {accepted} (the releases it models and tests): "
                f"pip install 'ultralytics{accepted}'")
    if launcher in LAUNCHER_MINIMUM and release < LAUNCHER_MINIMUM[launcher][0]:
        needed, why = LAUNCHER_MINIMUM[launcher]
        return (f"target.devices: {devices} needs Ultralytics {text(needed)} or later ({launcher}: {why}); the installed "
                f"{version} trains on one CPU process or one GPU: pip install 'ultralytics>={text(needed)},<8.5'")
    if optimizer == "MuSGD" and release < (8, 4, 0):
        return (f"hyp.optimizer: MuSGD came with Ultralytics 8.4.0; the installed {version} has SGD, Adam, Adamax, "
                "AdamW, NAdam, RAdam, RMSprop")
    if task in TASK_MINIMUM and release < TASK_MINIMUM[task][0]:
        needed = text(TASK_MINIMUM[task][0])
        return (f"task: {task} came with Ultralytics {needed}; the installed {version} does not train it: "
                f"pip install 'ultralytics>={needed},<8.5'")
    family = next((f for f in FAMILY_MINIMUM if model and f in model.rsplit("/", 1)[-1].lower()), None)
    if family and release < FAMILY_MINIMUM[family][0]:
        needed = text(FAMILY_MINIMUM[family][0])
        return (f"model: {family.upper()} models came with Ultralytics {needed}; the installed {version} cannot build "
                f"{model}: pip install 'ultralytics>={needed},<8.5', or a yolo11 model")
    return None
