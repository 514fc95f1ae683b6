"""Kaggle TPU sessions, from this side: build a kernel folder from a job, the offline wheels
dataset, and thin wrappers around the official `kaggle` CLI. Nothing here imports torch or
Ultralytics; what runs INSIDE the kernel is the training process's (worker/kaggle_session.py).

    metadata.py       kernel-metadata.json / dataset-metadata.json (slugs, titles, validation)
    build.py          `yolo-orch kaggle build`: the kernel folder (metadata, runner, resolved job)
    kernel_runner.py  the runner script's template (standalone, stdlib only)
    wheels.py         `yolo-orch kaggle wheels`: the flat offline wheels folder for Python 3.12
    tool.py           running the `kaggle` executable: missing / not authenticated -> KaggleCliError
    backend.py        the runner's Kaggle backend: each attempt one session (build, push, poll, pull);
                      the runner starts the next session until the job's epochs are done
"""
