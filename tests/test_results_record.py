"""What a result shows and records: str/repr without diagnostics, saved files checked on
load (an edited privacy record is refused), κ recorded as it runs, no silent overwrite."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import brace
from brace import LSRMemory, NotPrivateWarning, load_result, private_retrieve, save_result


@pytest.fixture(scope="module")
def mem():
    X = np.random.default_rng(0).normal(size=(150, 2))
    return LSRMemory(X, radius=0.8), X


def run(mem, method="brace", **kw):
    m, X = mem
    args = dict(method=method, epsilon=8.0, delta=1e-5, steps=3, seed=3) | kw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return private_retrieve(m, X[:4] + 0.05, **args)


# --------------------------------------------------------------------------------------
# printing a result shows the release and its privacy only
# --------------------------------------------------------------------------------------

_DIAG_WORDS = ("diagnostics", "per step:", "noise_std", "smooth_sensitivity", "activation",
               "gate_")


@pytest.mark.parametrize("kw", [dict(release="smooth", kappa=0.0), dict(release="count"),
                                dict(method="global"), dict(method="naive")],
                         ids=["smooth", "count", "global", "naive"])
def test_str_and_repr_show_no_diagnostics(mem, kw):
    res = run(mem, **kw)
    for text in (str(res), repr(res), f"{res}"):
        assert not any(w in text for w in _DIAG_WORDS), text
        assert "seed" not in text and str(res.noise_std[0, 0]) not in text
    assert "privacy" in str(res) and "privacy" in repr(res)
    if res.is_private:
        assert f"({res.privacy.epsilon:g}, {res.privacy.delta:g})-DP per query" in repr(res)
    else:
        assert "NOT differentially private" in repr(res)
    assert repr(res).startswith("PrivateRetrievalResult(method=")
    full = res.summary(diagnostics=True)
    assert "diagnostics (" in full and "mean noise std per step" in full


def test_summary_diagnostics_are_named_for_what_they_are(mem):
    smooth = run(mem, release="smooth", kappa=0.0).summary(diagnostics=True)
    assert "diagnostics (data-dependent, NOT covered by epsilon)" in smooth
    assert "mean smooth sensitivity per step" in smooth and "activation rate" in smooth
    count = run(mem, release="count").summary(diagnostics=True)
    assert "diagnostics (public: set by the released noisy counts)" in count
    assert "mean proposed sensitivity b_t per step" in count
    assert "smooth sensitivity" not in count and "activation" not in count
    assert "(public: fixed sensitivity)" in run(mem, method="global").summary(diagnostics=True)


# --------------------------------------------------------------------------------------
# load_result checks what it loads
# --------------------------------------------------------------------------------------


def _edit(path, **changes):
    """Rewrite a saved result with ``changes``: ``"privacy.epsilon": v`` edits a field of a
    JSON record; a top-level key replaces it (as an NPZ array or a JSON value)."""
    if path.suffix == ".json":
        doc = json.loads(path.read_text())
        for key, value in changes.items():
            head, _, tail = key.partition(".")
            if tail:
                doc[head][tail] = value
            else:
                doc[head] = value
        path.write_text(json.dumps(doc))
        return
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    for key, value in changes.items():
        head, _, tail = key.partition(".")
        if tail:
            rec = json.loads(str(arrays[head]))
            rec[tail] = value
            arrays[head] = np.asarray(json.dumps(rec))
        elif value is None:
            arrays.pop(head)
        else:
            arrays[head] = np.asarray(value)
    np.savez_compressed(path, **arrays)


@pytest.mark.parametrize("suffix", [".npz", ".json"])
@pytest.mark.parametrize("field,value", [("epsilon", 0.01), ("epsilon", 64.0),
                                         ("rho_per_step", 1e-4), ("epsilon_total", 0.5),
                                         ("gamma", 0.5)])
def test_an_edited_privacy_record_is_refused(mem, tmp_path, suffix, field, value):
    res = run(mem, release="smooth")
    path = save_result(res, tmp_path / f"r{suffix}")
    _edit(path, **{f"privacy.{field}": value})
    with pytest.raises(ValueError) as info:
        load_result(path)
    msg = str(info.value)
    assert str(path) in msg and "privacy." in msg
    if field == "epsilon" and value == 0.01:  # the claim, against what the noise spends
        assert "field 'privacy.epsilon'" in msg and "claims (0.01, 1e-05)-DP" in msg
        assert "spends epsilon = 8 at delta = 1e-05" in msg


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_an_edited_count_release_record_is_refused(mem, tmp_path, suffix):
    res = run(mem, release="count")
    assert load_result(save_result(res, tmp_path / f"ok{suffix}")).privacy == res.privacy
    for field, value in (("epsilon", 0.01), ("eps_count", 5.0), ("count_margin", 1)):
        path = save_result(res, tmp_path / f"{field}{suffix}")
        _edit(path, **{f"privacy.{field}": value})
        with pytest.raises(ValueError, match="field 'privacy") as info:
            load_result(path)
        assert str(path) in str(info.value)


@pytest.mark.parametrize("kw", [
    dict(release="smooth", gamma="gates"), dict(release="smooth", accounting="paper"),
    dict(method="global", accounting="paper"), dict(method="endpoint"), dict(method="naive"),
    dict(), dict(epsilon=0.5),
], ids=["gates", "paper-smooth", "paper-global", "endpoint", "naive", "default", "small-eps"])
def test_every_kind_of_untouched_release_loads(mem, tmp_path, kw):
    res = run(mem, **kw)
    for suffix in (".npz", ".json"):
        back = load_result(save_result(res, tmp_path / f"r{suffix}"))
        assert back.privacy.rho_per_step == res.privacy.rho_per_step
        assert back.params["kappa"] == res.params["kappa"]


@pytest.mark.parametrize("suffix", [".npz", ".json"])
@pytest.mark.parametrize("case", [
    "nan_outputs", "count_without_counts", "negative_epsilon", "privacy_not_json",
    "params_not_a_mapping", "privacy_not_an_object", "counts_not_integers",
])
def test_bad_fields_are_refused_naming_file_and_field(mem, tmp_path, suffix, case):
    res = run(mem, release="count" if "count" in case else "smooth")
    path = save_result(res, tmp_path / f"r{suffix}")
    out = res.outputs.copy()
    out[0, 1, 0] = np.nan
    field, change = {
        "nan_outputs": ("outputs", {"outputs": out if suffix == ".npz" else
                                    json.loads(json.dumps(out.tolist()).replace("NaN",
                                                                                "null"))}),
        "count_without_counts": ("released_counts", {"released_counts": None}),
        "negative_epsilon": ("privacy.epsilon", {"privacy.epsilon": -8.0}),
        "privacy_not_json": ("privacy", {"privacy": "{not json"}),
        "params_not_a_mapping": ("params", {"params": [1, 2]} if suffix == ".json"
                                 else {"params": json.dumps([1, 2])}),
        "privacy_not_an_object": ("privacy", {"privacy": "[1, 2]"} if suffix == ".npz"
                                  else {"privacy": [1, 2]}),
        "counts_not_integers": ("released_counts", {"released_counts": (
            None if res.released_counts is None else (res.released_counts + 0.5).tolist())}),
    }[case]
    _edit(path, **change)
    with pytest.raises(ValueError) as info:
        load_result(path)
    assert str(path) in str(info.value) and f"field {field!r}" in str(info.value), \
        str(info.value)


def test_noiseless_file_must_not_claim_privacy(mem, tmp_path):
    m, X = mem
    with pytest.warns(NotPrivateWarning):
        clean = brace.noiseless_retrieve(m, X[:4], steps=3)
    path = save_result(clean, tmp_path / "c.json")
    _edit(path, is_private=True)
    with pytest.raises(ValueError, match="noiseless trajectory"):
        load_result(path)


# --------------------------------------------------------------------------------------
# κ is recorded as it runs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_kappa_is_recorded_as_it_runs(mem, tmp_path, suffix):
    """A count release or a baseline never corrects: it records κ = ∞ (None) and why,
    never the κ passed; smooth BRACE records κ as given."""
    count = run(mem, release="count", kappa=0.0)
    assert count.params["kappa"] is None
    assert count.params["kappa_rule"] == "none (count release: no correction)"
    assert brace.plan.recorded_kappa(count.params) == math.inf
    for method in ("global", "endpoint", "naive"):
        base = run(mem, method=method, kappa=0.0)
        assert base.params["kappa"] is None
        assert base.params["kappa_rule"] == "none (fixed sensitivity: no correction)"
    smooth = run(mem, release="smooth", kappa=0.0)
    assert smooth.params["kappa"] == 0.0 and smooth.params["kappa_rule"] == "given"
    idle = run(mem, release="smooth")  # κ = 128 ≥ (2T+1)²/T at T = 3: cannot fire
    assert idle.params["kappa"] == brace.DEFAULT_KAPPA
    assert idle.params["kappa_rule"].startswith("given (no correction can fire")
    loose = run(mem, release="smooth", output_projection=False)
    assert loose.params["kappa_rule"] == "given"
    never = run(mem, release="smooth", kappa=math.inf)
    assert never.params["kappa"] is None and "infinite" in never.params["kappa_rule"]
    # the record is JSON as it stands, and reads back as it was
    path = save_result(count, tmp_path / f"c{suffix}")
    if suffix == ".json":
        doc = json.loads(path.read_text())["params"]
        assert doc["kappa"] is None and doc["kappa_rule"] == count.params["kappa_rule"]
    back = load_result(path)
    assert back.params == json.loads(json.dumps(count.params)) | {
        "seed": None, "seed_null_reason": brace.mechanisms.SEED_WITHHELD}


def test_plan_records_the_kappa_that_runs():
    kw = dict(radius=0.5, epsilon=4.0, delta=1e-5, steps=2)
    plan = brace.plan_release((1000, 2), method="brace", release="count", kappa=0.0, **kw)
    assert plan.kappa == math.inf and plan.theta == math.inf
    assert "count release: no correction" in str(plan)
    assert plan.to_dict()["kappa_null_reason"] == "infinite: none (count release: no correction)"
    smooth = brace.plan_release((1000, 2), method="brace", release="smooth", kappa=0.0, **kw)
    assert smooth.kappa == 0.0 and smooth.kappa_rule == "given"


# --------------------------------------------------------------------------------------
# save_result refuses to overwrite unless asked, as the CLI does
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_save_result_refuses_to_overwrite(mem, tmp_path, suffix):
    a, b = run(mem, seed=1), run(mem, seed=2)
    path = save_result(a, tmp_path / f"r{suffix}")
    before = path.read_bytes()
    with pytest.raises(FileExistsError) as info:
        save_result(b, path)
    assert str(path) in str(info.value) and "overwrite=True" in str(info.value)
    assert path.read_bytes() == before
    save_result(b, path, overwrite=True)
    np.testing.assert_array_equal(load_result(path).outputs, b.outputs)
    with pytest.raises(TypeError, match="overwrite must be True or False"):
        save_result(b, path, overwrite="yes")
