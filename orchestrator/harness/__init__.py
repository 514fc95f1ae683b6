"""The one harness of the tests and the benches: how they drive yolo-orch as a user does (the CLI in a
fresh interpreter and its environment), the jobs and sweeps they write, what they read back from a run
(events, results.csv, W&B epochs), the processes they look for, their one wait, the real services they
start (a private PostgreSQL server, a Slurm cluster of one or two nodes, a small tmpfs disk) and plain Ultralytics
driven offline (`python -m orchestrator.harness.plain`). It sits on top: nothing of the tool imports it.

The pytest fixtures (tests/conftest.py) and the campaigns (bench/) both import these modules; a service
that cannot start raises `Unavailable` with the reason, which a test turns into a skip (a failure in CI)
and a campaign into one line."""


from orchestrator.errors import EnvError


class Unavailable(EnvError):
    """A real service a test or campaign needs cannot start here (the reason, one line)."""
