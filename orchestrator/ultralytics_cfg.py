"""Facts read from the installed Ultralytics package's files, without importing it
(importing ultralytics pulls torch: seconds the light CLI must not spend)."""

from __future__ import annotations

import difflib
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

from orchestrator.spec.errors import SpecError
from orchestrator.spec.yamlio import load_own_yaml


@lru_cache(maxsize=1)
def package_dir() -> Path:
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or not spec.submodule_search_locations:
        raise SpecError("ultralytics is not installed in this Python environment; run scripts/setup.sh")
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


def suggest_model(name: str) -> str:
    return suggest(name, _model_yamls().keys())


def version() -> str:
    text = (package_dir() / "__init__.py").read_text()
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return m.group(1) if m else "unknown"
