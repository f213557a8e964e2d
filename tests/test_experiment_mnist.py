"""The MNIST experiment: quick end-to-end run, outputs, resume (spec §7); its CLI tests are
in ``tests/cli/``, the shared ``quick_run`` fixture in ``conftest.py``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from brace.experiments import mnist as mx
from brace.experiments._common import NOT_DP_LABEL, read_jsonl
from brace.experiments.mnist import QUICK, MnistConfig, run_mnist

OUTPUTS = (
    "results.jsonl",
    "summary.json",
    "table.txt",
    "fig2_prediction_mse.png",
    "fig3_endpoint_fidelity.png",
    "fig4_reconstructions.png",
    "fig4b_reconstructions_global_best.png",
)


# --------------------------------------------------------------------------- no data needed


def test_full_grid_matches_spec():
    cfg = MnistConfig()
    b = np.array(cfg.betas)
    assert b.size == 48 and np.all(np.diff(b) > 0)
    assert b[0] == pytest.approx(1e-6) and b[-1] == pytest.approx(1e3)
    assert np.isclose(b, 0.025119, rtol=1e-4).any()  # the paper's best β = 10^{-8/5}
    assert {12.7427, 20.6914} <= set(cfg.betas)
    assert cfg.steps == (3, 5, 7) and cfg.epsilons == (16.0, 32.0, 64.0)
    assert cfg.delta == 1e-5 and cfg.kappa == 128.0 and cfg.draws >= 10
    assert len(mx._grid_keys(cfg)) == 2 * 48 * 3 * (1 + 3 * 4)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("draws", 0, "draws"),
        ("delta", 1.5, "delta"),
        ("epsilons", (), "epsilons"),
        ("epsilons", (-1.0,), "epsilons"),
        ("steps", (0,), "steps"),
        ("accounting", "zcdp", "accounting"),
        ("extra_betas", (0.0,), "extra_betas"),
    ],
)
def test_config_rejects_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(MnistConfig(), **{field: value})


def test_noise_seeds_depend_on_grid_point_not_order():
    e1 = mx._noise_entropy(7, 0.1, 3, 64.0)
    assert e1 == mx._noise_entropy(7, 0.1, 3, 64.0)
    others = [mx._noise_entropy(7, 0.1000001, 3, 64.0), mx._noise_entropy(7, 0.1, 5, 64.0),
              mx._noise_entropy(7, 0.1, 3, 32.0), mx._noise_entropy(8, 0.1, 3, 64.0)]
    assert all(o != e1 for o in others)


# --------------------------------------------------------------------------- quick run


@pytest.mark.slow
def test_quick_run_writes_every_output(quick_run):
    out, s = quick_run["out"], quick_run["summary"]
    for f in OUTPUTS:
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    for f in OUTPUTS[3:]:
        assert (out / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == len(mx._grid_keys(QUICK)) == s["grid_points_total"]
    assert s["grid_points_computed_this_run"] == len(recs)
    assert len({mx._key(r) for r in recs}) == len(recs)  # one line per grid point
    r = recs[0]
    for k in ("run_hash", "vae_config_hash", "config", "versions", "beta", "radius",
              "steps", "epsilon", "method", "split", "prediction_mse", "endpoint_fidelity"):
        assert k in r
    assert r["config"]["quick"] is True and "numpy" in r["versions"]
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["features"]["config_hash"] == r["vae_config_hash"]
    assert {b["method"] for b in on_disk["best"]} == set(mx.ALL_METHODS)
    text = (out / "table.txt").read_text()
    assert "paper-style" in text and "dev-selected" in text and "8.759678" in text


@pytest.mark.slow
def test_data_checksums_and_corruption_level(quick_run):
    from brace.experiments.mnist_data import load_mnist_test

    load_mnist_test(quick_run["data"], verify=True)  # raises on a checksum mismatch
    c = quick_run["summary"]["corrupted_input_mse"]
    # ‖3u‖²/d with u ~ N(0, I_2): mean 9; 512 squared coordinates give sd ≈ 0.56
    assert c["test"] == pytest.approx(9.0, rel=0.10)


@pytest.mark.slow
def test_records_agree_with_a_direct_computation(quick_run):
    """One grid point recomputed from scratch: the metric is ‖Y_T − a‖²/d averaged."""
    from brace import LSRMemory, private_retrieve
    from brace.experiments.mnist_data import corrupt_queries
    from brace.experiments.vae import build_features

    s = quick_run["summary"]
    feats = build_features(quick_run["data"], cache_dir=quick_run["cache"], quick=True)
    x = np.asarray(feats.test)
    q = corrupt_queries(x, scale=3.0, seed=np.random.SeedSequence([QUICK.seed, 1]))
    assert s["corrupted_input_mse"]["test"] == pytest.approx(((q - x) ** 2).mean(), rel=1e-12)
    recs = {mx._key(r): r for r in read_jsonl(quick_run["out"] / "results.jsonl")}
    beta = QUICK.betas[2]
    mem = LSRMemory(feats.bank, beta=beta)
    z3 = mem.retrieve(q, 3)[:, -1]
    rec = recs[("test", beta, 3, None, "noiseless")]
    assert rec["prediction_mse"]["mean"] == pytest.approx(((z3 - x) ** 2).mean(), rel=1e-10)
    # the private call runs test and dev queries together, each repeated R times
    qd = corrupt_queries(np.asarray(feats.dev), scale=3.0,
                         seed=np.random.SeedSequence([QUICK.seed, 2]))
    q_all = np.repeat(np.concatenate([q, qd]), QUICK.draws, axis=0)
    res = private_retrieve(mem, q_all, method="brace", epsilon=64.0, delta=1e-5, steps=3,
                           kappa=128.0,
                           seed=np.random.SeedSequence(mx._noise_entropy(QUICK.seed, beta, 3,
                                                                          64.0)))
    Y = res.final[: x.shape[0] * QUICK.draws]
    x_rep = np.repeat(x, QUICK.draws, axis=0)
    z_rep = np.repeat(z3, QUICK.draws, axis=0)
    rec = recs[("test", beta, 3, 64.0, "brace")]
    assert rec["prediction_mse"]["mean"] == pytest.approx(((Y - x_rep) ** 2).mean(), rel=1e-10)
    assert rec["endpoint_fidelity"]["mean"] == pytest.approx(((Y - z_rep) ** 2).mean(),
                                                             rel=1e-10)
    assert rec["activation_rate"] == 0.0  # κ = 128 ≥ (2T+1)²/T: BRACE never activates


@pytest.mark.slow
def test_noiseless_beats_corrupted_input_at_best_beta(quick_run):
    s = quick_run["summary"]
    corrupted = s["corrupted_input_mse"]["test"]
    best = {b["method"]: b for b in s["best"]}
    nl = best["noiseless"]
    assert nl["dev_selected"]["test_mse"]["mean"] < corrupted
    assert nl["paper_style"]["test_mse"]["mean"] < 0.5 * corrupted
    # the paper-style value is the minimum over the test grid: no lower noiseless record
    recs = read_jsonl(quick_run["out"] / "results.jsonl")
    vals = [r["prediction_mse"]["mean"] for r in recs
            if r["split"] == "test" and r["method"] == "noiseless"]
    assert nl["paper_style"]["test_mse"]["mean"] == min(vals)
    # large β: gates empty, every method returns (about) the corrupted query
    big = [r for r in recs if r["split"] == "test" and r["beta"] == max(QUICK.betas)
           and r["method"] == "noiseless"]
    assert big[0]["prediction_mse"]["mean"] == pytest.approx(corrupted, rel=0.02)


@pytest.mark.slow
def test_naive_is_flagged_not_private(quick_run):
    out = quick_run["out"]
    recs = read_jsonl(out / "results.jsonl")
    naive = [r for r in recs if r["method"] == "naive"]
    assert naive and all(r["private"] is False and r["label"] == NOT_DP_LABEL
                         and "NOT differentially private" in r["warning"] for r in naive)
    assert all(r["private"] for r in recs if r["method"] in ("brace", "global", "endpoint"))
    s = json.loads((out / "summary.json").read_text())
    row = next(b for b in s["best"] if b["method"] == "naive")
    assert row["private"] is False and row["label"] == NOT_DP_LABEL
    assert NOT_DP_LABEL in (out / "table.txt").read_text()


@pytest.mark.slow
def test_rerun_resumes_without_new_work(quick_run, monkeypatch):
    out = quick_run["out"]

    def boom(*a, **k):  # any recomputation of a grid point would call private_retrieve
        raise AssertionError("a finished grid point was recomputed")

    monkeypatch.setattr(mx, "_run_beta", boom)
    s2 = run_mnist(QUICK, out, data_dir=quick_run["data"], cache_dir=quick_run["cache"],
                   progress=False)
    assert s2["grid_points_computed_this_run"] == 0
    for f in ("results.jsonl", "table.txt"):
        assert (out / f).read_bytes() == quick_run["bytes"][f], f
    assert s2["best"] == quick_run["summary"]["best"]


@pytest.mark.slow
def test_resume_completes_a_partial_file_identically(quick_run, tmp_path):
    """Drop the last β from results.jsonl: a rerun recomputes only it, with the same draws."""
    src = quick_run["out"] / "results.jsonl"
    lines = src.read_text().splitlines(keepends=True)
    last = max(QUICK.betas)
    kept = [ln for ln in lines if json.loads(ln)["beta"] != last]
    assert 0 < len(kept) < len(lines)
    (tmp_path / "results.jsonl").write_text("".join(kept))
    s = run_mnist(QUICK, tmp_path, data_dir=quick_run["data"], cache_dir=quick_run["cache"],
                  progress=False)
    assert s["grid_points_computed_this_run"] == len(lines) - len(kept)

    def strip(text):  # timings differ between runs; every number must not
        out = []
        for ln in text.splitlines():
            r = json.loads(ln)
            r.pop("point_time_s")
            out.append(json.dumps(r, sort_keys=True))
        return sorted(out)

    assert strip((tmp_path / "results.jsonl").read_text()) == strip(src.read_text())


@pytest.mark.slow
def test_foreign_results_file_is_refused(quick_run, tmp_path):
    line = json.loads(quick_run["out"].joinpath("results.jsonl").read_text().splitlines()[0])
    line["run_hash"] = "0" * 64
    (tmp_path / "results.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="different configuration"):
        run_mnist(dataclasses.replace(QUICK, draws=3), tmp_path, data_dir=quick_run["data"],
                  cache_dir=quick_run["cache"], progress=False)


