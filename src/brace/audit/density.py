"""Sampling a release and its exact log-density: the likelihood-ratio statistic."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import accounting as _accounting
from .._validation import check_bank
from ..mechanisms import (
    NotPrivateWarning,
    certificate,
    endpoint_sensitivity,
    global_sensitivity,
    private_retrieve,
)
from ..memory import LSRMemory
from ..plan import plan_release
from ..secure import rounded_units, sigma2_params
from ..sensitivity import Numerics, proposed_units
from ..steps import secure_grid
from .config import AuditConfig, _single_query

__all__ = ["log_likelihood_ratio"]

@dataclass(frozen=True)
class _Setup:
    cfg: AuditConfig
    q: np.ndarray  # (1, d)
    spent: Any  # PrivacySpent
    releases: int

    @property
    def dim(self) -> int:
        return self.q.shape[1]


def _setup(cfg: AuditConfig, q: np.ndarray) -> _Setup:
    releases = 1 if cfg.method == "endpoint" else cfg.steps
    if cfg.release == "count":
        spent = _accounting.calibrate_count(cfg.epsilon, cfg.delta, cfg.steps, dim=q.shape[1])
        return _Setup(cfg, q, spent, releases)
    spent = _accounting.calibrate(
        cfg.epsilon, cfg.delta, releases, dim=q.shape[1],
        gamma=(cfg.gamma if cfg.method == "brace" else 0.0),
        accounting=cfg.accounting, mechanism=cfg.method,
    )
    return _Setup(cfg, q, spent, releases)


def _sample(mem: LSRMemory, setup: _Setup, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` independent releases (rows) of the (possibly broken) mechanism on ``mem``
    (unprojected unless ``cfg.output_projection``).

    The count release's noisy counts ``m̃_t`` are appended as a last column."""
    cfg = setup.cfg
    d = setup.dim
    count = cfg.release == "count"
    out = np.empty((n, setup.releases, d + count))
    secure = cfg.noise == "secure"
    for b0 in range(0, n, cfg.batch_size):
        m = min(cfg.batch_size, n - b0)
        # secure mode draws its own exact noise from the OS (no innovations, no seed)
        xi = None if secure else rng.standard_normal((m, setup.releases, d))
        extra = (dict(noise="secure", _grid_factor=cfg.grid_factor) if secure else
                 dict(seed=rng, _innovations=cfg.noise_scale_factor * xi))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)  # labelled "NOT DP" in output
            res = private_retrieve(
                mem, np.repeat(setup.q, m, axis=0), method=cfg.method, epsilon=cfg.epsilon,
                delta=cfg.delta, steps=cfg.steps, kappa=cfg.kappa,
                gamma=setup.spent.gamma if cfg.method == "brace" and not count else None,
                accounting=cfg.accounting, output_projection=cfg.output_projection,
                release=cfg.release,
                **extra,
            )
        if res.privacy.rho_per_step != setup.spent.rho_per_step:  # pragma: no cover
            raise RuntimeError("audit: the mechanism's calibration differs from the model's.")
        out[b0 : b0 + m, :, :d] = res.outputs
        if count:
            out[b0 : b0 + m, :, d] = res.released_counts
    return out


def _count_log_density(mem: LSRMemory, setup: _Setup, outputs: np.ndarray) -> np.ndarray:
    """``log p_D(m̃, Y)`` of the count release (``docs/privacy-accounting.md`` §9), per run:
    ``Σ_t −ε_c|m̃_t − m_t(D)| − ‖Y_t − a_t(D)‖²/(2s_t²) − d·log s_t`` with ``m_t``, ``a_t`` the
    gate count and mean of ``D`` at ``y = Y_{t−1}`` and ``s_t`` the public scale of ``m̃_t``
    (constants shared by all banks dropped)."""
    cfg, sp = setup.cfg, setup.spent
    n, T, d1 = outputs.shape
    d = d1 - 1
    num = Numerics(mem.n_memories, d, mem.radius_, cfg.steps)
    mult = cfg.noise_scale_factor * sp.noise_multiplier
    Y, counts = outputs[:, :, :d], outputs[:, :, d]
    out = np.zeros(n)
    for t in range(T):
        y = np.repeat(setup.q, n, axis=0) if t == 0 else Y[:, t - 1]
        gp = mem.gate_pass(np.ascontiguousarray(y))
        a = gp.means(y)
        sig = num.slack(np.abs(y).max(axis=1))
        s = num.value(proposed_units(num, counts[:, t], sp.count_margin, sig)) * mult
        diff = Y[:, t] - a
        out += (-sp.eps_count * np.abs(counts[:, t] - gp.counts)
                - np.einsum("ij,ij->i", diff, diff) / (2.0 * s * s) - d * np.log(s))
    return out


def _secure_log_density(mem: LSRMemory, setup: _Setup, outputs: np.ndarray) -> np.ndarray:
    """``log p_D`` of a secure release (``docs/privacy-accounting.md`` §13), exactly, up to a
    constant shared by all banks: step ``t`` releases ``g_t·(u_t(D) + Z)``, ``Z ~ N_Z(0,
    σ_t²)^d``, on the public grid ``g_t`` (:func:`brace.steps.secure_grid`), so
    ``Σ_t −‖Y_t/g_t − u_t(D)‖²/(2σ_t²) − d·log σ_t`` (the discrete normaliser is
    ``sqrt(2π)σ_t`` up to a relative ``e^{−2π²σ_t²}``, below any float at ``σ_t ≥ 2^20``;
    it differs between banks only for the smooth release's data-dependent σ_t), plus
    ``−ε_c|m̃_t − m_t(D)|`` for the noisy counts. ``u_t(D)`` is the rounded gate mean,
    corrected point or clean endpoint, coarsened as the mechanism does for
    ``grid_factor`` > 1."""
    cfg, sp = setup.cfg, setup.spent
    count = cfg.release == "count"
    n, R, width = outputs.shape
    d = width - count
    r, T = mem.radius_, cfg.steps
    rho = sp.rho_per_step
    Y = outputs[:, :, :d]
    q = np.repeat(setup.q, n, axis=0)
    brace = cfg.method == "brace"
    plan = plan_release(mem, method=cfg.method, epsilon=cfg.epsilon, delta=cfg.delta,
                        steps=T, kappa=cfg.kappa,
                        gamma=sp.gamma if brace and not count else None,
                        accounting=cfg.accounting, output_projection=cfg.output_projection,
                        release=cfg.release, queries=1, noise="secure")

    def gauss(pre: np.ndarray, sens: np.ndarray, y: np.ndarray) -> np.ndarray:
        sens = np.broadcast_to(sens, (pre.shape[0],))
        g = secure_grid(plan, sens)
        tt, m, f = sigma2_params(sens, g, rho, d, data_dependent=not plan.scale_is_public)
        s2 = tt.astype(np.float64) * (m + f * 2.0**-30)
        u = rounded_units(pre, g, cfg.grid_factor, q[: pre.shape[0]])
        diff = y / g[:, None] - u
        return -np.einsum("ij,ij->i", diff, diff) / (2.0 * s2) - 0.5 * d * np.log(s2)

    if cfg.method == "endpoint":
        mu = mem.retrieve(setup.q, T)[:, -1]
        sens = endpoint_sensitivity(mem.n_memories, r, T, setup.q)
        return gauss(np.repeat(mu, n, axis=0), np.repeat(sens, n), Y[:, 0])
    if brace and not count:  # the smooth release: the certificate along the history
        out = np.zeros(n)
        for b0 in range(0, n, cfg.batch_size):
            Yb = Y[b0 : b0 + cfg.batch_size]
            mb = Yb.shape[0]
            hist = np.concatenate([np.repeat(setup.q[:, None, :], mb, axis=0), Yb[:, :-1]],
                                  axis=1)
            cert = certificate(mem, np.repeat(setup.q, mb, axis=0), hist, method="brace",
                               steps=T, kappa=cfg.kappa, gamma=sp.gamma,
                               output_projection=cfg.output_projection, noise="secure")
            for t in range(T):
                out[b0 : b0 + mb] += gauss(cert.pre_noise[:, t], cert.noise_scale[:, t],
                                           Yb[:, t])
        return out
    num = Numerics(mem.n_memories, d, r, T)
    out = np.zeros(n)
    for t in range(T):
        y = q if t == 0 else np.ascontiguousarray(Y[:, t - 1])
        gp = mem.gate_pass(y)
        a = gp.means(y)
        sig = num.slack(np.abs(y).max(axis=1))
        if count:
            counts = outputs[:, t, d]
            sens = num.value(proposed_units(num, counts, sp.count_margin, sig))
            out -= sp.eps_count * np.abs(counts - gp.counts)
        else:
            sens = global_sensitivity(mem.n_memories, r, T, y)
        out += gauss(a, sens, Y[:, t])
    return out


def _log_density(mem: LSRMemory, setup: _Setup, outputs: np.ndarray) -> np.ndarray:
    """``log p_D(Y)`` up to a constant shared by all banks, one value per row of ``outputs``."""
    cfg = setup.cfg
    if cfg.noise == "secure":
        return _secure_log_density(mem, setup, outputs)
    if cfg.release == "count":
        return _count_log_density(mem, setup, outputs)
    n, R, d = outputs.shape
    mult = cfg.noise_scale_factor * setup.spent.noise_multiplier
    out = np.empty(n)
    if cfg.method == "endpoint":
        mu = mem.retrieve(setup.q, cfg.steps)[0, -1]
        s = float(endpoint_sensitivity(mem.n_memories, mem.radius_, cfg.steps, setup.q)[0]) * mult
        diff = outputs[:, 0] - mu
        return -np.einsum("ij,ij->i", diff, diff) / (2.0 * s * s) - d * math.log(s)
    for b0 in range(0, n, cfg.batch_size):
        Y = outputs[b0 : b0 + cfg.batch_size]
        m = Y.shape[0]
        hist = np.concatenate([np.repeat(setup.q[:, None, :], m, axis=0), Y[:, :-1]], axis=1)
        cert = certificate(
            mem, np.repeat(setup.q, m, axis=0), hist, method=cfg.method, steps=cfg.steps,
            kappa=cfg.kappa, gamma=setup.spent.gamma, output_projection=False,
        )
        s = cert.noise_scale * mult  # (m, T)
        diff = Y - cert.pre_noise
        sq = np.einsum("itj,itj->it", diff, diff)
        out[b0 : b0 + m] = (-sq / (2.0 * s * s) - d * np.log(s)).sum(axis=1)
    return out


def log_likelihood_ratio(
    bank: Any,
    bank_prime: Any,
    query: Any,
    outputs: Any,
    config: AuditConfig,
) -> np.ndarray:
    """``S(Y) = log p_{D'}(Y) − log p_D(Y)`` for each row of ``outputs`` (shape (N, T, d);
    (N, 1, d) for the endpoint method), exactly, for unprojected releases of ``config``.
    """
    cfg = config.validated()
    X = check_bank(bank)
    Xp = check_bank(bank_prime, "bank_prime")
    if Xp.shape != X.shape:
        raise ValueError(f"bank_prime must have the shape of bank {X.shape}; got {Xp.shape}.")
    q = _single_query(query, X.shape[1])
    setup = _setup(cfg, q)
    Y = np.asarray(outputs, dtype=np.float64)
    width = X.shape[1] + (cfg.release == "count")
    if Y.ndim != 3 or Y.shape[1:] != (setup.releases, width):
        raise ValueError(
            f"outputs must have shape (N, {setup.releases}, {width}); got {Y.shape}."
        )
    mem = LSRMemory(X, radius=cfg.radius)
    memp = LSRMemory(Xp, radius=cfg.radius)
    return _log_density(memp, setup, Y) - _log_density(mem, setup, Y)
