"""`yolo-orch k8s`: the manifests of each kind validated offline against what a cluster checks (the Kubernetes
schemas of the versions they claim, Kubeflow Trainer's own models, KubeRay's CRD schema kept here as data);
a manifest no cluster would accept fails; no secret's value reaches one; bad options are one line each."""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.harness.cli import REPO, run_cli
from orchestrator.harness.jobs import TINY_MODEL, write_job
from orchestrator.launch import k8s

kubernetes_validate = pytest.importorskip("kubernetes_validate")
trainer_models = pytest.importorskip("kubeflow_trainer_api.models")

RAYJOB_CRD = REPO / "tests" / "assets" / "k8s" / f"ray.io_rayjobs-v{k8s.KUBERAY}.yaml.gz"
IMAGE = "registry.example.com/yolo-orch:0.1"
SECRETS = {"WANDB_API_KEY": "wandb-key-0123456789abcdef", "PGPASSWORD": "pg-secret-value",
           "MLFLOW_TRACKING_TOKEN": "mlflow-token-value"}


def kubernetes_versions() -> list[str]:
    """The versions the manifests claim (k8s.MIN_KUBERNETES on) that kubernetes-validate bundles: the oldest and
    the newest."""
    bundled = sorted(kubernetes_validate.utils.all_versions(), key=lambda v: tuple(map(int, v.split("."))))
    claimed = [v for v in bundled if tuple(map(int, v.split(".")))[:2] >= tuple(map(int, k8s.MIN_KUBERNETES.split(".")))]
    return [claimed[0], claimed[-1]]


@pytest.fixture
def folder(tmp_path) -> Path:
    (tmp_path / "tiny-det.yaml").write_text(TINY_MODEL.read_text())
    write_job(tmp_path, name="Tiny_K8s.1", model="tiny-det.yaml", target={"devices": "2xcpu:1"})
    return tmp_path


def manifests(folder: Path, *args: str, env: dict | None = None) -> list[dict]:
    r = run_cli("k8s", "job.yaml", "--image", IMAGE, *args, cwd=folder, env=env)
    assert r.returncode == 0, r.stderr
    return list(yaml.safe_load_all(r.stdout))


def validate_kubernetes(doc: dict) -> None:
    for version in kubernetes_versions():
        kubernetes_validate.validate(doc, version, strict=True)


def validate_trainjob(doc: dict) -> None:
    """Kubeflow Trainer's model of a TrainJob; a field it does not know is dropped by it, so a round trip that
    changes the document is one the API server would refuse too (strict field validation)."""
    model = trainer_models.TrainerV1alpha1TrainJob.from_dict(doc)
    assert model.to_dict() == doc, "a field Kubeflow Trainer does not know"


def strict(schema):
    """The CRD's schema as the API server applies it with strict field validation: an object with properties
    takes no others unless it says it preserves unknown fields."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    return [strict(v) for v in schema] if isinstance(schema, list) else schema


def validate_rayjob(doc: dict) -> None:
    crd = yaml.safe_load(gzip.decompress(RAYJOB_CRD.read_bytes()))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == doc["apiVersion"].split("/")[1])
    assert doc["apiVersion"].split("/")[0] == crd["spec"]["group"] and doc["kind"] == crd["spec"]["names"]["kind"]
    schema = strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # the API server's ObjectMeta (checked as a Job's above)
    jsonschema.validate(doc, schema)


def test_an_indexed_job_and_its_headless_service_validate_against_the_claimed_kubernetes(folder):
    service, job = manifests(folder, "--pvc", "work", "--namespace", "vision", "--secret", "tracking")
    for doc in (service, job):
        validate_kubernetes(doc)
    name = "tiny-k8s-1"
    assert (service["kind"], service["metadata"]["name"], service["spec"]["clusterIP"]) == ("Service", name, "None")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == name and pod["restartPolicy"] == "OnFailure"
    (train,) = pod["containers"]
    command = train["command"][2]
    assert '--node-rank "$JOB_COMPLETION_INDEX"' in command and f"--rdzv-endpoint {name}-0.{name}:29500" in command
    assert command.endswith(f"--run-id k8s-{name} --resume-existing")  # a restarted pod continues the run
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
    assert {"name": "work", "persistentVolumeClaim": {"claimName": "work"}} in pod["volumes"]
    assert train["workingDir"] == "/workspace" and train["envFrom"] == [{"secretRef": {"name": "tracking"}}]
    assert train["resources"] == {"requests": {"cpu": "1"}}


def test_a_gpu_job_asks_for_its_gpus_per_pod(folder):
    (job,) = manifests(folder, "-d", "0,1", "--pvc", "work")  # one node: no Service, no rendezvous flags
    validate_kubernetes(job)
    train = job["spec"]["template"]["spec"]["containers"][0]
    assert train["resources"] == {"limits": {"nvidia.com/gpu": 2}} and "--node-rank" not in train["command"][2]


def test_a_trainjob_validates_against_kubeflow_trainers_models(folder):
    (doc,) = manifests(folder, "--kind", "trainjob", "--pvc", "work", "--secret", "tracking")
    validate_trainjob(doc)
    trainer = doc["spec"]["trainer"]
    assert doc["spec"]["runtimeRef"] == {"name": "torch-distributed"} and trainer["numNodes"] == 2
    assert '--node-rank "$PET_NODE_RANK" --rdzv-endpoint "$PET_MASTER_ADDR:$PET_MASTER_PORT"' in trainer["command"][2]
    refs = [e["valueFrom"]["secretKeyRef"] for e in trainer["env"] if "valueFrom" in e]
    assert {r["name"] for r in refs} == {"tracking"} and "WANDB_API_KEY" in {r["key"] for r in refs}
    pod = doc["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    volumes = pod["template"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in volumes


def test_a_rayjob_validates_against_kuberays_crd(folder):
    (doc,) = manifests(folder, "--kind", "rayjob", "--pvc", "work")
    validate_rayjob(doc)
    spec = doc["spec"]
    assert "yolo-orch submit job.yaml --devices 2xcpu:1 --launcher ray --run-id k8s-tiny-k8s-1 --resume-existing" in \
        spec["entrypoint"]
    (workers,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 2
    assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0"}  # the head trains nothing


@pytest.mark.parametrize("kind", ["job", "trainjob", "rayjob"])
def test_a_manifest_no_cluster_would_accept_fails_its_check(folder, kind):
    """The checks are not vacuous: a misspelt field and a count as text fail each kind's."""
    doc = manifests(folder, "--kind", kind, "--pvc", "work")[-1]
    check = {"job": validate_kubernetes, "trainjob": validate_trainjob, "rayjob": validate_rayjob}[kind]
    check(doc)
    where = {"job": ("spec",), "trainjob": ("spec", "trainer"), "rayjob": ("spec",)}[kind]
    count = {"job": "completions", "trainjob": "numNodes", "rayjob": "backoffLimit"}[kind]
    for change in ("misspelt", "text"):
        broken = copy.deepcopy(doc)
        node = broken
        for key in where:
            node = node[key]
        if change == "misspelt":
            node[count + "s"] = node[count]
        else:
            node[count] = str(node[count])
        with pytest.raises(Exception):  # noqa: B017  (each validator raises its own error type)
            check(broken)


def test_no_secret_value_reaches_a_manifest(folder, tmp_path):
    """The W&B key, a PostgreSQL password and an MLflow token in the environment stay out of every kind; a
    Secret is named, never read."""
    for kind in ("job", "trainjob", "rayjob"):
        text = yaml.safe_dump_all(manifests(folder, "--kind", kind, "--pvc", "work", "--secret", "tracking",
                                            env=SECRETS))
        assert not any(value in text for value in SECRETS.values()), kind


def test_a_sweep_is_an_indexed_job_of_workers_on_one_server_study(folder, pg_url):
    (folder / "sweep.yaml").write_text(yaml.safe_dump({"base": "job.yaml", "study": "k8s-sweep", "workers": 3,
                                                       "space": {"hyp": {"lr0": {"low": 0.001, "high": 0.01, "log": True}}}}))
    r = run_cli("k8s", "sweep.yaml", "--image", IMAGE, "--pvc", "work", "--storage", pg_url, cwd=folder)
    assert r.returncode == 0, r.stderr
    (job,) = yaml.safe_load_all(r.stdout)
    validate_kubernetes(job)
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (3, 3)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "yolo-orch sweep sweep.yaml --storage" in command and "--study k8s-sweep --workers 1" in command
    sqlite = run_cli("k8s", "sweep.yaml", "--image", IMAGE, "--pvc", "work", cwd=folder)
    assert sqlite.returncode == 2 and "a database server every one reaches" in sqlite.stderr


@pytest.mark.parametrize("args, line", [
    ([], "--pvc: 2 nodes share the run"),
    (["--pvc", "Work"], "--pvc: 'Work' is not a Kubernetes name"),
    (["--pvc", "w", "--kind", "pytorchjob"], "--kind: 'pytorchjob' is not one of job, trainjob, rayjob"),
    (["--pvc", "w", "--shm-size", "lots"], "--shm-size: 'lots' is not a Kubernetes quantity"),
    (["--pvc", "w", "--workdir", "workspace"], "--workdir: 'workspace' is not an absolute path"),
    (["--pvc", "w", "--name", "x" * 60], "--name: 'xxxx"),
    (["--pvc", "w", "-d", "xla:cpu"], "target.devices: 'xla:cpu' does not run on Kubernetes"),
])
def test_bad_options_are_one_line_each_and_print_nothing(folder, args, line):
    r = run_cli("k8s", "job.yaml", "--image", IMAGE, *args, cwd=folder)
    assert r.returncode == 2 and r.stdout == "" and line in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_the_job_file_and_runs_folder_must_be_inside_the_folder_the_pods_see(folder, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere")
    r = run_cli("k8s", str(folder / "job.yaml"), "--image", IMAGE, "--pvc", "w", cwd=outside)
    assert r.returncode == 2 and "JOB: " in r.stderr and "is outside this folder" in r.stderr
    r = run_cli("k8s", "job.yaml", "--image", IMAGE, "--pvc", "w", "--set", f"runs_dir={outside}", cwd=folder)
    assert r.returncode == 2 and "runs_dir: " in r.stderr and "is outside this folder" in r.stderr
    r = run_cli("k8s", "job.yaml", "--image", IMAGE, "--pvc", "w", "--set", f"model={TINY_MODEL}", cwd=folder)
    assert r.returncode == 2 and f"model: {TINY_MODEL} is outside this folder" in r.stderr
    r = run_cli("k8s", "job.yaml", cwd=folder)
    assert r.returncode == 2 and "--image: the container image with yolo-orch installed" in r.stderr


def test_a_data_yaml_whose_images_lie_outside_the_folder_is_refused(folder, tmp_path_factory):
    """The data.yaml inside the folder, its `path:` outside: the pods would find the yaml and no images."""
    outside = tmp_path_factory.mktemp("images-elsewhere")
    made = run_cli("data", "synth", "--out", str(outside / "ds"), "--images", "8", "--classes", "2", cwd=folder)
    assert made.returncode == 0, made.stderr
    cfg = yaml.safe_load((outside / "ds" / "data.yaml").read_text())
    (folder / "data.yaml").write_text(yaml.safe_dump({**cfg, "path": str(outside / "ds")}))
    r = run_cli("k8s", "job.yaml", "--image", IMAGE, "--pvc", "w", "--set", "data=data.yaml", cwd=folder)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"data path: {outside / 'ds'} is outside this folder" in r.stderr and "data train: " in r.stderr
    assert "data: " not in r.stderr  # the yaml itself lies inside
    shutil.copytree(outside / "ds", folder / "ds")
    (folder / "data.yaml").write_text(yaml.safe_dump({**cfg, "path": "ds"}))  # the images inside: accepted
    assert manifests(folder, "--pvc", "w", "--set", "data=data.yaml")


def test_the_manifests_say_what_they_claim():
    """The header names the versions the tests validate against (no cluster reads a comment)."""
    text = k8s.render([{"apiVersion": "v1", "kind": "Service"}])
    assert text.startswith("# ") and f"Kubernetes >= {k8s.MIN_KUBERNETES}" in text and json.dumps(k8s.KUBERAY)[1:-1] in text
