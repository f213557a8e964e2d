"""One result schema (NPZ/JSON), load_result, and the safe defaults of private_retrieve."""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import pytest

import brace
from brace import (
    LSRMemory,
    NoiselessResult,
    NotPrivateWarning,
    PrivateRetrievalResult,
    load_result,
    noiseless_retrieve,
    private_retrieve,
    save_result,
)
from brace._validation import rng_from_record
from brace.accounting import NonPrivateEvent, RdpAccountant
from brace.results import RESULT_KEYS


@pytest.fixture(scope="module")
def mem():
    X = np.random.default_rng(0).normal(size=(150, 2))
    return LSRMemory(X, radius=0.8), X


def run(mem, method, **kw):
    m, X = mem
    args = dict(method=method, epsilon=4.0, delta=1e-5, steps=3, seed=3) | kw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return private_retrieve(m, X[:4] + 0.05, **args)


# --------------------------------------------------------------------------------------
# schema and round trip
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["brace", "global", "endpoint", "naive"])
@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_round_trip_every_method(mem, tmp_path, method, suffix):
    res = run(mem, method)
    path = save_result(res, tmp_path / f"r{suffix}")
    back = load_result(path)
    assert isinstance(back, PrivateRetrievalResult)
    np.testing.assert_array_equal(back.outputs, res.outputs)
    np.testing.assert_array_equal(back.queries, res.queries)
    assert back.method == method and back.is_private == res.is_private
    assert back.params == json.loads(json.dumps(res.params)) | {
        "seed": None, "seed_null_reason": brace.mechanisms.SEED_WITHHELD}
    for f in ("epsilon", "delta", "steps", "dim", "gamma", "rho_per_step", "queries"):
        assert getattr(back.privacy, f) == getattr(res.privacy, f)
    if res.is_private:
        assert back.privacy.epsilon_total == res.privacy.epsilon_total
    else:
        assert back.privacy.epsilon_total == math.inf
        assert isinstance(back.privacy.event, NonPrivateEvent)
    assert all(v is None for v in back.diagnostics().values())  # not saved unless asked


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_one_set_of_keys_for_every_method_and_the_noiseless_result(mem, tmp_path, suffix):
    m, X = mem
    with pytest.warns(NotPrivateWarning):
        clean = noiseless_retrieve(m, X[:4], steps=3)
    results = [run(mem, k) for k in ("brace", "global", "endpoint", "naive")] + [clean]
    keysets = []
    for i, res in enumerate(results):
        path = save_result(res, tmp_path / f"r{i}{suffix}")
        if suffix == ".json":
            keys = set(json.loads(path.read_text()))
        else:
            with np.load(path) as z:
                keys = set(z.files)
        assert set(RESULT_KEYS) <= keys
        # a count release (BRACE's default at some budgets) also releases its noisy counts
        is_count = getattr(res, "params", {}).get("release") == "count"
        assert ("released_counts" in keys) == is_count
        keysets.append(keys - {"warning", "privacy_null_reason", "released_counts"})
    assert all(k == keysets[0] for k in keysets)


def test_noiseless_result_round_trip_and_label(mem, tmp_path):
    m, X = mem
    with pytest.warns(NotPrivateWarning):
        clean = noiseless_retrieve(m, X[:4], steps=3)
    np.testing.assert_array_equal(clean.outputs, m.retrieve(X[:4], 3)[:, 1:])
    for suffix in (".npz", ".json"):
        back = load_result(save_result(clean, tmp_path / f"c{suffix}"))
        assert isinstance(back, NoiselessResult)
        assert back.method == "none" and not back.is_private and back.privacy is None
        np.testing.assert_array_equal(back.outputs, clean.outputs)
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["privacy"] is None and "NOT differentially private" in doc["warning"]
    assert "NOT DIFFERENTIALLY PRIVATE" in str(clean)


def test_diagnostics_only_when_asked_and_named_not_private(mem, tmp_path):
    res = run(mem, "brace", kappa=0.0)
    p = save_result(res, tmp_path / "d.npz", include_diagnostics=True)
    with np.load(p) as z:
        diag = [k for k in z.files if "noise_std" in k or "gate" in k]
    assert diag and all(k.startswith("diagnostic_not_private_") for k in diag)
    back = load_result(p)
    np.testing.assert_array_equal(back.noise_std, res.noise_std)
    j = save_result(res, tmp_path / "d.json", include_diagnostics=True)
    assert "diagnostics_not_private" in json.loads(j.read_text())
    np.testing.assert_array_equal(load_result(j).gate_released, res.gate_released)


def test_json_is_strict(mem, tmp_path):
    res = run(mem, "naive")  # epsilon_total = inf, alpha_opt finite
    text = save_result(res, tmp_path / "n.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    doc = json.loads(text)
    assert doc["privacy"]["epsilon_total"] is None
    assert "not differentially private" in doc["privacy"]["epsilon_total_null_reason"]
    json.loads(res.to_json(), parse_constant=lambda c: pytest.fail(c))


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda p: p.write_text("{}"), "lacks the key"),
        (lambda p: p.write_text("not json"), "cannot read result"),
        (lambda p: p.write_text('{"x": NaN}'), "NaN"),
    ],
)
def test_bad_result_files(tmp_path, setup, match):
    p = tmp_path / "bad.json"
    setup(p)
    with pytest.raises(ValueError, match=match):
        load_result(p)


def test_bad_paths_and_inconsistent_files(mem, tmp_path):
    with pytest.raises(ValueError, match=r"\.npz or \.json"):
        load_result(tmp_path / "x.txt")
    with pytest.raises(FileNotFoundError):
        load_result(tmp_path / "missing.npz")
    doc = run(mem, "naive").to_dict()
    doc["is_private"] = True
    (tmp_path / "lie.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="claims is_private=True"):
        load_result(tmp_path / "lie.json")


# --------------------------------------------------------------------------------------
# safe defaults of private_retrieve
# --------------------------------------------------------------------------------------


def test_naive_event_is_not_private(mem):
    res = run(mem, "naive")
    assert isinstance(res.privacy.event, NonPrivateEvent)
    assert RdpAccountant().compose(res.privacy.event).get_epsilon(1e-5) == math.inf
    assert res.privacy.epsilon_total == math.inf
    for m in ("brace", "global", "endpoint"):
        p = run(mem, m).privacy
        assert math.isfinite(RdpAccountant().compose(p.event).get_epsilon(1e-5))


def test_multi_query_call_reports_the_composed_epsilon(mem):
    res = run(mem, "global")
    p = res.privacy
    want = RdpAccountant().compose(p.step_event, 4 * 3).get_epsilon(p.delta)
    assert p.queries == 4 and p.epsilon_total == pytest.approx(want, rel=1e-12)
    assert p.epsilon_total > p.epsilon
    s = res.summary()
    assert f"{p.epsilon_total:.6g}" in s and "per query" in s and f"{p.delta:g}" in s
    assert res.to_dict()["privacy"]["epsilon_total"] == p.epsilon_total


def test_caller_innovations_are_never_reported_private(mem):
    m, X = mem
    q = X[:4] + 0.05
    with pytest.raises(TypeError, match="noise"):
        private_retrieve(m, q, method="brace", epsilon=4, delta=1e-5, steps=3,
                         noise=np.zeros((4, 3, 2)))
    res = private_retrieve(m, q, method="brace", epsilon=4, delta=1e-5, steps=3,
                           _innovations=np.zeros((4, 3, 2)))
    assert not res.is_private
    assert isinstance(res.privacy.event, NonPrivateEvent)
    assert "NOT" in res.summary() and "innovations" in res.to_dict()["warning"]


def test_same_seed_shares_innovations_across_methods(mem):
    m, X = mem
    q = X[:4] + 0.05
    xi = np.random.default_rng(9).standard_normal((4, 3, 2))
    a = private_retrieve(m, q, method="global", epsilon=4, delta=1e-5, steps=3, seed=9,
                         output_projection=False)
    e = private_retrieve(m, q, method="endpoint", epsilon=4, delta=1e-5, steps=3, seed=9,
                         output_projection=False)
    clean = m.retrieve(q, 3)
    np.testing.assert_allclose(e.outputs[:, 0], clean[:, -1] + e.noise_std[:, :1] * xi[:, -1],
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a.outputs[:, 0] - a.noise_std[:, :1] * xi[:, 0],
                               m.retrieve(q, 1)[:, 1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "seed",
    [7, np.random.SeedSequence(123, spawn_key=(4, 5)),
     np.random.default_rng(np.random.SeedSequence(99)), np.random.Generator(np.random.MT19937(3))],
    ids=["int", "seedseq", "generator", "mt19937"],
)
def test_recorded_seed_reproduces_the_release(mem, seed):
    res = run(mem, "global", seed=seed)
    rec = json.loads(json.dumps(res.params["seed"]))  # JSON-able
    assert "0x" not in json.dumps(rec)
    again = run(mem, "global", seed=rng_from_record(rec))
    np.testing.assert_array_equal(again.outputs, res.outputs)


@pytest.mark.parametrize("flag", ["output_projection", "return_clean"])
@pytest.mark.parametrize("value", ["no", 0, 1, None, "False"])
def test_flags_must_be_bool(mem, flag, value):
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        run(mem, "global", **{flag: value})
    assert run(mem, "global", **{flag: np.bool_(True)}).params["steps"] == 3


def test_progress_is_called_per_step_and_steps_are_bounded(mem):
    calls = []
    run(mem, "brace", progress=lambda t, T: calls.append((t, T)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    calls.clear()
    run(mem, "endpoint", progress=lambda t, T: calls.append((t, T)))
    assert calls == [(1, 1)]
    with pytest.raises(TypeError, match="progress must be callable"):
        run(mem, "global", progress="bar")
    with pytest.raises(ValueError, match=f"at most {brace._validation.MAX_STEPS}"):
        run(mem, "global", steps=100_000_000)


def test_default_kappa_is_shared():
    import inspect

    sig = inspect.signature(private_retrieve)
    assert sig.parameters["kappa"].default == brace.DEFAULT_KAPPA


@pytest.mark.parametrize("method", ["brace", "global", "endpoint", "naive"])
def test_diagnostics_recomputed_for_a_loaded_release(mem, tmp_path, method):
    m, _ = mem
    res = run(mem, method, kappa=0.0)
    back = brace.results.with_diagnostics(m, load_result(save_result(res, tmp_path / "r.npz")))
    for k in ("noise_std", "gate_released", "activated", "smooth_sensitivity"):
        a, b = getattr(res, k), getattr(back, k)
        if a is None:
            assert b is None
        else:
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    other = LSRMemory(m.bank, radius=0.7)
    with pytest.raises(ValueError, match="radius"):
        brace.results.with_diagnostics(other, res)


@pytest.mark.parametrize("seed", [5, np.random.SeedSequence(11)])
def test_the_seed_is_withheld_from_saved_releases_unless_asked(mem, tmp_path, seed):
    res = run(mem, "brace", seed=seed)
    assert res.params["seed"] is not None  # in memory: reproducible
    for suffix in (".npz", ".json"):
        back = load_result(save_result(res, tmp_path / f"s{suffix}"))
        assert back.params["seed"] is None and "regenerates the noise" in \
            back.params["seed_null_reason"]
        kept = load_result(save_result(res, tmp_path / f"k{suffix}", include_seed=True))
        assert kept.params["seed"] == json.loads(json.dumps(res.params["seed"]))
    assert res.to_dict()["params"]["seed"] is None
    assert "seed_null_reason" not in res.to_dict(include_seed=True)["params"]


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_count_release_round_trip_keeps_its_noisy_counts(mem, tmp_path, suffix):
    res = run(mem, "brace", release="count")
    back = load_result(save_result(res, tmp_path / f"c{suffix}"))
    np.testing.assert_array_equal(back.released_counts, res.released_counts)
    assert back.privacy.release == "count" and back.privacy.eps_count == res.privacy.eps_count


@pytest.mark.parametrize("release", ["count", None])
def test_count_release_diagnostics_recomputed(mem, tmp_path, release):
    """Explicit and default (auto-chosen) count releases: the loaded release's diagnostics
    are recomputed along its states and noisy counts."""
    res = run(mem, "brace", release=release, kappa=math.inf, epsilon=8.0)
    assert res.params["release"] == "count"
    back = brace.results.with_diagnostics(mem[0],
                                          load_result(save_result(res, tmp_path / "c.npz")))
    for k in ("noise_std", "gate_released", "smooth_sensitivity"):
        np.testing.assert_allclose(getattr(back, k), getattr(res, k), rtol=1e-12)
    gone = dataclasses.replace(back, released_counts=None)
    with pytest.raises(ValueError, match="released_counts"):
        brace.results.with_diagnostics(mem[0], gone)


def test_smooth_release_with_infinite_kappa_diagnostics_recomputed(mem, tmp_path):
    res = run(mem, "brace", release="smooth", kappa=math.inf)
    back = load_result(save_result(res, tmp_path / "k.json"))
    assert back.params["kappa"] is None or math.isinf(back.params["kappa"])
    again = brace.results.with_diagnostics(mem[0], back)
    np.testing.assert_allclose(again.noise_std, res.noise_std, rtol=1e-12)
