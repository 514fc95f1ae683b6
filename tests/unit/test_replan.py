"""resume.py: what a resume makes again, and what it names before anything starts."""

import pytest


def test_a_dataset_the_job_names_that_is_gone_is_named_before_anything_starts(tmp_path):
    from orchestrator.resume import restore_data
    from orchestrator.errors import UserError
    from orchestrator.rundir import ResolvedRun

    gone = tmp_path / "gone" / "data.yaml"
    resolved = ResolvedRun.from_dict({"job": {"data": str(gone), "task": "detect"},
                                      "plan": {"devices": "cpu", "train_args": {"data": str(gone), "epochs": 1}}})
    with pytest.raises(UserError) as exc:
        restore_data(resolved, "r1")
    assert exc.value.problems == [f"RUN: r1 trains on {gone}, which does not exist here; put the dataset back "
                                  "(or mount it at that path) and resume again"]
    copy = tmp_path / "data.yaml"  # a run's data.yaml copy whose root went away
    copy.write_text(f"path: {tmp_path / 'root'}\ntrain: images\nval: images\nnames: [a]\n")
    resolved.plan.train_args["data"] = str(copy)
    with pytest.raises(UserError, match=f"trains on {tmp_path / 'root'}, which does not exist here"):
        restore_data(resolved, "r1")
    (tmp_path / "root").mkdir()
    assert restore_data(resolved, "r1") is None
