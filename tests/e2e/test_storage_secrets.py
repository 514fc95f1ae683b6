"""Storage passwords never leak: every credential form SQLAlchemy and the drivers accept is planted,
then stdout, stderr and every file the commands wrote are scanned for it. `doctor --storage`,
`sweep --dry-run` and a real sweep on the PostgreSQL server (trust auth ignores the password, so a
planted one connects) all show the URL with *** instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from orchestrator.urls import redact_text, redact_url
from conftest import write_sweep

SECRET = "Hunter2Secret"
# (the form, a URL holding SECRET; {db} is the database)
FORMS = {
    "userinfo": f"postgresql://postgres:{SECRET}@127.0.0.1:5432/{{db}}",
    "query-password": f"postgresql://postgres@127.0.0.1:5432/{{db}}?password={SECRET}",
    "unescaped-at": f"postgresql://postgres:Pass@{SECRET}@127.0.0.1:5432/{{db}}",
    "percent-escaped": f"postgresql+psycopg2://postgres:{SECRET}%40x@127.0.0.1:5432/{{db}}",
    "slash-in-password": f"postgresql://postgres:a/{SECRET}@127.0.0.1:5432/{{db}}",
    "sslpassword": f"postgresql://postgres@127.0.0.1:5432/{{db}}?sslmode=disable&sslpassword={SECRET}",
    "mysql-passwd": f"mysql+pymysql://root@127.0.0.1:1/{{db}}?passwd={SECRET}",
}


@pytest.mark.parametrize("form", FORMS)
def test_redact_url_hides_every_form(form):
    url = FORMS[form].format(db="test")
    shown = redact_url(url)
    assert SECRET not in shown and "***" in shown
    assert "127.0.0.1" in shown and shown.endswith(("/test", "sslmode=disable&sslpassword=***", "passwd=***",
                                                    "password=***"))
    assert SECRET not in redact_text(f"connection to {url} failed: FATAL password={SECRET}", url)


def test_sqlite_paths_are_kept():
    assert redact_url("sqlite:////srv/me@host/s.db") == "sqlite:////srv/me@host/s.db"


def _scan(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


@pytest.mark.parametrize("form", FORMS)
def test_doctor_and_dry_run_never_print_it(tmp_path, form):
    url = FORMS[form].format(db="no_such_db_here")
    sweep = write_sweep(tmp_path)
    for args in (("doctor", "--storage", url, "--json"), ("sweep", sweep, "--dry-run", "--storage", url),
                 ("sweep", sweep, "--dry-run", "--storage", url, "--json")):
        result = run_cli(*args, cwd=tmp_path, env={"YOLO_ORCH_REGISTRY": ""}, timeout=120)
        assert SECRET not in result.stdout + result.stderr, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
    assert not _scan(tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("form", ["query-password", "userinfo"])
def test_real_sweep_on_postgres_never_stores_it(tmp_path, pg_url, form):
    db = pg_url.rsplit("/", 1)[1]
    url = FORMS[form].format(db=db)
    sweep = write_sweep(tmp_path, budget={"n_trials": 1}, enqueue=[{"hyp": {"box": 0.5, "lr0": 0.002}}],
                        job_changes={"epochs": 1})
    result = run_cli("sweep", sweep, "--storage", url, "--json", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["done"] == 1 and "***" in summary["storage"]
    assert SECRET not in result.stdout + result.stderr
    assert not _scan(tmp_path), _scan(tmp_path)
