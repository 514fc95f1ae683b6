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


HASHED = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)((?:\s*\\\s*--hash=sha256:[0-9a-f]{64})+)", re.MULTILINE)


@pytest.mark.parametrize("name", ["resolved.txt", "resolved-kaggle-image.txt", "pip.txt", "uv.txt"])
def test_every_pinned_package_carries_the_hashes_of_its_files(name):
    """Issue 60: setup.sh installs pip and uv with --require-hashes and every package with uv's --verify-hashes
    against these files: each pin has at least one sha256 (scripts/resolve.sh writes them)."""
    text = (REPO / "requirements" / name).read_text()
    pins = [line for line in text.splitlines() if PIN.match(line)]
    hashed = HASHED.findall(text)
    assert pins and len(hashed) == len(pins), f"run scripts/resolve.sh ({name})"


def test_setup_installs_the_installers_by_hash_and_verifies_the_rest():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "--require-hashes -r requirements/pip.txt" in setup and "--require-hashes --target" in setup
    assert "--verify-hashes" in setup and "--upgrade pip" not in setup
