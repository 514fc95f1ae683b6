"""The training process's offline Ultralytics config dir, prepared by many processes at once
(the ranks of a torchrun job on a fresh cache)."""

import os
import subprocess
import sys
from pathlib import Path

PREPARE = "from orchestrator.worker.offline import prepare_env; prepare_env()"


def test_ranks_preparing_a_fresh_config_dir_at_once_all_succeed(tmp_path):
    for attempt in range(5):  # the race needs the processes to overlap; a few fresh dirs make it likely
        config = tmp_path / f"ultralytics-config-{attempt}"
        env = {**os.environ, "YOLO_CONFIG_DIR": str(config), "PYTHONPATH": str(Path(__file__).parents[2])}
        procs = [subprocess.Popen([sys.executable, "-c", PREPARE], env=env, stderr=subprocess.PIPE, text=True)
                 for _ in range(8)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, [e for p, e in zip(procs, errors) if p.returncode]
        settings = config / "Ultralytics"
        fonts = sorted(f.name for f in settings.iterdir())
        assert fonts == ["Arial.Unicode.ttf", "Arial.ttf"], fonts  # and no temp files left behind
        assert (settings / "Arial.ttf").stat().st_size > 100_000  # a whole font, not a half-written one
