"""A fake `kaggle` executable for tests: records its argv and serves canned answers.

    env = install(tmp_path)                  # PATH + KAGGLE_CONFIG_DIR + FAKE_KAGGLE_DIR
    stage_output(env, "yolo-orch-tiny", {...files...})
    calls(env) -> [argv, ...]

Behaviour (FAKE_KAGGLE_MODE: ok | unauth | no_quota):
  kernels push -p DIR      copies DIR to $FAKE_KAGGLE_DIR/pushed/<n>/, prints the CLI's success line
  kernels status ID        RUNNING on the first call per kernel, then the staged status
                           (status/<slug>.txt, default KernelWorkerStatus.COMPLETE)
  kernels output ID -p D   copies outputs/<slug>/* into D plus a <slug>.log
  quota [-v]               a small table (CSV with -v)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FAKE = r'''#!__PYTHON__
import json, os, shutil, sys
from pathlib import Path

state = Path(os.environ["FAKE_KAGGLE_DIR"])
argv = sys.argv[1:]
with open(state / "calls.jsonl", "a") as f:
    f.write(json.dumps(argv) + "\n")
mode = os.environ.get("FAKE_KAGGLE_MODE", "ok")
if mode == "unauth":
    print("401 Client Error: Unauthorized for url: https://www.kaggle.com/api/v1/kernels/status")
    sys.exit(1)
cmd = argv[:2]
if cmd == ["kernels", "push"]:
    folder = Path(argv[argv.index("-p") + 1])
    meta = json.loads((folder / "kernel-metadata.json").read_text())
    pushed = state / "pushed"
    pushed.mkdir(exist_ok=True)
    n = len(list(pushed.iterdir())) + 1
    shutil.copytree(folder, pushed / str(n), ignore=shutil.ignore_patterns("output"))
    if mode == "push_error":
        print("Kernel push error: Notebook not found")
        sys.exit(0)
    print(f"Kernel version {n} successfully pushed.  Please check progress at https://www.kaggle.com/code/{meta['id']}")
elif cmd == ["kernels", "status"]:
    ref = argv[2]
    slug = ref.split("/")[1]
    counter = state / f"status-count-{slug}"
    count = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(count + 1))
    staged = state / "status" / f"{slug}.txt"
    raw = "KernelWorkerStatus.RUNNING" if count == 0 else (staged.read_text().strip() if staged.exists() else "KernelWorkerStatus.COMPLETE")
    print(f'{ref} has status "{raw}"')
    if raw.endswith("ERROR"):
        print('Failure message: "Your notebook hit an error"')
elif cmd == ["kernels", "output"]:
    ref = argv[2]
    slug = ref.split("/")[1]
    dest = Path(argv[argv.index("-p") + 1])
    dest.mkdir(parents=True, exist_ok=True)
    src = state / "outputs" / slug
    if src.is_dir():
        for p in src.iterdir():
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, dest / p.name)
            print(f"Output file downloaded to {dest / p.name}")
    (dest / f"{slug}.log").write_text('[{"stream_name":"stdout","data":"fake log"}]')
    print(f"Kernel log downloaded to {dest / (slug + '.log')}")
elif argv[:1] == ["quota"]:
    if mode == "no_quota":
        print("usage: kaggle [-h] [-v] [-W] {competitions,c,datasets,d,kernels,k,models,m,files,f,config} ...",
              file=sys.stderr)
        print("kaggle: error: argument command: invalid choice: 'quota' (choose from competitions, datasets, kernels)",
              file=sys.stderr)
        sys.exit(2)
    if "-v" in argv:
        print("accelerator,used_hours,limit_hours\nTPU,3.5,20\nGPU,1.0,30")
    else:
        print("accelerator  used   limit\nTPU          3.5h   20h\nGPU          1.0h   30h")
else:
    print(f"kaggle: error: unexpected {argv}", file=sys.stderr)
    sys.exit(2)
'''

USERNAME = "alice"
FAKE_KEY = "fake-kaggle-key-0123456789abcdef"


def install(tmp_path: Path, mode: str = "ok", credentials: bool = True) -> dict:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "kaggle"
    exe.write_text(FAKE.replace("__PYTHON__", sys.executable))
    exe.chmod(0o755)
    state = tmp_path / "fake-kaggle"
    state.mkdir(exist_ok=True)
    config = tmp_path / "kaggle-config"
    config.mkdir(exist_ok=True)
    if credentials:
        (config / "kaggle.json").write_text(json.dumps({"username": USERNAME, "key": FAKE_KEY}))
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "KAGGLE_CONFIG_DIR": str(config),
        "FAKE_KAGGLE_DIR": str(state),
        "FAKE_KAGGLE_MODE": mode,
        "KAGGLE_USERNAME": "",
        "KAGGLE_KEY": "",
        "KAGGLE_API_TOKEN": "",
    }


def stage_output(env: dict, slug: str, files: dict[str, bytes | str]) -> Path:
    folder = Path(env["FAKE_KAGGLE_DIR"]) / "outputs" / slug
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return folder


def stage_status(env: dict, slug: str, raw: str) -> None:
    folder = Path(env["FAKE_KAGGLE_DIR"]) / "status"
    folder.mkdir(exist_ok=True)
    (folder / f"{slug}.txt").write_text(raw)


def calls(env: dict) -> list[list[str]]:
    path = Path(env["FAKE_KAGGLE_DIR"]) / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def pushed(env: dict) -> list[Path]:
    folder = Path(env["FAKE_KAGGLE_DIR"]) / "pushed"
    return sorted(folder.iterdir(), key=lambda p: int(p.name)) if folder.exists() else []


def clean_env(env: dict) -> dict:
    """Empty strings mean: unset (subprocess env cannot express removal)."""
    out = dict(os.environ)
    out.update(env)
    for key in [k for k, v in out.items() if v == ""]:
        del out[key]
    return out


__all__ = ["install", "stage_output", "stage_status", "calls", "pushed", "clean_env", "USERNAME", "FAKE_KEY"]
