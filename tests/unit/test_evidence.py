"""The scaling evidence is data generated from the saved bench results (docs/scaling.md 7I): the file the
scaler reads and the docs' tables match them, a changed result makes them stale, and the statistics and
the arm naming do what the declared procedure says."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from orchestrator.scaling import evidence, measured, stats
from orchestrator.scaling.rules import Arm, arm_of


def test_the_evidence_file_and_the_docs_tables_match_the_saved_results():
    """`python -m orchestrator.scaling.measured --check`: exit 1 if a saved JSON changed without --write."""
    assert measured.main(["--check"]) == 0
    assert json.loads(measured.EVIDENCE.read_text()) == measured.build()


def test_a_changed_saved_result_changes_the_evidence(tmp_path):
    for name in [*measured.SOURCES, *measured.FEW_STEPS]:
        if (measured.RESULTS / name).exists():
            shutil.copy(measured.RESULTS / name, tmp_path / name)
    changed = tmp_path / "bench_scaling_sgd_k8_h200_s2-7.json"
    saved = json.loads(changed.read_text())
    run = next(r for r in saved["runs"] if r["policy"] == "linear" and r["seed"] == 2)
    run["final"] -= 0.3  # one seed collapses
    changed.write_text(json.dumps(saved))
    rebuilt, shipped = measured.build(tmp_path), evidence.load()
    assert rebuilt["sources"][changed.name] != shipped["sources"][changed.name]

    def sgd_k8(doc: dict) -> dict:
        return next(c for c in doc["comparisons"] if (c["task"], c["start"], c["family"], c["k"], c["arm"], c["versus"])
                    == ("detect", "scratch", "SGD", 8, "lr0-sqrt", "linear"))
    assert sgd_k8(rebuilt)["best"]["mean"] == pytest.approx(sgd_k8(shipped)["best"]["mean"] + 0.3 / sgd_k8(shipped)["best"]["n"],
                                                            abs=1e-3)


def test_mean_interval_is_students_t():
    iv = stats.mean_interval([1.0, 2.0, 3.0])
    assert (iv.n, iv.mean) == (3, 2.0)
    assert iv.hi - iv.mean == pytest.approx(4.303 / math.sqrt(3))
    assert iv.text() == "+2.000 [-0.484, +4.484], n = 3" and iv.excludes_zero is False
    assert stats.mean_interval([0.5]).text() == "+0.500, n = 1"  # one pair: no interval
    assert stats.mean_interval([0.1, 0.12, 0.11]).excludes_zero


def test_arms_are_named_by_what_they_trained():
    """From the passed lr0 and optimizer weight decay over the reference's, and the warmup."""
    assert arm_of("SGD", 8, 1.0, 8.0, True) == Arm("linear")
    assert arm_of("SGD", 8, 1.0, 8.0, False) == Arm("none")  # stock Ultralytics: only the warmup differs
    assert arm_of("SGD", 2, 1.0, 2.0, False) == Arm("linear")  # the same training below k = 4
    assert arm_of("SGD", 8, 8 ** 0.5, 8 ** 0.5, True) == Arm("lr0-sqrt")
    assert arm_of("SGD", 8, 8 ** 0.5, 8 ** 0.5, False) == Arm("lr0-sqrt", keep_warmup=True)
    assert arm_of("SGD", 4, 0.5, 8.0, True) == Arm("sqrt")
    assert arm_of("Adam", 4, 4.0, 1.0, True) == Arm("linear")
    assert arm_of("Adam", 4, 2.0, 2.0, True) == Arm("sqrt")
    assert arm_of("Adam", 4, 1.0, 1.0, True) == Arm("table")
    assert arm_of("Adam", 4, 3.0, 1.0, True) is None  # no rule passes those values


def test_every_arm_the_evidence_spells_reads_back_typed():
    """An arm is typed (rules.Arm); evidence.json's spelling of each is its label, read by Arm.parse alone."""
    data = evidence.load()
    labels = {c["arm"] for c in data["cells"]} | {d["rule"] for d in data["decisions"]}
    assert {"linear (warmup kept)", "lr0-sqrt, 20 epochs"} <= labels
    for label in labels:
        assert Arm.parse(label).label == label
    assert Arm.parse("lr0-sqrt (warmup kept)") == Arm("lr0-sqrt", keep_warmup=True)
    assert Arm.parse("linear, 20 epochs") == Arm("linear", epochs=20) and Arm("linear", epochs=20).longer


def test_auto_reads_the_decision_below_between_and_beyond_the_measured_k():
    rows = {d["k"]: d["rule"] for d in evidence.load()["decisions"]
            if (d["task"], d["start"], d["family"]) == ("detect", "pretrained", "SGD")}
    assert sorted(rows) == [4, 8]
    below = evidence.decision("detect", "pretrained", "SGD", 2.0)
    assert (below.arm, below.k_measured) == (Arm("linear"), None)
    assert evidence.decision("detect", "pretrained", "SGD", 6.0).arm.label == rows[4]
    beyond = evidence.decision("detect", "pretrained", "SGD", 16.0)
    assert (beyond.arm.label, beyond.k_measured, beyond.extrapolated) == (rows[8], 8, True)
    # a task without rows of its own takes detect's
    assert evidence.decision("pose", "scratch", "SGD", 8.0).row == evidence.decision("detect", "scratch", "SGD", 8.0).row


def test_no_decision_rests_on_a_device():
    """The procedure's step 6: no interaction between the device and a policy excludes 0, so nothing in the
    decisions is keyed by the device (the keys are task, start, family and k)."""
    doc = evidence.load()
    assert all(set(d) == {"task", "start", "family", "k", "rule", "basis", "gap", "versus"} for d in doc["decisions"])
    assert "none." in measured.summary(doc)[1]
