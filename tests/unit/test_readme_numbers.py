"""Every number the README and docs/scaling.md state is generated from a saved result or checked here against
its source (issue #63): the generated blocks are current, and the prose outside them holds no other number."""

from __future__ import annotations

import ast
import re

from conftest import REPO

from orchestrator.errors import EXIT_BAD_INPUT
from orchestrator.scaling import releases

README = REPO / "README.md"


def _prose(text: str) -> str:
    """The text a reader takes as claims: without the generated blocks (each checked by its own --check), fenced
    and inline code (commands and file names), link targets and device specs."""
    text = re.sub(r"<!-- (\w+): begin.*?<!-- \1: end -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`|\]\([^)]*\)", "", text)
    return re.sub(r"\b(cpu|tpu|xla:cpu):\d+", "", text)


def _numbers(text: str) -> list[str]:
    return re.findall(r"(?<![\w.])\d+(?:\.\d+)*(?![\w])", _prose(text))


def _matrix() -> tuple[str, ...]:
    """The releases the e2e matrix trains (tests/e2e/test_release_matrix.py's MATRIX), read without importing it."""
    tree = ast.parse((REPO / "tests" / "e2e" / "test_release_matrix.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", "") == "MATRIX" for t in node.targets))


def _pin(requirements: str, package: str) -> str:
    return re.search(rf"^{package}==([\d.]+)", (REPO / "requirements" / requirements).read_text(), re.M).group(1)


def test_the_readmes_generated_blocks_are_current():
    import readme_numbers  # bench/readme_numbers.py (pyproject: pytest's pythonpath)

    assert readme_numbers.main(["--check"]) == 0


def test_every_number_in_the_readmes_prose_is_checked_against_its_source():
    text = README.read_text()
    oldest = re.search(r">=([\d.]+)", releases.ACCEPTED).group(1)
    pin = _pin("base.txt", "ultralytics")
    python = re.search(r'requires-python = ">=([\d.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    kaggle_torch = ".".join(_pin("kaggle-image.txt", "torch").split(".")[:2])
    claims = {f"({oldest} to {pin},": (oldest, pin), f"proved on {len(_matrix())} releases'": (str(len(_matrix())),),
              f"Python >= {python}": (python,), f"torch {kaggle_torch} stack": (kaggle_torch,),
              f"exit code {EXIT_BAD_INPUT},": (str(EXIT_BAD_INPUT),)}
    prose = " ".join(_prose(text).split())
    for phrase in claims:
        assert phrase in prose, phrase
    checked = sorted(n for numbers in claims.values() for n in numbers)
    assert sorted(_numbers(text)) == checked, "a number in the README that no generator writes and no test checks"


def test_docs_scaling_states_no_measured_number_outside_its_generated_blocks():
    """docs/scaling.md's measured numbers (differences, intervals, n) are all in blocks `measured --write`
    generates; the prose keeps Ultralytics' constants and the procedures' declared thresholds only."""
    prose = _prose((REPO / "docs" / "scaling.md").read_text())
    assert re.findall(r"[+-]\d\.\d{3}\b|\bn = \d+", prose) == []
