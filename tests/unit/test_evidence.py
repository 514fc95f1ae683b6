"""The scaling evidence is data generated from the saved bench results (docs/scaling.md 7I): the file the
scaler reads and the docs' tables match them, a changed result makes them stale, and the statistics and
the arm naming do what the declared procedure says."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest

from orchestrator.scaling import confirm, evidence, measured, stats
from orchestrator.scaling.rules import Arm, arm_of, default_rule
from orchestrator.scaling.stats import Interval


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
    # linear lost 0.3 in one pair: lr0-sqrt - linear grows, and its interval widens (that machine kind's pairs
    # now spread: it weighs less among the kinds, 7J)
    new, old = sgd_k8(rebuilt)["best"], sgd_k8(shipped)["best"]
    assert new["mean"] > old["mean"] + 0.005
    assert new["ci95"][1] - new["ci95"][0] > old["ci95"][1] - old["ci95"][0]


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
    """The procedure's step 6: a rule may differ by device only where an interaction excludes 0 and a run that
    switches the mechanism reproduces it; none was run, so nothing in the decisions is keyed by the device (the
    keys are task, start, family or MuSGD's own, and k)."""
    doc = evidence.load()
    allowed = {"task", "start", "family", "k", "rule", "basis", "gap", "versus", "musgd", "on_last", "confirmation",
               "explored"}
    assert all(set(d) <= allowed for d in doc["decisions"])
    assert {d["family"] for d in doc["decisions"]} <= {"SGD", "Adam", "MuSGD"}


def test_one_machine_kind_is_the_seeds_t_interval_and_several_are_random_effects():
    """7J point 1: grouped by machine kind; one kind, Student's t on its seeds (said as one machine); several,
    DerSimonian and Laird's random-effects mean, here recomputed by hand."""
    one = stats.machine_interval([[1.0, 2.0, 3.0]])
    assert (one.mean, one.machines) == (2.0, 1) and one.text().endswith("n = 3, one machine")
    assert one.hi - one.mean == pytest.approx(4.303 / math.sqrt(3))
    groups = [[0.10, 0.12, 0.14], [0.00, 0.04], [0.20]]  # the third kind's one pair takes the pooled variance
    pooled = (2 * 0.0004 + 1 * 0.0008) / 3
    v = [0.0004 / 3, 0.0008 / 2, pooled / 1]
    means = [0.12, 0.02, 0.20]
    w = [1 / x for x in v]
    fixed = sum(a * b for a, b in zip(w, means)) / sum(w)
    q = sum(a * (m - fixed) ** 2 for a, m in zip(w, means))
    tau2 = max(0.0, (q - 2) / (sum(w) - sum(a * a for a in w) / sum(w)))
    ws = [1 / (x + tau2) for x in v]
    mean, se = sum(a * m for a, m in zip(ws, means)) / sum(ws), math.sqrt(1 / sum(ws))
    iv = stats.machine_interval(groups)
    assert (iv.n, iv.machines) == (6, 3) and iv.mean == pytest.approx(mean)
    assert (iv.lo, iv.hi) == (pytest.approx(mean - 1.959964 * se), pytest.approx(mean + 1.959964 * se))
    assert tau2 > 0 and iv.hi - iv.lo > 2 * 1.959964 * math.sqrt(1 / sum(w))  # wider than the fixed-effect one
    assert stats.machine_interval([[0.1], [0.2]]).lo is None  # no kind with two pairs: no variance, no interval


def _arms(rows: dict) -> dict:
    """{arm: {(setup, optimizer, machine, seed): row}} from {arm: [(optimizer, machine, seed, best.pt)]}."""
    return {arm: {("s", opt, machine, seed): {"final": v, "curve": [v], "source": "a.json"}
                  for opt, machine, seed, v in runs}
            for arm, runs in rows.items()}


def test_of_several_passing_arms_the_largest_lower_bound_wins_not_the_largest_mean():
    """7J point 3: an arm with a high mean on few, spread seeds does not beat a steadier one."""
    runs = lambda gains: [("SGD", "cpu-a", s, 0.5 + g) for s, g in enumerate(gains)]  # noqa: E731
    arms = _arms({"reference": runs([0.05] * 6), "linear": runs([0.0] * 6),
                  "lr0-sqrt": runs([0.09, 0.01, 0.08, 0.02, 0.1, 0.0]),  # mean +0.05, spread
                  "sqrt": runs([0.03, 0.031, 0.029, 0.03, 0.03, 0.03])})  # mean +0.03, steady
    row = measured._decide(arms, "SGD")
    assert Interval.from_json(row["versus"]["lr0-sqrt"]).mean > Interval.from_json(row["versus"]["sqrt"]).mean
    assert (row["rule"], row["basis"]) == ("sqrt", "measured")


def test_musgd_gets_its_own_key_where_its_own_pairs_differ():
    """7J point 2: in an SGD-family cell where MuSGD's own pairs put lr0-sqrt above linear, MuSGD is decided
    from them alone, SGD from its own, and auto looks MuSGD up under its key."""
    sgd = [("SGD", m, s) for m in ("cpu-a", "gpu-b") for s in range(3)]
    mu = [("MuSGD", "cpu-a", s) for s in range(4)]
    gain = {"SGD": -0.01, "MuSGD": 0.05}
    arms = _arms({"reference": [(o, m, s, 0.6) for o, m, s in sgd + mu],
                  "linear": [(o, m, s, 0.5 + 0.001 * s) for o, m, s in sgd + mu],
                  "lr0-sqrt": [(o, m, s, 0.5 + gain[o] + 0.002 * s) for o, m, s in sgd + mu]})
    test = measured._musgd_test(arms)
    assert test["own_key"] and Interval.from_json(test["alternatives"]["lr0-sqrt"]).above_zero
    rows = measured.decisions({("detect", "scratch", "SGD", 8): arms})
    assert [(r["family"], r["rule"]) for r in rows] == [("SGD", "linear"), ("MuSGD", "lr0-sqrt")]
    assert rows[1]["versus"]["lr0-sqrt"]["n"] == 4 and rows[1]["versus"]["lr0-sqrt"]["machines"] == 1
    shipped = [d for d in evidence.load()["decisions"] if d["family"] == "MuSGD"]
    for d in shipped:  # what the plan reads: MuSGD's own row, SGD's for SGD
        got = evidence.decision(d["task"], d["start"], "SGD", float(d["k"]), "MuSGD")
        assert got.row == d and got.pooled is None
        assert evidence.decision(d["task"], d["start"], "SGD", float(d["k"]), "SGD").row["family"] == "SGD"


def test_musgd_without_rows_of_its_own_says_so():
    """A cell where MuSGD has no pairs keeps the pooled SGD-family decision, and the plan says it was not
    measured for MuSGD (7J point 2)."""
    got = evidence.decision("detect", "pretrained", "SGD", 4.0, "MuSGD")
    assert got.row["family"] == "SGD" and got.pooled.startswith("not measured for MuSGD here")


def test_machine_kinds_are_read_from_the_files():
    """The GPU a file names (its host's CPU makes no other kind); a CPU's model without its cores; a file older
    than the per-row field names no model: a kind of its own (7J point 1)."""
    assert measured.machine_kind({"device": "0 (NVIDIA H100 80GB HBM3)"}, {}, "a.json") == "NVIDIA H100"
    assert measured.machine_kind({}, {"machine": "NVIDIA H200; Intel(R) Xeon(R) Processor (family 6, model 207), "
                                                 "16 cores"}, "a.json") == "NVIDIA H200"
    assert measured.machine_kind({}, {"machine": "AMD EPYC (family 25, model 17), 2 cores"}, "a.json") == \
        "AMD EPYC (family 25, model 17)"
    assert measured.machine_kind({"device": "cpu"}, {}, "old.json") == "CPU, model not recorded (old.json)"


def test_every_saved_fidelity_result_is_evidence_or_left_out_with_why():
    """SOURCES is checked against the files: each bench_scaling*/bench_finetune* result in docs/img is used, or
    listed with the reason it is not; every listed file exists."""
    saved = {p.name for p in measured.RESULTS.glob("bench_*.json") if p.name.startswith(("bench_scaling", "bench_finetune"))}
    listed = set(measured.SOURCES) | set(measured.FEW_STEPS) | set(measured.LEFT_OUT)
    assert saved == listed, (saved - listed, listed - saved)
    assert all(why for why in measured.LEFT_OUT.values())


def test_the_fresh_results_are_those_git_shows_after_the_declaration():
    """7K decides from FRESH alone: each is first committed after the commit that declared 7K (or not yet
    committed); every other source was committed before it."""
    git = shutil.which("git")
    repo = measured.REPO
    if git is None or subprocess.run([git, "cat-file", "-e", f"{measured.DECLARED}^{{commit}}"], cwd=repo,
                                     capture_output=True).returncode != 0:
        pytest.skip("no git history here (an exported tree or a shallow clone): nothing to check the list against")
    declared = subprocess.run([git, "rev-parse", measured.DECLARED], cwd=repo, capture_output=True, text=True).stdout.strip()
    for name in measured.SOURCES:
        added = subprocess.run([git, "log", "--diff-filter=A", "--format=%H", "--", f"docs/img/{name}"], cwd=repo,
                               capture_output=True, text=True).stdout.split()
        after = not added or (added[-1] != declared and subprocess.run(
            [git, "merge-base", "--is-ancestor", declared, added[-1]], cwd=repo).returncode == 0)
        assert (name in measured.FRESH) == after, name
    assert measured.FRESH <= set(measured.SOURCES)


def test_the_hypotheses_are_7js_departures_from_the_runs_before_the_declaration():
    """7K point 2: HYPOTHESES is what 7J took, apart from the default, from the saved runs that predate 7K."""
    rows, _ = measured.load_trainings()
    before = measured.name_arms([r for r in rows if r["source"] not in measured.FRESH])
    explored = measured.decisions(measured._pairs(before))
    departures = {(d["task"], d["start"], d["family"], d["k"]): d["rule"] for d in explored
                  if d["rule"] != default_rule(d["family"])}
    assert departures == measured.HYPOTHESES
    # MuSGD's own hypotheses are where 7J point 2's test gave it its own key, and nowhere else
    own = {(d["task"], d["start"], "MuSGD", d["k"]) for d in explored if d.get("musgd", {}).get("own_key")}
    assert own == {cell for cell in measured.HYPOTHESES if cell[2] == "MuSGD"}


def test_fresh_runs_use_fresh_seeds_only():
    """7K point 3: the fresh results train seeds no earlier run of a hypothesis's cell used."""
    rows = measured.name_arms(measured.load_trainings()[0])
    cell = lambda r: (*r["setup"].split("|")[:2], r["optimizer"], r["k"])  # noqa: E731
    fresh = [r for r in rows if r["source"] in measured.FRESH]
    assert all(r["seed"] in measured.FRESH_SEEDS for r in fresh)
    earlier = {(cell(r), r["seed"]) for r in rows if r["source"] not in measured.FRESH}
    assert not {(cell(r), r["seed"]) for r in fresh} & earlier


def _cell_arms(runs: dict) -> dict:
    """One cell's arms {arm: {(setup, optimizer, machine, seed): row}} from {arm: {optimizer: [best.pt by seed]}}."""
    return {arm: {("s", opt, "cpu-a", seed): {"final": v, "curve": [v - 0.001], "source": "f.json"}
                  for opt, values in by_opt.items() for seed, v in enumerate(values)}
            for arm, by_opt in runs.items()}


def _explored(rule: str, family: str = "SGD", k: int = 8) -> dict:
    return {"task": "detect", "start": "scratch", "family": family, "k": k, "rule": rule, "basis": "measured",
            "gap": None, "versus": {}}


def test_a_hypothesis_stands_on_six_fresh_pairs_above_linear_and_falls_to_the_prior_otherwise():
    """7K point 4: confirmed where 6 fresh pairs put it above linear with an interval above 0; rejected (the
    prior, linear) where they do not; with fewer pairs it awaits, keeping 7J's choice; a MuSGD cell's prior is
    its SGD cell's rule."""
    cell = ("detect", "scratch", "SGD", 8)
    hyp = {cell: "lr0-sqrt", ("detect", "scratch", "MuSGD", 8): "lr0-sqrt"}
    gains = {"SGD": [0.02, 0.03, 0.025, 0.02, 0.03, 0.028], "MuSGD": [0.04, -0.03, 0.05, -0.02, 0.01, 0.0]}
    fresh = {cell: _cell_arms({"linear": {o: [0.5] * 6 for o in gains},
                               "lr0-sqrt": {o: [0.5 + g for g in gs] for o, gs in gains.items()}})}
    explored = [_explored("lr0-sqrt"), _explored("lr0-sqrt", "MuSGD")]
    sgd, mu = confirm.apply(explored, {}, fresh, hyp)
    assert (sgd["rule"], sgd["basis"]) == ("lr0-sqrt", confirm.CONFIRMED)
    assert sgd["confirmation"]["best"]["n"] == 6 and sgd["confirmation"]["best"]["ci95"][0] > 0
    assert (mu["rule"], mu["basis"]) == ("lr0-sqrt", confirm.REJECTED)  # falls to SGD's rule, confirmed here
    assert "failed on fresh runs" in evidence.basis_text(mu) and "SGD row's rule" in evidence.basis_text(mu)
    five = {cell: {arm: dict(list(runs.items())[:5]) for arm, runs in fresh[cell].items()}}
    waiting = confirm.apply([_explored("lr0-sqrt")], {}, five, {cell: "lr0-sqrt"})[0]
    assert (waiting["rule"], waiting["basis"]) == ("lr0-sqrt", confirm.AWAITING)
    lost = confirm.apply([_explored("lr0-sqrt")], {}, {cell: _cell_arms(
        {"linear": {"SGD": [0.5] * 6}, "lr0-sqrt": {"SGD": [0.5 + g for g in gains["MuSGD"]]}})}, {cell: "lr0-sqrt"})[0]
    assert (lost["rule"], lost["basis"], lost["explored"]) == ("linear", confirm.REJECTED, "lr0-sqrt")


def test_a_cell_without_a_hypothesis_takes_the_default_whatever_7j_found():
    """7K point 5: a departure 7J finds without a declared hypothesis does not reach auto."""
    row = confirm.apply([_explored("sqrt", "Adam", 4)], {}, {}, {})[0]
    assert (row["rule"], row["basis"], row["explored"]) == ("linear", "default", "sqrt")
    assert "7J alone would pass sqrt" in evidence.basis_text(row)
