"""The doctor's probe subprocess: a probe stopped at its timeout keeps what it printed before (the runtime probe
prints torch's line before it imports torch_xla, so a hanging torch_xla still leaves the torch check its answer)."""

from orchestrator.doctor.checks import TIMED_OUT, run_python


def test_a_probe_stopped_at_its_timeout_keeps_its_first_lines():
    code, out, err = run_python("import time\nprint('torch line', flush=True)\ntime.sleep(30)", timeout=2)
    assert (code, out, err) == (TIMED_OUT, "torch line\n", "timed out after 2 s")
