"""Fixtures shared by several test files."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

# The MNIST test split is not part of the repository; CI keeps it in ``shared/`` beside
# the checkout. An explicit BRACE_MNIST_DIR wins; the MNIST tests skip without the data.
_SHARED_MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist"
if "BRACE_MNIST_DIR" not in os.environ and _SHARED_MNIST.is_dir():
    os.environ["BRACE_MNIST_DIR"] = str(_SHARED_MNIST)


# One short skip reason, reported once: -ra folds identical reasons only per file and
# line, so the hook below files every MNIST skip under this conftest.
MNIST_SKIP = "MNIST test split not found: set BRACE_MNIST_DIR to a directory holding it"


def _mnist_dir_or_skip():
    from brace.experiments.mnist_data import find_mnist_dir

    try:
        return find_mnist_dir()
    except FileNotFoundError:
        pytest.skip(MNIST_SKIP)


@pytest.fixture(scope="session")
def mnist_dir():
    """The directory holding the MNIST IDX test split (the test skips without it)."""
    return _mnist_dir_or_skip()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if (rep.skipped and isinstance(rep.longrepr, tuple)
            and rep.longrepr[2].removeprefix("Skipped: ") in (MNIST_SKIP, PG_SKIP)):
        rep.longrepr = (__file__, None, rep.longrepr[2])


# PostgreSQL: one throw-away server per session (tests/pgserver.py), a fresh schema per
# test; without the server binaries the tests that need it skip with one line.
from pgserver import PG_SKIP, TempPostgres, find_binaries  # noqa: E402

_SCHEMAS = itertools.count()


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server on a loopback port (skipped without the binaries)."""
    pytest.importorskip("psycopg", reason="psycopg not installed (the 'serve' extra)")
    bindir = find_binaries()
    if bindir is None:
        pytest.skip(PG_SKIP)
    server = TempPostgres(bindir).start()
    yield server
    server.cleanup()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a fresh, empty schema of the test server (one ledger)."""
    return pg_server.new_schema(f"t{os.getpid()}_{next(_SCHEMAS)}")


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory, mnist_dir):
    """One ``--quick`` MNIST run (skipped without the data), shared by the experiment and
    CLI tests: its output and cache directories, the summary and the output bytes."""
    from brace.experiments.mnist import QUICK, run_mnist

    data = mnist_dir
    base = tmp_path_factory.mktemp("mnist")
    out, cache = base / "out", base / "cache"
    summary = run_mnist(QUICK, out, data_dir=data, cache_dir=cache, progress=False)
    return {"out": out, "cache": cache, "data": data, "summary": summary,
            "bytes": {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}}
