"""The dashboard's web server (Starlette, served by uvicorn): four pages, their JSON, the run files.

    /                  runs: every run and trial, filtered and paged
    /run/{id}          a run: curves (live while it trains), plan, devices, timeline, log, files
    /compare?ids=a,b   two or more runs: curves overlaid, resolved jobs side by side
    /sweep/{study}     a sweep: trials, their curves, the best trial and its best.yaml

Every route reads (ui/store.py); none writes, and each runs in a worker thread, so a slow disk or a
large file never blocks the server. Charts are drawn in the browser by plotly.js, served from the
plotly package's own file: nothing is fetched from the network.

What a run folder holds is not trusted: text files are served masked (the log's secrets, as on the
run page) and as plain text; images as images; anything else as a download. Every response forbids
sniffing, framing and scripts from anywhere but the dashboard (Guard), and a request that names
another host than loopback is refused, so a web page cannot reach the dashboard by DNS rebinding."""

from __future__ import annotations

import asyncio
import html
import json
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from orchestrator.tasks import TASKS
from orchestrator.ui.store import Store

STATIC = Path(__file__).with_name("static")
LONG_POLL_S = 15.0
MAX_QUERY_INT = 10**6  # a page or epoch number past this is taken as this (SQLite's integers end at 2**63)
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
}
IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


class Guard:
    """ASGI middleware: a request is answered only when its Host header names this dashboard (a loopback
    name, unless `allowed` is None: the user widened --host), and every response carries
    SECURITY_HEADERS."""

    def __init__(self, app, allowed: frozenset[str] | None):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        if self.allowed is not None and host_name(host) not in self.allowed:
            refused = PlainTextResponse(f"Host {host!r} is not this dashboard's (it answers loopback names only)",
                                        status_code=421)
            return await refused(scope, receive, self._secured(send))
        await self.app(scope, receive, self._secured(send))

    @staticmethod
    def _secured(send):
        async def secured(message):
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in SECURITY_HEADERS.items():
                    headers[key] = value
            await send(message)
        return secured


def host_name(host: str) -> str:
    """The name of a Host header without its port: `[::1]:8765` -> `::1`, `localhost:80` -> `localhost`."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def plotly_js() -> Path:
    """plotly.js as the plotly package ships it (no CDN: the dashboard works offline)."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def create_app(store: Store, runs_root: Path, allowed_hosts: frozenset[str] | None = LOOPBACK_NAMES) -> Guard:
    """The dashboard's ASGI app; `allowed_hosts` None answers any Host (a dashboard listening beyond
    loopback, where the user chose who reaches it)."""
    routes = [
        Route("/", runs_page), Route("/run/{run_id}", run_page), Route("/compare", compare_page),
        Route("/sweep/{study}", sweep_page), Route("/api/runs", api_runs), Route("/api/run/{run_id}", api_run),
        Route("/api/compare", api_compare), Route("/api/sweep/{study}", api_sweep),
        Route("/files/{run_id}/{path:path}", run_file), Route("/best/{study}", best_yaml),
        Route("/static/{name}", static),
    ]
    app = Starlette(routes=routes, exception_handlers={OSError: unreadable})
    app.state.store, app.state.runs_root = store, Path(runs_root)
    return Guard(app, allowed_hosts)


async def unreadable(request: Request, exc: OSError) -> Response:
    """The registry or a file became unreadable while the dashboard runs: one line, no traceback."""
    return _json({"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}, 503)


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
    page_no = _int(q.get("page"), 0)

    def read() -> dict:
        result = store.runs(name=q.get("name", ""), state=q.get("state", ""), devices=q.get("devices", ""),
                            tags=q.get("tags", ""), task=q.get("task", ""), page=page_no)
        result["studies"] = store.studies() if page_no == 0 else []
        result["tasks"] = list(TASKS)  # the task filter's choices: tasks.py, the one list of them
        return result

    return _json(await run_in_threadpool(read))


async def api_run(request: Request) -> Response:
    """`?after=N` (the live page): wait up to LONG_POLL_S for an epoch past N, or the run's end. Each look
    reads only what the run wrote since the last (Store.events), in a worker thread."""
    run_id, after, store = request.path_params["run_id"], _int(request.query_params.get("after"), -1), _store(request)
    deadline = time.monotonic() + LONG_POLL_S

    def look() -> tuple[dict | None, dict | None]:
        record = store.get(run_id)
        return record, (store.detail(record) if record else None)

    while True:
        record, detail = await run_in_threadpool(look)
        if record is None:
            return _json({"error": f"no run {run_id!r} in this registry"}, 404)
        epochs = len(((detail.get("events") or {}).get("curves") or {}).get("epoch") or [])
        if after < 0 or epochs > after or not record["active"] or time.monotonic() > deadline:
            return _json(detail)
        await asyncio.sleep(0.5)


async def api_compare(request: Request) -> Response:
    store = _store(request)
    ids = [i for i in request.query_params.get("ids", "").split(",") if i][:8]

    def read() -> list[dict]:
        records = [(run_id, store.get(run_id)) for run_id in ids]
        return [store.detail(r) if r else {"run": {"id": run_id}, "missing": True} for run_id, r in records]

    return _json({"runs": await run_in_threadpool(read)})


async def api_sweep(request: Request) -> Response:
    store, study = _store(request), request.path_params["study"]

    def read() -> dict:
        trials = [store.detail(t) for t in store.trials(study)]
        for trial in trials:  # the page shows curves and the verdict, not every trial's log and files
            trial.pop("log", None)
            trial.pop("files", None)
        return {"study": study, "summary": store.sweep_summary(study, request.app.state.runs_root), "trials": trials}

    return _json(await run_in_threadpool(read))


# ---------------------------------------------------------------- files

async def run_file(request: Request) -> Response:
    """A file of the run: text masked (Store.file_text), an image as itself, anything else a download,
    never a page of the dashboard's origin (an .html or .svg in a run folder runs no script here)."""
    store = _store(request)

    def find() -> Path | None:
        record = store.get(request.path_params["run_id"])
        return store.file_path(record, request.path_params["path"]) if record else None

    path = await run_in_threadpool(find)
    if path is None:
        return Response("not a file of this run", status_code=404)
    if path.suffix.lower() in TEXT:
        return PlainTextResponse(await run_in_threadpool(store.file_text, path))
    if path.suffix.lower() in IMAGES:
        return FileResponse(path, media_type=IMAGES[path.suffix.lower()])
    return FileResponse(path, media_type="application/octet-stream", filename=path.name)


async def best_yaml(request: Request) -> Response:
    study, sweeps = request.path_params["study"], request.app.state.runs_root / "sweeps"
    path = sweeps / study / "best.yaml"
    if "/" in study or not path.resolve().is_relative_to(sweeps.resolve()) or not path.is_file():
        return Response("no best.yaml for this study", status_code=404)
    return PlainTextResponse(await run_in_threadpool(_store(request).file_text, path))  # masked, as a run's files


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
    """A query value as an integer between `default` and MAX_QUERY_INT; `default` when it is none."""
    try:
        value = int(text) if text is not None and len(text) <= 20 else default
    except ValueError:
        return default
    return min(max(value, default), MAX_QUERY_INT)
