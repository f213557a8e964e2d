"""A snapshot without public seeds (``PrivateMemory.snapshot(bounds=…)`` with ``seeds``
None; ``docs/privacy-accounting.md`` §15): priced as one call of the filter — the centre
release, the radii releases and the Voronoi rounds (with ``project``, also the
second-moment release, §15.1), every one at the whole space (a row anywhere is clipped
into the domain and read) — before the bank is read, then run by
:func:`brace.seeding.private_seeds` (:func:`brace.projection.private_projected_seeds`)
and recorded as ``synopsis-cells`` rows. The charge is recorded (pending rows, committed)
before the bank is read: if anything after admission fails, or the process dies, it
stands, and a failure raises :class:`~brace.budget.admission.AdmittedCallFailed`
(``docs/ledger.md`` §4.1)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

from .. import accounting as acc_events
from .. import ledger as _ledger
from .._validation import check_epsilon
from ..accounting.filter import convert
from ..ledger.state import weights
from ..projection import ProjectionPlan, check_project, private_projected_seeds
from ..seeding import PAIR_NEAR, SeedingPlan, check_rounds, parse_domain, private_seeds
from ..synopsis import Synopsis
from .admission import (
    CHARGED_FAILURE,
    AdmittedCallFailed,
    BudgetExceededError,
    _largest_fitting,
    record_epsilon,
)


def snapshot_without_seeds(pm: Any, *, bounds: Any, ball: Any, epsilon: float | None,
                           rng: np.random.Generator | None, noise: str,
                           seed_record: Any, rounds: int | None, public_seed: int,
                           merge_radius: float | None, min_count: float | None,
                           c_min: float | None = None, k_cap: int = 64,
                           project: Any = None) -> Synopsis:
    """The body of :meth:`PrivateMemory.snapshot` without seeds (the caller validated
    ``noise``, the generator and ``min_count``; ``pm`` is locked here)."""
    d = pm._dim
    domain = parse_domain(bounds, ball, d)
    project = check_project(project, d)
    R = None if rounds is None else check_rounds(rounds)
    if isinstance(public_seed, bool) or not isinstance(public_seed, int | np.integer) \
            or public_seed < 0:
        raise ValueError(f"public_seed must be an int >= 0; got {public_seed!r}.")
    mr = None if merge_radius is None else check_epsilon(merge_radius, "merge_radius")
    n, b_delta = pm._fingerprint["shape"][0], pm._budget[1]
    c0 = domain.centre
    with pm._locked():
        with pm._admission():  # phase 1: priced, charged (pending), committed
            total = pm._snapshot_total(epsilon)

            def make(rho: float) -> Any:
                if project is None:
                    return SeedingPlan.make(rho, n, d, R, c_min=c_min, k_cap=k_cap)
                return ProjectionPlan.make(rho, n, d, project, R, c_min=c_min, k_cap=k_cap)

            def reserved(rho: float) -> tuple:
                plan = make(rho)
                w = np.stack([weights(acc_events.GaussianStep(x)) for x in plan.events()])
                # every release reads every row (clipped into the domain): the whole space
                return (np.repeat(c0[None], w.shape[0], 0), np.full(w.shape[0], math.inf), w)

            def usage(rho: float) -> float:
                res = reserved(rho)
                u = pm._filter.usage(pm._worst((res,), admission=True))
                if epsilon is not None:  # the snapshot alone within its own epsilon
                    u = max(u, convert(res[2].sum(axis=0), b_delta) / total)
                return u

            rho = _largest_fitting(usage, 1e-12, 1e6, exact=epsilon is None)
            if rho == 0.0:
                raise BudgetExceededError(
                    f"no snapshot of {R or 'any number of'} Voronoi rounds fits in what "
                    "remains of the budget. Nothing was released or spent.", spent=pm.spent,
                    remaining=pm.remaining, requested_total=math.inf)
            plan = make(rho)
            key = hashlib.sha256(json.dumps({"domain": domain.to_dict(), "plan": plan.to_dict(),
                                             "public_seed": int(public_seed)},
                                            sort_keys=True).encode()).hexdigest()
            # the admitted charge (every event at the whole space), recorded (pending)
            # before the bank is read: it stands if anything after admission fails (§15)
            charge = [_charge_row(x, i, key, len(pm._rows), d, c0, b_delta, noise, domain)
                      for i, x in enumerate(plan.events())]
            run = private_seeds if project is None else private_projected_seeds
            pending = pm._reserve(charge)
        try:
            out = pm._after_admission(run, pm._memory, domain, plan, noise=noise, rng=rng,
                                      public_seed=int(public_seed), merge_radius=mr,
                                      min_count=min_count, n=n)
            rows = _release_rows(out, key, len(pm._rows), d, c0, b_delta, noise, domain)
        except Exception as exc:  # admitted: the failure keeps its charge
            raise AdmittedCallFailed(CHARGED_FAILURE) from exc
        pm._complete(pending, rows)  # phase 2: the releases replace it
        total_w = sum(weights(acc_events.GaussianStep(x)) for x in plan.events())
        cost = convert(total_w, b_delta)
    counts = np.maximum(np.rint(out["counts"]), 0).astype(np.int64)
    sp = plan if project is None else plan.at(out["projection"]["k"])
    params = {
        "seeding": "private", "method": "none", "release": "none", "steps": 0,
        "rounds": sp.rounds, "c_min": sp.c_min, "domain": domain.to_dict(),
        "scale": out["scale"],
        "cell_radius": out["clip"], "merge_radius": out["merge_radius"],
        "min_count": out["min_count"], "k0": sp.k0, "m_star": sp.m_star,
        "split_rounds": list(sp.split_rounds), "public_seed": int(public_seed),
        "rho": plan.rho, "rho_centre": sp.rho_centre, "rho_radii": sp.rho_radii,
        "groups": sp.k0, "trace": out["trace"], "noise": noise,
        "accounting": pm._accounting,
    }
    if out.get("pairs") is not None:  # the pair release (§15.2): the clusters' input
        params.update(pairs=np.asarray(out["pairs"]).tolist(),
                      pairs_sigma=float(out["pairs_sigma"]), pairs_near=PAIR_NEAR,
                      rho_pairs=sp.rho_pairs)
    if project is not None:
        pr = out["projection"]
        params["project"] = {
            "k": int(pr["k"]), "rule": "auto" if project == "auto" else "fixed",
            "k_max": plan.k_ref, "basis": pr["basis"].tolist(),
            "mean": pr["mean"].tolist(), "clip": pr["clip"], "bits": pr["bits"],
            "eigenvalues": pr["eigenvalues"].tolist(), "edge": pr["edge"],
            "residual": pr["residual"], "scale_full": pr["scale_full"],
            "rho_centre": plan.rho_centre, "rho_scale": plan.rho_scale,
            "rho_moments": plan.rho_moments, "rho_synopsis": plan.rho_synopsis,
        }
        params["scale_space"] = "projected"
    cell_rho = sp.rho_round
    if seed_record is not None:
        params["seed"] = seed_record
    return Synopsis(
        attractors=out["attractors"], counts=counts, radius=pm.radius,
        seeds=np.empty((0, d)), endpoints=np.empty((0, d)), epsilon=cost, delta=b_delta,
        seed_epsilon=0.0, seed_delta=0.0, cell_rho=cell_rho, params=params)


def _charge_row(rho: float, i: int, key: str, pos: int, d: int, c0: np.ndarray,
                b_delta: float, noise: str, domain: Any) -> tuple:
    """The row of release ``i``'s admitted charge (``ρ``-zCDP at the whole space; zero
    outputs), recorded as pending before the bank is read (``docs/ledger.md`` §4.1)."""
    ev = acc_events.GaussianStep(rho)
    return ({"method": _ledger.CELLS_METHOD, "queries": 1, "steps": 1, "dim": d,
             "epsilon": record_epsilon(weights(ev), b_delta), "delta": b_delta,
             "release": "cells", "event": _ledger.event_to_dict(ev),
             "params": {"kind": "charge", "round": i + 1, "of": key, "noise": noise,
                        "domain": domain.to_dict()},
             "privacy": {}}, f"cells:{key}:{pos}:{i}", c0[None], np.array([math.inf]),
            np.zeros((1, 1, d)), None)


def _release_rows(out: dict[str, Any], key: str, pos: int, d: int, c0: np.ndarray,
                  b_delta: float, noise: str, domain: Any) -> list[tuple]:
    """The ledger rows of a snapshot's releases (post-processing of what it released),
    each checked to be recordable (finite JSON) before anything is written."""
    rows = []
    for i, rel in enumerate(out["releases"]):
        C = np.asarray(rel["centres"], dtype=np.float64)
        v = np.asarray(rel["values"], dtype=np.float64)
        ev = acc_events.GaussianStep(rel["rho"])
        params: dict[str, Any] = {"kind": rel["kind"], "round": i + 1, "of": key,
                                  "sensitivity": rel["sensitivity"],
                                  "sigma": rel["sigma"], "noise": noise,
                                  "domain": domain.to_dict()}
        if rel.get("space") == "projected":  # released in the subspace (§15.1)
            params.update(space="projected", projected_dim=rel["dim"])
        if rel["kind"] == "moments":  # outputs: the noisy second-moment matrix
            outputs = v[:, None, :]
            params.update(radius=rel["clip"], unit=rel["unit"], bits=rel["bits"],
                          sigma_diag=rel["sigma_diag"], mean=C[0].tolist())
            C = v  # one output row per coordinate
        elif rel["kind"] == "radii":  # outputs: the centres (the histogram in params)
            outputs = np.concatenate([C[:, None, :], np.zeros_like(C)[:, None, :]], 1)
            params.update(edges=np.asarray(rel["edges"]).tolist(),
                          noisy_counts=v.tolist())
        elif rel["kind"] == "pairs":  # outputs: the centres (the pair counts in params)
            outputs = np.concatenate([C[:, None, :], np.zeros_like(C)[:, None, :]], 1)
            params.update(near=PAIR_NEAR, noisy_counts=v.tolist())
        else:  # outputs: each cell's centre and noisy clipped offset sum
            outputs = np.concatenate([C[:, None, :], v[:, None, :-1]], axis=1)
            params.update(radius=rel["clip"], unit=rel["unit"],
                          noisy_counts=(v[:, -1] / rel["clip"]).tolist())
        record = {
            "method": _ledger.CELLS_METHOD, "queries": int(C.shape[0]),
            "steps": int(outputs.shape[1]), "dim": d,
            "epsilon": record_epsilon(weights(ev), b_delta), "delta": b_delta,
            "release": "cells", "event": _ledger.event_to_dict(ev), "params": params,
            "privacy": {},
        }
        json.dumps(record, allow_nan=False)  # recordable, or the charge is kept
        if not np.all(np.isfinite(outputs)):
            raise ValueError("a released value is not finite")
        rows.append((record, f"cells:{key}:{pos}:{i}", c0[None], np.array([math.inf]),
                     outputs, None))
    return rows
