"""The run-directory contract: everything the orchestrator and the training process agree on.

The two sides meet only here and in the files this package names. The orchestrator writes
job.resolved.yaml (the typed `ResolvedRun` of rundir/resolved.py: job, plan, resume/OOM history) and starts the training process with the run
directory as its one argument; the training process (rank 0) appends one JSON object per line to
events.jsonl, which the orchestrator tails for progress bars, the registry and summaries, writes
summary.json when it finishes and ends with one of the exit codes of names.py. This package imports
nothing else of the tool but the device parser and the kinds of failure, so the training process pulls in
no Pydantic, scaler or registry.

Its modules, by what they hold: `names.py` (files, exit codes, environment names, run ids), `resolved.py`
(job.resolved.yaml, typed) with `contract.py` (what a readable one holds), `events.py` (events.jsonl),
`epochs.py` (epochs from results.csv), `summary.py` (summary.json, why a worker failed), `process.py`
(ranks, process identity, dying with a parent), `checkpoints.py` (checkpoints read without torch),
`files.py` (atomic writes, the tool's own YAML), `reading.py` (the one read model of a run for the readers that
show one). This face re-exports what the two sides use."""

# ruff: noqa: F401  (the package's face: what the two sides import from `orchestrator.rundir`)
from orchestrator.rundir.files import (dump_yaml, load_own_yaml, replaced_atomically, write_bytes_atomic,
                                       write_json_atomic, write_text_atomic)
from orchestrator.rundir.resolved import (RESOLVED, SCHEMA_VERSION, NodeOptions, OomStep, ResolvedRun,
                                          ResolvedRunError, ResumeOrder, ResumeRecord, RunDirVersionError, RunJob,
                                          RunPlan, TrialLink, load_resolved, parse_resolved, resolved_or_none)
from orchestrator.rundir.names import (BEST, DEADLINE_STOP, ENV, ENV_CALLBACKS, ENV_DEADLINE, ENV_SUPERVISOR_PID,
                                       ENV_SUPERVISOR_START, EVENTS, EXIT_NOT_RESUMABLE, EXIT_OOM, HEARTBEATS,
                                       HEARTBEAT_PHASES, LAST, LOG, RESULTS, RESUME_PATCHED, SESSION_RESUME,
                                       STACKS, STACK_SIGNAL, SUMMARY, WEIGHTS, XLA_COMPILE_CACHE, new_run_id)
from orchestrator.rundir.events import (EventTail, EventWriter, end_torn_line, float_or_none, parse_event,
                                        trained_epoch_events, trained_epochs)
from orchestrator.rundir.epochs import completed_epochs, missing_epochs, row_epoch
from orchestrator.rundir.summary import failure_cause, finish_run, run_summary, say_in_log
from orchestrator.rundir.process import Ranks, die_with_parent, is_primary, process_alive, process_identity, rank
