"""The audit of the count release (``release="count"``): its exact density (noisy counts and
Gaussian steps), its pairs, and power: the real release passes, one with its Gaussian std
halved is caught."""

from __future__ import annotations

import numpy as np
import pytest

from brace import LSRMemory, private_retrieve
from brace.audit import AuditConfig, audit, candidate_pairs, report_bank
from brace.audit.density import _log_density, _sample, _setup


@pytest.fixture(scope="module")
def bank2():
    return report_bank(40, 2, 0.5, 9)


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_count_log_density_is_the_samplers_density(bank2, factor):
    """log p_D(m̃, Y) = Σ_t −ε_c|Z_t| − ‖ξ_t‖²/2 − d·log s_t + const for the very noise the
    mechanism drew (Z_t = m̃_t − m_t, the count noise)."""
    X, q = bank2
    cfg = AuditConfig(epsilon=8.0, steps=3, radius=0.5, release="count",
                      noise_scale_factor=factor).validated()
    setup = _setup(cfg, q[None])
    xi = np.random.default_rng(3).standard_normal((400, 3, 2))
    mem = LSRMemory(X, radius=0.5)
    res = private_retrieve(mem, np.repeat(q[None], 400, 0), method="brace", epsilon=8.0,
                           delta=1e-5, steps=3, release="count", output_projection=False,
                           seed=5, _innovations=factor * xi)
    outputs = np.concatenate([res.outputs, res.released_counts[..., None]], axis=2)
    got = _log_density(mem, setup, outputs)
    z = res.released_counts - res.gate_released
    assert np.abs(z).max() > 0  # the counts are noisy
    std = factor * res.noise_std
    want = (-setup.spent.eps_count * np.abs(z) - 0.5 * (xi**2).sum(-1)
            - 2 * np.log(std)).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-8)
    # the sampler packs the same columns
    Y = _sample(mem, setup, 10, np.random.default_rng(0))
    assert Y.shape == (10, 3, 3) and np.all(Y[:, :, 2] == np.round(Y[:, :, 2]))


def test_count_pair_finder_skips_the_smooth_searches(bank2):
    """The count release's candidates: boundary, antipodal, …; not the smooth-bound and
    scale-ratio searches, which rank smooth-release scales (the change-of-measure check of
    the count density is in test_audit.py)."""
    X, q = bank2
    cfg = AuditConfig(method="brace", release="count", epsilon=8.0, steps=2, radius=0.5)
    pairs = candidate_pairs(X, q, cfg, rng=0)
    assert {p.kind for p in pairs} >= {"boundary-in", "boundary-out", "antipodal"}
    assert not any(p.kind in ("smooth-bound", "scale-ratio") for p in pairs)


@pytest.mark.slow
def test_count_release_passes_and_a_broken_one_is_caught():
    """Claimed ε = 1, T = 1, the report's d = 1 bank. Gaussian std halved: ε_lb ≥ 1
    (caught); the real release, same seeds: ε_lb ≤ 1 (pass)."""
    X, q = report_bank(24, 1, 0.5, 8)
    base = AuditConfig(method="brace", release="count", epsilon=1.0, steps=1, radius=0.5,
                       n_runs=200_000, n_pilot=50_000, n_screen=500, seed=2024,
                       batch_size=50_000)
    broken = audit(X, q, AuditConfig(**{**base.__dict__, "noise_scale_factor": 0.5}))
    assert broken.epsilon_lb >= 1.0, str(broken)
    assert broken.verdict == "caught"
    real = audit(X, q, base)
    assert real.epsilon_lb <= 1.0, str(real)
    assert real.verdict == "pass" and real.label == "brace (count release)"


@pytest.mark.parametrize("kw, match", [
    ({"release": "ptr"}, "release must be 'smooth' or 'count'"),
    ({"release": "count", "method": "global"}, "BRACE release"),
    ({"release": "count", "gamma": 0.1}, "gamma does not apply"),
])
def test_count_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        AuditConfig(**kw).validated()


def test_report_audits_every_release_mode():
    from brace.audit import ReportConfig
    from brace.audit.report import report_cases

    cases = report_cases(ReportConfig())
    labels = {cfg.label for _, cfg in cases}
    assert "brace (count release)" in labels
    assert any(lb.startswith("brace (kappa=128, gamma=") for lb in labels)
    broken = [cfg for _, cfg in cases if cfg.noise_scale_factor != 1.0]
    assert {(c.method, c.release) for c in broken} == {("global", "smooth"), ("brace", "count")}
    assert all(not c.is_private for c in broken)
