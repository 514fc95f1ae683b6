"""Safe YAML reading for user files: size limit, no alias bombs, errors with line:col."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.spec.errors import SpecError

MAX_BYTES = 1 << 20  # a job or sweep spec is small; refuse anything over 1 MiB
MAX_ALIASES = 100  # legit anchors are few; a "billion laughs" file has many


class _GuardedLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(
                    f"line {mark.line + 1}, column {mark.column + 1}: more than {MAX_ALIASES} YAML aliases "
                    "(refusing a possible alias bomb)"
                )
        return super().compose_node(parent, index)


def read_yaml_file(path: Path, what: str = "file") -> Any:
    """Load one YAML document from `path`, turning every failure into a SpecError."""
    label = str(path)
    if not path.exists():
        raise SpecError(f"{label}: no such {what}")
    if path.is_dir():
        raise SpecError(f"{label}: is a directory, expected a YAML {what}")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SpecError(f"{label}: {what} is {size / 2**20:.1f} MiB; at most {MAX_BYTES // 2**20} MiB is accepted")
    raw = path.read_bytes()
    if b"\x00" in raw:
        raise SpecError(f"{label}: binary data, expected a YAML {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{label}: not UTF-8 text (byte {exc.start}), expected a YAML {what}") from None
    return parse_yaml_text(text, label)


def parse_yaml_text(text: str, label: str) -> Any:
    try:
        return yaml.load(text, Loader=_GuardedLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError(f"{where}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{label}: YAML error: {exc}") from None
    except RecursionError:
        raise SpecError(f"{label}: YAML nested too deeply") from None
