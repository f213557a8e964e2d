"""One version everywhere: ``brace --version``, ``brace.__version__``, ``pyproject.toml``,
the installed package metadata and the top released heading of ``CHANGELOG.md``."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

import brace
from brace.cli import main

ROOT = Path(__file__).resolve().parents[1]
DIST = "brace-dam"


def _cli_version(capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out.strip()
    name, _, version = out.partition(" ")
    assert name == DIST, out
    return version


def _pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version\s*=\s*"([^"]+)"\s*$', project, re.M)
    assert m, "pyproject.toml: no version in [project]"
    return m.group(1)


def _released_changelog_version() -> str:
    """The version of the first ``## X.Y.Z (YYYY-MM-DD)`` heading; the ``## Unreleased``
    section above it (if any) is skipped."""
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
                          re.M)
    released = [h for h in headings if not h.startswith("Unreleased")]
    assert released, "CHANGELOG.md has no released version"
    m = re.fullmatch(r"(\d+\.\d+\.\d+) \(\d{4}-\d{2}-\d{2}\)", released[0])
    assert m, f"CHANGELOG.md: malformed release heading {released[0]!r}"
    assert all(h == "Unreleased" for h in headings[: headings.index(released[0])]), headings
    return m.group(1)


def test_cli_version_is_the_released_version(capsys):
    version = _cli_version(capsys)
    assert version == brace.__version__
    assert version == _pyproject_version()
    assert version == _released_changelog_version()


def _installed_from_this_checkout() -> bool:
    try:
        raw = metadata.distribution(DIST).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return False
    if raw is None:  # a regular (non-editable, non-URL) install: nothing to compare
        return False
    url = urlparse(json.loads(raw).get("url", ""))
    return url.scheme == "file" and Path(unquote(url.path)).resolve() == ROOT


@pytest.mark.skipif(not _installed_from_this_checkout(),
                    reason="brace-dam is not installed from this checkout")
def test_installed_metadata_matches(capsys):
    # Fails when pyproject.toml's version moved without a reinstall (pip install -e .).
    assert metadata.version(DIST) == _cli_version(capsys), (
        "installed metadata is stale: reinstall with pip install -e ."
    )
