"""setup.sh installs with uv held to pip's resolution (requirements/resolved*.txt, scripts/resolve.sh):
every pin of a requirements file must be in its resolved file at the same version, or uv refuses the
install (a conflict) or, for a package the resolved file lacks, picks its own version."""

from __future__ import annotations

import re

import pytest

from conftest import REPO

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)")


def _pins(path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line.startswith("-r "):
            pins.update(_pins(path.parent / line.split()[1]))
        elif m := PIN.match(line.strip()):
            pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


@pytest.mark.parametrize("profile, resolved", [("test", "resolved.txt"), ("base", "resolved.txt"),
                                               ("kaggle-image", "resolved-kaggle-image.txt")])
def test_every_pin_is_in_the_resolved_file(profile, resolved):
    requirements = REPO / "requirements"
    wanted, have = _pins(requirements / f"{profile}.txt"), _pins(requirements / resolved)
    assert wanted and len(have) > len(wanted)
    assert {n: v for n, v in wanted.items() if have.get(n) != v} == {}, f"run scripts/resolve.sh ({resolved})"
