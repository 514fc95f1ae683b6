"""The dashboard's web server (Starlette, served by uvicorn): four pages, their JSON, the run files.

    /                  runs: every run and trial, filtered and paged
    /run/{id}          a run: curves (live while it trains), plan, devices, timeline, log, files
    /compare?ids=a,b   two or more runs: curves overlaid, resolved jobs side by side
    /sweep/{study}     a sweep: trials, their curves, the best trial and its best.yaml

Every route reads (ui/store.py); none writes. Charts are drawn in the browser by plotly.js, served
from the plotly package's own file: nothing is fetched from the network."""

from __future__ import annotations

import asyncio
import html
import json
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from orchestrator.ui.store import Store

STATIC = Path(__file__).with_name("static")
LONG_POLL_S = 15.0


def plotly_js() -> Path:
    """plotly.js as the plotly package ships it (no CDN: the dashboard works offline)."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def create_app(store: Store, runs_root: Path) -> Starlette:
    routes = [
        Route("/", runs_page), Route("/run/{run_id}", run_page), Route("/compare", compare_page),
        Route("/sweep/{study}", sweep_page), Route("/api/runs", api_runs), Route("/api/run/{run_id}", api_run),
        Route("/api/compare", api_compare), Route("/api/sweep/{study}", api_sweep),
        Route("/files/{run_id}/{path:path}", run_file), Route("/best/{study}", best_yaml),
        Route("/static/{name}", static),
    ]
    app = Starlette(routes=routes)
    app.state.store, app.state.runs_root = store, Path(runs_root)
    return app


def _store(request: Request) -> Store:
    return request.app.state.store


# ---------------------------------------------------------------- pages: a shell the page script fills

def page(name: str, title: str, **data: str) -> HTMLResponse:
    attrs = " ".join(f'data-{k}="{html.escape(v, quote=True)}"' for k, v in data.items())
    body = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)} - yolo-orch</title>"
            "<link rel='stylesheet' href='/static/app.css'><script src='/static/plotly.min.js'></script>"
            f"</head><body data-page='{name}' {attrs}><header><a href='/'>yolo-orch</a> <span>"
            f"{html.escape(title)}</span></header><main id='main'>loading...</main>"
            "<script src='/static/app.js'></script></body></html>")
    return HTMLResponse(body)


async def runs_page(request: Request) -> Response:
    return page("runs", f"runs ({_store(request).registry})")


async def run_page(request: Request) -> Response:
    return page("run", f"run {request.path_params['run_id']}", run=request.path_params["run_id"])


async def compare_page(request: Request) -> Response:
    return page("compare", "compare", ids=request.query_params.get("ids", ""))


async def sweep_page(request: Request) -> Response:
    return page("sweep", f"sweep {request.path_params['study']}", study=request.path_params["study"])


# ---------------------------------------------------------------- the JSON the pages read

async def api_runs(request: Request) -> Response:
    q, store = request.query_params, _store(request)
    page_no = max(_int(q.get("page"), 0), 0)
    result = store.runs(name=q.get("name", ""), state=q.get("state", ""), devices=q.get("devices", ""),
                        tags=q.get("tags", ""), task=q.get("task", ""), page=page_no)
    result["studies"] = store.studies() if page_no == 0 else []
    return _json(result)


async def api_run(request: Request) -> Response:
    """`?after=N` (the live page): wait up to LONG_POLL_S for an epoch past N, or the run's end."""
    run_id, after = request.path_params["run_id"], _int(request.query_params.get("after"), -1)
    deadline = time.monotonic() + LONG_POLL_S
    while True:
        record = _store(request).get(run_id)
        if record is None:
            return _json({"error": f"no run {run_id!r} in this registry"}, 404)
        detail = _store(request).detail(record)
        epochs = len(((detail.get("events") or {}).get("curves") or {}).get("epoch") or [])
        if after < 0 or epochs > after or not record["active"] or time.monotonic() > deadline:
            return _json(detail)
        await asyncio.sleep(0.5)


async def api_compare(request: Request) -> Response:
    store = _store(request)
    runs = []
    for run_id in [i for i in request.query_params.get("ids", "").split(",") if i][:8]:
        record = store.get(run_id)
        runs.append(store.detail(record) if record else {"run": {"id": run_id}, "missing": True})
    return _json({"runs": runs})


async def api_sweep(request: Request) -> Response:
    store, study = _store(request), request.path_params["study"]
    trials = [store.detail(t) for t in store.trials(study)]
    for trial in trials:  # the page shows curves and the verdict, not every trial's log and files
        trial.pop("log", None)
        trial.pop("files", None)
    return _json({"study": study, "summary": store.sweep_summary(study, request.app.state.runs_root),
                  "trials": trials})


# ---------------------------------------------------------------- files

async def run_file(request: Request) -> Response:
    store = _store(request)
    record = store.get(request.path_params["run_id"])
    path = store.file_path(record, request.path_params["path"]) if record else None
    if path is None:
        return Response("not a file of this run", status_code=404)
    return FileResponse(path, media_type="text/plain; charset=utf-8" if path.suffix in TEXT else None)


async def best_yaml(request: Request) -> Response:
    study, sweeps = request.path_params["study"], request.app.state.runs_root / "sweeps"
    path = sweeps / study / "best.yaml"
    if "/" in study or not path.resolve().is_relative_to(sweeps.resolve()) or not path.is_file():
        return Response("no best.yaml for this study", status_code=404)
    return FileResponse(path, media_type="text/plain; charset=utf-8")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name == "plotly.min.js":
        return FileResponse(plotly_js(), media_type="application/javascript")
    if name not in ("app.js", "app.css"):
        return Response(status_code=404)
    return FileResponse(STATIC / name)


TEXT = {".log", ".txt", ".yaml", ".yml", ".json", ".jsonl", ".csv"}


def _json(data, status: int = 200) -> Response:
    return Response(json.dumps(_no_nan(data), default=str), status_code=status, media_type="application/json")


def _no_nan(value):
    """JSON has no NaN: a metric that is nan is shown as a gap."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
