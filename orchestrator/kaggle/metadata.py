"""kernel-metadata.json and dataset-metadata.json: what `kaggle kernels push -p DIR` and
`kaggle datasets create|version -p DIR` read.

Facts they encode (docs/kaggle.md has the sources):
- `id` is "owner/slug"; the `title` must slugify to that slug, else Kaggle names the kernel
  after the title and the next push creates another kernel.
- `enable_internet` defaults to TRUE in the CLI when absent: always write it.
- `machine_shape` picks the accelerator ("TpuV5E8": TPU v5e-8, 8 cores). `enable_gpu` /
  `enable_tpu` are deprecated, and a `docker_image` silently drops the TPU: never written.
- Only `code_file` is uploaded by a kernel push; everything else the kernel needs comes from
  `dataset_sources` / `kernel_sources` (mounted read-only under /kaggle/input).
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.jobspec.kaggle import MACHINE_SHAPES, REF_PATTERN, SLUG_PATTERN

KERNEL_METADATA = "kernel-metadata.json"
DATASET_METADATA = "dataset-metadata.json"
CODE_FILE = "run_kaggle.py"
SLUG_MAX = 50
FORBIDDEN_KEYS = ("docker_image", "docker_image_pinning_type", "enable_gpu", "enable_tpu")
TPU_CORES = {"TpuV5E8": 8, "TpuV6E8": 8}


def slugify(text: str) -> str:
    """Kaggle's slug of a title: lower case, runs of anything but [a-z0-9] -> '-', trimmed."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def kernel_slug(job_name: str, session: int = 1, base: str | None = None) -> str:
    """`yolo-orch-<job>` for the first session, `...-s2`, `...-s3` for the sessions that resume it.
    Each session is its own kernel so the next one can attach the previous one's output."""
    root = slugify(base or f"yolo-orch-{job_name}") or "yolo-orch-job"
    suffix = "" if session <= 1 else f"-s{session}"
    root = root[: SLUG_MAX - 5].strip("-")  # the same root for every session (room for "-s999")
    if len(root) < 3:
        root = f"{root}-job"
    return f"{root}{suffix}"


def base_slug(slug: str) -> str:
    """The session-1 slug of a session slug (`x-s3` -> `x`)."""
    return re.sub(r"-s\d+$", "", slug)


def title_for(slug: str) -> str:
    """A title that slugifies back to `slug` (>= 5 characters)."""
    title = slug.replace("-", " ")
    if len(title) < 5:
        title = slug  # too short either way; validate() reports it
    return title


def kernel_metadata(owner: str, slug: str, *, machine_shape: str = "TpuV5E8", enable_internet: bool = False,
                    dataset_sources: list[str] = (), kernel_sources: list[str] = (),
                    code_file: str = CODE_FILE) -> dict[str, Any]:
    meta = {
        "id": f"{owner}/{slug}",
        "title": title_for(slug),
        "code_file": code_file,
        "language": "python",
        "kernel_type": "script",
        "is_private": True,
        "enable_internet": bool(enable_internet),
        "machine_shape": machine_shape,
        "dataset_sources": list(dict.fromkeys(dataset_sources)),
        "competition_sources": [],
        "kernel_sources": list(dict.fromkeys(kernel_sources)),
        "model_sources": [],
    }
    return meta


def validate_kernel_metadata(meta: dict[str, Any]) -> list[str]:
    """Problems that would make the push fail or do something else than meant."""
    problems = []
    ident = str(meta.get("id", ""))
    if not re.fullmatch(REF_PATTERN, ident):
        problems.append(f"id: expected owner/slug with a slug of 3-50 lower-case letters, digits, '-' (got {ident!r})")
    title = str(meta.get("title", ""))
    if len(title) < 5 or len(title) > SLUG_MAX:
        problems.append(f"title: must be 5-{SLUG_MAX} characters (got {len(title)})")
    if "/" in ident and slugify(title) != ident.split("/", 1)[1]:
        problems.append(f"title: {title!r} slugifies to {slugify(title)!r}, not the id's slug {ident.split('/', 1)[1]!r}")
    for key in FORBIDDEN_KEYS:
        if key in meta:
            problems.append(f"{key}: must not be set (use machine_shape; a docker_image drops the TPU)")
    if not isinstance(meta.get("enable_internet"), bool):
        problems.append("enable_internet: must be written explicitly (the CLI defaults it to true)")
    if meta.get("language") != "python" or meta.get("kernel_type") not in ("script", "notebook"):
        problems.append("language/kernel_type: expected python and script")
    for key in ("dataset_sources", "kernel_sources"):
        for ref in meta.get(key, []):
            if not re.fullmatch(REF_PATTERN, str(ref)):
                problems.append(f"{key}: {ref!r} is not owner/slug")
    return problems


def machine_shape_warning(shape: str) -> str | None:
    if shape not in MACHINE_SHAPES:
        return (f"machine_shape {shape!r} is not one this version knows ({', '.join(MACHINE_SHAPES)}); "
                "written as given")
    return None


def dataset_metadata(owner: str, slug: str, title: str, *, license_name: str = "other",
                     description: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"title": title, "id": f"{owner}/{slug}", "licenses": [{"name": license_name}]}
    if description:
        meta["description"] = description
    return meta


def validate_dataset_metadata(meta: dict[str, Any]) -> list[str]:
    problems = []
    title = str(meta.get("title", ""))
    if not 6 <= len(title) <= 50:
        problems.append(f"title: must be 6-50 characters (got {len(title)}: {title!r})")
    ident = str(meta.get("id", ""))
    if not re.fullmatch(REF_PATTERN, ident) or not re.fullmatch(SLUG_PATTERN, ident.split("/", 1)[-1]):
        problems.append(f"id: expected owner/slug (slug 3-50 lower-case letters, digits, '-'), got {ident!r}")
    if not meta.get("licenses"):
        problems.append("licenses: at least one, e.g. [{\"name\": \"other\"}]")
    return problems
