"""The job spec: Pydantic v2 models for job.yaml. Structure and ranges only;
checks that touch the filesystem live in ``orchestrator.jobspec.loader``."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import (BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, ValidationInfo, WithJsonSchema,
                      field_validator, model_validator)

from orchestrator.data import SYNTH_MAX_IMAGES, SYNTH_MAX_IMGSZ
from orchestrator.tasks import TASKS
from orchestrator.devices import DeviceSpec, DeviceSpecError, parse_devices
from orchestrator.scaling.types import POLICIES, WARMUPS
from orchestrator.scaling.ultralytics_math import DEFAULTS, canonical_optimizer
from orchestrator.jobspec.files import NAME_MAX, too_long_component
from orchestrator.jobspec.kaggle import KaggleOptions
from orchestrator.jobspec.ray import RaySettings
from orchestrator.jobspec.slurm import SlurmSettings, placement_problem
from orchestrator.rundir.tracking import EXPORT_FORMATS, EXPORT_TOLERANCE, ULTRALYTICS_INTEGRATIONS

# Ultralytics' spellings (BaseTrainer.build_optimizer); a job may write any case, as Ultralytics maps
# names case-insensitively ('sgd', 'adamw', default.yaml's 'RMSProp'): the plan carries these.
OPTIMIZERS = ("auto", "SGD", "MuSGD", "Adam", "Adamax", "AdamW", "NAdam", "RAdam", "RMSprop")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
PLACEMENTS = ("slurm", "ray")  # target.launcher: where attempts start, when not on this machine


class Strict(BaseModel):
    # allow_inf_nan=False: `lr0: nan` is "must be a finite number", not a failed range check
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def _check_devices(value: Any) -> DeviceSpec:
    if isinstance(value, DeviceSpec):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"expected a device spec string such as 'cpu', '0,1' or 'tpu:8' (got {value!r})")
    try:
        return parse_devices(value)
    except DeviceSpecError as exc:
        raise ValueError(str(exc)) from None


# Devices are parsed once, here: the spec holds the DeviceSpec (its kind, world size and launcher
# backend); written out (job.resolved.yaml, --json, the JSON schema) it is its text.
Devices = Annotated[DeviceSpec, PlainValidator(_check_devices), PlainSerializer(str, return_type=str),
                    WithJsonSchema({"type": "string", "description": "a device spec: cpu, cpu:N, 0, 0,1, N, MxN, "
                                    "Mxcpu:N, tpu:N, xla:cpu or xla:cpu:N (docs/distributed.md)"})]


Probability = Field(default=None, ge=0.0, le=1.0)


class Hyperparameters(Strict):
    """Ultralytics training hyperparameters (names unchanged). Unset means: take
    the preset's value, else Ultralytics' default."""

    optimizer: Optional[Literal[OPTIMIZERS]] = None  # type: ignore[valid-type]
    lr0: Optional[float] = Field(default=None, gt=0.0, le=10.0)
    lrf: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    momentum: Optional[float] = Field(default=None, ge=0.0, lt=1.0)
    weight_decay: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    warmup_epochs: Optional[float] = Field(default=None, ge=0.0, le=1000.0)
    warmup_momentum: Optional[float] = Field(default=None, ge=0.0, lt=1.0)
    warmup_bias_lr: Optional[float] = Field(default=None, ge=0.0, le=10.0)
    cos_lr: Optional[bool] = None
    box: Optional[float] = Field(default=None, ge=0.0, le=1000.0)
    cls: Optional[float] = Field(default=None, ge=0.0, le=1000.0)
    dfl: Optional[float] = Field(default=None, ge=0.0, le=1000.0)
    hsv_h: Optional[float] = Probability
    hsv_s: Optional[float] = Probability
    hsv_v: Optional[float] = Probability
    degrees: Optional[float] = Field(default=None, ge=-180.0, le=180.0)
    translate: Optional[float] = Probability
    scale: Optional[float] = Field(default=None, ge=0.0, le=10.0)
    shear: Optional[float] = Field(default=None, ge=-180.0, le=180.0)
    perspective: Optional[float] = Probability  # Ultralytics takes any fraction; ADVISED_MAX says what its docs advise
    flipud: Optional[float] = Probability
    fliplr: Optional[float] = Probability
    bgr: Optional[float] = Probability
    mosaic: Optional[float] = Probability
    mixup: Optional[float] = Probability
    cutmix: Optional[float] = Probability
    copy_paste: Optional[float] = Probability
    close_mosaic: Optional[int] = Field(default=None, ge=0, le=100000)

    @field_validator("optimizer", mode="before")
    @classmethod
    def _ultralytics_spelling(cls, value):
        """`sgd` -> `SGD`, `RMSProp` -> `RMSprop`, as Ultralytics reads them (canonical_optimizer);
        anything else is refused with the list."""
        return (canonical_optimizer(value) or value) if isinstance(value, str) else value

    def values(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


# Values Ultralytics accepts but its documentation advises to keep small (docs: "perspective: 0.0 - 0.001"):
# accepted, and said by the plan (advised_range_warnings)
ADVISED_MAX = {"perspective": 0.001}


def advised_range_warnings(hyp: dict[str, Any]) -> list[str]:
    """One line per hyperparameter above what Ultralytics' documentation advises."""
    return [f"hyp.{key} {hyp[key]:g} is above the 0 to {top:g} Ultralytics' documentation advises (it trains; larger "
            "values warp the images strongly)" for key, top in ADVISED_MAX.items()
            if isinstance(hyp.get(key), (int, float)) and hyp[key] > top]


class HypBlock(Hyperparameters):
    """`hyp:` in a job: an optional preset (name in hyp/ or a YAML path) plus inline values."""

    preset: Optional[str] = None

    @field_validator("preset")
    @classmethod
    def _preset_fits(cls, v):
        return _fits_the_filesystem(v)


class SynthData(Strict):
    images: int = Field(default=128, ge=1, le=SYNTH_MAX_IMAGES)
    val_images: int = Field(default=32, ge=1, le=SYNTH_MAX_IMAGES)
    classes: int = Field(default=3, ge=1, le=8)
    imgsz: int = Field(default=128, ge=32, le=SYNTH_MAX_IMGSZ)
    seed: int = Field(default=0, ge=0)


class CocoImages(Strict):
    train: str
    val: str


class CocoSource(Strict):
    """COCO JSON as annotation tools export it: one annotation file per split, and the images' folder (one for
    both, or one per split). Read and checked at plan time (jobspec/coco.py), converted once at submit into a
    folder of the tool's cache named by the files' content; paths relative to the job file."""

    train: str = Field(description="the training split's annotation file (instances_train.json)")
    val: str = Field(description="the validation split's annotation file")
    images: str | CocoImages = Field(description="the folder the files' `file_name`s are in, or one per split")


class DataSource(Strict):
    """Data the job names by what it is rather than by a data.yaml: generated (`synth`), COCO JSON (`coco`) or
    Ultralytics NDJSON (`ndjson`)."""

    synth: Optional[SynthData] = None
    coco: Optional[CocoSource] = None
    ndjson: Optional[str] = Field(default=None, min_length=1, description="an Ultralytics NDJSON file (the "
                                  "Platform's export) whose images are local (its dataset record's `path`); read "
                                  "and checked at plan time (jobspec/ndjson.py), converted once at submit")

    @model_validator(mode="after")
    def _one_source(self) -> "DataSource":
        given = [name for name in ("synth", "coco", "ndjson") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("name one source: `synth: {...}` (generated), `coco: {train: ..., val: ..., "
                             f"images: ...}}` or `ndjson: FILE` (got {' and '.join(given) or 'none'})")
        return self


class Reference(Strict):
    """The hardware the hyperparameters were tuned on."""

    devices: Devices = Field(default=parse_devices("1"), json_schema_extra={"default": "1"})
    batch: int = Field(default=DEFAULTS["batch"], ge=1, le=65536, description="TOTAL batch over all reference devices")
    nbs: int = Field(default=DEFAULTS["nbs"], ge=1, le=65536)


class Target(Strict):
    """Where to run. Give the total `batch` or `batch_per_device` (not both);
    with neither, the reference's per-device batch is kept."""

    devices: Devices = Field(default=parse_devices("cpu"), json_schema_extra={"default": "cpu"})
    batch: Optional[int] = Field(default=None, ge=1, le=65536)
    batch_per_device: Optional[int] = Field(default=None, ge=1, le=65536)

    @field_validator("batch", "batch_per_device", mode="before")
    @classmethod
    def _no_autobatch(cls, value: Any) -> Any:
        """Ultralytics' AutoBatch (batch=-1, or a memory fraction 0 < batch < 1) is refused by name."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (value == -1 or 0 < value < 1):
            raise ValueError(
                "batch=-1 or a memory fraction (Ultralytics' AutoBatch) is not supported: Ultralytics runs it in one process "
                "only and picks a batch after the plan, so the scaler could not keep images per step; give a "
                "batch, and target.max_batch_per_device to cap it (CUDA OOM halves it and restarts, oom_retries)")
        return value
    max_batch_per_device: Optional[int] = Field(default=None, ge=1, le=65536)
    launcher: Optional[Literal[PLACEMENTS]] = Field(  # type: ignore[valid-type]
        default=None, description="where the run's attempts start: unset, on this machine (local, torchrun or XLA, "
        "as the devices say); slurm: each attempt one sbatch job (MxN: one job of M nodes), watched from here "
        "(the job's `slurm:`); ray: each attempt's nodes reserved on a Ray cluster, a lost node re-planned "
        "(the job's `ray:`)")

    @model_validator(mode="after")
    def _one_batch(self):
        if self.batch is not None and self.batch_per_device is not None:
            raise ValueError("give target.batch (total) or target.batch_per_device, not both")
        return self

    @field_validator("launcher")
    @classmethod
    def _placeable(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        """Slurm and Ray place CPU processes and GPUs (jobspec/slurm.placement_problem)."""
        problem = placement_problem(value, info.data["devices"]) if "devices" in info.data else None
        if problem:
            raise ValueError(problem)
        return value


class Scaling(Strict):
    policy: Literal[POLICIES] = "auto"  # type: ignore[valid-type]
    warmup: Literal[WARMUPS] = Field(  # type: ignore[valid-type]
        default="auto", description="auto: the rule's (at least 5 epochs from k = 4, Goyal et al.); keep: the reference's")


class Wandb(Strict):
    mode: Optional[Literal["online", "offline", "disabled"]] = Field(
        default=None, description="unset: online when an API key is configured, offline otherwise"
    )
    project: str = Field(default="yolo-orch", min_length=1, max_length=128)
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: list[str] = Field(default_factory=list)


MLFLOW_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql")


class Mlflow(Strict):
    """MLflow tracking from the training process (rank 0), on when the job has this section:
    worker/mlflow_logger.py. Credentials come from MLflow's own variables (MLFLOW_TRACKING_USERNAME,
    MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN), never from the URI: the URI is written to the run."""

    tracking_uri: Optional[str] = Field(
        default=None, min_length=1, max_length=2048,
        description="unset: MLFLOW_TRACKING_URI, else a SQLite store beside the runs (sqlite:///RUNS_DIR/mlflow.db)")
    experiment: Optional[str] = Field(default=None, min_length=1, max_length=256, description="unset: the job's name")
    run_name: Optional[str] = Field(default=None, min_length=1, max_length=256, description="unset: the run id")
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("tracking_uri")
    @classmethod
    def _no_secret_in_uri(cls, v):
        return checked_tracking_uri(v) if v is not None else v


def checked_tracking_uri(uri: str) -> str:
    """A tracking URI the run may write down: a scheme MLflow stores runs in, no password or token."""
    from orchestrator.urls import secrets_in

    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    if scheme not in MLFLOW_SCHEMES:
        raise ValueError(f"{uri[:80]!r} is not an MLflow tracking URI; expected one of "
                         f"{', '.join(s + '://' for s in MLFLOW_SCHEMES)}")
    if secrets_in(uri):
        raise ValueError("holds a password or token, which would be written to the run: give it in "
                         "MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN instead")
    return uri


class ExportOptions(Strict):
    """Export after training: each format made from best.pt in its own process, validated on the job's
    val split and compared with best.pt validated the same way (orchestrator/export.py)."""

    formats: list[Literal[EXPORT_FORMATS]] = Field(default_factory=list, max_length=len(EXPORT_FORMATS))  # type: ignore[valid-type]
    tolerance: float = Field(default=EXPORT_TOLERANCE, ge=0, le=1,
                             description="the largest |exported - best.pt| over the val metrics that passes")

    @model_validator(mode="before")
    @classmethod
    def _a_list_is_the_formats(cls, value):
        return {"formats": value} if isinstance(value, list) else value

    @field_validator("formats")
    @classmethod
    def _once_each(cls, value):
        return list(dict.fromkeys(value))


class XlaOptions(Strict):
    """XLA (TPU) backend settings: targets `tpu:N` and `xla:cpu`."""

    max_boxes: int = Field(default=32, ge=1, le=4096, description="fixed per-image box limit (targets are padded)")
    bf16: Optional[bool] = Field(default=None, description="bf16 autocast; unset: on for TPUs, off for xla:cpu")


class JobSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN, description="run name: letters, digits, '.', '_', '-'")
    task: Optional[Literal[TASKS]] = Field(  # type: ignore[valid-type]
        default=None, description="detect, segment, pose, obb, classify, semantic or depth; unset: the model's task (loader.py)")
    model: str = Field(default="yolo11n.yaml", min_length=1)
    data: str | DataSource
    epochs: int = Field(default=DEFAULTS["epochs"], ge=1, le=100000)
    imgsz: int = Field(default=640, ge=32, le=8192)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    deterministic: bool = True
    hyp: str | HypBlock = Field(default_factory=HypBlock)
    reference: Reference = Field(default_factory=Reference)
    target: Target = Field(default_factory=Target)
    scaling: Scaling = Field(default_factory=Scaling)
    sync_bn: bool = False
    xla: XlaOptions = Field(default_factory=XlaOptions)
    wandb: Wandb = Field(default_factory=Wandb)
    mlflow: Optional[Mlflow] = Field(default=None, description="MLflow tracking; off unless this section is given")
    tensorboard: bool = Field(default=False, description="per-epoch scalars in RUN_DIR/tensorboard (tensorboard --logdir runs/)")
    export: ExportOptions = Field(default_factory=ExportOptions,
                                  description="formats to export best.pt to after training: [onnx, torchscript, openvino]")
    integrations: list[Literal[ULTRALYTICS_INTEGRATIONS]] = Field(  # type: ignore[valid-type]
        default_factory=list, description="Ultralytics' own callbacks to switch on (rank 0, offline rules); default: none")
    overrides: dict[str, Any] = Field(default_factory=dict)
    runs_dir: str = Field(default="runs", min_length=1)
    kaggle: Optional[KaggleOptions] = Field(default=None, description="Kaggle TPU launcher settings (yolo-orch kaggle build)")
    slurm: Optional[SlurmSettings] = Field(default=None, description="each attempt's sbatch allocation when "
                                           "target.launcher is slurm (unset: the cluster's defaults)")
    ray: Optional[RaySettings] = Field(default=None, description="the Ray cluster and the losses a run placed "
                                       "there survives, when target.launcher is ray (unset: RAY_ADDRESS, defaults)")
    oom_retries: int = Field(
        default=2, ge=0, le=10,
        description="CUDA out-of-memory recoveries: restart from the last checkpoint with the per-device batch "
        "halved and nbs raised so images per optimizer step stay the same (0 disables)",
    )
    stall_timeout: int = Field(
        default=300, ge=0, le=86400,
        description="Seconds in which no rank of a training advances (no batch started, no forward pass, no batch "
        "ended, no validation batch) before the orchestrator dumps every rank's Python stack into stacks/, stops "
        "the run and marks it stalled, resumable (0 disables; XLA targets are not watched: they compile for minutes)",
    )

    @field_validator("slurm")
    @classmethod
    def _slurm_with_its_launcher(cls, value: Optional[SlurmSettings], info: ValidationInfo):
        target = info.data.get("target")
        if value is not None and target is not None and target.launcher != "slurm":
            raise ValueError("applies to a run placed on Slurm: add target.launcher: slurm (or print a script "
                             "with `yolo-orch slurm JOB`)")
        return value

    @field_validator("ray")
    @classmethod
    def _ray_with_its_launcher(cls, value: Optional[RaySettings], info: ValidationInfo):
        target = info.data.get("target")
        if value is not None and target is not None and target.launcher != "ray":
            raise ValueError("applies to a run placed on Ray: add target.launcher: ray (or submit --launcher ray)")
        return value

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if ".." in v:
            raise ValueError(f"must not contain '..' (got {v!r})")
        return v

    @field_validator("hyp", mode="before")
    @classmethod
    def _hyp_str(cls, v):
        if isinstance(v, str) and not v.strip():
            raise ValueError("preset name or path must not be empty")
        return _fits_the_filesystem(v)

    @field_validator("model", "data", "runs_dir")
    @classmethod
    def _path_fits(cls, v):
        return _fits_the_filesystem(v)


def _fits_the_filesystem(value):
    """A path with a name longer than the filesystem allows would fail every open() with ENAMETOOLONG."""
    long_name = too_long_component(value) if isinstance(value, str) else None
    if long_name is not None:
        raise ValueError(f"a name in this path is longer than {NAME_MAX} bytes ('{long_name[:40]}...')")
    return value


def hyp_block(job: JobSpec) -> HypBlock:
    return job.hyp if isinstance(job.hyp, HypBlock) else HypBlock(preset=job.hyp)


def sanitize_run_name(text: str) -> str:
    """Map any string to a safe single path component."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip(".-") or "run"
    return cleaned.replace("..", ".")[:64]
