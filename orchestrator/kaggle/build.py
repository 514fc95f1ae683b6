"""`yolo-orch kaggle build`: a job -> a ready kernel folder.

    <out>/kernel-metadata.json   what `kaggle kernels push -p <out>` reads
    <out>/run_kaggle.py          the runner (the kernel's code_file; the job is embedded in it,
                                 because a push uploads only the code file)
    <out>/job.resolved.yaml      the resolved job and plan, for reading (not uploaded)

Nothing secret is read or written: the W&B key is fetched inside the kernel from Kaggle's
secret store, Kaggle credentials stay with the `kaggle` CLI on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import pprint
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator import __version__
from orchestrator.kaggle import metadata as md
from orchestrator.devices import DeviceSpec, DeviceSpecError, parse_devices
from orchestrator.errors import UserError
from orchestrator.jobspec.kaggle import KaggleOptions
from orchestrator.jobspec.dataset import dataset_root
from orchestrator.rundir import RESOLVED, ResolvedRun, new_run_id, write_text_atomic
from orchestrator.jobspec.files import check_output_file, output_problem
from orchestrator.jobspec.loader import LoadedJob, read_yaml_file

RUNNER_TEMPLATE = Path(__file__).with_name("kernel_runner.py")
BUNDLE_MARK = "# @@BUNDLE@@"
MAX_MODEL_YAML = 1 << 20


@dataclass
class BuildOptions:
    out: Path | None = None
    owner: str | None = None
    machine_shape: str | None = None
    wheels_dataset: str | None = None
    data_dataset: str | None = None
    resume_from: str | None = None  # owner/kernel of the previous session
    kernel: str | None = None  # base slug
    session: int | None = None
    run_id: str | None = None
    devices: str | None = None
    session_hours: float | None = None
    margin_minutes: float | None = None
    enable_internet: bool | None = None
    max_boxes: int | None = None
    bf16: bool | None = None
    force: bool = False  # replace the files of an existing kernel folder


@dataclass
class BuildResult:
    folder: Path
    metadata: dict
    bundle: dict
    files: list[Path]
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        b = self.bundle
        return {
            "folder": str(self.folder), "kernel": self.metadata["id"], "session": b["session"],
            "run_id": b["run_id"], "devices": b["devices"], "world_size": b["world_size"],
            "machine_shape": self.metadata["machine_shape"], "enable_internet": self.metadata["enable_internet"],
            "dataset_sources": self.metadata["dataset_sources"], "kernel_sources": self.metadata["kernel_sources"],
            "wandb_mode": b["wandb_mode"], "files": [str(p) for p in self.files], "warnings": self.warnings,
        }


def kaggle_settings(job: LoadedJob, opts: BuildOptions) -> KaggleOptions:
    """The job's `kaggle:` block with the command-line options on top (validated)."""
    base = (job.spec.kaggle or KaggleOptions()).model_dump()
    changes = {
        "machine_shape": opts.machine_shape, "wheels_dataset": opts.wheels_dataset, "dataset": opts.data_dataset,
        "kernel": opts.kernel, "session_hours": opts.session_hours, "margin_minutes": opts.margin_minutes,
        "enable_internet": opts.enable_internet,
    }
    base.update({k: v for k, v in changes.items() if v is not None})
    from pydantic import ValidationError

    from orchestrator.jobspec.errors import format_pydantic_errors

    try:
        return KaggleOptions.model_validate(base)
    except ValidationError as exc:
        raise UserError(format_pydantic_errors(exc, prefix="kaggle")) from None


def with_xla_options(job: LoadedJob, opts: BuildOptions) -> LoadedJob:
    """The job with `--max-boxes` / `--bf16` over its `xla:` section (validated)."""
    changes = {k: v for k, v in (("max_boxes", opts.max_boxes), ("bf16", opts.bf16)) if v is not None}
    if not changes:
        return job
    from pydantic import ValidationError

    from orchestrator.jobspec.errors import format_pydantic_errors
    from orchestrator.jobspec.job import XlaOptions

    try:
        xla = XlaOptions.model_validate({**job.spec.xla.model_dump(), **changes})
    except ValidationError as exc:
        raise UserError(format_pydantic_errors(exc, prefix="xla")) from None
    return dataclasses.replace(job, spec=job.spec.model_copy(update={"xla": xla}))


def resolve_owner(opts: BuildOptions) -> str:
    from orchestrator.kaggle.tool import username

    owner = opts.owner or username()
    if not owner:
        raise UserError("--owner: your Kaggle user name is needed (or KAGGLE_USERNAME, or ~/.kaggle/kaggle.json)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,49}", owner):
        raise UserError(f"--owner: {owner!r} is not a Kaggle user name")
    return owner


def target_devices(job: LoadedJob, opts: BuildOptions, shape: str, warnings: list[str]) -> DeviceSpec:
    requested = opts.devices or job.spec.target.devices.text
    try:
        spec = parse_devices(requested)
    except DeviceSpecError as exc:
        raise exc.under("--devices") from None
    cores = md.TPU_CORES.get(shape)
    if not spec.xla:
        if not cores:
            raise UserError(f"--devices: the Kaggle launcher trains with the XLA backend; give tpu:N, xla:cpu or xla:cpu:N "
                            f"(got {requested!r} with machine_shape {shape})")
        if not opts.devices:
            warnings.append(f"target.devices {requested!r} is not an XLA target; using tpu:{cores} ({shape})")
        else:
            raise UserError(f"--devices: {requested!r} is not an XLA target; use tpu:{cores}, xla:cpu or xla:cpu:N")
        return parse_devices(f"tpu:{cores}")
    if spec.kind == "tpu" and cores and spec.world_size > cores:
        raise UserError(f"--devices: {shape} has {cores} TPU cores; tpu:{spec.world_size} does not fit")
    if spec.kind == "tpu" and not cores:
        warnings.append(f"devices {spec.text} on machine_shape {shape}, which is not a TPU: training will fail")
    return spec


def data_bundle(plan, job: LoadedJob, settings: KaggleOptions) -> dict:
    if plan.data.synth is not None:
        return {"kind": "synth", "synth": plan.data.synth.model_dump()}
    for name in ("coco", "ndjson"):
        if getattr(plan.data, name) is not None:
            raise UserError(f"data.{name}: a Kaggle session trains on a YOLO dataset uploaded as a Kaggle dataset: "
                            "write one with `yolo-orch data import SOURCE --out DIR`, upload DIR, and name "
                            "DIR/data.yaml as the job's data (docs/kaggle.md)")
    if not settings.dataset:
        raise UserError(f"kaggle.dataset: the images and labels of {job.spec.data} must be uploaded as a Kaggle "
                        "dataset (docs/kaggle.md); name it with `kaggle: {dataset: OWNER/SLUG}` in the job or "
                        "--data-dataset OWNER/SLUG")
    path = plan.data.yaml_path
    cfg = read_yaml_file(path, "dataset yaml")
    root = dataset_root(cfg, path).resolve()
    config = {k: v for k, v in cfg.items() if k not in ("path", "download")}
    for key in ("train", "val", "test"):
        if key not in cfg or not cfg[key]:
            continue
        values = cfg[key] if isinstance(cfg[key], list) else [cfg[key]]
        rel = []
        for value in values:
            p = Path(str(value))
            if p.is_absolute():
                try:
                    p = p.resolve().relative_to(root)
                except ValueError:
                    raise UserError(f"data: {key} entry {value} is outside the dataset folder {root}; upload one "
                                    "folder holding everything the yaml names") from None
            rel.append(p.as_posix())
        config[key] = rel if isinstance(cfg[key], list) else rel[0]
    return {"kind": "yaml", "dataset": settings.dataset, "yaml_name": path.name, "config": config}


def model_bundle(job: LoadedJob) -> dict:
    model = job.spec.model
    local = job.resolve_path(model)
    if not local.is_file():
        return {"name": model}
    if local.suffix in (".yaml", ".yml"):
        if local.stat().st_size > MAX_MODEL_YAML:
            raise UserError(f"model: {model} is larger than 1 MiB; not a model yaml?")
        return {"name": local.name, "text": local.read_text()}
    raise UserError(f"model: local weights ({model}) cannot travel inside the kernel; start from a model yaml "
                    "(e.g. yolo11n.yaml) on Kaggle")


def wandb_mode_for(job: LoadedJob, internet: bool, warnings: list[str]) -> str:
    mode = job.spec.wandb.mode
    if mode in ("disabled", "offline"):
        return mode
    if not internet:
        if mode == "online":
            warnings.append("wandb.mode online needs internet in the kernel (--internet / kaggle.enable_internet); "
                            "W&B will log offline on Kaggle and its files come back in the tarball")
        return "offline"
    return "online"  # the runner falls back to offline (with a warning) when the secret is not attached


def render_runner(bundle: dict) -> str:
    source = RUNNER_TEMPLATE.read_text()
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if BUNDLE_MARK in line]
    if len(hits) != 1:
        raise RuntimeError(f"{RUNNER_TEMPLATE}: expected one {BUNDLE_MARK} line")
    literal = pprint.pformat(bundle, width=110, sort_dicts=False)
    lines[hits[0]] = f"BUNDLE: dict = {literal}\n"
    text = "".join(lines)
    compile(text, "run_kaggle.py", "exec")  # a broken runner never leaves this machine
    return text


def build(job: LoadedJob, opts: BuildOptions) -> BuildResult:
    """Validate everything, then write the kernel folder. Raises UserError (field-named lines)."""
    from orchestrator.plan import make_plan

    warnings: list[str] = []
    settings = kaggle_settings(job, opts)
    shape_note = md.machine_shape_warning(settings.machine_shape)
    if shape_note:
        warnings.append(shape_note)
    owner = resolve_owner(opts)
    job = with_xla_options(job, opts)
    devices = target_devices(job, opts, settings.machine_shape, warnings)
    plan = make_plan(job, devices=devices)
    warnings += plan.warnings
    if str(plan.train_args.get("optimizer", "auto")).lower() == "auto":
        warnings.append("hyp.optimizer is auto: Ultralytics then ignores lr0/momentum and the scaler's values; "
                        "pin an optimizer (e.g. SGD or AdamW) for scaled TPU runs")
    data = data_bundle(plan, job, settings)
    session = session_number(opts)
    slug = md.kernel_slug(job.spec.name, session, base=settings.kernel)
    wheels = settings.wheels_dataset or f"{owner}/yolo-orch-wheels"
    meta = md.kernel_metadata(owner, slug, machine_shape=settings.machine_shape,
                              enable_internet=settings.enable_internet,
                              dataset_sources=[wheels] + ([settings.dataset] if data["kind"] == "yaml" else []),
                              kernel_sources=[opts.resume_from] if opts.resume_from else [])
    problems = md.validate_kernel_metadata(meta)
    if problems:
        raise UserError([f"kernel-metadata.json: {p}" for p in problems])
    run_id = opts.run_id or new_run_id()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", run_id):
        raise UserError(f"--run-id: {run_id!r} must be letters, digits, '.', '_', '-'")
    mode = wandb_mode_for(job, settings.enable_internet, warnings)
    resolved = plan.resolved_document(run_id, None, mode)  # run_dir: set inside the kernel
    # the settings first: their `kernel` is the base slug, this session's kernel is meta["id"]
    resolved.kaggle = {**settings.model_dump(mode="json"), "kernel": meta["id"], "session": session,
                       "resume_from": opts.resume_from}
    bundle = session_bundle(plan, settings, resolved, meta["id"], session, opts.resume_from, data, model_bundle(job),
                            wheels)
    folder = Path(opts.out) if opts.out else Path("kaggle") / slug
    texts = {md.KERNEL_METADATA: json.dumps(meta, indent=2, default=str) + "\n", md.CODE_FILE: render_runner(bundle),
             RESOLVED: resolved.yaml()}
    write_kernel_folder(folder, texts, opts.force)
    return BuildResult(folder.resolve(), meta, bundle, [folder / name for name in texts], warnings)


def write_kernel_folder(folder: Path, texts: dict[str, str], force: bool) -> None:
    """Every file checked before any is written (an existing one only with --force; never through a
    link, a device or a folder in its place); a new folder appears whole, by one rename."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UserError(f"--out: {folder} is not a folder (a file, a link or a device); name a kernel folder")
    if folder.is_dir():
        problems = [f"--out: {folder / name} {why}" for name in texts
                    if (why := output_problem(folder / name, force))]
        if problems:
            raise UserError(problems)
        for name, text in texts.items():
            write_text_atomic(folder / name, text)
        return
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out: cannot make {folder.parent} ({exc.strerror or exc})") from None
    check_output_file(folder, "--out")  # the name fits
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the folder from its group
        for name, text in texts.items():
            (staging / name).write_text(text)
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def session_number(opts: BuildOptions) -> int:
    """This session's number: given, or one more than the kernel it resumes (`<slug>-sN`)."""
    session = opts.session
    if session is None:
        session = 1
        if opts.resume_from:
            m = re.search(r"-s(\d+)$", opts.resume_from)
            session = int(m.group(1)) + 1 if m else 2
    if session < 1:
        raise UserError("--session: must be >= 1")
    if opts.resume_from and not re.fullmatch(md.REF_PATTERN, opts.resume_from):
        raise UserError(f"--resume-from: expected OWNER/KERNEL (got {opts.resume_from!r})")
    if session > 1 and not opts.resume_from:
        raise UserError("--resume-from: a later session must name the previous session's kernel (OWNER/KERNEL)")
    return session


def session_bundle(plan, settings: KaggleOptions, resolved: ResolvedRun, kernel: str, session: int, resume_from: str | None,
                   data: dict, model: dict, wheels: str) -> dict:
    """Everything the kernel's runner needs, embedded in it (worker/kaggle_session.py reads it)."""
    return {
        "format": 1,
        "job_name": plan.job.spec.name,
        "run_id": resolved.run_id,
        "kernel": kernel,
        "session": session,
        "resume_from": resume_from,
        "devices": plan.devices.text,
        "device_kind": plan.devices.kind,
        "world_size": plan.devices.world_size,
        "epochs": plan.job.spec.epochs,
        "wandb_mode": resolved.wandb_mode,
        "max_boxes": plan.job.spec.xla.max_boxes,
        "bf16": plan.scaled.effective.get("precision") == "bf16",  # the plan's (plan.xla_bf16)
        "kaggle": {"session_hours": settings.session_hours, "margin_minutes": settings.margin_minutes,
                   "wheels_dataset": wheels, "dataset": settings.dataset if data["kind"] == "yaml" else None,
                   "machine_shape": settings.machine_shape, "enable_internet": settings.enable_internet},
        "data": data,
        "model": model,
        "resolved": resolved.to_dict(),
        "built_by": {"yolo_orch": __version__, "time": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    }


def read_bundle(folder: Path) -> dict:
    """The bundle embedded in a built kernel folder's runner (for `push`/the launcher)."""
    import ast

    text = (Path(folder) / md.CODE_FILE).read_text()
    m = re.search(r"^BUNDLE: dict = (.*?)(?=^\S)", text, re.S | re.M)
    if not m:
        raise UserError(f"{folder}: {md.CODE_FILE} has no embedded job (not built by `yolo-orch kaggle build`?)")
    return ast.literal_eval(m.group(1).strip())


def describe(result: BuildResult) -> list[str]:
    m = result.metadata
    return [
        f"kernel {m['id']} (session {result.bundle['session']}, run {result.bundle['run_id']}) -> {result.folder}",
        f"  machine_shape {m['machine_shape']}, devices {result.bundle['devices']}, internet "
        f"{'on' if m['enable_internet'] else 'off'}, W&B {result.bundle['wandb_mode']}",
        f"  dataset_sources: {', '.join(m['dataset_sources']) or '-'}; kernel_sources: {', '.join(m['kernel_sources']) or '-'}",
        f"  push it: yolo-orch kaggle push {result.folder}",
    ]


__all__ = ["BuildOptions", "BuildResult", "build", "read_bundle", "render_runner", "describe"]
