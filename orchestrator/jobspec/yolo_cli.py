"""Ultralytics' command-line grammar (`ultralytics.cfg.entrypoint`), for `yolo-orch train`.

`yolo train detect model=yolo11n.yaml data=data.yaml --imgsz= 640 epochs =1, cache = disk save_txt`
is a command Ultralytics runs (its own CLI tests type it so): the task and the mode as words in any
order, spaces around '=' merged, leading dashes and a trailing comma dropped (with a warning), bare
words of boolean arguments set true, and `cfg=file.yaml` a file of more arguments under the command
line's. The same words mean the same here; what Ultralytics refuses is refused with its reason. No
torch: the words come from Ultralytics' source and default.yaml on disk."""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.jobspec import ultralytics_cfg
from orchestrator.errors import UserError
from orchestrator.jobspec.yamlio import read_yaml_file

# entrypoint's `special` commands, which run instead of a mode (their singular and dashed forms too)
SPECIAL = ("checks", "version", "settings", "cfg", "login", "logout", "copy-cfg", "solutions", "help")
BARE_TRUE = ("half", "int8", "end2end", "nms")  # bare flags whose defaults are missing or None
VERBATIM = ("name", "project")  # values Ultralytics keeps as text (a run called `1e3` stays `1e3`)


@dataclass
class Words:
    pairs: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what Ultralytics repaired, with its warning


def smart_value(text: str) -> Any:
    """A value as Ultralytics' `smart_value` reads it: none/true/false by name, a Python literal, else text."""
    lowered = text.lower()
    if lowered == "none":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text


def merge_equals_args(args: list[str]) -> list[str]:
    """Ultralytics' merge_equals_args: ['a', '=', 'v'], ['a=', 'v'] and ['a', '=v'] become 'a=v', and
    the words of one bracketed value (`imgsz=[3,`, `640]`) are joined."""
    merged: list[str] = []
    current: list[str] = []
    depth, i = 0, 0
    while i < len(args):
        arg = args[i]
        if arg == "=" and 0 < i < len(args) - 1 and merged:
            arg, i = f"{merged.pop()}={args[i + 1]}", i + 1
        elif arg.endswith("=") and i < len(args) - 1 and "=" not in args[i + 1]:
            arg, i = arg + args[i + 1], i + 1
        elif arg.startswith("=") and i > 0 and merged:
            arg = merged.pop() + arg
        depth += arg.count("[") - arg.count("]")
        current.append(arg)
        if depth == 0:
            merged.append("".join(current))
            current = []
        i += 1
    if current:
        raise UserError(f"{current[0]}: has an unmatched '[' or ']' bracket")
    return merged


def parse_words(args: list[str]) -> Words:
    """The command line's words -> {argument: value} as Ultralytics' entrypoint reads them; one line per
    word it would refuse."""
    known = ultralytics_cfg.default_cfg()
    words, problems = Words(), []
    for word in merge_equals_args(args):
        word = _repaired(word, words.notes)
        if "=" in word:
            problems += _take_pair(word, known, words)
        else:
            problems += _take_bare_word(word, known, words)
    if problems:
        raise UserError(problems)
    return words


def _repaired(word: str, notes: list[str]) -> str:
    if word.startswith("--"):
        notes.append(f"argument '{word}' does not require leading dashes '--', updating to '{word[2:]}'.")
        word = word[2:]
    if word.endswith(","):
        notes.append(f"argument '{word}' does not require trailing comma ',', updating to '{word[:-1]}'.")
        word = word[:-1]
    return word


def _take_pair(word: str, known: dict, words: Words) -> list[str]:
    key, _, text = (part.strip() for part in word.partition("="))
    if not text:
        return [f"{key}: missing '{key}' value (e.g. {key}={known.get(key, 'VALUE')})"]
    if key not in known:
        return [_unknown(key, known)]
    if key == "cfg":
        return _take_cfg_file(text, known, words)
    words.pairs[key] = text if key in VERBATIM and text.lower() != "none" else smart_value(text)
    return []


def _take_cfg_file(text: str, known: dict, words: Words) -> list[str]:
    """`cfg=custom.yaml`: its arguments, under those the command line gives (before or after it)."""
    raw = read_yaml_file(Path(text).expanduser(), "cfg file")
    if not isinstance(raw, dict):
        return [f"cfg: {text} must be a mapping of Ultralytics arguments"]
    problems = [f"cfg ({text}): {_unknown(str(k), known)}" for k in raw if k not in known]
    words.notes.append(f"Overriding {ultralytics_cfg.package_dir() / 'cfg' / 'default.yaml'} with {text}")
    words.pairs = {**{k: v for k, v in raw.items() if k != "cfg" and k in known}, **words.pairs}
    return problems


def _take_bare_word(word: str, known: dict, words: Words) -> list[str]:
    types = ultralytics_cfg.cfg_key_types()
    if word in types["TASKS"]:
        words.pairs["task"] = word
    elif word in types["MODES"]:
        words.pairs["mode"] = word
    elif word.lower() in _special_words():
        return [f"{word}: `yolo {word}` is a command of its own, not a train argument"]
    elif isinstance(known.get(word), bool) or word in BARE_TRUE:
        words.pairs[word] = True  # `yolo train ... save_txt` sets save_txt=True
    elif word in known:
        return [f"{word}: '{word}' is a valid YOLO argument but is missing an '=' sign to set its value, i.e. try "
                f"'{word}={known[word]}'"]
    else:
        return [_unknown(word, known)]
    return []


def _special_words() -> set[str]:
    words = set(SPECIAL) | {w[0] for w in SPECIAL} | {w[:-1] for w in SPECIAL if w.endswith("s")}
    return words | {f"-{w}" for w in words} | {f"--{w}" for w in words}


def _unknown(key: str, known: dict) -> str:
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    similar = f"; similar arguments are i.e. {[f'{k}={known[k]}' for k in close]}" if close else ""
    return f"{key}: not a valid YOLO argument{similar}"
