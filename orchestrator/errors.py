"""The tool's kinds of failure and its exit codes, in one place. A leaf: it imports nothing of the tool,
and every part may import it, so each part's own errors derive from these and say their kind.

- UserError: bad input (a job or sweep file, a flag, a file, a dataset, a run id). One line per
  problem, naming the field and what was expected; exit 2; nothing was started or overwritten.
- RunStateError: a UserError about a run's state (still running, finished, stopped before its first
  checkpoint, its job.resolved.yaml damaged or newer): what to do instead; exit 2.
- EnvError: the machine or a service kept a correct command from working (a storage that stays away,
  a registry that cannot be written, a full disk). One line saying what to do; exit 1.

The training process's own exit codes (out of memory, not resumable) are part of the run-directory
contract (rundir/), which the training process reads without the rest of the tool.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # an EnvError, a training that failed, a sweep that did not reach its trials
EXIT_BAD_INPUT = 2  # a UserError
EXIT_TOO_MANY_FAILURES = 3  # a sweep worker after max_consecutive_failures failed trials in a row
EXIT_EXPORT_FAILED = 4  # the training finished (its weights are kept) but an export the job asked for failed
EXIT_STALLED = 124  # as `timeout`: a Slurm script requeues it (launch/slurm.py)
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM, a killed run

# How a run ended -> the exit code of the command that ran it (any other end: EXIT_FAILED).
RUN_EXIT_CODES = {"finished": EXIT_OK, "killed": EXIT_INTERRUPTED, "stalled": EXIT_STALLED}


class ToolError(Exception):
    """A failure the command line reports in lines, never as a traceback: `problems` (one line each),
    `kind` (what kind of failure, for the reader and `--json`) and the exit code."""

    kind = "failure"
    exit_code = EXIT_FAILED

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))

    def under(self, field: str):
        """The same failure with each line under `field` (`--devices: ...`, `RUN: r1: ...`), of the same kind."""
        return type(self)([f"{field}: {line}" for line in self.problems])


class UserError(ToolError):
    """Bad user input: the CLI prints one line per problem and exits EXIT_BAD_INPUT."""

    kind = "user"
    exit_code = EXIT_BAD_INPUT


class RunStateError(UserError):
    """A run's state keeps a command from it (resume a running or finished run, read a damaged run)."""

    kind = "run state"


class EnvError(ToolError):
    """The machine or a service kept the command from working: the CLI prints the line, exits EXIT_FAILED."""

    kind = "environment"
