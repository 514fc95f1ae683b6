"""`yolo-orch kaggle wheels`: the offline wheels folder for the Kaggle TPU image.

The image (mid 2026) has Python 3.12, torch 2.8.0, torch_xla 2.8.0, torchvision 0.23.0 and no
Ultralytics; kernels usually run without internet. This folder holds everything else the
runner installs with `pip install --no-index --find-links`:

1. this project's wheel (`pip wheel --no-deps`, built from a clean copy of the source);
2. the dependency set of (project wheel + Ultralytics [+ W&B]) resolved FOR THE IMAGE, not for
   this machine: `pip install --dry-run --report --only-binary=:all: --python-version 3.12
   --platform manylinux2014_x86_64 --platform manylinux_2_17..28_x86_64 ...`, with torch and
   torchvision replaced by metadata-only stand-ins of the image's versions (so torch's CUDA
   dependency tree is never resolved);
3. those pins downloaded with `pip download --no-deps` for the same tags, minus the image's
   accelerator stack (torch, torchvision, torch_xla, triton, nvidia-*, libtpu, jax).

The folder is flat (`kaggle datasets create` skips subfolders by default) and carries its
dataset-metadata.json, so `kaggle datasets create -p DIR` (first time) or
`kaggle datasets version -p DIR -m "..."` (later) uploads it as is.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.kaggle import metadata as md
from orchestrator.rundir import write_json_atomic
from orchestrator.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
KAGGLE_TPU_IMAGE = {"python": "3.12", "torch": "2.8.0", "torchvision": "0.23.0", "torch_xla": "2.8.0"}
# pip does not expand manylinux_2_X tags downwards (only manylinux2014 -> 2010 -> 1): list them. The
# image runs torch 2.8 wheels (manylinux_2_28), so its glibc is >= 2.28.
DEFAULT_PLATFORMS = ("manylinux2014_x86_64",) + tuple(f"manylinux_2_{m}_x86_64" for m in (17, 24, 25, 26, 27, 28))
# The image's accelerator stack (and the CUDA libraries torch would pull on a GPU machine); small
# helpers such as nvidia-ml-py stay (something needs them).
EXCLUDE = re.compile(r"^(torch|torchvision|torch[-_.]xla|triton|pytorch[-_.]triton.*|libtpu.*|jax|jaxlib|yolo[-_.]orch|"
                     r"nvidia[-_.].*[-_.]cu\d+|nvidia[-_.](nccl|nvtx|nvjitlink|cufile|cusparselt|nvshmem)[-_.].*)$", re.I)
MANIFEST = "yolo-orch-wheels.json"


@dataclass
class WheelsOptions:
    out: Path
    owner: str
    slug: str = "yolo-orch-wheels"
    title: str = "yolo-orch wheels for Kaggle TPU"
    python_version: str = KAGGLE_TPU_IMAGE["python"]
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS
    packages: list[str] | None = None  # None: the default set below
    with_wandb: bool = True
    project: bool = True
    torch: str = KAGGLE_TPU_IMAGE["torch"]
    torchvision: str = KAGGLE_TPU_IMAGE["torchvision"]


@dataclass
class WheelsResult:
    folder: Path
    wheels: list[str]
    excluded: list[str]
    commands: list[list[str]]
    metadata: dict
    seconds: float
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"folder": str(self.folder), "wheels": self.wheels, "excluded": self.excluded,
                "dataset": self.metadata["id"], "commands": [" ".join(c) for c in self.commands],
                "seconds": round(self.seconds, 1), "notes": self.notes}


def ultralytics_requirement() -> str:
    """The Ultralytics version this project is tested with (this environment's), else the range."""
    try:
        from importlib.metadata import version

        return f"ultralytics=={version('ultralytics')}"
    except Exception:  # noqa: BLE001
        return "ultralytics>=8.3.0,<8.5"


def default_packages(with_wandb: bool) -> list[str]:
    return [ultralytics_requirement()] + (["wandb"] if with_wandb else [])


def abi(python_version: str) -> str:
    return "cp" + python_version.replace(".", "")


def target_flags(opts: WheelsOptions) -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", opts.python_version, "--implementation", "cp",
             "--abi", abi(opts.python_version), "--abi", "abi3", "--abi", "none"]
    for p in opts.platforms:
        flags += ["--platform", p]
    return flags


def project_wheel_command(source: Path, dest: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dest), str(source)]


def resolve_command(opts: WheelsOptions, requirements: list[str], report: Path, constraints: Path,
                    find_links: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--report", str(report), *target_flags(opts), "--constraint", str(constraints)]
    if find_links is not None:
        cmd += ["--find-links", str(find_links)]
    return cmd + requirements


def download_command(opts: WheelsOptions, pins: list[str], dest: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *target_flags(opts),
            "-d", str(dest), *pins]


STUB_LOCAL = "kaggleimage"  # local version label of the stand-ins for the image's packages


def image_packages(opts: WheelsOptions) -> dict[str, str]:
    return {"torch": opts.torch, "torchvision": opts.torchvision}


def constraints_text(opts: WheelsOptions) -> str:
    """Pin the image's packages to their stand-in wheels: resolving the real torch would drag in
    its CUDA tree (nvidia-*, triton), which the CPU/TPU image neither has nor needs."""
    return "".join(f"{name}=={ver}+{STUB_LOCAL}\n" for name, ver in image_packages(opts).items())


def stub_wheel(dest: Path, name: str, version: str) -> Path:
    """A metadata-only wheel `name==version+kaggleimage` standing in for a package the image
    already has (used only to resolve; never shipped)."""
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}+{STUB_LOCAL}"
    path = dest / f"{dist}-py3-none-any.whl"
    info = f"{dist}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}+{STUB_LOCAL}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: yolo-orch\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{k},,\n" for k in files) + f"{info}/RECORD,,\n"
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for arc, text in files.items():
            z.writestr(arc, text)
    return path


def dataset_meta(opts: WheelsOptions) -> dict:
    meta = md.dataset_metadata(
        opts.owner, opts.slug, opts.title,
        description=(f"Offline wheels for yolo-orch on Kaggle TPU (Python {opts.python_version}; the image's "
                     f"torch {opts.torch} / torch_xla / torchvision are NOT included). Each wheel keeps its own "
                     "license. Made by `yolo-orch kaggle wheels`."),
    )
    problems = md.validate_dataset_metadata(meta)
    if problems:
        raise UserError([f"dataset-metadata.json: {p}" for p in problems])
    return meta


def pins_from_report(report: dict) -> tuple[list[str], list[str]]:
    """(name==version to download, excluded names) from a pip installation report."""
    pins, excluded = [], []
    for item in report.get("install", []):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if EXCLUDE.match(name):
            excluded.append(f"{name}=={version}")
        else:
            pins.append(f"{name}=={version}")
    return sorted(pins, key=str.lower), sorted(excluded, key=str.lower)


def _run(cmd: list[str], what: str, timeout: float = 1800) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(f"{what}: pip took longer than {timeout:.0f} s") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise UserError(f"{what}: pip failed (exit {proc.returncode}): {lines[-1] if lines else 'no output'}")


def copy_source(dest: Path) -> Path:
    """A clean copy of the project (no build/ leftovers, no caches) to build the wheel from."""
    src = dest / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO_ROOT / name).is_file():
            shutil.copy2(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "orchestrator", src / "orchestrator",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return src


def build_wheels(opts: WheelsOptions, dry_run: bool = False) -> WheelsResult:
    started = time.time()
    meta = dataset_meta(opts)
    folder = Path(opts.out)
    requirements = list(opts.packages) if opts.packages is not None else default_packages(opts.with_wandb)
    commands: list[list[str]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="yolo-orch-wheels-") as tmp:
        work = Path(tmp)
        constraints = work / "constraints.txt"
        constraints.write_text(constraints_text(opts))
        report_path = work / "report.json"
        built = work / "built"
        if opts.project:
            commands.append(project_wheel_command(REPO_ROOT, built))
        commands.append(resolve_command(opts, (["yolo-orch"] if opts.project else []) + requirements, report_path,
                                        constraints, built))
        if dry_run:
            commands.append(download_command(opts, ["<resolved pins>"], folder))
            return WheelsResult(folder, [], [], commands, meta, time.time() - started, ["dry run: nothing written"])
        folder.mkdir(parents=True, exist_ok=True)
        stray = [p.name for p in folder.iterdir() if p.is_dir()]
        if stray:
            notes.append(f"subfolders {stray} are not uploaded by `kaggle datasets create` (--dir-mode skip)")
        for name, version in image_packages(opts).items():
            stub_wheel(built, name, version)
        if opts.project:
            _run(project_wheel_command(copy_source(work), built), "project wheel")
            commands[0] = project_wheel_command(REPO_ROOT, built)
            for whl in built.glob("yolo_orch-*.whl"):
                for old in folder.glob("yolo_orch-*.whl"):
                    old.unlink()
                shutil.copy2(whl, folder / whl.name)
        _run(commands[-1], "resolve for the Kaggle image")
        report = json.loads(report_path.read_text())
        pins, excluded = pins_from_report(report)
        if pins:
            cmd = download_command(opts, pins, folder)
            commands.append(cmd)
            _run(cmd, "download")
    write_json_atomic(folder / md.DATASET_METADATA, meta)
    wheels = sorted(p.name for p in folder.glob("*.whl"))
    manifest = {"python": opts.python_version, "platforms": list(opts.platforms), "requirements": requirements,
                "image": {"torch": opts.torch, "torchvision": opts.torchvision, "torch_xla": KAGGLE_TPU_IMAGE["torch_xla"]},
                "excluded": excluded, "wheels": wheels, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_json_atomic(folder / MANIFEST, manifest)
    return WheelsResult(folder.resolve(), wheels, excluded, commands, meta, time.time() - started, notes)


def upload_hint(result: WheelsResult) -> list[str]:
    return [
        f"first time:  kaggle datasets create -p {result.folder}",
        f"later:       kaggle datasets version -p {result.folder} -m \"yolo-orch wheels\"",
        "(keep the folder flat: the default --dir-mode skips subfolders)",
    ]
