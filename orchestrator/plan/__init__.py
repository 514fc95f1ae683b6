"""The plan: what will run, where, with which exact Ultralytics arguments, and why.

Pure core: no torch, no ultralytics. `plan`, `submit --dry-run` and `submit` all
build the same Plan, so what is shown is what runs."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.scaling import releases
from orchestrator.scaling.scaler import scale
from orchestrator.scaling.types import ReferenceHyp, ScaleResult, TargetHardware
from orchestrator.devices import DeviceSpec
from orchestrator.launch.torchrun import NodeLaunch
from orchestrator.errors import UserError
from orchestrator.jobspec import ultralytics_cfg
from orchestrator.jobspec.job import advised_range_warnings
from orchestrator.jobspec.job_data import DataInfo, describe_data
from orchestrator.jobspec.loader import LoadedJob, resolve_hyp
from orchestrator.jobspec.slurm import placement_problem
from orchestrator.rundir import NodeOptions, ResolvedRun, RunJob, RunPlan
from orchestrator.tracking import check_trackers


@dataclass(frozen=True)
class Plan:
    """What `plan` prints is what runs: made whole by make_plan (the launcher's options are an input
    to it) and never changed after. `run` is the contract's plan itself (job.resolved.yaml's `plan`,
    rundir.RunPlan), made once; the rest is what the orchestrator also knows: the loaded job, the
    parsed devices, the dataset description and the scaler's typed record. Where a run lives is added
    only to the document the run reads."""

    job: LoadedJob
    devices: DeviceSpec
    data: DataInfo
    scaled: ScaleResult
    run: RunPlan

    # the contract's values, under the names the orchestrator's callers use
    @property
    def launcher(self) -> str:
        return self.run.launcher

    @property
    def hyp(self) -> dict[str, Any]:
        """Reference-scale hyperparameters (defaults <- preset <- inline)."""
        return self.run.hyp

    @property
    def train_args(self) -> dict[str, Any]:
        """Ultralytics' exact train() arguments, minus the run-directory placement."""
        return self.run.train_args

    @property
    def warnings(self) -> list[str]:
        return self.run.warnings

    @property
    def launch(self) -> NodeOptions | None:
        """This node's torchrun options for a multi-node run (launch/torchrun.py)."""
        return self.run.launch

    @property
    def ultralytics(self) -> str:
        """The installed release the plan modelled (scaling/releases.py)."""
        return self.run.ultralytics

    @property
    def job_warnings(self) -> list[str]:
        """The warnings of the job whatever its target (its data, a hyperparameter above what Ultralytics'
        docs advise): the plan's warnings beyond the scaler's, said once for all targets."""
        return [w for w in self.run.warnings if w not in self.scaled.warnings]

    def as_json(self) -> dict[str, Any]:
        """`plan --json` and `submit --dry-run --json`: the contract's plan without the reference-scale hyp."""
        out = copy.deepcopy(self.run.to_dict())
        out.pop("hyp")
        return out

    def resolved_document(self, run_id: str, run_dir: Path | None, wandb_mode: str,
                          data_yaml: Path | None = None) -> ResolvedRun:
        """The run contract (job.resolved.yaml) for a run of this plan: the job, the plan with the
        reference-scale hyperparameters, and where the run lives; `data_yaml`: the run's own copy of
        the dataset yaml (runner.write_data_yaml), which Ultralytics then reads."""
        run = copy.deepcopy(self.run)  # the run owns its copy
        if data_yaml is not None:
            run.train_args["data"] = str(data_yaml)
        return ResolvedRun(run_id=run_id, run_dir=str(run_dir) if run_dir is not None else None,
                           job_file=str(self.job.path) if self.job.path else None, wandb_mode=wandb_mode,
                           job=RunJob(self.job.spec.model_dump(mode="json")), plan=run)


def data_record(data: DataInfo) -> dict[str, Any]:
    """The contract's `plan.data`: the dataset yaml, classes, training images[, the absolute root]."""
    return {"yaml": str(data.yaml_path), "nc": data.nc, "train_images": data.train_images,
            **({"root": str(data.root)} if data.root else {}), **({"coco": data.coco} if data.coco else {}),
            **({"ndjson": data.ndjson} if data.ndjson else {}), **({"digest": data.digest} if data.digest else {})}


def images_trained(train_images: int | None, fraction: Any) -> int | None:
    """The training images Ultralytics really uses under its `fraction` argument
    (ultralytics/data/base.py): a float is a share (at least 1 image), an int a count, a list
    [train, val, test] per split; 0 and 1 mean all. Steps per epoch, and so warmup and
    `optimizer=auto`, follow from this count, not from the folder's."""
    if train_images is None or fraction is None:
        return train_images
    if isinstance(fraction, list):
        fraction = fraction[0] if fraction else 1.0
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or fraction in (0, 1) or fraction < 0:
        return train_images  # 0/1: all; anything else Ultralytics rejects itself
    count = fraction if isinstance(fraction, int) else max(1, round(train_images * fraction))
    return min(count, train_images)


def starts_from_weights(model: str, pretrained: Any = None) -> bool:
    """Fine-tuning: Ultralytics' setup_model loads weights from a `.pt` model unless `pretrained` is
    False, and from `pretrained` when it names a file."""
    return isinstance(pretrained, str) or (str(model).lower().endswith(".pt") and pretrained is not False)


def scaler_inputs(spec, hyp: dict[str, Any], nc: int | None, train_images: int | None, target_spec: DeviceSpec,
                  max_batch_per_device: int | None = None) -> tuple[ReferenceHyp, TargetHardware]:
    """The scaler's inputs for a job (also used to re-plan a resume or an OOM restart,
    plan/replan.py). `max_batch_per_device` tightens the job's own cap."""
    reference = ReferenceHyp(
        world_size=spec.reference.devices.world_size,
        batch=spec.reference.batch,
        nbs=spec.reference.nbs,
        optimizer=hyp["optimizer"],
        lr0=hyp["lr0"],
        lrf=hyp["lrf"],
        momentum=hyp["momentum"],
        weight_decay=hyp["weight_decay"],
        warmup_epochs=hyp["warmup_epochs"],
        warmup_momentum=hyp["warmup_momentum"],
        warmup_bias_lr=hyp["warmup_bias_lr"],
        epochs=spec.epochs,
        nc=nc,
        dataset_size=images_trained(train_images, spec.overrides.get("fraction")),
        task=spec.task or "detect",
        pretrained=starts_from_weights(spec.model, spec.overrides.get("pretrained")),
        formulas=releases.formulas_for(ultralytics_cfg.version()),
    )
    cap = spec.target.max_batch_per_device
    if max_batch_per_device is not None:
        cap = max_batch_per_device if cap is None else min(cap, max_batch_per_device)
    target = TargetHardware(
        devices=target_spec,
        batch=spec.target.batch,
        batch_per_device=spec.target.batch_per_device,
        max_batch_per_device=cap,
        drop_last=bool(spec.overrides.get("compile")),  # DetectionTrainer.get_dataloader: drop_last=compile
        sync_bn=spec.sync_bn,
    )
    return reference, target


def xla_bf16(spec, devices: DeviceSpec) -> bool:
    """The XLA worker's precision (worker/xla_entry.py): `xla.bf16`, else bf16 on a TPU, fp32 on XLA:CPU."""
    chosen = spec.xla.bf16
    return devices.kind == "tpu" if chosen is None else bool(chosen)


def check_xla_data(effective: dict[str, Any], devices: DeviceSpec) -> None:
    """The XLA loader drops the short last batch on every core: fewer images than one batch per core
    would leave an epoch with no step (xla/data.py refuses it mid-run; the plan says so first)."""
    size, b, world = effective.get("dataset_size"), effective["batch_per_device"], devices.world_size
    if size is not None and size < b * world:
        raise UserError(f"target.devices: {devices.text} trains fixed batches of {b} per core on {world} core(s) "
                        f"(drop_last), which needs at least {b * world} training images; the dataset has {size}")


def scale_for(spec, hyp: dict[str, Any], nc: int | None, train_images: int | None, target_spec: DeviceSpec,
              policy: str, max_batch_per_device: int | None = None) -> ScaleResult:
    """The scaler's result for a job on `target_spec` (make_plan; plan/replan.py for a resume or an OOM
    restart): on XLA targets with the data checked against the fixed batches and the precision the
    XLA worker trains with (it reads `effective.precision`)."""
    reference, target = scaler_inputs(spec, hyp, nc, train_images, target_spec, max_batch_per_device)
    scaled = scale(reference, target, policy, spec.scaling.warmup)  # a ScalingError is the user's (exit 2)
    if target_spec.xla:
        check_xla_data(scaled.effective, target_spec)
        scaled.effective["precision"] = "bf16" if xla_bf16(spec, target_spec) else "fp32"
    return scaled


def accumulate_warning(eff: dict[str, Any], release: str) -> list[str]:
    """A release whose warmup leaves accumulate elsewhere than set up (releases.CHANGES) trains, after
    warmup, with other images per optimizer step than the plan's: said, with the numbers."""
    after = eff.get("accumulate_after_warmup")
    if after is None or after == eff["accumulate"]:
        return []
    images = eff["images_per_step"] // max(eff["accumulate"], 1) * after
    return [f"accumulate {eff['accumulate']} -> {after} after warmup: Ultralytics {release}'s warmup leaves it there "
            f"({eff['warmup_iterations']} warmup steps of {eff['batches_per_epoch'] * eff['epochs']}), so the run "
            f"trains with {images} images per optimizer step, not {eff['images_per_step']} (docs/scaling.md, "
            "formulas by release)"]


def refuse_xla_task(task: str | None, target_spec: DeviceSpec) -> None:
    """The XLA backend's fixed-shape loss is the detection loss: another task is refused on its devices."""
    if target_spec.xla and task != "detect":
        raise UserError(f"target.devices: {target_spec.text} runs the XLA backend, which trains detect models only "
                        f"(its fixed-shape loss is the detection loss); task {task} trains on cpu, cpu:N or GPUs")


def checked_release(optimizer: str | None, target_spec: DeviceSpec, task: str | None = None,
                    model: str | None = None) -> str:
    """The installed Ultralytics release, when it can run this optimizer on this launcher, this task and this
    model family (else a UserError saying which release can): the plan's check, and a resume's on the run's
    own devices."""
    release = ultralytics_cfg.version()
    refused = releases.refusal(release, optimizer, target_spec.backend, target_spec.text, task=task, model=model)
    if refused:
        raise UserError(refused)
    return release


@dataclass(frozen=True)
class Assembled:
    """What the one assembler makes of a job for a target: the scaler's record (its warnings include the
    release's), Ultralytics' exact arguments, and the installed release it checked them against."""

    scaled: ScaleResult
    train_args: dict[str, Any]
    release: str


def assemble(spec, hyp: dict[str, Any], nc: int | None, train_images: int | None, target_spec: DeviceSpec,
             policy: str, base_args: dict[str, Any], overrides: dict[str, Any] | None = None,
             max_batch_per_device: int | None = None) -> Assembled:
    """The one place a plan's arguments are put together and checked, for a new run (make_plan), a
    resume onto other devices and an OOM restart (plan/replan.py): the task the backend trains, the scaler,
    `base_args | passed | overrides` with the target's device, the installed release's refusal for the
    launcher and optimizer, and its warnings (accumulate after warmup, an untested release)."""
    refuse_xla_task(spec.task, target_spec)
    problem = placement_problem(spec.target.launcher, target_spec)  # devices given beside the job (--devices)
    if problem:
        raise UserError(f"target.launcher: {problem}")
    scaled = scale_for(spec, hyp, nc, train_images, target_spec, policy, max_batch_per_device)
    args = {**base_args, **scaled.passed, **(overrides or {})}
    args["device"] = target_spec.ultralytics_device()
    release = checked_release(args.get("optimizer"), target_spec, spec.task, str(args.get("model") or ""))
    scaled.warnings += accumulate_warning(scaled.effective, release) + releases.untested(release)
    return Assembled(scaled, args, release)


def base_train_args(job: LoadedJob, data: DataInfo, hyp: dict[str, Any], target_spec: DeviceSpec) -> dict[str, Any]:
    """A new run's arguments before the scaler's: the job's own and its reference-scale hyperparameters.
    Offline by design: Ultralytics' plots need a font it would download; the worker provisions one, so
    plots stay on. Integrations are switched off in the worker."""
    spec = job.spec
    model = job.resolve_path(spec.model)
    return {"model": str(model) if model.is_file() else spec.model, "data": str(data.yaml_path),
            "epochs": spec.epochs, "imgsz": spec.imgsz, "seed": spec.seed, "deterministic": spec.deterministic,
            "device": target_spec.ultralytics_device(), **hyp}  # device here: its place in the arguments' order


def job_overrides(job: LoadedJob) -> dict[str, Any]:
    """The job's `overrides:`, a `pretrained` file made absolute where the plan found it (as `model`)."""
    overrides = dict(job.spec.overrides)
    if isinstance(overrides.get("pretrained"), str) and job.resolve_path(overrides["pretrained"]).is_file():
        overrides["pretrained"] = str(job.resolve_path(overrides["pretrained"]))
    return overrides


def make_plan(job: LoadedJob, devices: DeviceSpec | None = None, policy: str | None = None,
              data: DataInfo | None = None, node: NodeLaunch | None = None) -> Plan:
    """`data`: this job's data already described (`describe_data` counts the training images, a
    walk of the dataset folder): planning one job's data for several targets or sweep trials reads
    it once. `node`: this node's torchrun options (`submit`'s flags), checked against the devices and
    kept in the plan's `launch` (docs/distributed.md)."""
    spec = job.spec
    target_spec = devices or spec.target.devices
    refuse_xla_task(spec.task, target_spec)  # before the data walk: the cheaper refusal first
    check_trackers(spec)
    hyp = resolve_hyp(job)
    data = data or describe_data(job)
    made = assemble(spec, hyp, data.nc, data.train_images, target_spec, policy or spec.scaling.policy,
                    base_train_args(job, data, hyp, target_spec), job_overrides(job))
    run = RunPlan(job=spec.name, devices=target_spec.text, world_size=target_spec.world_size,
                  launcher=target_spec.backend, policy=made.scaled.policy, train_args=made.train_args,
                  scaling=made.scaled.as_json(), hyp=hyp, data=data_record(data),
                  warnings=list(made.scaled.warnings) + data.warnings + advised_range_warnings(hyp),
                  ultralytics=made.release, launch=node_options(spec, node, target_spec))
    return Plan(job=job, devices=target_spec, data=data, scaled=made.scaled, run=run)


def node_options(spec, node: NodeLaunch | None, target_spec: DeviceSpec) -> NodeOptions | None:
    """The plan's `launch`: this node's torchrun options, checked against the devices; none for a run placed
    on Slurm, whose job gives every node its rank and the rendezvous (launch/slurm_backend.py)."""
    if node is None:
        return None
    if spec.target.launcher:
        if node.node_rank is not None or node.rdzv_endpoint is not None:
            raise UserError(f"--node-rank/--rdzv-endpoint: a run placed on {spec.target.launcher} (target.launcher) "
                            "gets each node's rank and the rendezvous from its job; leave them out")
        return None
    return NodeOptions.from_dict(node.options(target_spec))
