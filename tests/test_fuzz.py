"""Hostile-input fuzzing of every public entry point and CLI command (issue 7, §3).

Contract under test. Every call either

* works correctly — finite outputs of the documented shape that satisfy the method's
  invariants (checked against a direct reference where one is cheap), or
* raises exactly one documented error: ``ValueError`` / ``TypeError`` (and
  ``FileNotFoundError`` for missing files) with a non-empty message;

and an input that is valid by an independent predicate must always work. The CLI exits
0 or 2, ends stderr with one line ``brace…: error: …``, never shows a traceback and never
leaves an output file (or a temporary file) behind when it fails.

Real bugs found in code this file does not own are strict xfails at the end (their
``reason`` names the minimal fix); the property tests keep clear of those inputs so that
they test everything else.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brace import LSEMemory, LSRMemory, NotPrivateWarning, certificate, private_retrieve
from brace.accounting import calibrate
from brace.cli import build_parser, main

DOCUMENTED = (ValueError, TypeError, FileNotFoundError)
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=True,
)
pytestmark = pytest.mark.filterwarnings(
    "ignore::RuntimeWarning", "ignore::brace.NotPrivateWarning"
)

NAN, INF = math.nan, math.inf
SCALES = [1.0, 1e-300, 1e-150, 1e6, 1e150, 1e300]
REF_LIMIT = 1e150  # |x|² overflows above ~1.3e154: see test_gate_with_huge_coordinates


def too_coarse(X, q, r, T, *extra) -> bool:
    """Inputs whose float64 rounding slack exceeds SLACK_MAX_REL·r are refused
    (docs/privacy.md §8): coordinates far beyond the radius's resolution."""
    from brace.sensitivity import SLACK_MAX_REL, Numerics

    if X is None or q is None or r is None or not T:
        return False
    num = Numerics(X.shape[0], X.shape[1], float(r), int(T))
    scale = float(np.abs(q).max()) + (T + 1) * float(r)
    for e in extra:
        scale = max(scale, float(np.abs(e).max()))
    return not float(num.slack(scale)) <= SLACK_MAX_REL * float(r)


def attempt(fn):
    """Run ``fn``; return ``(True, result)`` or ``(False, documented error)``; anything
    else propagates and fails the test."""
    try:
        return True, fn()
    except DOCUMENTED as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return False, exc


@contextlib.contextmanager
def deadline(seconds: int):
    """Raise TimeoutError if the block runs longer than ``seconds`` (main thread, POSIX)."""

    def _raise(*_):
        raise TimeoutError(f"did not return within {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------- strategies
# Each example draws a set of at most two "bad" fields (often none); every other field
# gets a good value. So a third of the examples are fully valid (and must work), and the
# rest isolate one or two hostile inputs (which must fail cleanly).

BANK_GOOD = [None, None, "int", "float32", "list", "dup"]
BANK_BAD = ["nan", "inf", "-inf", "0d", "1d", "3d", "n0", "d0", "bool", "complex", "str",
            "object"]
Q_GOOD = [None, None, "int", "2d", "float32"]
Q_BAD = ["nan", "inf", "0d", "3d", "dim", "empty", "bool", "str"]
R_GOOD = ["half", "scale", 1.0, np.float32(0.5), 2]
R_BAD = [1e-300, 1e160, 0.0, -1.0, NAN, INF, "1", None]


def draw_bad(data, names: list[str], max_bad: int = 2) -> set[str]:
    k = min(data.draw(st.sampled_from([0, 0, 1, 1, 2]), label="n_bad"), max_bad, len(names))
    return data.draw(st.sets(st.sampled_from(names), min_size=k, max_size=k), label="bad")


def choose(data, name: str, good: list, bad: list, bad_set: set[str]):
    return data.draw(st.sampled_from(bad if name in bad_set else good), label=name)


def _corrupt(arr: np.ndarray, how: str | None, data) -> object:
    a = arr.copy()
    if how is None:
        return a
    if how == "int":
        with np.errstate(all="ignore"):
            return np.clip(np.round(a), -(2.0**62), 2.0**62).astype(np.int64)
    if how == "float32":
        with np.errstate(all="ignore"):
            return a.astype(np.float32)  # may overflow to inf: then it must be refused
    if how == "list":
        return a.tolist()
    if how == "dup":
        if a.ndim == 2 and len(a) > 1:
            a[1:] = a[0]
        return a
    if how in ("nan", "inf", "-inf"):
        a.reshape(-1)[data.draw(st.integers(0, a.size - 1), label="where")] = float(how)
        return a
    table = {
        "0d": lambda: np.float64(a.reshape(-1)[0]),
        "1d": lambda: a.reshape(-1),
        "3d": lambda: a[None],
        "2d": lambda: a.reshape(1, -1),
        "n0": lambda: a[:0],
        "d0": lambda: a[:, :0],
        "dim": lambda: np.concatenate([a, a[..., :1]], axis=-1),
        "empty": lambda: np.zeros((0, a.shape[-1])),
        "bool": lambda: a > 0,
        "complex": lambda: a.astype(complex),
        "str": lambda: a.astype(str),
        "object": lambda: a.astype(object),
    }
    return table[how]()


def _valid_array(x, ndims: tuple[int, ...], bank: bool = False) -> np.ndarray | None:
    """Independent predicate: a real (integer/float, not bool) array of the given ranks,
    finite after conversion to float64, with no zero-length axis; a bank also within the
    stated input range (|x| <= 2^400 for float64; any finite float32). None if invalid."""
    a = np.asarray(x)
    if a.dtype == bool or a.dtype.kind not in "iuf" or a.ndim not in ndims or 0 in a.shape:
        return None
    with np.errstate(all="ignore"):
        f = a.astype(np.float64)
    if not np.all(np.isfinite(f)):
        return None
    if bank and a.dtype != np.float32 and not np.abs(f).max() <= 2.0**400:
        return None
    return f


def memory_case(data, bad: set[str], max_n: int = 6, max_d: int = 3):
    """(bank, query, radius, scale) with corruptions of the fields named in ``bad``."""
    n = data.draw(st.integers(1, max_n), label="n")
    d = data.draw(st.integers(1, max_d), label="d")
    scale = data.draw(st.sampled_from(SCALES), label="scale")
    base = np.array(data.draw(st.lists(st.floats(-3, 3), min_size=n * d, max_size=n * d),
                              label="bank values"))
    X = base.reshape(n, d) * scale
    i = data.draw(st.integers(0, n - 1), label="near row")
    off = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=d, max_size=d),
                             label="offset"))
    with np.errstate(all="ignore"):
        q = X[i] + off * scale
    bank = _corrupt(X, choose(data, "bank", BANK_GOOD, BANK_BAD, bad), data)
    query = _corrupt(q, choose(data, "query", Q_GOOD, Q_BAD, bad), data)
    radius = choose(data, "radius", R_GOOD, R_BAD, bad)
    radius = {"half": 0.5 * scale, "scale": scale}.get(radius, radius) \
        if isinstance(radius, str) else radius
    return bank, query, radius, scale


def _valid_radius(r) -> float | None:
    if isinstance(r, bool) or not isinstance(r, int | float | np.floating | np.integer):
        return None
    r = float(r)
    if not 2.0**-400 <= r <= 2.0**400:  # the stated radius range
        return None
    return r


def _arrays(bank, query, radius):
    """Independent validity of (bank, query, radius): (X, q, r) or Nones."""
    X = _valid_array(bank, (2,), bank=True)
    q = _valid_array(query, (1, 2))
    if q is not None and X is not None and q.shape[-1] != X.shape[1]:
        q = None
    return X, q, _valid_radius(radius)


def _gate_mean_reference(X: np.ndarray, Y: np.ndarray, r: float):
    """Φ_D(y) by the direct formula (closed ball), and the gate sizes."""
    d2 = ((X[None] - Y[:, None]) ** 2).sum(-1)
    mask = d2 <= r * r
    cnt = mask.sum(1)
    means = np.where(cnt[:, None] > 0, (mask[..., None] * X[None]).sum(1)
                     / np.maximum(cnt, 1)[:, None], Y)
    return means, cnt


# --------------------------------------------------------------------------- memories


@FUZZ
@given(data=st.data())
def test_lsr_memory_entry_points(data):
    bad = draw_bad(data, ["bank", "query", "radius", "steps"])
    bank, query, radius, scale = memory_case(data, bad)
    steps = choose(data, "steps", [1, 2, 5, 3.0, np.int64(2)],
                   [0, -1, 2.5, True, "2", None], bad)
    X, q, r = _arrays(bank, query, radius)
    valid = X is not None and q is not None and r is not None
    T = None if "steps" in bad else int(steps)
    mem = LSRMemory(bank, radius=radius)
    ok, traj = attempt(lambda: mem.retrieve(query, steps))
    assert ok == (valid and T is not None), (ok, traj)
    ok_step, phi = attempt(lambda: mem.step(query))
    ok_gate, cnt = attempt(lambda: mem.gate(query, counts=True))
    ok_mask, mask = attempt(lambda: mem.gate(query))
    ok_e, energy = attempt(lambda: mem.energy(query))
    ok_g, grad = attempt(lambda: mem.gradient(query))
    assert ok_step == ok_gate == ok_mask == ok_e == ok_g == valid, (phi, cnt, energy)
    ok_r, r_prop = attempt(lambda: (mem.radius_, mem.beta_))
    assert ok_r == (r is not None)
    if ok_r:
        assert r_prop[0] == r and r_prop[1] == pytest.approx(2.0 / (r * r), rel=1e-15)
    ok_n, shape = attempt(lambda: (mem.n_memories, mem.dim))
    assert ok_n == (X is not None)
    if ok_n:
        assert shape == X.shape
    if not valid:
        return
    Y = q.reshape(-1, q.shape[-1])
    assert np.all(np.isfinite(phi))
    assert np.all(np.isfinite(energy)) and np.all(np.isfinite(grad))
    if T is not None:
        assert traj.shape == (q.shape[:-1] + (T + 1, q.shape[-1]))
        assert np.all(np.isfinite(traj))
        np.testing.assert_array_equal(traj[..., 0, :], q)
        # every step moves by at most r (Φ_D(y) ∈ B̄(y, r))
        t2 = traj.reshape(-1, T + 1, q.shape[-1])
        with np.errstate(all="ignore"):
            moves = np.linalg.norm(np.diff(t2, axis=1), axis=-1)
        if np.all(np.isfinite(moves)):
            assert np.all(moves <= r * (1 + 1e-9) + 1e-9 * np.abs(t2).max())
    if max(np.abs(X).max(), np.abs(Y).max(), r) <= REF_LIMIT:
        ref, ref_cnt = _gate_mean_reference(X, Y, r)
        np.testing.assert_allclose(phi.reshape(Y.shape), ref, rtol=1e-12,
                                   atol=1e-12 * max(np.abs(X).max(), 1e-300))
        np.testing.assert_array_equal(np.reshape(cnt, -1), ref_cnt)
        np.testing.assert_array_equal(np.reshape(mask, (len(Y), -1)).sum(1), ref_cnt)


@FUZZ
@given(data=st.data())
def test_lse_memory_entry_points(data):
    bad = draw_bad(data, ["bank", "query", "beta"])
    bank, query, _, scale = memory_case(data, bad - {"beta"})
    beta = choose(data, "beta", [1.0, 3.125, 1e-300, 1e-6, np.float32(2.0), 4],
                  [0.0, -1.0, NAN, INF, "1", None, True], bad)
    X, q, _ = _arrays(bank, query, 1.0)
    valid = X is not None and q is not None and "beta" not in bad
    overflow = valid and float(beta) * np.abs(X).max() * np.abs(q).max() * X.shape[1] > 1e300
    mem = LSEMemory(bank, beta=beta)
    ok, traj = attempt(lambda: mem.retrieve(query, 2))
    ok_s, out = attempt(lambda: mem.step(query))
    ok_e, e = attempt(lambda: mem.energy(query))
    ok_g, g = attempt(lambda: mem.gradient(query))
    if overflow:  # β·zᵀx overflows float64: see test_lse_overflow_is_silent_nan
        return
    assert ok == ok_s == ok_e == ok_g == valid, (ok, ok_s, ok_e, ok_g, valid)
    if not valid:
        return
    assert np.all(np.isfinite(traj)) and np.all(np.isfinite(out))
    assert np.all(np.isfinite(e)) and np.all(np.isfinite(g))
    # a softmax-weighted mean lies in the bounding box of the bank
    tol = 1e-12 * np.abs(X).max() + 1e-300
    assert np.all(out >= X.min(0) - tol) and np.all(out <= X.max(0) + tol)
    np.testing.assert_allclose(g, -out, rtol=1e-12, atol=tol)


# --------------------------------------------------------------------------- mechanisms

PR_FIELDS = {
    "method": (["brace", "global", "endpoint", "naive"], ["laplace", None, 3]),
    "eps": ([1.0, 4.0, 128.0, 1e-3, 1e6, np.float32(2.0), 3],
            [0.0, -1.0, NAN, INF, "1", None, True]),
    "delta": ([1e-5, 0.5, 1e-12, 0.999, np.float64(1e-6)],
              [0.0, 1.0, -1e-5, NAN, None, "1e-5"]),
    "steps": ([1, 3, 12, 2.0, np.int64(2)], [0, -2, 2.5, True, "3", None]),
    "kappa": ([0.0, 1.0, 128.0, INF, 1e300, 0], [-1.0, NAN, "0", None]),
    "gamma": ([None, None, 0.01, 1e-300, 2.0], [-0.1, NAN, INF, "0.1"]),
    "acc": (["rdp", "paper"], ["zcdp", None, 1]),
    "seed": ([None, 0, 7, np.random.default_rng(1), np.random.SeedSequence(3), np.int64(5)],
             [-1, 1.5, "a", True]),
    "noise": ([None, "ok"], ["shape", "int", "nan"]),
}


@FUZZ
@given(data=st.data())
def test_private_retrieve(data):
    bad = draw_bad(data, ["bank", "query", "radius", *PR_FIELDS])
    bank, query, radius, _ = memory_case(data, bad, max_n=5, max_d=2)
    v = {k: choose(data, k, g, b, bad) for k, (g, b) in PR_FIELDS.items()}
    proj = data.draw(st.booleans(), label="projection")
    X, q, r = _arrays(bank, query, radius)
    method, steps = v["method"], v["steps"]
    T = None if "steps" in bad else int(steps)
    Q = 1 if q is None or q.ndim == 1 else q.shape[0]
    d = X.shape[1] if X is not None else 1
    R = 1 if method == "endpoint" else (T or 1)
    xi = {"ok": np.zeros((Q, R, d)), "shape": np.zeros((Q, R + 1, d)),
          "int": np.zeros((Q, R, d), dtype=int), "nan": np.full((Q, R, d), NAN),
          None: None}[v["noise"]]
    valid = X is not None and q is not None and r is not None and not (bad & set(PR_FIELDS))
    if valid and too_coarse(X, q, r, T):
        valid = False  # refused: "coordinates are too large relative to the radius"
    maybe = method == "brace" and v["gamma"] is not None and "gamma" not in bad
    mem = LSRMemory(bank, radius=radius)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok, res = attempt(lambda: private_retrieve(
            mem, query, method=method, epsilon=v["eps"], delta=v["delta"], steps=steps,
            kappa=v["kappa"], gamma=v["gamma"], accounting=v["acc"], output_projection=proj,
            seed=v["seed"], _innovations=xi,
        ))
    if valid and maybe and not ok:
        assert "gamma" in str(res), res  # an explicit γ too large for (ε, δ, T, d)
        return
    assert ok == valid, (ok, res, bad)
    if not ok:
        return
    assert res.outputs.shape == (Q, R, d)
    assert np.all(np.isfinite(res.outputs))
    assert res.noise_std.shape == (Q, R)
    assert np.all(np.isfinite(res.noise_std)) and np.all(res.noise_std > 0)
    assert res.is_private == (method != "naive" and xi is None)  # caller noise: not private
    naive_warned = any(issubclass(w.category, NotPrivateWarning) for w in caught)
    assert naive_warned == (method == "naive")
    if proj:
        qq = q.reshape(-1, d)
        rad = np.arange(2, R + 2) * r if method != "endpoint" else np.array([(T + 1) * r])
        dist = np.linalg.norm(res.outputs - qq[:, None], axis=-1)
        assert np.all(dist <= rad * (1 + 1e-9) + 1e-9 * np.abs(qq).max())


CERT_FIELDS = {
    "method": (["brace", "global", "naive"], ["endpoint", "x"]),
    "steps": ([1, 2, 4], [0, -1]),
    # "huge": a released state at 1e300 is refused (beyond float64's resolution at r)
    "hist": (["ok", "long"], ["shape", "2d", "str", "short", "huge"]),
    "gamma": ([0.05, 0.0, 1e-300], [-1.0, NAN, None, INF]),
    "kappa": ([0.0, 128.0, INF], [-1.0, NAN]),
}


@FUZZ
@given(data=st.data())
def test_certificate(data):
    bad = draw_bad(data, ["bank", "query", "radius", *CERT_FIELDS])
    bank, query, radius, scale = memory_case(data, bad, max_n=5, max_d=2)
    v = {k: choose(data, k, g, b, bad) for k, (g, b) in CERT_FIELDS.items()}
    X, q, r = _arrays(bank, query, radius)
    Q = 1 if q is None or q.ndim == 1 else q.shape[0]
    d = X.shape[1] if X is not None else (q.shape[-1] if q is not None else 1)
    T = max(v["steps"], 1)
    rng = np.random.default_rng(0)
    h = {"ok": rng.normal(0, 1, (Q, T, d)) * scale, "huge": np.full((Q, T, d), 1e300),
         "long": np.zeros((Q, T + 2, d)), "shape": np.zeros((Q + 1, T, d)),
         "2d": np.zeros((Q, d)), "str": np.full((Q, T, d), "x"),
         "short": np.zeros((Q, T - 1, d))}[v["hist"]]
    if q is not None and v["hist"] in ("ok", "huge", "long"):
        h[:, 0] = q.reshape(Q, d)  # Y_0 = q
    valid = X is not None and q is not None and r is not None and not (bad & set(CERT_FIELDS))
    if valid and too_coarse(X, q, r, T, h):
        valid = False  # refused: "coordinates are too large relative to the radius"
    mem = LSRMemory(bank, radius=radius)
    ok, cert = attempt(lambda: certificate(mem, query, h, method=v["method"], steps=v["steps"],
                                           kappa=v["kappa"], gamma=v["gamma"]))
    assert ok == valid, (ok, cert, bad)
    if ok:
        assert cert.pre_noise.shape == (Q, T, d) and cert.noise_scale.shape == (Q, T)
        assert np.all(np.isfinite(cert.noise_scale)) and np.all(cert.noise_scale > 0)
        # ≤ 2r plus the public floating-point slack (≤ SLACK_MAX_REL·r, docs/privacy.md §8)
        assert np.all(cert.noise_scale <= r * (2 + 2e-3))
        assert np.all(np.isfinite(cert.pre_noise))


CAL_FIELDS = {
    "eps": ([1.0, 4.0, 1e-6, 1e-3, 1e4], [0.0, -1.0, NAN, INF, "1", None, 1e-100, 1e7]),
    "delta": ([1e-5, 1e-12, 0.5], [0.0, 1.0, NAN, None]),
    "steps": ([1, 5, 10**4], [0, 2.5, True, "1", 10**6]),
    "dim": ([1, 2, 384, 10**6], [0, -1, 1.5, None]),
    "gamma": ([None, 0.0, 1e-300, 0.01, 1.0], [-0.1, NAN, INF, "0", 11.0]),
    "acc": (["rdp", "paper"], ["other", 3]),
    "mech": (["", "brace"], [3, None]),
}


@FUZZ
@given(data=st.data())
def test_calibrate(data):
    bad = draw_bad(data, list(CAL_FIELDS))
    v = {k: choose(data, k, g, b, bad) for k, (g, b) in CAL_FIELDS.items()}
    with deadline(20):
        ok, spent = attempt(lambda: calibrate(v["eps"], v["delta"], v["steps"], dim=v["dim"],
                                              gamma=v["gamma"], accounting=v["acc"],
                                              mechanism=v["mech"]))
    if bad:
        assert not ok, (bad, v)
        return
    if v["gamma"] in (None, 0.0):
        assert ok, spent  # always feasible
    elif not ok:
        assert "gamma" in str(spent)  # an explicit γ too large for (ε, δ, T, d)
        return
    assert 0 < spent.rho_per_step < INF and spent.gamma >= 0
    if v["acc"] == "rdp":
        assert spent.epsilon_rdp <= float(v["eps"]) * (1 + 1e-9) + 1e-12


# --------------------------------------------------------------------------- CLI


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """In-process ``brace`` call: (exit status, stdout, stderr). An uncaught exception
    (a traceback) propagates and fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse; see test_cli_usage_errors_exit_2
            code = exc.code
            if isinstance(code, str):
                err.write(code + "\n")
                code = 2
            rc = 0 if code is None else int(code)
    return rc, out.getvalue(), err.getvalue()


def assert_clean_failure(rc: int, err: str, out_paths: list[Path]) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("brace") and ": error: " in last, err
    for p in out_paths:
        assert not p.exists() or p.is_dir() and not any(p.iterdir()), p
        parent = p.parent
        if parent.is_dir():
            assert not [f for f in parent.iterdir() if f.name.endswith(".tmp")]


def _write_inputs(tmp: Path) -> dict[str, str]:
    """Good, hostile and corrupt input files; returns name -> path."""
    X = np.array([[0.0, 0.0], [0.3, 0.1], [1.0, 1.0], [0.3, 0.1]])
    files = {
        "good": X, "q": np.array([[0.1, 0.0], [0.9, 0.9]]), "q1": np.array([0.1, 0.0]),
        "nan": np.array([[NAN, 0.0]]), "inf": np.array([[INF, 0.0]]), "3d": X[None],
        "0d": np.array(1.0), "n0": np.zeros((0, 2)), "int": X.astype(int),
        "f32": X.astype(np.float32), "huge": X * 1e100, "over": X * 1e150, "tiny": X * 1e-300,
        "dim3": np.zeros((2, 3)), "str": np.array([["a", "b"]]), "n1": X[:1],
    }
    paths = {}
    for k, val in files.items():
        np.save(tmp / f"{k}.npy", val)
        paths[k] = str(tmp / f"{k}.npy")
    np.save(tmp / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    paths["obj"] = str(tmp / "obj.npy")
    (tmp / "corrupt.npy").write_bytes(b"\x93NUMPY garbage \x00\x01")
    paths["corrupt"] = str(tmp / "corrupt.npy")
    (tmp / "empty.npy").write_bytes(b"")
    paths["empty"] = str(tmp / "empty.npy")
    np.savez(tmp / "two.npz", a=X, b=X)
    paths["two"] = str(tmp / "two.npz")
    paths["missing"] = str(tmp / "missing.npy")
    paths["dir"] = str(tmp)
    return paths


OUT_GOOD, OUT_BAD = ["ok"], ["missing_dir", "parent_is_file", "is_dir"]


def _out(tmp: Path, kind: str, name: str) -> Path:
    return {"ok": tmp / "out" / name, "missing_dir": tmp / "nope" / "deeper" / name,
            "parent_is_file": tmp / "good.npy" / name, "is_dir": tmp / "out"}[kind]


@pytest.fixture(scope="module")
def cli_tmp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzzcli")
    (tmp / "out").mkdir()
    return tmp, _write_inputs(tmp)


def _clear(tmp: Path) -> None:
    for f in (tmp / "out").iterdir():
        f.unlink()


CLI_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.function_scoped_fixture,
                                               HealthCheck.too_slow])

RETRIEVE_FIELDS = {
    "bank": (["good", "int", "f32", "tiny", "n1", "huge"],
             ["nan", "inf", "over", "3d", "0d", "n0", "str", "obj", "corrupt", "empty", "two",
              "missing", "dir", "dim3"]),
    "queries": (["q", "q1", "int"], ["nan", "dim3", "3d", "missing", "corrupt"]),
    "radius": (["0.5", "2"], ["1e-300", "1e300", "-1", "0", "nan", "inf", "abc"]),
    "steps": (["1", "3"], ["0", "-1", "2.5", "x"]),
    "eps": (["1", "64", "1e-3"], [None, "0", "-1", "nan", "inf", "1e300"]),
    "delta": ([None, "1e-5", "0.5"], ["0", "1", "nan"]),
    "extra": ([[], ["--no-output-projection"], ["--seed", "3"], ["--kappa", "0"],
               ["--gamma", "auto"]],
              [["--kappa", "-1"], ["--seed", "-1"], ["--gamma", "nan"], ["--gamma", "-1"],
               ["--accounting", "x"]]),
    "out": (OUT_GOOD, OUT_BAD),
}


@CLI_SETTINGS
@given(data=st.data())
def test_cli_retrieve(cli_tmp, data):
    tmp, paths = cli_tmp
    _clear(tmp)
    bad = draw_bad(data, list(RETRIEVE_FIELDS))
    v = {k: choose(data, k, g, b, bad) for k, (g, b) in RETRIEVE_FIELDS.items()}
    method = data.draw(st.sampled_from(["none", "brace", "global", "endpoint", "naive"]),
                       label="method")
    target = _out(tmp, v["out"], "r.npz")
    argv = ["retrieve", "--bank", paths[v["bank"]], "--queries", paths[v["queries"]],
            "--radius", v["radius"], "--steps", v["steps"], "--method", method,
            "--out", str(target), *v["extra"]]
    if v["eps"] is not None:
        argv += ["--epsilon", v["eps"]]
    if v["delta"] is not None:
        argv += ["--delta", v["delta"]]
    with deadline(60):
        rc, stdout, err = run_cli(argv)
    private_only = {"eps", "delta", "extra"}
    if method == "none" and bad <= private_only:
        assert rc in (0, 2)  # ignored options; argparse may still refuse e.g. "nan"
    else:
        assert (rc == 0) == (not bad), (bad, err)
    if rc == 0:
        assert target.is_file() and "Traceback" not in err
        with np.load(target) as z:
            assert np.all(np.isfinite(z["outputs"]))
            assert bool(z["is_private"]) == (method not in ("none", "naive"))
    else:
        assert_clean_failure(rc, err, [] if v["out"] == "is_dir" else [target])


ACCOUNT_FIELDS = {
    "eps": (["1", "128", "1e-3"], ["0", "-3", "nan", "inf", "abc"]),
    "delta": (["1e-5", "1e-12"], ["0", "1", "-1", "nan"]),
    "steps": (["1", "5"], ["0", "-1", "2.5"]),
    "dim": (["1", "384"], ["0", "x"]),
    # brace account prices retrieve's default method, BRACE: γ = 0 is refused there
    "gamma": (["auto", "0.001", "0.05", "2"], ["0", "nan", "inf", "-0.5", "x"]),
    "extra": ([[], ["--json"], ["--accounting", "paper"]], [["--accounting", "x"]]),
}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_cli_account(data):
    bad = draw_bad(data, list(ACCOUNT_FIELDS))
    v = {k: choose(data, k, g, b, bad) for k, (g, b) in ACCOUNT_FIELDS.items()}
    with deadline(30):
        rc, stdout, err = run_cli(["account", "--epsilon", v["eps"], "--delta", v["delta"],
                                   "--steps", v["steps"], "--dim", v["dim"], "--n", "1000",
                                   "--gamma", v["gamma"], *v["extra"]])
    if not bad and v["gamma"] in ("0.001", "0.05", "2") and rc != 0:
        assert "gamma" in err  # an explicit γ too large for (ε, δ, T, d)
    else:
        assert (rc == 0) == (not bad), (bad, err)
    if rc == 0:
        assert stdout.strip() and "Traceback" not in err
    else:
        assert_clean_failure(rc, err, [])


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        (["--replications", "2", "--candidates", "2", "--no-progress"], True),
        (["--replications", "1", "--candidates", "2", "--no-progress"], False),
        (["--replications", "2", "--candidates", "0", "--no-progress"], False),
        (["--replications", "2", "--candidates", "2", "--epsilon", "nan", "--no-progress"],
         False),
        (["--replications", "2", "--candidates", "2", "--delta", "2", "--no-progress"], False),
        (["--replications", "x"], False),
    ],
)
def test_cli_experiment_synthetic(tmp_path, args, ok):
    target = tmp_path / "syn"
    with deadline(120):
        rc, stdout, err = run_cli(["experiment", "synthetic", "--out", str(target), *args])
    if ok:
        assert rc == 0, err
        assert {"summary.json", "table.txt"} <= {p.name for p in target.iterdir()}
    else:
        assert_clean_failure(rc, err, [target])


def test_cli_experiment_synthetic_unwritable_output(tmp_path):
    (tmp_path / "file").write_text("x")
    target = tmp_path / "file" / "syn"
    rc, _, err = run_cli(["experiment", "synthetic", "--out", str(target), "--replications",
                          "2", "--candidates", "2", "--no-progress"])
    assert_clean_failure(rc, err, [target])


AUDIT_FIELDS = {
    "bank": (["good", "int", "f32", "n1"], ["nan", "3d", "n0", "corrupt", "missing", "obj"]),
    "query": (["q1"], ["q", "nan", "dim3", "missing"]),
    "radius": (["0.5"], ["0", "nan", "1e300"]),
    "eps": (["1", "4"], ["0", "nan", "inf"]),
    "steps": (["1", "2"], ["0", "-1"]),
    "extra": ([[], ["--replace-row", "0", "--replace-value", "0.5,0.5"],
               ["--noise-scale-factor", "0.5"], ["--alpha", "0.1"], ["--kappa", "128"]],
              [["--alpha", "1"], ["--runs", "5"], ["--noise-scale-factor", "0"],
               ["--replace-row", "9", "--replace-value", "0,0"],
               ["--replace-row", "0", "--replace-value", "0,nan"],
               ["--replace-row", "0", "--replace-value", "1,1,1"], ["--pilot-runs", "3"],
               ["--seed", "-1"], ["--replace-row", "0"]]),
    "out": (OUT_GOOD, OUT_BAD),
}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cli_audit(cli_tmp, data):
    tmp, paths = cli_tmp
    _clear(tmp)
    bad = draw_bad(data, list(AUDIT_FIELDS))
    v = {k: choose(data, k, g, b, bad) for k, (g, b) in AUDIT_FIELDS.items()}
    method = data.draw(st.sampled_from(["brace", "global", "endpoint", "naive"]),
                       label="method")
    target = _out(tmp, v["out"], "a.json")
    argv = ["audit", "--bank", paths[v["bank"]], "--query", paths[v["query"]], "--radius",
            v["radius"], "--method", method, "--epsilon", v["eps"], "--steps", v["steps"],
            "--runs", "40", "--screen-runs", "10", "--no-progress", "--out", str(target),
            *v["extra"]]
    with deadline(60):
        rc, stdout, err = run_cli(argv)
    assert (rc == 0) == (not bad), (bad, err)
    if rc == 0:
        assert target.is_file() and "Traceback" not in err
    else:
        assert_clean_failure(rc, err, [] if v["out"] == "is_dir" else [target])


@pytest.mark.parametrize("out", ["missing_parent_is_file", "is_file"])
def test_cli_audit_report_unwritable(tmp_path, out):
    (tmp_path / "f").write_text("x")
    target = tmp_path / "f" / "rep" if out == "missing_parent_is_file" else tmp_path / "f"
    rc, _, err = run_cli(["audit", "--report", "--runs", "20", "--out", str(target)])
    assert rc == 2 and err.strip().startswith("brace: error:")
    assert (tmp_path / "f").read_text() == "x"


def test_every_subcommand_rejects_garbage_without_traceback():
    """All registered commands (including ones added later) fail cleanly on bad flags."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        rc, _, err = run_cli([name, "--no-such-flag-xyz"])
        assert rc == 2 and "Traceback" not in err and "error" in err, name
        nested = [a for a in p._actions if isinstance(getattr(a, "choices", None), dict)]
        for action in nested:
            for child in action.choices:
                rc, _, err = run_cli([name, child, "--no-such-flag-xyz"])
                assert rc == 2 and "Traceback" not in err and "error" in err, (name, child)


def test_cli_subprocess_never_shows_traceback(tmp_path):
    """A few calls in a real process: exit status and stderr as a user sees them."""
    np.save(tmp_path / "b.npy", np.array([[0.0], [1.0]]))
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    runs = [
        ["retrieve", "--bank", str(tmp_path / "bad.npy"), "--queries", str(tmp_path / "b.npy"),
         "--radius", "1", "--steps", "1", "--out", str(tmp_path / "o.npz")],
        ["account", "--epsilon", "-1", "--delta", "1e-5", "--steps", "1", "--dim", "1"],
        ["audit", "--bank", str(tmp_path / "b.npy"), "--query", str(tmp_path / "b.npy"),
         "--radius", "1", "--method", "brace", "--epsilon", "1", "--steps", "1"],
    ]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for argv in runs:
        p = subprocess.run([sys.executable, "-m", "brace.cli", *argv], capture_output=True,
                           text=True, timeout=120, env=env)
        assert p.returncode == 2, (argv, p.stderr)
        assert "Traceback" not in p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("brace: error:"), p.stderr
    assert not (tmp_path / "o.npz").exists()


# --------------------------------------------------------------------------- fixed bugs
# Each test below failed before its fix (found by this suite); they now guard the fixes.


def test_gate_with_huge_coordinates():
    big = 2.0**399  # inside the stated input range |x| <= 2^400
    X = np.array([[big, 0.0], [big, 0.2]])
    mem = LSRMemory(X, radius=1.0)
    q = np.array([big, 0.5])
    assert mem.gate(q).tolist() == [True, True]
    assert int(mem.gate(q, counts=True)) == 2
    np.testing.assert_allclose(mem.step(q), [big, 0.1])
    # beyond it the bank is refused when the memory is built, never in answer to a query
    with pytest.raises(ValueError, match="out-of-range value"):
        LSRMemory(np.array([[1e200, 0.0], [1e200, 0.2]]), radius=1.0).gate(q)


def test_lse_overflow_is_a_clear_error():
    mem = LSEMemory(np.array([[1.0, 0.0], [0.0, 1.0]]), beta=1e300)
    with pytest.raises(ValueError, match="overflows float64"):
        mem.step(np.array([1e10, 1.0]))


def test_calibrate_tiny_epsilon_is_refused_quickly():
    with deadline(5), pytest.raises(ValueError, match="epsilon must lie in the supported"):
        calibrate(1e-300, 1e-5, 2, dim=1)
    with deadline(5):
        assert calibrate(1e-6, 1e-5, 2, dim=1).rho_per_step > 0


def test_calibrate_huge_gamma_is_value_error():
    with pytest.raises(ValueError, match="gamma"):
        calibrate(1.0, 1e-5, 2, dim=2, gamma=1e300)


def test_certificate_refuses_nan_history():
    mem = LSRMemory(np.array([[0.0, 0.0], [0.5, 0.0]]), radius=1.0)
    with pytest.raises(ValueError, match="history"):
        certificate(mem, np.zeros(2), np.full((1, 3, 2), NAN), steps=3, gamma=0.1)


def test_cli_usage_errors_exit_2():
    p = subprocess.run([sys.executable, "-m", "brace.cli", "account", "--epsilon", "nan",
                        "--delta", "1e-5", "--steps", "1", "--dim", "1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1


def test_calibrate_large_gamma_message_names_gamma():
    with pytest.raises(ValueError, match="gamma"):
        calibrate(1.0, 1e-5, 1, dim=1, gamma=40.0)


def test_calibrate_unreachable_target_is_value_error():
    with pytest.raises(ValueError, match="epsilon"):
        calibrate(1e-100, 1e-300, 1, dim=1, gamma=0.0)


def test_choose_gamma_tiny_epsilon_is_fast():
    with deadline(5):
        spent = calibrate(1e-6, 1e-12, 1, dim=1, gamma=None)
    assert spent.gamma >= 0


def test_calibrate_huge_epsilon_message_names_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        calibrate(1e300, 1e-5, 2, dim=1)



def test_oversized_results_are_refused_up_front():
    mem = LSRMemory(np.zeros((3, 2)), radius=1.0)
    with pytest.raises(ValueError, match="steps must be at most 10000"):
        mem.retrieve(np.zeros((2, 2)), 10**9)
    with pytest.raises(ValueError, match="steps must be at most 10000"):
        private_retrieve(mem, np.zeros((2, 2)), method="global", epsilon=1.0, delta=1e-5,
                         steps=10**9)
