"""job.resolved.yaml as one typed object: the run the orchestrator planned, as the training process,
resume, the runner and the Kaggle code read it.

Plain dataclasses (no Pydantic: the training process imports this). The plan makes it
(`Plan.resolved_document`), `replan` re-plans it, `load`/`save` read and write it with its
`schema_version`; everything else reads attributes. Ultralytics' own arguments (`train_args`) and the
reference-scale hyperparameters (`hyp`) stay mappings under Ultralytics' names; the job spec is kept as
the JSON the orchestrator validated (`job.document`, re-validated by Pydantic when re-planning), with
the fields the run side needs as properties. Keys this version does not know are kept as they were."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.devices import parse_devices
from orchestrator.errors import RunStateError
from orchestrator.rundir.contract import SCHEMA_VERSION, contract_problems, is_int
from orchestrator.rundir.files import dump_yaml, load_own_yaml, write_text_atomic

RESOLVED = "job.resolved.yaml"


class ResolvedRunError(RunStateError):
    """job.resolved.yaml cannot be read as a run (one line saying why; the caller names the run: `exc.under`)."""


class RunDirVersionError(ResolvedRunError):
    """job.resolved.yaml was written by a newer yolo-orch, in a layout this one does not know."""


def _pick(raw: dict, known: tuple[str, ...]) -> tuple[dict, dict]:
    """(the known keys, the rest): the rest is written back untouched."""
    return {k: raw[k] for k in known if k in raw}, {k: v for k, v in raw.items() if k not in known}


@dataclass
class RunJob:
    """The job spec as the plan validated it (JobSpec's JSON)."""

    document: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.document["name"])

    @property
    def task(self) -> str:
        return self.document.get("task") or "detect"

    @property
    def epochs(self) -> int:
        return int(self.document["epochs"])

    @property
    def oom_retries(self) -> int:
        return int(self.document.get("oom_retries") or 0)

    @property
    def stall_timeout(self) -> int:
        return int(self.document.get("stall_timeout") or 0)

    @property
    def sync_bn(self) -> bool:
        return bool(self.document.get("sync_bn", False))

    @property
    def xla_max_boxes(self) -> int:
        """The job's `xla.max_boxes` (its default's one home: jobspec/job.py; the plan writes every field)."""
        return int(self.document["xla"]["max_boxes"])

    @property
    def wandb(self) -> dict[str, Any]:
        """The W&B settings: project, entity, group, tags (W&B's own names)."""
        return dict(self.document.get("wandb") or {})

    @property
    def mlflow(self) -> dict[str, Any] | None:
        """The job's `mlflow` section as written (None: off); the store decided at run creation is in the
        run's mlflow.json (orchestrator/tracking.py, worker/mlflow_logger.py)."""
        return dict(self.document["mlflow"]) if self.document.get("mlflow") is not None else None

    @property
    def tensorboard(self) -> bool:
        return bool(self.document.get("tensorboard", False))

    @property
    def export_formats(self) -> tuple[str, ...]:
        return tuple((self.document.get("export") or {}).get("formats") or ())

    @property
    def export_tolerance(self) -> float:
        return float((self.document.get("export") or {}).get("tolerance", 0.01))

    @property
    def integrations(self) -> tuple[str, ...]:
        """Ultralytics' own callbacks the job switched on (rundir/tracking.py's names)."""
        return tuple(self.document.get("integrations") or ())

    @property
    def reference(self) -> dict[str, Any]:
        return dict(self.document.get("reference") or {})

    @property
    def placement(self) -> str | None:
        """Where the run's attempts start when not on this machine (`target.launcher`: slurm, ray), else None."""
        return (self.document.get("target") or {}).get("launcher")

    @property
    def slurm(self) -> dict[str, Any]:
        """A Slurm-placed run's allocation (the job's `slurm:` section; {}: the cluster's defaults)."""
        return dict(self.document.get("slurm") or {})

    @property
    def ray(self) -> dict[str, Any]:
        """A Ray-placed run's cluster and loss budget (the job's `ray:` section; {}: RAY_ADDRESS, defaults)."""
        return dict(self.document.get("ray") or {})

    @property
    def synth(self) -> dict[str, Any] | None:
        """The generated dataset's settings, when the job trains on one."""
        data = self.document.get("data")
        return data.get("synth") if isinstance(data, dict) else None


@dataclass
class NodeOptions:
    """This node's torchrun options for a multi-node run (launch/torchrun.py)."""

    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "static"
    rdzv_id: str | None = None

    @classmethod
    def from_dict(cls, raw: dict | None) -> NodeOptions | None:
        if not raw:
            return None
        return cls(int(raw.get("node_rank") or 0), raw.get("rdzv_endpoint"), raw.get("rdzv_backend") or "static",
                   raw.get("rdzv_id"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node_rank": self.node_rank, "rdzv_endpoint": self.rdzv_endpoint,
                               "rdzv_backend": self.rdzv_backend}
        if self.rdzv_id:
            out["rdzv_id"] = self.rdzv_id
        return out


_PLAN_KEYS = ("job", "devices", "world_size", "launcher", "policy", "data", "train_args", "scaling", "warnings",
              "ultralytics", "launch", "hyp")


@dataclass
class RunPlan:
    """The plan the run trains (plan.Plan.as_json plus `hyp`): devices, launcher, Ultralytics' exact
    arguments and the scaler's record."""

    job: str
    devices: str  # the device spec's text (devices.parse_devices reads it)
    world_size: int
    launcher: str
    policy: str
    train_args: dict[str, Any]  # Ultralytics' train() arguments, under its names
    scaling: dict[str, Any]  # ScaleResult.as_json(): passed, effective, reasons, warnings, details, reference_effective, k
    hyp: dict[str, Any] = field(default_factory=dict)  # reference-scale hyperparameters
    data: dict[str, Any] = field(default_factory=dict)  # yaml, nc, train_images[, root][, coco: split -> [file, images]][, ndjson: file][, digest: the source's sha256]
    warnings: list[str] = field(default_factory=list)
    ultralytics: str = ""
    launch: NodeOptions | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict) -> RunPlan:
        known, extra = _pick(raw, _PLAN_KEYS)
        return cls(job=known.get("job", ""), devices=str(known["devices"]), world_size=int(known.get("world_size") or 1),
                   launcher=known.get("launcher") or "local", policy=known.get("policy") or "auto",
                   train_args=dict(known.get("train_args") or {}), scaling=dict(known.get("scaling") or {}),
                   hyp=dict(known.get("hyp") or {}), data=dict(known.get("data") or {}),
                   warnings=list(known.get("warnings") or []), ultralytics=known.get("ultralytics") or "",
                   launch=NodeOptions.from_dict(known.get("launch")), extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out = {"job": self.job, "devices": self.devices, "world_size": self.world_size, "launcher": self.launcher,
               "policy": self.policy, "data": self.data, "train_args": self.train_args, "scaling": self.scaling,
               "warnings": self.warnings, "ultralytics": self.ultralytics}
        if self.launch is not None:
            out["launch"] = self.launch.to_dict()
        out["hyp"] = self.hyp
        return {**out, **self.extra}

    # ---- what the run side reads
    @property
    def epochs(self) -> int:
        return int(self.train_args["epochs"])

    @property
    def batch(self) -> int:
        return int(self.train_args["batch"])

    @property
    def nbs(self) -> int:
        return int(self.train_args["nbs"])  # the scaler passes nbs on every plan (Ultralytics' default: scaling/)

    @property
    def batch_per_device(self) -> int:
        return self.batch // max(self.world_size, 1)

    @property
    def data_path(self) -> str:
        return str(self.train_args.get("data") or "")

    @property
    def effective(self) -> dict[str, Any]:
        """The scaler's record of what Ultralytics will do (scaling/effective.py's names)."""
        return dict(self.scaling.get("effective") or {})

    @property
    def passed(self) -> dict[str, Any]:
        """The arguments the scaler set (a subset of train_args)."""
        return dict(self.scaling.get("passed") or {})

    @property
    def reasons(self) -> list[str]:
        """Why each value changed, one line each."""
        return list(self.scaling.get("reasons") or [])

    @property
    def reference_effective(self) -> dict[str, Any]:
        return dict(self.scaling.get("reference_effective") or {})

    @property
    def images_per_step(self) -> int | None:
        return self.effective.get("images_per_step")

    @property
    def accumulate(self) -> int | None:
        return self.effective.get("accumulate")

    @property
    def bf16(self) -> bool:
        """The XLA worker's precision, chosen by the plan (plan.xla_bf16)."""
        return self.effective.get("precision") == "bf16"

    @property
    def nc(self) -> int | None:
        return self.data.get("nc")

    @property
    def train_images(self) -> int | None:
        return self.data.get("train_images")

    @property
    def node_rank(self) -> int:
        return self.launch.node_rank if self.launch else 0

    @property
    def device_kind(self) -> str:
        """The devices' kind (devices.KINDS: cpu, cuda, tpu, xla_cpu), by the one parser of device specs."""
        return parse_devices(self.devices).kind

    @property
    def on_cpu(self) -> bool:
        """CPUs: cpu, cpu:N, MxN on CPU nodes (Mxcpu:N)."""
        return self.device_kind == "cpu"

    @property
    def on_tpu(self) -> bool:
        return self.device_kind == "tpu"


@dataclass
class ResumeOrder:
    """Tells the training process to continue from a checkpoint (worker/recovery.resume_arguments)."""

    checkpoint: str
    if_missing: str = "fail"  # "fail": a missing or unreadable checkpoint ends the run; "scratch": start over
    reason: str = "resume"

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "if_missing": self.if_missing, "reason": self.reason}


@dataclass
class OomStep:
    """One restart after an out-of-memory exit: each pair is [before, after] (replan.plan_oom_restart)."""

    time: float
    retry: int
    epoch: int | None
    batch_per_device: list[int]
    batch: list[int]
    nbs: list[int]
    accumulate: list[int | None]
    images_per_step: list[int | None]
    restart_from: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ResumeRecord:
    """One `yolo-orch resume` of the run."""

    time: float
    from_epoch: int
    devices: str
    previous_devices: str
    replanned: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TrialLink:
    """A sweep trial's section: what the training process needs to report to its Optuna trial (the
    storage URL travels in the environment: it may hold a password)."""

    study: str
    trial: int
    trial_id: int
    params: dict[str, Any]
    objectives: list[dict[str, Any]]  # {metric, direction}
    pruner: dict[str, Any]  # the sweep's pruner settings

    @property
    def metrics(self) -> list[str]:
        return [o["metric"] for o in self.objectives]

    @property
    def directions(self) -> list[str]:
        return [o["direction"] for o in self.objectives]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_TOP_KEYS = ("schema_version", "run_id", "run_dir", "job_file", "wandb_mode", "job", "plan", "sweep", "callbacks",
             "kaggle", "deadline", "xla_compile_cache", "resume", "resumes", "oom")


@dataclass
class ResolvedRun:
    """A run's job.resolved.yaml. Optional sections: `callbacks` ("module:function" hooks the training
    process calls as function(model, run_dir, resolved) after its own: a sweep trial's pruning
    callback comes in this way, so the worker never imports the sweep); `deadline` (epoch seconds:
    the run stops at the last epoch boundary before it, a Kaggle session's limit); `xla_compile_cache`
    (where torch_xla keeps compiled graphs on a TPU); `resume`, `resumes` and the OOM history."""

    run_id: str
    run_dir: str | None
    job_file: str | None
    wandb_mode: str
    job: RunJob
    plan: RunPlan
    sweep: TrialLink | None = None
    callbacks: list[str] = field(default_factory=list)
    kaggle: dict[str, Any] | None = None  # the kernel and session it ran in (a record for people)
    deadline: float | None = None
    xla_compile_cache: str | None = None
    resume: ResumeOrder | None = None
    resumes: list[ResumeRecord] = field(default_factory=list)
    oom_max_batch_per_device: int | None = None
    oom_history: list[OomStep] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict) -> ResolvedRun:
        known, extra = _pick(raw, _TOP_KEYS)
        oom = known.get("oom") or {}
        resume, sweep = known.get("resume"), known.get("sweep")
        return cls(
            run_id=str(known.get("run_id") or ""), run_dir=known.get("run_dir"), job_file=known.get("job_file"),
            wandb_mode=known.get("wandb_mode") or "disabled", job=RunJob(dict(known.get("job") or {})),
            plan=RunPlan.from_dict(known.get("plan") or {}), sweep=TrialLink(**sweep) if sweep else None,
            callbacks=list(known.get("callbacks") or []), kaggle=known.get("kaggle"),
            deadline=float(known["deadline"]) if known.get("deadline") else None,
            xla_compile_cache=known.get("xla_compile_cache"),
            resume=ResumeOrder(**resume) if resume else None,
            resumes=[ResumeRecord(**r) for r in known.get("resumes") or []],
            oom_max_batch_per_device=oom.get("max_batch_per_device"),
            oom_history=[OomStep(**s) for s in oom.get("history") or []], extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, "run_dir": self.run_dir,
                               "job_file": self.job_file, "wandb_mode": self.wandb_mode, "job": self.job.document,
                               "plan": self.plan.to_dict()}
        optional = {"sweep": self.sweep.to_dict() if self.sweep else None, "callbacks": self.callbacks or None,
                    "kaggle": self.kaggle, "deadline": self.deadline, "xla_compile_cache": self.xla_compile_cache}
        out.update({k: v for k, v in optional.items() if v is not None})
        if self.resume is not None:
            out["resume"] = self.resume.to_dict()
        if self.resumes:
            out["resumes"] = [r.to_dict() for r in self.resumes]
        if self.oom_history or self.oom_max_batch_per_device:
            out["oom"] = {"max_batch_per_device": self.oom_max_batch_per_device,
                          "history": [s.to_dict() for s in self.oom_history]}
        return {**out, **self.extra}

    def yaml(self) -> str:
        return dump_yaml(self.to_dict())

    def save(self, run_dir: Path) -> None:
        """Written whole (atomically), in this version's layout (`load` refused a newer one)."""
        write_text_atomic(Path(run_dir) / RESOLVED, self.yaml())


def parse_resolved(doc: Any, where: str = RESOLVED) -> ResolvedRun:
    """A job.resolved.yaml's content (a Kaggle bundle embeds one) as the typed run, checked whole
    (contract_problems): a newer layout than SCHEMA_VERSION raises RunDirVersionError, anything else it
    cannot run ResolvedRunError, each one line."""
    version = doc.get("schema_version", 1) if isinstance(doc, dict) else 1
    if is_int(version) and version > SCHEMA_VERSION:
        raise RunDirVersionError(f"{where}: schema_version {version!r} is not one this yolo-orch reads (1 to "
                                 f"{SCHEMA_VERSION}): it was written by a newer version; continue it with that one")
    problems = contract_problems(doc)
    if problems:
        raise ResolvedRunError(f"{where}: damaged or edited: {'; '.join(problems)}")
    try:
        return ResolvedRun.from_dict(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ResolvedRunError(f"{where}: damaged ({type(exc).__name__}: {exc})") from None


def load_resolved(run_dir: Path) -> ResolvedRun:
    """The run's job.resolved.yaml, as written by the tool (see parse_resolved)."""
    path = Path(run_dir) / RESOLVED
    try:
        doc = load_own_yaml(path.read_text())
    except yaml.YAMLError as exc:
        raise ResolvedRunError(f"{path}: not readable YAML ({str(exc).splitlines()[0]})") from None
    return parse_resolved(doc, str(path))


def resolved_or_none(run_dir: Path) -> ResolvedRun | None:
    """For showing or annotating a run, never failing on its files: None when job.resolved.yaml is
    missing, damaged or from a newer version."""
    try:
        return load_resolved(run_dir) if (Path(run_dir) / RESOLVED).is_file() else None
    except (OSError, ResolvedRunError):
        return None
