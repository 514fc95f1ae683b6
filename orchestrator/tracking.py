"""Where a run's results go besides its folder, decided on the orchestrator side without importing a
tracker: the MLflow store a run logs to (the job's `mlflow.tracking_uri`, else MLFLOW_TRACKING_URI,
else a SQLite file in the runs folder), TensorBoard, and Ultralytics' own integrations. `plan` prints
these lines and refuses what would fail later (a password in the URI, a store folder it cannot write);
`create_run` writes the effective settings into the run's mlflow.json, so a resume logs to the same
store from any shell."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.jobspec.job import JobSpec, checked_tracking_uri
from orchestrator.rundir.tracking import default_tracking_uri
from orchestrator.urls import with_installed_pg_driver

ENV_URI = "MLFLOW_TRACKING_URI"
# the package each tracker imports: Ultralytics skips a callback whose package is missing without a word
PACKAGES = {"mlflow": "mlflow", "tensorboard": "tensorboard", "clearml": "clearml", "comet": "comet_ml",
            "dvc": "dvclive", "raytune": "ray"}
TRACKING_EXTRA = ("mlflow", "tensorboard")  # the packages of pyproject's `tracking` extra


def install_hint(package: str) -> str:
    """How to install a tracker's package: the extra that holds it, else the package itself."""
    return "pip install 'yolo-orch[tracking]'" if package in TRACKING_EXTRA else f"pip install {package}"
# what Ultralytics' exporter imports for a format (and its validator to run the file): it would try to pip-install
# them mid-run, which yolo-orch forbids (YOLO_AUTOINSTALL=false)
EXPORT_PACKAGES = {"onnx": ("onnx", "onnxslim", "onnxruntime"), "torchscript": (), "openvino": ("openvino",)}


def check_trackers(spec: JobSpec) -> None:
    """Refuse at plan time what would leave a run untracked later: a tracker whose package is not
    installed, an MLflow store that cannot be used (effective_mlflow). One problem per line."""
    wanted = ([("mlflow", "mlflow")] if spec.mlflow is not None else []) + \
        ([("tensorboard", "tensorboard")] if spec.tensorboard else []) + [("integrations", n) for n in spec.integrations]
    problems = [f"{field}: {name} needs the {PACKAGES[name]} package, which is not installed "
                f"({install_hint(PACKAGES[name])})"
                for field, name in wanted if importlib.util.find_spec(PACKAGES[name]) is None]
    problems += export_problems(spec.export.formats)
    if problems:
        raise UserError(problems)
    effective_mlflow(spec, runs_root(spec))


def export_problems(formats, field: str = "export.formats") -> list[str]:
    """One line per format whose packages do not import here: missing, or present and broken (a found
    package that fails to import fails the export after the whole training, so it is imported to know)."""
    wanted = {name: EXPORT_PACKAGES[name] for name in formats}
    broken = unimportable(tuple(sorted({p for packages in wanted.values() for p in packages})))
    out = []
    for name, packages in wanted.items():
        failing = [f"{p} ({broken[p]})" if broken[p] else p for p in packages if p in broken]
        if failing:
            out.append(f"{field}: {name} needs {', '.join(failing)}, which {'does' if len(failing) == 1 else 'do'} "
                       "not import here (pip install 'yolo-orch[export]')")
    return out


IMPORT_CHECK_TIMEOUT_S = 120
_IMPORT_CHECK = """import importlib, importlib.util, json, sys
broken = {}
for name in sys.argv[1:]:
    if importlib.util.find_spec(name) is None:
        broken[name] = ""
        continue
    try:
        importlib.import_module(name)
    except Exception as exc:
        broken[name] = (type(exc).__name__ + ": " + str(exc).splitlines()[0][:120]) if str(exc) else type(exc).__name__
print(json.dumps(broken))
"""


@lru_cache(maxsize=8)
def unimportable(packages: tuple[str, ...]) -> dict[str, str]:
    """{package: why} for each of `packages` that does not import ("" when it is not installed), imported in
    a child process (about a second for onnx's three; this process stays light and cannot be crashed by one)."""
    if not packages:
        return {}
    try:
        done = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, *packages], capture_output=True, text=True,
                              timeout=IMPORT_CHECK_TIMEOUT_S)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {p: f"its import did not finish within {IMPORT_CHECK_TIMEOUT_S} s" for p in packages}
    except (ValueError, IndexError):  # the check itself died (a package that kills the interpreter)
        return {p: "importing it ended the Python process" for p in packages}


def runs_root(spec: JobSpec) -> Path:
    """The runs folder a run of this job is created in (runner.create_run)."""
    return Path(spec.runs_dir).expanduser().resolve()


def effective_mlflow(spec: JobSpec, runs_root: Path) -> dict[str, Any] | None:
    """The job's `mlflow` section with its defaults filled in (None: MLflow is off): tracking URI and
    experiment. UserError naming the field when the URI cannot be used as it stands."""
    if spec.mlflow is None:
        return None
    uri, field = _uri_and_field(spec, runs_root)
    try:
        checked_tracking_uri(uri)
    except ValueError as exc:
        raise UserError(f"{field}: {exc}") from None
    uri = with_installed_pg_driver(absolute_store(uri))  # (MLflow's SQLAlchemy picks psycopg 3 for postgresql://)
    problem = store_folder_problem(uri)
    if problem:
        raise UserError(f"{field}: {problem}")
    return {**spec.mlflow.model_dump(mode="json"), "tracking_uri": uri,
            "experiment": spec.mlflow.experiment or spec.name, "fallback_uri": default_tracking_uri(runs_root)}


def _uri_and_field(spec: JobSpec, runs_root: Path) -> tuple[str, str]:
    if spec.mlflow.tracking_uri:
        return spec.mlflow.tracking_uri, "mlflow.tracking_uri"
    if os.environ.get(ENV_URI):
        return os.environ[ENV_URI], ENV_URI
    return default_tracking_uri(runs_root), "mlflow.tracking_uri (the default)"


def absolute_store(uri: str) -> str:
    """A local store's path made absolute (SQLAlchemy reads `sqlite:///x.db` against the working folder,
    which differs between `submit` and its training process): `sqlite:////abs/x.db`, `file:///abs`."""
    scheme, _, rest = uri.partition("://")
    if scheme == "sqlite" and rest.startswith("/") and not rest.startswith("//"):
        return f"sqlite:///{Path(rest[1:]).expanduser().resolve()}"
    if scheme == "file" and not rest.startswith("/"):
        return Path(rest).expanduser().resolve().as_uri()
    return uri


def store_folder_problem(uri: str) -> str | None:
    """Why a local store (sqlite:///PATH, file:///PATH) cannot be written; None when it can or is remote."""
    scheme, _, rest = uri.partition("://")
    if scheme not in ("sqlite", "file"):
        return None
    path = Path(rest[1:] if scheme == "sqlite" else rest)  # sqlite:////abs/x.db, file:///abs
    folder = path.parent if scheme == "sqlite" else path
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"{folder} cannot be made (not a folder: {existing})"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def describe(spec: JobSpec, runs_root: Path) -> list[str]:
    """`plan`'s lines for the trackers beside W&B (none when the job asks for none)."""
    lines = []
    mlflow = effective_mlflow(spec, runs_root)
    if mlflow is not None:
        fallback = mlflow["fallback_uri"]
        lines.append(f"MLflow: {mlflow['tracking_uri']} (experiment {mlflow['experiment']})"
                     + (f"; if that store cannot be reached when the run starts, it logs to {fallback}"
                        if fallback != mlflow["tracking_uri"] else ""))
    if spec.tensorboard:
        lines.append(f"TensorBoard: each run's scalars in RUN_DIR/tensorboard (tensorboard --logdir {runs_root})")
    if spec.export.formats:
        lines.append(f"Export after training: {', '.join(spec.export.formats)} from best.pt, each validated on the val "
                     f"split and compared with best.pt (tolerance {spec.export.tolerance:g})")
    if spec.integrations:
        lines.append(f"Ultralytics integrations on: {', '.join(spec.integrations)} (rank 0; Comet and ClearML offline "
                     "unless configured)")
    return lines
