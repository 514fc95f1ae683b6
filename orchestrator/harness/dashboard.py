"""`yolo-orch ui` on a runs folder, read through a real headless browser (Debian's chromium; scripts/browser.sh
installs it when missing): the DOM a page's script leaves (`--dump-dom`), what a person would see."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from orchestrator.harness import Unavailable
from orchestrator.harness.cli import REPO, cli_env

# screenshots of the pages a test opens land here when set (docs' pictures are made this way)
SHOTS = Path(os.environ["YOLO_ORCH_UI_SCREENSHOTS"]) if os.environ.get("YOLO_ORCH_UI_SCREENSHOTS") else None


def find_browser() -> str:
    """Chromium's path, installed when missing (one apt-get at a time: scripts/browser.sh takes a lock)."""
    r = subprocess.run(["bash", str(REPO / "scripts" / "browser.sh")], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise Unavailable(f"no browser: {r.stderr.strip()}")
    return r.stdout.strip().splitlines()[-1]


def headless(browser: str, profile: Path, budget_ms: int = 8000, size: str = "1280,1800") -> list[str]:
    """Chromium headless with its own profile folder, given `budget_ms` of virtual time to run a page's script."""
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}", f"--window-size={size}"]


def screenshot(browser: str, profile: Path, url: str, to: Path, budget_ms: int = 8000,
               size: str = "1280,1800") -> None:
    """A PNG of the page at `url` as the browser shows it after `budget_ms` of its script."""
    to.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([*headless(browser, profile, budget_ms, size), f"--screenshot={to}", url],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not to.is_file():
        raise RuntimeError(f"no screenshot of {url}: {r.stderr[-500:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dashboard:
    """The dashboard on a port of its own over `runs`; `.api(path)`, `.status(path)`, `.dom(path)`, `.stop()`."""

    def __init__(self, runs: Path, browser: str, tmp: Path):
        self.port, self.browser, self.tmp = _free_port(), browser, tmp
        self.url = f"http://127.0.0.1:{self.port}"
        start = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", "--runs-dir", str(runs), "--port",
                                      str(self.port)], env=cli_env(), stderr=subprocess.PIPE, text=True)
        while True:
            try:
                urllib.request.urlopen(self.url + "/api/runs", timeout=1)
                break
            except OSError:
                assert self.proc.poll() is None, self.proc.stderr.read()
                assert time.monotonic() - start < 30, "the dashboard did not start"
                time.sleep(0.1)
        self.started_in = time.monotonic() - start

    def api(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def dom(self, path: str, budget_ms: int = 8000, shot: str | None = None) -> str:
        """The page as the browser leaves it after running its script (and a screenshot, when asked)."""
        r = subprocess.run([*headless(self.browser, self.tmp / "chrome", budget_ms), "--dump-dom", self.url + path],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        if shot and SHOTS:
            screenshot(self.browser, self.tmp / "chrome", self.url + path, SHOTS / shot, budget_ms)
        return r.stdout

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
