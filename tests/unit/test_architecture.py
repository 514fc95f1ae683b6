"""The house's rules, checked on the source (docs/architecture.md draws them): layers that only
point down, the training process importing only the run-directory contract, no import cycles,
and functions and modules short enough to read. Every import counts, lazy ones inside functions
included."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"

# Each part of the package (a top-level module or folder) and the parts it may import.
# The root package (`orchestrator`: its version) and `errors` may be imported by any (EVERYWHERE below).
MAY_IMPORT: dict[str, set[str]] = {
    # the contract between the two processes, and leaves that import nothing of the tool
    "devices": set(),
    "rundir": {"devices"},  # the plan's devices read by the one parser of device specs
    "tasks": set(),
    "data": {"tasks"},
    "urls": set(),
    "sqlite_wal": set(),
    "errors": set(),  # the kinds of failure and the exit codes: imported by every part
    # the training process: the contract, generated data, its own package (and Ultralytics, torch)
    "worker": {"rundir", "data"},
    # the pure core: what to train and how its hyperparameters map to the target
    "scaling": {"devices", "tasks"},
    "jobspec": {"rundir", "data", "devices", "tasks", "scaling", "urls"},  # urls: no secret in a tracking URI
    "launch": {"rundir", "devices", "jobspec"},
    # MLflow's store (its PostgreSQL driver named: urls), TensorBoard, Ultralytics' integrations: decided, not imported
    "tracking": {"rundir", "jobspec", "urls"},
    # the plan, and a run re-planned (a resume onto other devices, an OOM restart) by the same assembler
    "plan": {"rundir", "data", "devices", "tasks", "scaling", "jobspec", "launch", "tracking"},
    # the orchestrator side: runs, their registry and recovery, sweeps, Kaggle, diagnostics
    "registry": {"rundir", "sqlite_wal"},
    "wandb_mode": {"jobspec"},
    "watchdog": {"rundir"},
    "exports": {"rundir"},  # export after training: each format in a child process (worker/export.py)
    "runner": {"rundir", "data", "devices", "jobspec", "launch", "plan", "registry", "wandb_mode", "tracking",
               "watchdog", "exports", "urls"},  # urls: no secret in the note of a tracker that would not close
    # closing a run as finishing does: its exports (exports) after its trackers
    "resume": {"rundir", "urls", "data", "devices", "jobspec", "launch", "plan", "registry", "runner", "exports"},
    # the pruning callback runs inside the training process, on the worker's epoch bookkeeping
    "sweep": {"rundir", "sqlite_wal", "urls", "devices", "tasks", "jobspec", "launch", "plan", "registry", "runner",
              "worker.callbacks", "tracking"},
    "kaggle": {"rundir", "devices", "tasks", "jobspec", "plan", "registry", "launch", "runner"},  # a backend of the runner
    # doctor checks the training process's offline settings and W&B reach: it reads those two
    # torch-free modules rather than keeping a second copy of their constants
    "doctor": {"rundir", "registry", "jobspec", "urls", "wandb_mode", "worker.offline", "worker.wandb_reach",
               "data", "scaling"},  # --verify-plan: generated data, the plan's formulas
    # the dashboard reads the registry and the run directories, and writes nothing
    "ui": {"rundir", "registry", "tasks", "urls"},
    # what the commands that change something do, without a terminal (the CLI renders it)
    "application": {"rundir", "urls", "data", "devices", "scaling", "jobspec", "launch", "plan", "registry", "runner",
                    "resume", "sweep", "kaggle", "doctor", "ui", "exports", "tracking"},
    # the command line on top
    "cli": {"rundir", "urls", "data", "devices", "tasks", "scaling", "jobspec", "launch", "plan", "registry", "wandb_mode",
            "tracking", "exports", "runner", "application", "sweep", "kaggle", "doctor", "ui"},
    "__main__": {"cli"},
    # the tests' and benches' one harness, on top beside the command line: nothing of the tool imports it
    "harness": {"rundir", "registry", "worker.offline", "worker.wandb_history"},
}
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 450


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports anywhere in its file."""
    out = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name and target.startswith("orchestrator"):
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


# Leaves any part may import: the root package (its version) and the tool's kinds of failure, from
# which every part's own errors derive (errors.py imports nothing).
EVERYWHERE = {"", "errors"}


def allowed(importer: str, imported: str) -> bool:
    src, dst = part_of(importer), part_of(imported)
    if dst in EVERYWHERE or dst == src:
        return True
    rules = MAY_IMPORT[src]
    return dst in rules or imported.removeprefix("orchestrator.") in rules


def test_every_part_has_a_rule():
    assert {part_of(m) for m in modules()} - {""} <= set(MAY_IMPORT)


def test_imports_only_point_down():
    wrong = [f"{a} imports {b}" for a, deps in graph().items() for b in sorted(deps) if not allowed(a, b)]
    assert not wrong, "\n".join(wrong)


def test_the_training_process_imports_only_the_contract():
    worker = {m: deps for m, deps in graph().items() if part_of(m) == "worker"}
    assert worker, "no worker modules found"
    outside = [f"{m} imports {d}" for m, deps in worker.items() for d in deps
               if part_of(d) not in ("worker", "rundir", "data", *EVERYWHERE)]
    assert not outside, "\n".join(outside)


def test_no_import_cycles():
    edges = graph()
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(edges[node]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_no_cycles_between_parts():
    parts: dict[str, set[str]] = {}
    for a, deps in graph().items():
        parts.setdefault(part_of(a), set()).update(part_of(b) for b in deps if part_of(b) not in ("", part_of(a)))
    for start in parts:
        seen, todo = set(), list(parts[start])
        while todo:
            p = todo.pop()
            assert p != start, f"the parts {start} and {p} import each other (through {sorted(seen)})"
            if p not in seen:
                seen.add(p)
                todo += parts.get(p, ())


def test_functions_and_modules_stay_short():
    long = []
    for name, path in modules().items():
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            long.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {n} lines (at most {MAX_FUNCTION_LINES})")
    assert not long, "\n".join(long)


def documented_rules() -> dict[str, set[str]]:
    """docs/architecture.md's layer table: each row's parts (first column) and the parts its last column
    names (in backticks; a name that is no part, such as a flag, is prose)."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    names = set(MAY_IMPORT) | {dep for deps in MAY_IMPORT.values() for dep in deps}
    rules: dict[str, set[str]] = {}
    for line in doc.splitlines():
        if not line.startswith("| `orchestrator/"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        parts = [re.sub(r"^orchestrator/|/$|\.py$", "", t) for t in re.findall(r"`([^`]+)`", cells[0])]
        may = {t for t in re.findall(r"`([^`]+)`", cells[-1]) if t in names}
        for part in parts:
            rules[part] = may
    return rules


def test_the_documented_layers_are_the_rules():
    """Every part has its row in docs/architecture.md, and the row names exactly what MAY_IMPORT allows."""
    documented = documented_rules()
    missing = sorted(set(MAY_IMPORT) - set(documented) - {"__main__"})
    assert not missing, f"docs/architecture.md has no row for {missing}"
    wrong = [f"{part}: the docs say {sorted(documented[part])}, the rule is {sorted(MAY_IMPORT[part])}"
             for part in sorted(documented) if documented[part] != MAY_IMPORT.get(part)]
    assert not wrong, "\n".join(wrong)


# ---- a run's state has one writer: Registry.move (orchestrator/registry/). Anywhere else, a write of it is
# SQL that changes the runs table, or a call that hands a registry method a `state` (update, add_run, _set).
RUNS_TABLE_WRITE = re.compile(r"\b(UPDATE\s+runs|INSERT\s+(OR\s+\w+\s+)?INTO\s+runs|REPLACE\s+INTO\s+runs|"
                              r"DELETE\s+FROM\s+runs)\b", re.I)
REGISTRY_WRITERS = {"update", "add_run", "_set"}
# dicts with a `state` key of their own, not a run's row: Kaggle's resume.json (kernel_runner)
NOT_THE_REGISTRY = {"state"}


def state_writes(source: str) -> list[str]:
    """Each write of a run's state in `source`, as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and RUNS_TABLE_WRITE.search(node.value):
            found.append(f"{node.lineno}: SQL writes the runs table")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in REGISTRY_WRITERS and any(k.arg == "state" for k in node.keywords):
            receiver = node.func.value
            if not (isinstance(receiver, ast.Name) and receiver.id in NOT_THE_REGISTRY):
                found.append(f"{node.lineno}: .{node.func.attr}(state=...)")
    return found


RUNS_TABLE_SQL = re.compile(r"\b(FROM|INTO|UPDATE|JOIN)\s+runs\b(?![/.])", re.I)  # not a folder: runs/JOB


def test_the_runs_table_is_queried_in_the_registry_alone():
    """One query serves `yolo-orch runs` and the dashboard (registry/query.py): no other part has SQL on it."""
    sql = [f"{name}:{node.lineno}" for name, path in modules().items() if part_of(name) != "registry"
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Constant) and isinstance(node.value, str) and RUNS_TABLE_SQL.search(node.value)]
    assert not sql, sql


def test_only_the_registry_writes_a_runs_state():
    writes = [f"{name}:{w}" for name, path in modules().items() if part_of(name) != "registry"
              for w in state_writes(path.read_text())]
    assert not writes, "a run's state is written by Registry.move alone:\n" + "\n".join(writes)


def test_the_guard_sees_a_state_write_added_anywhere():
    """The rule above, and the registry's own refusal (tests/unit/test_run_states.py), on the writes it is for."""
    planted = '''
def close(registry, run_id):
    registry.update(run_id, state="finished", note="done")
    registry._conn.execute("UPDATE runs SET state = 'killed' WHERE id = ?", (run_id,))
    with registry._write() as c:
        c.execute("insert or replace into runs (id, state) values (?, ?)", (run_id, "queued"))
    registry.move(run_id, "finished")  # the one writer: not a finding
    state.update(state="failed")  # Kaggle's resume.json: not a run's row
'''
    assert state_writes(planted) == ["3: .update(state=...)", "4: SQL writes the runs table",
                                     "6: SQL writes the runs table"]
