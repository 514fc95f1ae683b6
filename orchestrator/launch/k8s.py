"""Kubernetes manifests that train a job or run a sweep (`yolo-orch k8s`), as `yolo-orch slurm` prints an
sbatch script. Pure data: no cluster, client or schema needed here (the tests validate them offline).

job       an Indexed Job (M completions, M at once) and a headless Service: pod K is node rank K
          (`JOB_COMPLETION_INDEX`, which the Job controller sets), node 0's stable name `NAME-0.NAME`
          is the static rendezvous's host
trainjob  Kubeflow Trainer v2's TrainJob on the `torch-distributed` runtime, whose `PET_NODE_RANK`,
          `PET_MASTER_ADDR` and `PET_MASTER_PORT` give the same three values
rayjob    KubeRay's RayJob: a Ray cluster of M worker pods (the head trains nothing), whose entrypoint is
          `yolo-orch submit --launcher ray` (RAY_ADDRESS is the head's)
a sweep   an Indexed Job of K sweep workers on one study in a database every pod reaches

Every training pod runs `yolo-orch submit JOB --run-id k8s-NAME --resume-existing`: a container the kubelet
starts again (restartPolicy OnFailure), or a Job created again from the same manifest, continues the run from
its last saved epoch instead of starting at epoch 1. The working folder is the claim (--pvc), mounted where
the job file, its data and its runs folder lie as they do here; /dev/shm is a memory-backed emptyDir (a
pod's own is 64 MB, too small for the DataLoader's workers); a secret only ever as a reference to a Secret
(--secret NAME: each key of it becomes an environment variable: WANDB_API_KEY, PGPASSWORD,
MLFLOW_TRACKING_TOKEN...), never a value."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

import yaml

from orchestrator.devices import DeviceSpec

KINDS = ("job", "trainjob", "rayjob")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a Service, a namespace, a Job's pods' names: <= 63
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # claims, Secrets
QUANTITY = re.compile(r"\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")  # a Kubernetes resource quantity
IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*")  # registry/name:tag or @sha256:digest, no spaces
MAX_NAME = 52  # an Indexed Job's pod is NAME-<index>, a hostname of at most 63
RUNTIME = "torch-distributed"  # Kubeflow Trainer's PyTorch runtime (its ClusterTrainingRuntime)
TRAINER_NODE = "node"  # the torch runtime's replicated job and its container
RAY_VERSION = "2.60.0"  # the `ray` extra's (pyproject: ray==2.60.*)
# What the manifests claim (their header says it; the tests validate against these): Indexed Jobs with
# JOB_COMPLETION_INDEX and the batch.kubernetes.io/job-name label (Kubernetes 1.27), Kubeflow Trainer v2's
# TrainJob with runtimePatches (its API 2.3), KubeRay's RayJob (ray.io/v1, its CRD of 1.7.0)
MIN_KUBERNETES = "1.27"
TRAINER_API = "2.3"
KUBERAY = "1.7.0"
LABEL = "app.kubernetes.io/managed-by"


@dataclass
class K8sOptions:
    kind: str = "job"
    image: str | None = None
    name: str | None = None  # default: the job's name, as a Kubernetes name
    namespace: str | None = None
    pvc: str | None = None  # the claim holding the working folder (ReadWriteMany for several pods)
    workdir: str = "/workspace"  # where the pods see it
    secrets: list[str] = field(default_factory=list)
    shm: str = "8Gi"  # /dev/shm's size limit (memory-backed)
    port: int = 29500
    backoff_limit: int | None = None  # default: 3 restarts per pod
    runtime: str = RUNTIME


def option_problems(opts: K8sOptions) -> list[str]:
    """One line per option a cluster would refuse, or that would break the manifest's YAML or a pod's command."""
    problems = []
    if opts.kind not in KINDS:
        problems.append(f"--kind: '{opts.kind}' is not one of {', '.join(KINDS)}")
    if not opts.image:
        problems.append("--image: the container image with yolo-orch installed (e.g. registry.example.com/yolo-orch:0.1)")
    elif not IMAGE.fullmatch(opts.image) or len(opts.image) > 512:
        problems.append(f"--image: {opts.image[:60]!r} is not an image reference (registry/name:tag, lowercase, no spaces)")
    checks = (("--name", opts.name, DNS_LABEL, MAX_NAME), ("--namespace", opts.namespace, DNS_LABEL, 63),
              ("--pvc", opts.pvc, DNS_SUBDOMAIN, 253), ("--runtime", opts.runtime, DNS_SUBDOMAIN, 253),
              *(("--secret", s, DNS_SUBDOMAIN, 253) for s in opts.secrets))
    for flag, value, pattern, longest in checks:
        if value is not None and (not pattern.fullmatch(value) or len(value) > longest):
            problems.append(f"{flag}: {value[:70]!r} is not a Kubernetes name (lowercase letters, digits, '-', at most "
                            f"{longest})")
    if not opts.workdir.startswith("/") or re.search(r"[\x00-\x1f\x7f]", opts.workdir):
        problems.append(f"--workdir: {opts.workdir[:60]!r} is not an absolute path in the container")
    if not QUANTITY.fullmatch(opts.shm):
        problems.append(f"--shm-size: {opts.shm[:30]!r} is not a Kubernetes quantity (e.g. 8Gi, 512Mi)")
    if not 1 <= opts.port <= 65535:
        problems.append(f"--port: {opts.port} is not a TCP port (1-65535)")
    if opts.backoff_limit is not None and not 0 <= opts.backoff_limit <= 1000:
        problems.append(f"--backoff-limit: must be between 0 and 1000 (got {opts.backoff_limit})")
    return problems


def kubernetes_name(text: str) -> str:
    """A job's name as a Kubernetes name: lowercase, '-' for anything else, at most MAX_NAME."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:MAX_NAME].rstrip("-")
    return name or "yolo-orch"


def run_id(name: str) -> str:
    """The run every pod of this manifest continues: stable across restarts and re-created Jobs."""
    return f"k8s-{name}"


def render(manifests: list[dict]) -> str:
    head = (f"# yolo-orch k8s: Kubernetes >= {MIN_KUBERNETES}; a TrainJob: Kubeflow Trainer {TRAINER_API}; a RayJob: "
            f"KubeRay {KUBERAY}. Apply with: kubectl apply -f FILE\n")
    return head + yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False, width=120)


# ---- the pieces every kind shares -------------------------------------------------------------------------


def submit_command(job_path: str, devices: DeviceSpec, sets: list[str], name: str, rendezvous: str | None,
                   extra: list[str] = ()) -> list[str]:
    """A training pod's command: `yolo-orch submit` with the run id every restart continues; on several nodes
    this pod's rank and node 0's address, which `rendezvous` gives as shell words."""
    args = ["yolo-orch", "submit", job_path, "--devices", devices.text, *extra]
    for s in sets:
        args += ["--set", s]
    line = " ".join(shlex.quote(a) for a in args)
    if rendezvous:
        line += " " + rendezvous
    line += f" --run-id {run_id(name)} --resume-existing"
    return ["/bin/sh", "-c", "exec " + line]


def labels(name: str) -> dict:
    return {LABEL: "yolo-orch", "yolo-orch/job": name}


def metadata(name: str, opts: K8sOptions) -> dict:
    meta = {"name": name, "labels": labels(name)}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    return meta


def resources(devices: DeviceSpec) -> dict:
    """One node's share: its GPUs (limits), or a CPU per process (requests)."""
    if devices.kind == "cuda":
        return {"limits": {"nvidia.com/gpu": devices.per_node}}
    return {"requests": {"cpu": str(devices.per_node)}}


def volumes(opts: K8sOptions) -> list[dict]:
    out = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": opts.shm}}]
    if opts.pvc:
        out.append({"name": "work", "persistentVolumeClaim": {"claimName": opts.pvc}})
    else:  # one pod without a claim: the folder lives as long as the pod (a container restart keeps it)
        out.append({"name": "work", "emptyDir": {}})
    return out


def mounts(opts: K8sOptions) -> list[dict]:
    return [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "work", "mountPath": opts.workdir}]


def env(opts: K8sOptions) -> tuple[list[dict], list[dict]]:
    """The container's env and envFrom: no value of a secret, only the Secrets' names."""
    return [{"name": "PYTHONUNBUFFERED", "value": "1"}], [{"secretRef": {"name": s}} for s in opts.secrets]


def container(cname: str, opts: K8sOptions, command: list[str] | None, devices: DeviceSpec | None) -> dict:
    values, from_secrets = env(opts)
    c = {"name": cname, "image": opts.image, "workingDir": opts.workdir}
    if command:
        c["command"] = command
    c["env"] = values
    if from_secrets:
        c["envFrom"] = from_secrets
    if devices is not None:
        c["resources"] = resources(devices)
    c["volumeMounts"] = mounts(opts)
    return c


# ---- the kinds --------------------------------------------------------------------------------------------


def indexed_job(name: str, opts: K8sOptions, completions: int, command: list[str], devices: DeviceSpec,
                subdomain: str | None) -> dict:
    """An Indexed Job of `completions` pods at once, each restarted in place when its command fails."""
    pod_spec = {"restartPolicy": "OnFailure"}
    if subdomain:
        pod_spec["subdomain"] = subdomain  # pod K answers as NAME-K.NAME (the headless Service)
    cont = container("train", opts, command, devices)
    if subdomain:
        cont["ports"] = [{"name": "rendezvous", "containerPort": opts.port}]
    pod_spec["containers"] = [cont]
    pod_spec["volumes"] = volumes(opts)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(name, opts),
            "spec": {"completionMode": "Indexed", "completions": completions, "parallelism": completions,
                     "backoffLimit": opts.backoff_limit if opts.backoff_limit is not None else 3 * completions,
                     "template": {"metadata": {"labels": labels(name)}, "spec": pod_spec}}}


def headless_service(name: str, opts: K8sOptions) -> dict:
    """The stable names of the Job's pods (NAME-K.NAME), resolvable before they are ready: node 0's is the
    rendezvous's host before any pod has joined it."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(name, opts),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {"batch.kubernetes.io/job-name": name},
                     "ports": [{"name": "rendezvous", "port": opts.port, "targetPort": opts.port}]}}


def job_manifests(job_path: str, devices: DeviceSpec, sets: list[str], name: str, opts: K8sOptions) -> list[dict]:
    """--kind job: a headless Service and an Indexed Job of one pod per node."""
    rendezvous = (f'--node-rank "$JOB_COMPLETION_INDEX" --rdzv-endpoint {name}-0.{name}:{opts.port}'
                  if devices.nodes > 1 else None)
    command = submit_command(job_path, devices, sets, name, rendezvous)
    job = indexed_job(name, opts, devices.nodes, command, devices, name if devices.nodes > 1 else None)
    return [headless_service(name, opts), job] if devices.nodes > 1 else [job]


def trainjob_manifest(job_path: str, devices: DeviceSpec, sets: list[str], name: str, opts: K8sOptions) -> dict:
    """--kind trainjob: Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1) on the torch runtime; the runtime
    gives each node PET_NODE_RANK and node 0's address; the volumes and /dev/shm are a runtime patch."""
    rendezvous = ('--node-rank "$PET_NODE_RANK" --rdzv-endpoint "$PET_MASTER_ADDR:$PET_MASTER_PORT"'
                  if devices.nodes > 1 else None)
    values, from_secrets = env(opts)
    trainer = {"image": opts.image, "command": submit_command(job_path, devices, sets, name, rendezvous),
               "numNodes": devices.nodes, "resourcesPerNode": resources(devices), "env": values}
    pod = {"volumes": volumes(opts), "containers": [{"name": TRAINER_NODE, "volumeMounts": mounts(opts)}]}
    patch = {"manager": "yolo-orch", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": TRAINER_NODE, "template": {"spec": {"template": {"spec": pod}}}}]}}}}
    spec = {"runtimeRef": {"name": opts.runtime}, "trainer": trainer, "runtimePatches": [patch]}
    if from_secrets:  # Trainer's container patch takes env, not envFrom: each Secret through the pod's env
        trainer["env"] = values + secret_env(opts.secrets)
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": metadata(name, opts),
            "spec": spec}


# the variables a Secret may hold for a training (W&B, PostgreSQL, MLflow, Hugging Face): where a kind takes
# no envFrom, each becomes a secretKeyRef to the key of that name, optional (a Secret need not hold them all)
SECRET_KEYS = ("WANDB_API_KEY", "PGPASSWORD", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD", "HF_TOKEN")


def secret_env(secrets: list[str]) -> list[dict]:
    return [{"name": key, "valueFrom": {"secretKeyRef": {"name": s, "key": key, "optional": True}}}
            for s in secrets for key in SECRET_KEYS]


def rayjob_manifest(job_path: str, devices: DeviceSpec, sets: list[str], name: str, opts: K8sOptions) -> dict:
    """--kind rayjob: KubeRay's RayJob (ray.io/v1): a head that trains nothing (num-cpus 0) and one worker pod
    per node; the entrypoint places the run on them (`--launcher ray`: one bundle per node)."""
    command = submit_command(job_path, devices, sets, name, None, ["--launcher", "ray"])
    entrypoint = f"cd {shlex.quote(opts.workdir)} && {command[2]}"
    head = {"rayStartParams": {"num-cpus": "0"},
            "template": {"spec": {"containers": [container("ray-head", opts, None, None)], "volumes": volumes(opts)}}}
    worker = {"groupName": "train", "replicas": devices.nodes, "minReplicas": devices.nodes,
              "maxReplicas": devices.nodes, "rayStartParams": {},
              "template": {"spec": {"containers": [container("ray-worker", opts, None, devices)],
                                    "volumes": volumes(opts)}}}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata(name, opts),
            "spec": {"entrypoint": entrypoint, "shutdownAfterJobFinishes": True,
                     "backoffLimit": opts.backoff_limit if opts.backoff_limit is not None else 3,
                     "rayClusterSpec": {"rayVersion": RAY_VERSION, "headGroupSpec": head,
                                        "workerGroupSpecs": [worker]}}}


def sweep_manifest(sweep_path: str, study: str, workers: int, storage: str, devices: DeviceSpec, name: str,
                   opts: K8sOptions) -> dict:
    """An Indexed Job of `workers` sweep workers on one study (as the Slurm array): they share its trials, and
    the trial of a pod that dies is retried by the others (the study's heartbeat)."""
    args = ["yolo-orch", "sweep", sweep_path, "--storage", storage, "--study", study, "--workers", "1"]
    command = ["/bin/sh", "-c", "exec " + " ".join(shlex.quote(a) for a in args)]
    return indexed_job(name, opts, workers, command, devices, None)
