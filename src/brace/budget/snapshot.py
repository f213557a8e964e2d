"""The one-shot private synopsis of a :class:`brace.PrivateMemory`
(``PrivateMemory.snapshot``, ``docs/privacy-accounting.md`` §14): priced and charged
once through the filter, recorded in the ledger as ``synopsis-cells`` rows."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import numpy as np

from .. import accounting as acc_events
from .. import ledger as _ledger
from .._validation import (
    check_bool,
    check_epsilon,
    check_nonnegative,
    check_privacy_delta,
    check_steps,
    rng_and_record,
)
from ..accounting import rho_from_eps_delta
from ..accounting.filter import convert
from ..footprints import CLEAN_MARGIN, GATE_MARGIN, footprints
from ..gates.contract import MAX_COORD
from ..ledger.state import weights
from ..mechanisms import DIAGNOSTIC_FIELDS, run_plan
from ..memory import pins_bank
from ..plan import plan_release
from ..seeding import check_rounds
from ..steps import public_checks
from ..synopsis import (
    CELL_SHARE,
    Synopsis,
    cell_sensitivity,
    cell_unit,
    check_cell_radius,
    default_min_count,
    first_centres,
    next_centres,
    public_seeds,
    release_cell_round,
    snapshot_noise,
)
from .admission import (
    CHARGED_FAILURE,
    AdmittedCallFailed,
    BudgetExceededError,
    _call_key,
    _largest_fitting,
    record_epsilon,
)
from .seedless import snapshot_without_seeds


class Snapshots:
    """Mixin: :meth:`snapshot`."""

    @pins_bank
    def snapshot(self, seeds: Any = None, *, steps: int = 0, epsilon: float | None = None,
                 seed: Any = None, bounds: Any = None, ball: Any = None,
                 public_seed: int = 0, method: str = "brace", rounds: int | None = None,
                 cell_share: float = CELL_SHARE, merge_radius: float | None = None,
                 min_count: float | None = None, seed_delta: float | None = None,
                 cell_radius: float | None = None, keep_seeds: bool = False,
                 noise: str = "auto", project: int | str | None = None,
                 **kw: Any) -> Synopsis:
        """A one-shot private synopsis: private retrieval from public ``seeds``, merged
        into attractors, refined by private cell means with noisy counts, charged once
        (``docs/privacy-accounting.md`` §14). Later queries are answered from the
        returned :class:`Synopsis` by post-processing, free.

        **Without seeds** (``seeds=None``, the default) the seeds are found privately
        inside a public domain — ``bounds=(lo, hi)`` (a box) or ``ball=(centre,
        radius)`` — and no public data is needed (``docs/privacy-accounting.md`` §15):
        every row is first mapped into the domain (clamped to the box, projected onto
        the ball: a row outside counts as its clipped self); a centre release (the
        rows' mean), radii releases (a noisy histogram of the distances to the nearest
        centre, whose median is the private scale ``s``) and ``rounds`` (default: 8,
        5 or 3 by the budget, ``seeding.SeedingPlan``)
        Voronoi rounds — every row in the cell of its nearest centre, offsets clipped to
        ``s``, one Gaussian release per round over the disjoint cells, cells split along
        public random directions and merged at ``s/2`` — all in one call of the filter.
        ``epsilon``, ``seed``, ``noise``, ``public_seed`` (the public directions),
        ``merge_radius`` (default ``s/2``) and ``min_count`` apply; ``steps``,
        ``cell_radius``, ``keep_seeds``, ``method`` and ``cell_share`` do not.

        **In high dimension**, ``project=k`` (or ``"auto"``) first releases a private
        top-``k`` subspace — Gaussian noise on the rows' clipped second-moment matrix
        around the private mean (Analyze Gauss), its leading eigenvectors — and runs
        the synopsis on the projected rows, in the same call of the filter; the
        attractors are mapped back (``docs/privacy-accounting.md`` §15.1). The noise of
        a Voronoi round then grows as ``√k`` rather than ``√d``, so many more cells are
        affordable (on raw MNIST, d = 784: ``docs/experiments.md`` §6.1). ``"auto"``
        keeps the directions whose noisy eigenvalue clears the noise's spectral edge
        (at most 32); ``merge_radius`` and ``min_count`` then apply in the subspace.

        1. Optionally (``steps ≥ 1``), each seed runs ``steps`` private retrieval steps
           (``method``, its default release, output projection on).
        2. ``rounds`` cell rounds: every bank row within ``r`` of a centre joins the cell
           of its nearest centre; one Gaussian release gives every cell's noisy offset
           sum and noisy count (L2 sensitivity ``≈ 2r`` for all cells together: the cells
           are disjoint); the new centre is ``c + clip_r(sum/count)`` (the step shrunk
           by its noise), centres within ``merge_radius`` merged. Round 1 starts at the
           seeds and the endpoints. A cell round is one LSR step (the mean of a gate of
           radius ``r_c``) for all centres at once, over a partition of the rows.
        3. Cells whose noisy count is below ``min_count`` are dropped (the largest is
           always kept).

        Parameters
        ----------
        seeds : (S, d) array of public points, an int ``S`` (uniform in the public box
            ``bounds``, drawn from ``public_seed``) or ``"grid"`` (d ≤ 3, spacing r over
            ``bounds``). Seeds must not depend on the bank: public data, past public
            queries, or a public box. In high d, a seed in an empty region has an empty
            gate and does not move (``docs/guide.md``, "Which one should I use?").
        steps : private retrieval steps per seed before the cell rounds (default 0: none;
            the cell rounds start at the seeds and take the whole budget). Trajectories
            let seeds far from the modes travel up to ``(T+1)r``, but each seed pays for
            its own steps: at ε ≤ 4 on the mixture and on digits the cell rounds alone
            did as well or better (``docs/benchmarks.md``, "Real data against peers").
        epsilon : ε at the budget's δ that the snapshot alone may cost (everything it
            releases, composed); None spends what the filter admits now. A share
            ``cell_share`` of its zCDP budget goes to the cell rounds (split evenly);
            the per-seed ε of the retrieval is then the largest that fits, at per-seed
            δ ``seed_delta`` (default budget δ / (4S)).
        seed : the noise's random draws (retrieval, then the cell rounds); with a seed
            the noise is numpy's (reproducible).
        noise : ``"auto"`` (default): ``"secure"`` — the exact discrete Gaussian on the
            integer statistics, every bit from the operating system — when ``seed`` is
            None, ``"plain"`` (numpy Gaussian, from ``seed``) when one is given;
            ``"secure"`` with a seed is refused. ``Synopsis.params["noise"]`` records
            it, and ``params["seed"]`` only a seed the caller passed.
        method : ``"brace"`` or ``"global"``.
        merge_radius : radius of the merges (leader clustering; default ``r``).
        keep_seeds : cells whose noisy count is below ``min_count`` keep their centre,
            unmoved, instead of being dropped (default False). With seeds taken from
            public data, the synopsis then never has fewer attractors than the seeds
            that merge into them: at worst it is the public seeds themselves.
        cell_radius : radius ``r_c`` of the cells (default ``r``; public, in
            ``[2^-400, 2^400]``). Larger cells hold more rows each, so their noisy means
            are more accurate, at a coarser summary; the sensitivity is about ``2·r_c``.
        rounds : the number of cell (Voronoi) rounds, at most 64
            (``seeding.MAX_ROUNDS``; default 2 with seeds, chosen by the budget without).
        min_count : noisy-count threshold (default: the count noise's std times
            ``sqrt(2·log(4k))`` for ``k`` cells, so an empty cell survives with
            probability below about ``1/(4k)``).
        project : without seeds only: ``None`` (default: the synopsis runs in the full
            space), an int ``k`` (``1 ≤ k < d``: the private top-``k`` subspace) or
            ``"auto"`` (``k`` from the noisy spectrum, at most 32); ``d ≤ 4096``. Half
            of the snapshot's zCDP budget goes to the second moments
            (``brace.projection``).
        **kw : ``release``, ``kappa``, ``gamma`` as in :meth:`retrieve`.

        Raises :class:`BudgetExceededError` before the bank is read if no snapshot of
        this shape fits, and ``ValueError`` for a public scale outside its stated range
        (the domain's size in ``[2^-400, 2^400]``, ``cell_radius``, ``rounds``). A
        failure after admission keeps the admitted charge and raises
        :class:`~brace.budget.admission.AdmittedCallFailed`
        (``docs/privacy-accounting.md`` §14–§15).
        """
        if method not in ("brace", "global"):
            raise ValueError(f"snapshot method must be 'brace' or 'global'; got {method!r}.")
        for k in kw:
            if k not in ("release", "kappa", "gamma"):
                raise TypeError(f"snapshot does not take {k}=.")
        mode = snapshot_noise(noise, seed)
        if min_count is not None:  # a NaN threshold would drop every cell but the largest
            min_count = check_nonnegative("min_count", min_count)
        if seeds is None:
            for name, val, default in (("steps", steps, 0), ("cell_radius", cell_radius, None),
                                       ("keep_seeds", keep_seeds, False), ("method", method,
                                                                          "brace"),
                                       ("cell_share", cell_share, CELL_SHARE),
                                       ("seed_delta", seed_delta, None)):
                if val is not default and val != default:
                    raise ValueError(f"{name}= is for a snapshot from public seeds; without "
                                     "seeds the cells, their clip and the rounds are found "
                                     "privately (docs/privacy-accounting.md §15).")
            if kw:
                raise TypeError(f"a snapshot without seeds does not take {sorted(kw)}.")
            if seed is not None:
                rng, seed_record = rng_and_record(seed)
            else:
                rng, seed_record = (np.random.default_rng() if mode == "plain" else None), None
            return snapshot_without_seeds(
                self, bounds=bounds, ball=ball, epsilon=epsilon, rng=rng, noise=mode,
                seed_record=seed_record, rounds=rounds, public_seed=public_seed,
                merge_radius=merge_radius, min_count=min_count, project=project)
        if ball is not None:
            raise ValueError("ball= is for a snapshot without seeds (seeds=None).")
        if project is not None:
            raise ValueError("project= is for a snapshot without seeds (seeds=None): a "
                             "private subspace before the synopsis finds its seeds "
                             "(docs/privacy-accounting.md §15.1).")
        T = 0 if isinstance(steps, int) and not isinstance(steps, bool) and steps == 0 \
            else check_steps(steps)
        R = check_rounds(2 if rounds is None else rounds)
        check_bool("keep_seeds", keep_seeds)
        S = public_seeds(seeds, self._dim, self.radius, bounds=bounds,
                         public_seed=public_seed)
        if not np.all(np.abs(S) <= MAX_COORD[np.dtype(np.float64)]):  # public: refused now
            raise ValueError("seeds must lie within the bank's input range |x| <= 2^400 "
                             "(about 2.6e120) per coordinate, so that no squared distance "
                             "of a cell round can overflow after admission "
                             "(docs/privacy.md §8).")
        share = float(cell_share)
        if not 0.0 < share < 1.0:
            raise ValueError(f"cell_share must be in (0, 1); got {cell_share!r}.")
        dlt = (self._budget[1] / (4.0 * S.shape[0]) if seed_delta is None
               else check_privacy_delta(seed_delta, "seed_delta"))
        mr = self.radius if merge_radius is None else check_epsilon(merge_radius,
                                                                    "merge_radius")
        r, n, b_delta = self.radius, self._fingerprint["shape"][0], self._budget[1]
        rc = r if cell_radius is None else check_cell_radius(cell_radius)
        rng, seed_record = rng_and_record(seed)  # a seed is recorded only if passed
        with self._locked():
            with self._admission():  # phase 1: priced, charged (pending), committed
                total = self._snapshot_total(epsilon)
                hc, hr = np.mean(S, axis=0), _cells_radius(S, T, R, r, rc)

                def cells(rho: float) -> tuple:
                    w = weights(acc_events.GaussianStep(rho))
                    return (np.repeat(hc[None], R, 0), np.full(R, hr), np.tile(w, (R, 1)))

                if T == 0:  # cell rounds only, from the seeds: all of the budget to them
                    def cell_usage(rho: float) -> float:
                        u = self._filter.usage(self._worst((cells(rho),), admission=True))
                        if epsilon is not None:
                            u = max(u, convert(cells(rho)[2].sum(axis=0), b_delta) / total)
                        return u

                    rho_cell = _largest_fitting(cell_usage, 1e-12, 1e6,
                                                exact=epsilon is None)
                    if rho_cell == 0.0:
                        raise BudgetExceededError(
                            f"no snapshot of {R} cell rounds fits in what remains of the budget. "
                            "Nothing was released or spent.", spent=self.spent,
                            remaining=self.remaining, requested_total=math.inf)
                else:
                    rho_cell = share * rho_from_eps_delta(total, b_delta) / R
                cell_w = weights(acc_events.GaussianStep(rho_cell))
                res_cells = cells(rho_cell)
                plans: dict[float, Any] = {}

                def usage(e: float) -> float:
                    try:
                        plan = plan_release(self._memory, method=method, epsilon=e, delta=dlt,
                                            steps=T, queries=S.shape[0], noise=mode, **kw)
                    except ValueError:
                        return math.inf
                    plans[e] = plan
                    u = self._filter.usage(self._worst((self._reserved(plan, S), res_cells),
                                                       admission=True))
                    if epsilon is not None:  # the snapshot alone within its own epsilon
                        alone = convert(weights(plan.spent.step_event) * (S.shape[0] * T)
                                        + cell_w * R, b_delta)
                        u = max(u, alone / total)
                    return u

                eps_q = _largest_fitting(usage, 1e-5, 1e4) if T else math.inf
                if eps_q == 0.0:
                    raise BudgetExceededError(
                        f"no snapshot of {S.shape[0]} seeds x {T} steps and {R} cell rounds "
                        "fits in what remains of the budget. Use fewer seeds, steps or rounds. "
                        "Nothing was released or spent.", spent=self.spent,
                        remaining=self.remaining, requested_total=math.inf)
                # the admitted charge, recorded (pending) before the bank is read: it stands
                # if anything after admission fails (§14, Theorem 13)
                if T:
                    plan = plans[eps_q]
                    public_checks(plan, S)  # the public refusals, before the charge
                    key = _call_key(S, T, eps_q, dlt, method, plan, kw)
                    charge = [self._charge_row(plan, S, T, eps_q, dlt, method,
                                               self._reserved(plan, S), key)]
                else:
                    key = hashlib.sha256(np.ascontiguousarray(S).tobytes()).hexdigest()
                    charge = []
                cell_ev = _ledger.event_to_dict(acc_events.GaussianStep(rho_cell))
                charge += [({"method": _ledger.CELLS_METHOD, "queries": 1, "steps": 1,
                             "dim": self._dim, "epsilon": record_epsilon(cell_w, b_delta),
                             "delta": b_delta, "release": "cells", "event": cell_ev,
                             "params": {"kind": "charge", "round": i + 1, "of": key,
                                        "radius": rc, "noise": mode},
                             "privacy": {}}, f"cells:{key}:{i}", hc[None],
                            np.array([hr]), np.zeros((1, 1, self._dim)), None)
                           for i in range(R)]
                pending = self._reserve(charge)
            try:
                if T:
                    res = self._after_admission(run_plan, self._memory, S, plan,
                                                seed=None if plan.noise == "secure" else rng)
                    Y = res.outputs[:, -1]
                    fp = self._after_admission(footprints, plan, S, res.outputs)
                    rows = [(self._record(method, S, T, eps_q, dlt, plan, res), key,
                             fp.centres, fp.radii, res.outputs,
                             getattr(res, "released_counts", None))]
                    step_w = weights(plan.spent.step_event) * (S.shape[0] * T)
                else:
                    Y, eps_q, dlt, rows, step_w = np.empty((0, self._dim)), 0.0, 0.0, [], 0.0
                # round 1's centres: the endpoints and the (public) seeds, merged at the
                # merge radius (leader clustering, densest first): post-processing
                centres = self._after_admission(first_centres, np.concatenate([Y, S]), mr)
                # the rounds' grid (secure: capped so that σ fits the exact sampler, as in
                # release_cell_round) and sensitivity, for the record
                unit = cell_unit(rc, n, rho_cell if mode == "secure" else None)
                sens = cell_sensitivity(rc, unit, self._dim)
                groups = centres.shape[0]
                released = []
                for _ in range(R):  # each round: one Gaussian release over disjoint cells
                    noisy, sigma = self._after_admission(release_cell_round, self._memory,
                                                         centres, rc, rho_cell, rng, noise=mode)
                    released.append((centres, noisy))
                    thr = (default_min_count(sigma / rc, centres.shape[0]) if min_count is None
                           else float(min_count))
                    centres, counts = self._after_admission(next_centres, centres, noisy, rc, mr,
                                                            thr, sigma,
                                                            keep_unmoved=bool(keep_seeds))
                for i, (c, v) in enumerate(released):
                    rows.append(({
                        # outputs (k, 2, d): each cell's centre and noisy offset sum
                        "method": _ledger.CELLS_METHOD, "queries": int(c.shape[0]), "steps": 2,
                        "dim": self._dim, "epsilon": record_epsilon(cell_w, b_delta),
                        "delta": b_delta, "release": "cells",
                        "event": cell_ev,
                        "params": {"radius": rc, "sensitivity": sens, "noise": mode,
                                   "unit": unit,
                                   "round": i + 1, "of": key,
                                   "noisy_counts": (v[:, -1] / rc).tolist()}, "privacy": {},
                    }, f"cells:{key}:{len(self._rows)}:{i}", hc[None], np.array([hr]),
                        np.concatenate([c[:, None, :], v[:, None, :-1]], axis=1),
                        None))
                for row in rows:  # recordable, or the charge is kept
                    json.dumps(row[0], allow_nan=False)
                    if not np.all(np.isfinite(row[4])):
                        raise ValueError("a released value is not finite")
            except Exception as exc:  # admitted: the failure keeps its charge
                raise AdmittedCallFailed(CHARGED_FAILURE) from exc
            ids = self._complete(pending, rows)  # phase 2: the releases replace it
            if self._db is None and T:
                self._results[ids[0] - 1] = dataclasses.replace(
                    res, **dict.fromkeys(DIAGNOSTIC_FIELDS))
            cost = convert(step_w + cell_w * R, b_delta)
        params = {"method": method if T else "none",
                  "release": plan.release if T else "none", "steps": T, "rounds": R,
                  "seeds": int(S.shape[0]), "groups": int(groups), "merge_radius": mr,
                  "min_count": thr, "count_std": sigma / rc, "cell_radius": rc,
                  "keep_seeds": bool(keep_seeds), "noise": mode,
                  "accounting": self._accounting, **{k_: repr(v) for k_, v in kw.items()}}
        if seed_record is not None:
            params["seed"] = seed_record
        return Synopsis(
            attractors=centres, counts=np.maximum(np.rint(counts), 0).astype(np.int64),
            radius=r, seeds=S,
            endpoints=Y, epsilon=cost, delta=b_delta, seed_epsilon=eps_q, seed_delta=dlt,
            cell_rho=rho_cell, params=params)



def _cells_radius(S: np.ndarray, T: int, R: int, r: float, rc: float) -> float:
    """Radius of one public ball around the seeds' mean that holds every row a
    snapshot's cell rounds can read: round 1's centres are seeds or endpoints
    ``Y_T ∈ B̄(s, (T+1)r)`` (output projection), each round moves a centre by at most
    ``r_c`` (the clip; merged centres are convex combinations), and a counted row lies
    within ``r_c(1 + GATE_MARGIN)`` of its centre (``docs/privacy-accounting.md`` §14)."""
    c = np.mean(S, axis=0)
    spread = float(np.max(np.linalg.norm(S - c, axis=1)))
    traj = (T + 1) * r * (1.0 + CLEAN_MARGIN) if T else 0.0
    return (spread + traj + (R - 1) * rc * (1.0 + 1e-12) + rc * (1.0 + GATE_MARGIN)) \
        * (1.0 + GATE_MARGIN)
