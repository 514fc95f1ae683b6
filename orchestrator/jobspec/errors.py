"""Bad input in the job spec's terms: the helpers that turn Pydantic's errors into the lines of a
UserError (orchestrator/errors.py), each naming a field."""

from __future__ import annotations

import re
import reprlib

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple, _REPR.maxset = 3, 8, 8, 8, 8
_REPR.maxstring = _REPR.maxother = 80


def format_pydantic_errors(exc, prefix: str = "") -> list[str]:
    """Turn a pydantic ValidationError into `field.path: message (got X)` lines."""
    lines = []
    errors = exc.errors()
    nested = {tuple(str(p) for p in e["loc"] if not _is_union_tag(p))[:-1] for e in errors}
    for err in errors:
        loc = [field_text(p) for p in err["loc"] if not _is_union_tag(p)]
        if err["type"] == "string_type" and tuple(loc) in nested:
            continue  # the string branch of a `preset name | mapping` union: the mapping's errors say more
        path = ".".join(loc) or "(top level)"
        if prefix:
            path = f"{prefix}.{path}" if loc else prefix
        msg = err["msg"]
        kind = err["type"]
        if kind == "extra_forbidden":
            lines.append(f"{path}: unknown key")
            continue
        if kind == "missing":
            lines.append(f"{path}: required field is missing")
            continue
        msg = msg.removeprefix("Value error, ").replace("Input should be", "must be")
        got = err.get("input")
        if kind.startswith(("greater", "less", "int_", "float_", "bool_", "string_", "literal", "finite")) or kind in (
            "enum",
            "int_type",
            "float_type",
        ):
            lines.append(f"{path}: {_lower_first(msg)} (got {_short(got)})")
        else:
            lines.append(f"{path}: {_lower_first(msg)}")
    return _dedupe(lines)


_PLAIN_FIELD = re.compile(r"[\w.\-]{1,40}")
MAX_FIELD_CHARS = 40


def field_text(part) -> str:
    """A key as an error line names it: as written when it is a plain name, else a short escaped
    excerpt (a file of other things, such as a symlink to /etc/shadow, is not echoed back whole)."""
    text = str(part)
    if _PLAIN_FIELD.fullmatch(text):
        return text
    return repr(text[:MAX_FIELD_CHARS] + ("..." if len(text) > MAX_FIELD_CHARS else ""))


def _is_union_tag(part) -> bool:
    # pydantic puts union member names into loc: 'str', 'DataSource', and a member with a model validator as
    # 'function-after[_one_source(), DataSource]'
    return isinstance(part, str) and (part[:1].isupper() or part in ("str", "int", "float", "bool")
                                      or part.startswith(("function-after", "function-before", "function-wrap")))


def _lower_first(s: str) -> str:
    return s[:1].lower() + s[1:] if s else s


def _short(value) -> str:
    text = _REPR.repr(value)  # bounded: never walks a huge (aliased) structure in full
    return text if len(text) <= 60 else text[:57] + "..."


def _dedupe(lines: list[str]) -> list[str]:
    seen, out = set(), []
    for line in lines:
        if line not in seen:
            seen.add(line)
            out.append(line)
    return out
