"""What `yolo-orch k8s` does, without a terminal: the manifests for a job (an Indexed Job, a TrainJob or a
RayJob) or for a sweep (an Indexed Job of sweep workers on one study), validated as `submit` and `sweep`
validate their files, before anything reaches a cluster.

The pods see this folder (the one `yolo-orch k8s` runs in) at --workdir, on the claim: the job file, its data
and its runs folder must lie inside it, so that what the plan read here is what the pods read there."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import UserError


def manifests_for(path: Path, devices: str | None, sets: list[str], opts, workers: int | None = None,
                  storage: str | None = None, here: Path | None = None) -> str:
    """The manifests for a job file, or for a sweep file (one with `space:`), as YAML documents."""
    from orchestrator.jobspec.yamlio import read_yaml_file
    from orchestrator.launch.k8s import render

    here = (here or Path.cwd()).resolve()
    raw = read_yaml_file(path, "job or sweep file")
    if isinstance(raw, dict) and "space" in raw:
        if devices or sets:
            raise UserError("--devices/--set: apply to a job file; a sweep's trials take its base job's")
        if opts.kind != "job":
            raise UserError(f"--kind: a sweep's workers are an Indexed Job (--kind job), not a {opts.kind}")
        return render([sweep_workers(path, workers, storage, opts, here)])
    if workers is not None or storage is not None:
        raise UserError("--workers/--storage: apply to a sweep file (one with `space:`)")
    return render(job_manifests(path, devices, sets, opts, here))


def job_manifests(job_file: Path, devices: str | None, sets: list[str], opts, here: Path) -> list[dict]:
    from orchestrator.jobspec.loader import load_job
    from orchestrator.launch import k8s
    from orchestrator.plan import make_plan

    job = load_job(job_file, sets=sets, devices=devices)
    plan = make_plan(job)  # validates everything now, not in a pod
    if plan.devices.kind not in ("cpu", "cuda"):
        raise UserError(f"target.devices: '{plan.devices.text}' does not run on Kubernetes; use cpu:N, GPUs or MxN")
    paths = [("JOB", job_file), ("runs_dir", Path(job.spec.runs_dir))]
    model = job.resolve_path(job.spec.model)
    if model.is_file():  # a model yaml or weights of the user's (not a name Ultralytics knows)
        paths.append(("model", model))
    problems = folder_problems(paths + data_paths(job, plan.data), here, opts)
    if plan.devices.nodes > 1 and not opts.pvc:
        problems.append(f"--pvc: {plan.devices.nodes} nodes share the run (node 0 writes the weights every node "
                        "resumes from): give the claim that holds this folder on every pod (ReadWriteMany)")
    if problems:
        raise UserError(problems)
    name = opts.name or k8s.kubernetes_name(job.spec.name)
    relative = str(job_file.resolve().relative_to(here))
    build = {"job": k8s.job_manifests, "trainjob": lambda *a: [k8s.trainjob_manifest(*a)],
             "rayjob": lambda *a: [k8s.rayjob_manifest(*a)]}[opts.kind]
    return build(relative, plan.devices, list(sets), name, opts)


def data_paths(job, data) -> list[tuple[str, Path]]:
    """What the pods read of the data: a data.yaml and the root and split folders it names (its `path:` may
    point anywhere), a classify dataset's folder, COCO's files and image folders, an NDJSON file; nothing for
    generated data (each pod makes its own)."""
    from orchestrator.jobspec import dataset
    from orchestrator.jobspec.yamlio import read_yaml_file

    if data.synth is not None:
        return []
    if data.coco is not None:  # the plan's record: each split's annotation file and images folder, absolute
        return [(f"data.coco.{split}", Path(p)) for split, files in data.coco.items() for p in files]
    if data.ndjson is not None:
        return [("data.ndjson", Path(data.ndjson))]
    if data.yaml_path.is_dir():  # classify: the dataset folder
        return [("data", data.yaml_path)]
    cfg = read_yaml_file(data.yaml_path, "dataset yaml")
    root = dataset.dataset_root(cfg, data.yaml_path)
    splits = [(f"data {key}", p) for key in ("train", "val", "test") for p in dataset.split_entries(cfg, key, root)]
    return [("data", data.yaml_path), ("data path", root), *splits]


def folder_problems(paths: list[tuple[str, Path]], here: Path, opts) -> list[str]:
    """The job file, its model and data files and the runs folder must lie inside this folder, which the pods
    see at --workdir."""
    where = f"the pods see this folder ({here}) at {opts.workdir}" + (f" on the claim {opts.pvc}" if opts.pvc else "")
    problems = []
    for label, path in paths:
        if not path.expanduser().resolve().is_relative_to(here):
            problems.append(f"{label}: {path} is outside this folder; {where}: run yolo-orch k8s from the folder "
                            "that holds it, or give it relative to that folder")
    return problems


def sweep_workers(sweep_file: Path, workers: int | None, storage: str | None, opts, here: Path) -> dict:
    """The sweep as `yolo-orch sweep` validates it, on a server every pod reaches, without a password in the
    manifest (a Secret given with --secret sets PGPASSWORD in each pod)."""
    from orchestrator.application.slurm import server_storage
    from orchestrator.launch import k8s

    request = server_storage(sweep_file, storage, "pods")
    problems = folder_problems([("SWEEP", sweep_file), ("runs_dir", request.sweep.runs_root)], here, opts)
    count = workers or request.sweep.spec.workers
    if count > 1 and not opts.pvc:
        problems.append(f"--pvc: {count} workers share the sweep's folder: give the claim that holds this folder")
    if problems:
        raise UserError(problems)
    name = opts.name or k8s.kubernetes_name(request.sweep.study)
    relative = str(sweep_file.resolve().relative_to(here))
    return k8s.sweep_manifest(relative, request.sweep.study, count, request.url, request.base_plan.devices, name,
                              opts)
