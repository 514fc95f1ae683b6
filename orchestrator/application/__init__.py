"""The application layer: what each command that changes something does, as functions that take
plain values and return outcomes (training.py: submit, train, resume; slurm.py: the sbatch scripts).
The command line (orchestrator/cli/) parses arguments, calls one of them and renders the result."""
