"""Facts read from the installed Ultralytics package's files, without importing it
(importing ultralytics pulls torch: seconds the light CLI must not spend)."""

from __future__ import annotations

import difflib
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.rundir import load_own_yaml
from orchestrator.tasks import TASKS


@lru_cache(maxsize=1)
def package_dir() -> Path:
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("ultralytics is not installed in this Python environment; run scripts/setup.sh")
    return Path(list(spec.submodule_search_locations)[0])


@lru_cache(maxsize=1)
def default_cfg() -> dict:
    """Ultralytics' own `cfg/default.yaml`: the single source of truth for argument names."""
    return load_own_yaml((package_dir() / "cfg" / "default.yaml").read_text())


@lru_cache(maxsize=1)
def _model_yamls() -> dict[str, Path]:
    return {p.name: p for p in (package_dir() / "cfg" / "models").rglob("*.yaml")}


def find_model_yaml(name: str) -> Path | None:
    """Resolve `yolo11n.yaml` as Ultralytics does: exact name, else without the scale letter."""
    known = _model_yamls()
    if name in known:
        return known[name]
    unscaled = re.sub(r"(\d+)([nslmx])(.+)?$", r"\1\3", name)
    return known.get(unscaled)


def suggest(word: str, choices) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


SCALES = "nslmx"


def suggest_model(name: str) -> str:
    """The closest model yaml as users write them: Ultralytics' files are unscaled (yolo26-sem.yaml) and a job
    names a scale (yolo26n-sem.yaml), so each file's scaled names are candidates too, and the suggestion keeps
    the scale the user wrote."""
    names = list(_model_yamls())
    scaled = [m.expand(rf"\g<1>\g<2>{scale}\g<3>") for n in names for scale in SCALES
              for m in [re.match(r"(.*?)(\d+)(\D.*)$", n)] if m]
    close = difflib.get_close_matches(name, names + scaled, n=5, cutoff=0.6)
    version = re.findall(r"\d+", name)[:1]  # `yolov26n`: the 26 says more than the v (yolo26n, not yolov6n)
    same = [c for c in close if re.findall(r"\d+", c)[:1] == version]
    return f"; did you mean '{(same or close)[0]}'?" if close else ""


@lru_cache(maxsize=1)
def version() -> str:
    """The installed release, read from its __init__.py (no import); every plan asks, once per process."""
    text = (package_dir() / "__init__.py").read_text()
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return m.group(1) if m else "unknown"


# The key classes of Ultralytics' own argument check (`ultralytics.cfg.check_cfg`), read from its source
# with `ast` so they follow the installed version without importing it (that pulls torch).
_KEY_SETS = ("CFG_FLOAT_KEYS", "CFG_FRACTION_KEYS", "CFG_INT_KEYS", "CFG_BOOL_KEYS", "CFG_STR_KEYS")


@lru_cache(maxsize=1)
def cfg_key_types() -> dict[str, object]:
    """{'CFG_FLOAT_KEYS': frozenset, ..., 'CFG_INT_MIN': {key: minimum}} from ultralytics/cfg/__init__.py."""
    import ast

    tree = ast.parse((package_dir() / "cfg" / "__init__.py").read_text())
    found: dict[str, object] = {name: frozenset() for name in _KEY_SETS}
    found["CFG_INT_MIN"] = {}
    found["TASKS"], found["MODES"] = frozenset(), frozenset()  # the task and mode words of its command line
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name not in found:
            continue
        value = node.value
        if isinstance(value, ast.Call) and value.args:  # frozenset({...})
            value = value.args[0]
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        found[name] = literal if isinstance(literal, dict) else frozenset(literal)
    return found


def check_train_arg(key: str, value) -> str | None:
    """Why Ultralytics would reject `key=value` as a train argument, or None. The rules of
    `ultralytics.cfg.check_cfg` (hard mode), plus the ones its trainer enforces later: `workers` and
    `fraction` ranges, `cache` values."""
    types = cfg_key_types()
    number = isinstance(value, (int, float))  # Ultralytics' FLOAT_OR_INT: a bool passes as 0/1 there too
    if value is None:  # check_cfg: null is refused for amp and the typed keys with a default, but auto_augment
        typed = set().union(*(types[name] for name in _KEY_SETS)) | {"scale", "compile"}
        refused = key == "amp" or (default_cfg().get(key) is not None and key in typed and key != "auto_augment")
        return "must not be null" if refused else None
    if key == "cache":
        ok = isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("ram", "disk"))
        return None if ok else f"expected true, false, 'ram' or 'disk' (got {value!r})"
    if key == "workers" and isinstance(value, int) and value < 0:
        return f"must be >= 0 (got {value})"
    if key == "amp":
        ok = isinstance(value, bool) or str(value).lower() in ("fp16", "bf16", "fp32")
        return None if ok else f"expected true, false, 'fp16', 'bf16' or 'fp32' (got {value!r})"
    if key == "time" and not (number and value >= 0):  # hours; a negative one makes the epochs negative
        return f"expected the hours to train, a number >= 0 (0 or null: train by epochs; got {value!r})"
    if key in types["CFG_FLOAT_KEYS"]:
        return None if number else f"expected a number (got {value!r})"
    if key in types["CFG_FRACTION_KEYS"]:
        if key == "fraction":
            return _check_fraction(value)
        if not number:
            return f"expected a number between 0.0 and 1.0 (got {value!r})"
        return None if 0.0 <= value <= 1.0 else f"must be between 0.0 and 1.0 (got {value})"
    if key in types["CFG_INT_KEYS"]:
        if not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
            return f"expected an integer (got {value!r})"
        minimum = types["CFG_INT_MIN"].get(key)
        return None if minimum is None or value >= minimum else f"must be >= {minimum} (got {value})"
    if key in types["CFG_BOOL_KEYS"]:
        return None if isinstance(value, bool) else f"expected true or false (got {value!r})"
    if key in types["CFG_STR_KEYS"]:
        return None if isinstance(value, str) else f"expected a string (got {value!r})"
    if key == "compile":  # torch.compile refuses another mode, and Ultralytics then trains uncompiled, silently
        ok = isinstance(value, bool) or value in COMPILE_MODES
        return None if ok else f"expected true, false or one of {', '.join(COMPILE_MODES)} (got {value!r})"
    return None


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's


def _check_fraction(value) -> str | None:
    """Ultralytics' dataset fraction: a share in (0, 1], a count > 1, or [train, val(, test)] of those;
    the train share must not be 0 (the trainer would have no images)."""
    if isinstance(value, list):
        ok = (len(value) in (2, 3) and all(value[:2]) and all(
            (type(x) is int and x >= 0) or (type(x) is float and 0.0 <= x <= 1.0) for x in value))
        return None if ok else f"expected [train, val] or [train, val, test] counts/shares, train and val not 0 (got {value})"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a share in (0, 1], an image count > 1, or a per-split list (got {value!r})"
    if 0.0 < value <= 1.0 or (isinstance(value, int) and value > 1):
        return None
    return f"expected a share in (0, 1] or an image count > 1 (got {value})"


def model_yaml_task(path: Path) -> str | None:
    """The task a model yaml builds, by Ultralytics' own rule (`nn.tasks.guess_model_task`: the name of
    the head's last module); None when the file does not say."""
    try:
        cfg = load_own_yaml(Path(path).read_text())
        m = str(cfg["head"][-1][-2]).lower()
    except Exception:  # noqa: BLE001 - an unreadable yaml is Ultralytics' to report
        return None
    if m in {"classify", "classifier", "cls", "fc"}:
        return "classify"
    for marker, task in (("detect", "detect"), ("semanticsegment", "semantic"), ("segment", "segment"),
                         ("pose", "pose"), ("obb", "obb"), ("depth", "depth")):
        if marker in m:
            return task
    return None


FILENAME_TASKS = (("-sem", "semantic"), ("-seg", "segment"), ("-cls", "classify"), ("-pose", "pose"), ("-obb", "obb"),
                  ("-depth", "depth"))


def weights_task(path: Path) -> str | None:
    """The task a .pt checkpoint trains, without torch: its `train_args` task read from the pickle's
    opcodes (never executed); else Ultralytics' filename rule (guess_model_task: -sem, -seg, -cls, -pose, -obb, -depth,
    otherwise detect)."""
    return _checkpoint_task(path) or next((t for mark, t in FILENAME_TASKS if mark in Path(path).stem), "detect")


def _checkpoint_task(path: Path) -> str | None:
    import pickletools
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith("data.pkl"))
            data = z.read(name)
        memo: dict[int, str] = {}
        last, after_task = None, False
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("BINPUT", "LONG_BINPUT") and isinstance(last, str):  # torch.save: pickle protocol 2
                memo[arg] = last
            value = memo.get(arg) if op.name in ("BINGET", "LONG_BINGET") else arg if isinstance(arg, str) else None
            if value is None:
                continue
            if after_task and value in TASKS:
                return value
            after_task, last = value == "task", value
    except Exception:  # noqa: BLE001 - not a torch zip checkpoint: the filename decides
        return None
    return None
