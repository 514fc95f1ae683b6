"""Kaggle TPU launcher: build a kernel folder from a job, the offline wheels dataset, and thin
wrappers around the official `kaggle` CLI (push, status, output, quota).

Light: nothing here imports torch or ultralytics except `session` (which runs INSIDE the
Kaggle kernel, after the runner installed the wheels).

    metadata.py   kernel-metadata.json / dataset-metadata.json (slugs, titles, validation)
    build.py      `yolo-orch kaggle build`: the kernel folder (metadata, runner, resolved job)
    runner.py     the runner script's template (standalone, stdlib only)
    session.py    training inside the kernel: data, XLA trainer, session deadline, resume.json
    deadline.py   the epoch-boundary stop before the session limit (an XLA trainer callback)
    wheels.py     `yolo-orch kaggle wheels`: the flat offline wheels folder for Python 3.12
    cli.py        running the `kaggle` executable: missing / not authenticated -> KaggleCliError
    launch.py     the whole loop: build, push, poll, pull, resume in a new session, registry
"""
