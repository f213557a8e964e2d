"""Once a call is admitted, whether it returns and which error it raises depend on public
values only (``docs/privacy.md`` §8 "Input range", §10).

A bank and its neighbour that differs in one hostile row — huge, tiny, subnormal, a
float32 extreme, duplicated — placed where local accounting charges nothing give the same
outcome bit for bit, on every backend and for ``retrieve``, ``snapshot`` and the command
line. Rows the library cannot handle are refused when the memory is built (the owner's
act), never in answer to a query.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import brace
from brace import PrivateMemory
from brace.cli import main

CENTRE = np.array([50.0, 50.0])  # the data and queries live here; the origin is far away
R = 1.0
N = 1500

# hostile values, in range (the memory must be built and behave as without them)
IN_RANGE = {
    "huge": [2.0**399, -(2.0**399)],
    "limit": [2.0**400, 3.0],
    "tiny": [1e-300, -1e-300],
    "subnormal": [5e-324, -5e-324],
    "zero": [0.0, -0.0],
    "mixed": [2.0**399, 5e-324],
}
# out of range: refused when the memory is built
OUT_OF_RANGE = {
    "overflow": [1e155, 0.0],
    "beyond": [2.0**401, 0.0],
    "nan": [math.nan, 0.0],
    "inf": [math.inf, 0.0],
}
IN_RANGE_F32 = {"f32-max": [3.4e38, 0.0], "f32-1e20": [1e20, -1e20],
                "f32-subnormal": [1.4e-45, -1.4e-45]}
OUT_OF_RANGE_F32 = {"f32-inf": [np.inf, 0.0], "f32-nan": [np.nan, 1.0]}


def _bank(dtype=np.float64) -> np.ndarray:
    rng = np.random.default_rng(3)
    X = CENTRE + rng.normal(scale=0.5, size=(N, 2))
    X[-3:] = CENTRE + 40.0  # the rows to replace: far from every query's footprint
    return X.astype(dtype)


def _neighbour(X: np.ndarray, row: list[float], copies: int = 1) -> np.ndarray:
    Xp = X.copy()
    Xp[-copies:] = np.asarray(row, dtype=X.dtype)
    return Xp


def _as_backend(X: np.ndarray, backend: str, tmp_path):
    if backend == "mmap":
        path = tmp_path / f"bank-{abs(hash(X.tobytes()))}.npy"
        np.save(path, X)
        return np.load(path, mmap_mode="r"), {}
    if backend == "dask":
        da = pytest.importorskip("dask.array")
        return da.from_array(X, chunks=(600, 2)), {}
    if backend == "torch":
        torch = pytest.importorskip("torch")
        return torch.from_numpy(X.copy()), {}
    if backend == "frozen":
        return brace.frozen_bank(X), {}
    return X, {}


def _memory(X, backend, tmp_path, **kw):
    bank, extra = _as_backend(X, backend, tmp_path)
    index = backend if backend in ("brute", "kdtree", "auto") else "auto"
    mem = brace.LSRMemory(bank, radius=R, index=index)
    return PrivateMemory(mem, budget=(20.0, 1e-5), **extra, **kw)


def _outcome(fn):
    try:
        return ("ok", fn())
    except (ValueError, TypeError, brace.BudgetExceededError) as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


def _same(a, b) -> None:
    assert a[0] == b[0], (a, b)
    if a[0] == "error":
        assert a[1] == b[1]
    else:
        for x, y in zip(a[1], b[1], strict=True):
            assert np.array_equal(x, y), (x, y)


QUERIES = CENTRE + np.array([[0.2, -0.1], [-0.3, 0.4]])


def _calls(pm) -> list:
    """Every call of the test, on one PrivateMemory: BRACE (smooth with correction, the
    default release), global, the count release, a snapshot; outputs as arrays."""
    out = []
    out.append(_outcome(lambda: (pm.retrieve(QUERIES, steps=2, epsilon=1.0, seed=3).outputs,)))
    out.append(_outcome(lambda: (pm.retrieve(QUERIES, steps=2, epsilon=1.0, seed=4,
                                             kappa=0.0).outputs,)))
    out.append(_outcome(lambda: (pm.retrieve(QUERIES, steps=2, epsilon=1.0, seed=5,
                                             method="global").outputs,)))
    out.append(_outcome(lambda: (pm.retrieve(QUERIES, steps=2, epsilon=1.0, seed=6,
                                             release="count", kappa=math.inf).outputs,)))
    out.append(_outcome(lambda: (lambda s: (s.attractors, s.counts))(
        pm.snapshot(QUERIES, epsilon=1.0, seed=7))))
    # a call refused by public values: too many steps for the output size is not it;
    # an epsilon whose count release cannot be calibrated is
    out.append(_outcome(lambda: (pm.retrieve(QUERIES, steps=2, epsilon=1e-7, seed=8,
                                             release="count", kappa=math.inf).outputs,)))
    return out


BACKENDS = ["brute", "kdtree", "auto", "mmap", "dask", "torch", "frozen"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_rows_in_range_change_no_outcome(backend, tmp_path):
    X = _bank()
    base = _calls(_memory(X, backend, tmp_path))
    assert [o[0] for o in base] == ["ok"] * 5 + ["error"]
    for name, row in IN_RANGE.items():
        for copies in (1, 3):  # one row, and duplicates of it
            pm = _memory(_neighbour(X, row, copies), backend, tmp_path)
            got = _calls(pm)
            for a, b in zip(base, got, strict=True):
                _same(a, b)
            # the hostile rows sit where local accounting charged nothing
            assert np.all(pm.spent_at(np.asarray([row], dtype=np.float64)) == 0.0), name


@pytest.mark.parametrize("backend", ["brute", "kdtree", "mmap", "torch"])
def test_float32_hostile_rows(backend, tmp_path):
    X = _bank(np.float32)
    base = _calls(_memory(X, backend, tmp_path))
    for row in IN_RANGE_F32.values():
        got = _calls(_memory(_neighbour(X, row), backend, tmp_path))
        for a, b in zip(base, got, strict=True):
            _same(a, b)
    for row in OUT_OF_RANGE_F32.values():
        with pytest.raises(ValueError, match="non-finite or out-of-range"):
            _memory(_neighbour(X, row), backend, tmp_path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_out_of_range_are_refused_when_the_memory_is_built(backend, tmp_path):
    X = _bank()
    for row in OUT_OF_RANGE.values():
        with pytest.raises(ValueError, match="non-finite or out-of-range"):
            _memory(_neighbour(X, row), backend, tmp_path)


def test_the_reported_overflow_cases_are_refused_at_construction():
    """The review's cases: a row at 1e155 far from every query made the KD-tree pass and
    the synopsis's cell sums raise on one bank and release on its neighbour."""
    X = np.random.default_rng(0).normal(size=(5000, 2))
    X[-1] = (50.0, 50.0)
    Xp = X.copy()
    Xp[-1, 0] = 1e155
    pm = PrivateMemory(brace.LSRMemory(X, radius=0.5, index="kdtree"), budget=(8.0, 1e-5))
    assert pm.retrieve(X[:2], steps=2, epsilon=1.0, seed=3).outputs.shape == (2, 2, 2)
    with pytest.raises(ValueError, match="non-finite or out-of-range"):
        PrivateMemory(brace.LSRMemory(Xp, radius=0.5, index="kdtree"), budget=(8.0, 1e-5))
    # secure noise: the grid's range is decided from the queries before the bank is read
    pm.retrieve(X[:2], steps=2, epsilon=1.0)


def test_secure_outcomes_do_not_depend_on_far_rows(tmp_path):
    """Secure noise is fresh every call, so outcomes (release or error, and the public
    grid) are compared, not bits."""
    X = _bank()
    for row in IN_RANGE.values():
        a = _memory(X, "auto", tmp_path)
        b = _memory(_neighbour(X, row), "auto", tmp_path)
        for kw in ({}, {"method": "global"}, {"release": "count", "kappa": math.inf},
                   {"kappa": 0.0}):
            ra = a.retrieve(QUERIES, steps=2, epsilon=1.0, **kw)
            rb = b.retrieve(QUERIES, steps=2, epsilon=1.0, **kw)
            assert ra.params["noise"] == rb.params["noise"] == "secure"
            assert ra.params["release"] == rb.params["release"]  # chosen from public values
            if ra.params["release"] != "count":  # its grid follows the noisy m̃
                assert np.array_equal(ra.grid, rb.grid)


def test_cli_outcomes_do_not_depend_on_far_rows(tmp_path, capsys):
    X = _bank()
    q = tmp_path / "q.npy"
    np.save(q, QUERIES)

    def run(bank: np.ndarray, tag: str) -> tuple[int, object]:
        b = tmp_path / f"bank-{tag}.npy"
        np.save(b, bank)
        out = tmp_path / f"out-{tag}.npz"
        rc = main(["retrieve", "--bank", str(b), "--queries", str(q), "--radius", str(R),
                   "--steps", "2", "--epsilon", "1", "--seed", "3", "--out", str(out)])
        err = capsys.readouterr().err
        if rc:
            return rc, err.replace(str(b), "BANK")
        with np.load(out) as z:
            return rc, z["outputs"].copy()

    rc0, out0 = run(X, "base")
    assert rc0 == 0
    for name, row in IN_RANGE.items():
        rc, out = run(_neighbour(X, row), name)
        assert rc == 0 and np.array_equal(out, out0), name
    for name, row in OUT_OF_RANGE.items():
        rc, err = run(_neighbour(X, row), name)
        assert rc == 2 and "out-of-range" in err and "Traceback" not in err, (name, err)


# the snapshots at the edges of their stated ranges (issue 37): the smallest and largest
# domain, with and without the projection, and the smallest and largest cell radius
EDGE_SNAPSHOTS = {
    "seedless-smallest": dict(bounds=(-(2.0**-400), 2.0**-400)),
    "seedless-largest": dict(bounds=(-(2.0**399), 2.0**399)),
    "projected-smallest": dict(bounds=(-(2.0**-400), 2.0**-400), project=1),
    "projected-largest": dict(bounds=(-(2.0**399), 2.0**399), project=1),
    "seeded-smallest": dict(seeds=CENTRE[None], cell_radius=2.0**-400),
    "seeded-largest": dict(seeds=CENTRE[None], cell_radius=2.0**400),
}


@pytest.mark.parametrize("edge", list(EDGE_SNAPSHOTS))
def test_snapshots_at_the_edges_of_their_ranges_return_whatever_the_hostile_row(edge):
    """A snapshot reads every row (without seeds) or every row near its cells, so its
    release may differ between neighbours; whether it returns, and its charge, may not.
    Every hostile row in range, at the smallest and largest domain and cell radius, with
    and without the projection: the snapshot returns finite attractors at the same
    charge, and nothing is left to fail after admission."""
    kw = EDGE_SNAPSHOTS[edge]
    X = _bank()
    spent = set()
    for name, row in {"base": None, **IN_RANGE}.items():
        B = X if row is None else _neighbour(X, row, 3)
        pm = PrivateMemory(B, radius=R, budget=(20.0, 1e-5), accounting="global")
        with np.errstate(all="raise"), warnings.catch_warnings():
            warnings.simplefilter("error")  # the caller's strictest state changes nothing
            syn = pm.snapshot(epsilon=2.0, seed=9, rounds=3, **kw)
        assert np.all(np.isfinite(syn.attractors)), name
        spent.add(pm.spent)
    assert len(spent) == 1
