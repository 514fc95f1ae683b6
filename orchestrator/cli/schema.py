"""`yolo-orch schema`: the JSON Schema of job files, for editors."""

from __future__ import annotations

import typer

from orchestrator.cli.common import print_json


def schema_cmd() -> None:
    """Print the JSON Schema of the job spec (point your editor's YAML plugin at it)."""
    from orchestrator.jobspec.job import JobSpec

    schema = JobSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "yolo-orch job"
    print_json(schema)


def register(app: typer.Typer) -> None:
    app.command("schema")(schema_cmd)
