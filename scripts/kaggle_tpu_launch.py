#!/usr/bin/env python3
"""Train a yolo-orch job on a Kaggle TPU, end to end (the same as `yolo-orch kaggle launch`):

    scripts/kaggle_tpu_launch.py JOB.yaml [--owner USER] [--wheels-dataset OWNER/SLUG]
        [--data-dataset OWNER/SLUG] [--machine-shape TpuV5E8] [--devices tpu:8]
        [--session-hours 9] [--margin-minutes 20] [--internet] [--poll 60] [--runs-dir runs]
        [--run-id ID --resume-from OWNER/KERNEL]   # continue an interrupted launch

builds the kernel folder, pushes it, polls its status with a progress display, pulls the
outputs into runs/<job>/<run id>/ (registered in runs/registry.db), and while the job's epochs
are not done (a session stopped before Kaggle's limit) pushes the next session, which resumes
from the previous one's output. Needs the official `kaggle` CLI, authenticated, and the wheels
dataset uploaded once (`yolo-orch kaggle wheels`). See docs/kaggle.md.

Exit: 0 finished, 1 a session failed, 2 bad input / kaggle CLI missing or not authenticated,
130 interrupted (the kernel may still run; the printed command continues).
"""

from __future__ import annotations

import sys

from orchestrator.cli.app import main

if __name__ == "__main__":
    sys.exit(main(["kaggle", "launch", *sys.argv[1:]]))
