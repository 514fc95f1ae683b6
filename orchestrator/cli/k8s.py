"""`yolo-orch k8s JOB.yaml [-d MxN] [--kind job|trainjob|rayjob] --image IMG [--pvc CLAIM] ... > job.yaml`
`yolo-orch k8s SWEEP.yaml --workers K [--storage URL] --image IMG --pvc CLAIM > sweep.yaml` (sweep workers)"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import check_devices_flag
from orchestrator.cli.options import SETS
from orchestrator.errors import UserError


def k8s_cmd(
    job_file: Path = typer.Argument(..., help="Job spec or sweep YAML, inside this folder (the pods see it at --workdir)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d", help="Target devices, e.g. 2x4 (overrides target.devices)."),
    set_: Optional[list[str]] = SETS,
    kind: str = typer.Option("job", "--kind", help="job (an Indexed Job and a headless Service), trainjob (Kubeflow "
                             "Trainer v2) or rayjob (KubeRay)."),
    image: Optional[str] = typer.Option(None, "--image", help="The container image with yolo-orch installed."),
    name: Optional[str] = typer.Option(None, "--name", help="The manifests' name (default: the job's)."),
    namespace: Optional[str] = typer.Option(None, "--namespace", "-n", help="metadata.namespace."),
    pvc: Optional[str] = typer.Option(None, "--pvc", help="The claim that holds this folder (its job file, data and "
                                      "runs), mounted at --workdir; required for several pods (ReadWriteMany)."),
    workdir: str = typer.Option("/workspace", "--workdir", help="Where the pods see this folder."),
    secret: Optional[list[str]] = typer.Option(None, "--secret", help="A Secret whose keys become environment "
                                               "variables (WANDB_API_KEY, PGPASSWORD, ...); repeatable."),
    shm_size: str = typer.Option("8Gi", "--shm-size", help="/dev/shm (memory-backed) for the DataLoader's workers."),
    port: int = typer.Option(29500, "--port", help="Node 0's rendezvous port."),
    backoff_limit: Optional[int] = typer.Option(None, "--backoff-limit", help="Restarts before the Job fails "
                                                "(default: 3 per pod; a RayJob: 3 new clusters)."),
    runtime: str = typer.Option("torch-distributed", "--runtime", help="--kind trainjob: the ClusterTrainingRuntime."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, max=1000, help="A sweep file: worker pods."),
    storage: Optional[str] = typer.Option(None, "--storage", help="A sweep file: the study's database URL, one every "
                                          "pod reaches, without a password (default: the sweep file's)."),
) -> None:
    """Print Kubernetes manifests that train the job (resumed, not restarted, when a pod starts again);
    for a sweep file, an Indexed Job of sweep workers on one study. Apply them with kubectl apply -f -."""
    from orchestrator.application import k8s
    from orchestrator.launch.k8s import K8sOptions, option_problems

    check_devices_flag(devices)
    opts = K8sOptions(kind=kind, image=image, name=name, namespace=namespace, pvc=pvc, workdir=workdir,
                      secrets=list(secret or []), shm=shm_size, port=port, backoff_limit=backoff_limit, runtime=runtime)
    problems = option_problems(opts)
    if problems:
        raise UserError(problems)
    typer.echo(k8s.manifests_for(job_file, devices, set_ or [], opts, workers, storage), nl=False)


def register(app: typer.Typer) -> None:
    app.command("k8s")(k8s_cmd)
