"""Safe YAML reading for user files: size limit, no alias bombs, errors with line:col."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import UserError
from orchestrator.jobspec.files import PIPE_WAIT_S, read_stream_bounded, too_long_component

MAX_BYTES = 1 << 20  # a job or sweep spec is small; refuse anything over 1 MiB
MAX_ALIASES = 100  # legit anchors are few; a "billion laughs" file has many
# ... but 9 levels of 9 aliases stay under MAX_ALIASES and still expand to 9**9 values the moment
# anything walks them (repr in an error message, json.dumps of a plan): bound the expanded size too.
MAX_EXPANDED = 100_000
MAX_FLOW_DEPTH = 200  # PyYAML's scanner is quadratic in flow nesting ([[[[...): refuse before parsing


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

    def construct_mapping(self, node, deep=False):
        """A key given twice is an error (PyYAML keeps the last silently: two `name:` lines would
        train under the second name without a word). Keys a `<<` merge brings in may be overridden."""
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in first_line:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key '{key}' (first on line {first_line[key]})", key_node.start_mark)
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def read_yaml_file(path: Path, what: str = "file") -> Any:
    """Load one YAML document from `path`, turning every failure into a UserError."""
    label = str(path)
    long_name = too_long_component(path)
    if long_name is not None:
        raise UserError(f"{label[:60]}...: a name in this path is longer than 255 bytes; no such {what}")
    if not path.exists():
        raise UserError(f"{label}: no such {what}")
    if path.is_dir():
        raise UserError(f"{label}: is a directory, expected a YAML {what}")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise UserError(f"{label}: {what} is {size / 2**20:.1f} MiB; at most {MAX_BYTES // 2**20} MiB is accepted")
    try:  # read at most one byte past the limit: a pipe, /dev/zero or <(...) has no size to check first
        raw = read_stream_bounded(path, MAX_BYTES)
    except TimeoutError:
        raise UserError(f"{label}: nothing came through this pipe in {PIPE_WAIT_S:.0f} s (a FIFO nobody writes "
                        f"to?); expected a YAML {what}") from None
    except OSError as exc:
        raise UserError(f"{label}: cannot read this {what} ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:
        raise UserError(f"{label}: {what} is more than {MAX_BYTES // 2**20} MiB (a device or a stream?); "
                        f"at most {MAX_BYTES // 2**20} MiB is accepted")
    if b"\x00" in raw:
        raise UserError(f"{label}: binary data, expected a YAML {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{label}: not UTF-8 text (byte {exc.start}), expected a YAML {what}") from None
    return parse_yaml_text(text, label)


def _flow_depth(text: str, limit: int) -> int:
    """Nesting depth of [ and { (quotes and comments not parsed: an upper bound, cheap)."""
    depth = top = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > top:
                top = depth
                if top > limit:
                    break
        elif ch in "]}" and depth:
            depth -= 1
    return top


def _expanded_size(value: Any, memo: dict[int, int], limit: int) -> int:
    """Number of values `value` expands to when walked (shared alias targets counted each time)."""
    if not isinstance(value, (list, dict)):
        return 1
    key = id(value)
    if key in memo:
        return memo[key]
    memo[key] = limit + 1  # a cycle (recursive alias) counts as too large
    items = list(value.keys()) + list(value.values()) if isinstance(value, dict) else value
    total = 1
    for item in items:
        total += _expanded_size(item, memo, limit)
        if total > limit:
            break
    memo[key] = total
    return total


def parse_yaml_text(text: str, label: str) -> Any:
    if _flow_depth(text, MAX_FLOW_DEPTH) > MAX_FLOW_DEPTH:
        raise UserError(f"{label}: YAML nested too deeply (more than {MAX_FLOW_DEPTH} levels of [ or {{)")
    try:
        loader = _GuardedLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
        # without aliases the size is the file's (at most 1 MiB): a 60,000-class `names` is no bomb
        if loader._aliases and _expanded_size(data, {}, MAX_EXPANDED) > MAX_EXPANDED:
            raise UserError(f"{label}: YAML aliases expand to more than {MAX_EXPANDED} values "
                            "(refusing a possible alias bomb)")
        return data
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        problem = exc.problem or exc.context or "invalid YAML"
        raise UserError(f"{where}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{label}: YAML error: {exc}") from None
    except RecursionError:
        raise UserError(f"{label}: YAML nested too deeply") from None
    except ValueError as exc:  # Python's int() refuses more than 4300 digits (CVE-2020-10735)
        if "digits" not in str(exc):
            raise
        raise UserError(f"{label}: a number with more than {sys.get_int_max_str_digits()} digits; no field takes "
                        "one") from None
