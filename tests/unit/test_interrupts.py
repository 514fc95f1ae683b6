"""launch/process.py: the first interrupt stops a process, and a second one cannot cut that stop short (the CI at
b925c3f: a killed `yolo-orch sweep` sent its worker two SIGTERMs, the second landed in the trial's close and left
its MLflow run RUNNING). Real signals, in processes of their own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from conftest import REPO

STOP_TWICE = textwrap.dedent("""
    import os, signal, time
    from orchestrator.launch import process
    try:
        with process.interrupts_raise():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        print("not interrupted")
    except process.Interrupted as exc:
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C, then the parent's SIGTERM, while stopping
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print("stopped whole after", exc)
""")


def test_a_second_interrupt_does_not_cut_the_stop_short():
    done = subprocess.run([sys.executable, "-c", STOP_TWICE], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "stopped whole after SIGTERM", done.stderr


PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    time.sleep(600)
""")
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from orchestrator.launch import process
    seen = []
    signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    process.stop_when_parent_dies(os.getppid(), interval_s=0.1)
    Path(sys.argv[1] + ".ready").touch()
    while not seen:
        time.sleep(0.05)
    time.sleep(1.5)  # past the parent watch's interval many times over
    Path(sys.argv[1]).write_text(str(len(seen)))
""")


def test_the_death_of_the_parent_is_one_signal(tmp_path):
    out = tmp_path / "signals"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(out)], cwd=REPO)
    deadline = time.time() + 60
    while not out.with_suffix(".ready").exists():
        assert time.time() < deadline and parent.poll() is None
        time.sleep(0.05)
    parent.kill()  # kill -9: the child is told once, by the kernel or by the watch, never both
    parent.wait(10)
    while not out.exists():
        assert time.time() < deadline, "the child was never told its parent died"
        time.sleep(0.05)
    assert out.read_text() == "1"
