"""``PrivateMemory``: a bank that only answers privately, within one budget.

Every release composes into one Rényi-DP accountant (``docs/ledger.md``): the per-order
RDP curves are summed over all queries and steps of all calls, non-RDP parts (none of
the current mechanisms has one) add as δ, and the sum is converted once at the budget's
δ. A call that would take that composition past the budget raises
:class:`BudgetExceededError` before anything is computed, and spends nothing. With a
``ledger`` file the spend is recorded durably *before* the release is returned
(:mod:`brace.ledger`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

from . import ledger as _ledger
from ._validation import (
    check_delta,
    check_epsilon,
    check_queries,
    check_steps,
)
from .mechanisms import (
    DIAGNOSTIC_FIELDS,
    PRIVATE_METHODS,
    PrivateRetrievalResult,
    private_retrieve,
)
from .memory import LSRMemory, pins_bank
from .plan import plan_release

__all__ = ["BudgetExceededError", "PrivateMemory"]


class BudgetExceededError(RuntimeError):
    """A release would take the composed privacy loss past the budget; nothing was
    released and nothing was spent. ``spent``, ``remaining`` and ``requested_total``
    are ε at the budget's δ."""

    def __init__(self, message: str, *, spent: float, remaining: float,
                 requested_total: float) -> None:
        super().__init__(message)
        self.spent = spent
        self.remaining = remaining
        self.requested_total = requested_total


_PLAN_KW = ("kappa", "gamma", "accounting", "output_projection", "release")
_REFUSED_KW = {
    "return_clean": "the noiseless trajectory is not private",
    "_innovations": "caller-supplied innovations carry no guarantee",
    "memory": "the bank is the PrivateMemory's own",
    "queries": "pass the queries as the first argument",
}


def _check_budget(budget: Any) -> tuple[float, float]:
    try:
        eps, delta = budget
    except (TypeError, ValueError):
        raise TypeError(
            f"budget must be a pair (epsilon, delta), e.g. (10.0, 1e-5). Found {budget!r}."
        ) from None
    return check_epsilon(eps, "budget epsilon"), check_delta(delta, "budget delta")


class PrivateMemory:
    """An LSR memory that answers only private retrievals, within a total budget.

    Parameters
    ----------
    bank : array_like (n, d)
        The private memories.
    radius : float
        Support radius ``r`` (as :class:`LSRMemory`).
    budget : (epsilon, delta)
        Total budget for everything released from this bank: the composition of all
        releases must stay (ε, δ)-DP.
    ledger : path, optional
        JSON ledger file (created if missing). It persists the spend across processes
        and restarts, is bound to this bank and radius by a SHA-256 fingerprint, and
        is written before each release is returned. Without it the spend lives in this
        object only.

    Unlike an estimator, the arguments are validated here: opening a ledger with
    another bank, radius or budget must fail before any query.

    Examples
    --------
    >>> import numpy as np, brace
    >>> X = np.random.default_rng(0).normal(size=(50, 2))
    >>> pm = brace.PrivateMemory(X, radius=0.8, budget=(10.0, 1e-5))
    >>> res = pm.retrieve(X[:2], steps=3, epsilon=1.0, delta=1e-6, seed=0)
    >>> 0 < pm.spent < 10 and abs(pm.spent + pm.remaining - 10) < 1e-9
    True
    """

    def __init__(self, bank: Any, *, radius: float, budget: tuple[float, float],
                 ledger: str | os.PathLike | None = None) -> None:
        self.bank = bank
        self.radius = radius
        self.budget = budget
        self.ledger = ledger
        self._memory = LSRMemory(bank, radius=radius)
        # the validated bank (validation hashes it once for the memory's own integrity
        # check); the ledger's fingerprint, which includes the radius, is the one other pass
        X = self._memory._state().X
        self._budget = _check_budget(budget)
        self._fingerprint = _ledger.bank_fingerprint(X, self._memory.radius_)
        self._records: list[dict[str, Any]] = []
        self._path = None if ledger is None else Path(os.fspath(ledger))
        if self._path is not None:
            with _ledger.ledger_lock(self._path):
                if self._path.exists():
                    state = _ledger.read_ledger(self._path)
                    _ledger.check_binding(state, self._fingerprint, self._budget)
                else:
                    _ledger.create_ledger(self._path, self._fingerprint, self._budget)

    # ----------------------------------------------------------------------------------
    @property
    def fingerprint(self) -> dict[str, Any]:
        """The bank's fingerprint (SHA-256 of bytes, shape, dtype, radius)."""
        return dict(self._fingerprint)

    @property
    def releases(self) -> tuple[dict[str, Any], ...]:
        """Every recorded release (from the ledger when there is one)."""
        return self._state()[0]

    @property
    def spent(self) -> float:
        """ε of everything released so far, composed, at the budget's δ."""
        return self._state()[1]

    @property
    def remaining(self) -> float:
        """``budget ε − spent`` (≥ 0), at the budget's δ."""
        return max(0.0, self._budget[0] - self.spent)

    def _state(self) -> tuple[tuple[dict[str, Any], ...], float]:
        if self._path is None:
            eps, _, _ = _ledger.compose_records(self._records, self._budget[1])
            return tuple(self._records), eps
        state = _ledger.read_ledger(self._path)
        _ledger.check_binding(state, self._fingerprint, self._budget)
        return state.releases, state.spent

    # ----------------------------------------------------------------------------------
    @pins_bank
    def retrieve(self, queries: Any, *, steps: int, epsilon: float, delta: float,
                 method: str = "brace", seed: Any = None, **kw: Any) -> PrivateRetrievalResult:
        """A private release (as :func:`brace.private_retrieve`, per-query (ε, δ)),
        charged to the budget.

        Raises :class:`BudgetExceededError` — before anything is computed, spending
        nothing — if the composition of all releases with this one would exceed the
        budget. ``method="naive"`` (not private), ``return_clean`` and caller-chosen
        innovations are refused. The result's diagnostics (data-dependent, not covered
        by ε) are removed: only the release is returned.
        """
        if method not in PRIVATE_METHODS:
            raise ValueError(
                f"PrivateMemory answers only private methods {PRIVATE_METHODS}; got "
                f"method={method!r}" + (" (NOT differentially private)." if method == "naive"
                                        else ".")
            )
        for k, why in _REFUSED_KW.items():
            if k in kw:
                raise TypeError(f"PrivateMemory.retrieve does not take {k}=: {why}.")
        X, _ = self._memory._bank()
        q, _ = check_queries(queries, X.shape[1], name="queries")
        T = check_steps(steps)
        eps = check_epsilon(epsilon)
        dlt = check_delta(delta)
        # Price the call from public parameters only: the plan private_retrieve will run
        # (an invalid argument is refused here, spending nothing).
        plan = plan_release(self._memory, method=method, epsilon=eps, delta=dlt, steps=T,
                            queries=q.shape[0],
                            **{k: kw[k] for k in _PLAN_KW if k in kw})
        spent_call = plan.spent
        record = {
            "method": method,
            "queries": int(q.shape[0]),
            "steps": T,
            "dim": int(X.shape[1]),
            "epsilon": eps,
            "delta": dlt,
            "epsilon_call": (spent_call.epsilon_total  # at the per-query delta
                             if math.isfinite(spent_call.epsilon_total) else None),
            "accounting": plan.accounting,
            "gamma": spent_call.gamma,
            "rho_per_step": spent_call.rho_per_step,
            "event": _ledger.event_to_dict(spent_call.call_event),
            "delta_extra": 0.0,  # no current mechanism has a non-RDP part
        }
        if self._path is None:
            return self._spend(self._records, record, q, T, eps, dlt, method, seed, kw,
                               spent_call)
        with _ledger.ledger_lock(self._path):
            state = _ledger.read_ledger(self._path)
            _ledger.check_binding(state, self._fingerprint, self._budget)
            records = list(state.releases)
            return self._spend(records, record, q, T, eps, dlt, method, seed, kw,
                               spent_call, created=state.created)

    def _spend(self, records, record, q, T, eps, dlt, method, seed, kw, spent_call,
               created=None):
        b_eps, b_delta = self._budget
        after, _, _ = _ledger.compose_records(records, b_delta, extra=[record])
        if not after <= b_eps:
            before, _, _ = _ledger.compose_records(records, b_delta)
            left = max(0.0, b_eps - before)
            raise BudgetExceededError(
                f"this release ({record['queries']} queries x {record['steps']} steps at "
                f"({eps:g}, {dlt:g}) per query, {method}) would bring the total to eps = "
                f"{after:.6g} at delta = {b_delta:g}, over the budget eps = {b_eps:g}. "
                f"Spent so far: {before:.6g}; remaining: {left:.6g}. Nothing was released "
                "or spent; ask for fewer queries or a smaller epsilon.",
                spent=before, remaining=left, requested_total=after,
            )
        res = private_retrieve(self._memory, q, method=method, epsilon=eps, delta=dlt,
                               steps=T, seed=seed, **kw)
        if res.privacy.rho_per_step != spent_call.rho_per_step or not res.is_private:
            raise RuntimeError("PrivateMemory: the release was not calibrated as priced.")
        record = {
            "id": len(records) + 1,
            "time": _ledger.now(),
            **record,
            # no seed: it regenerates the noise of the release (docs/ledger.md)
            "params": {k: v for k, v in res.params.items() if k != "seed"},
            "spent_after": after,
        }
        if self._path is None:
            self._records.append(record)
        else:  # write-ahead: durable before the release is returned
            _ledger.write_ledger(self._path, self._fingerprint, self._budget,
                                 [*records, record], created)
        return dataclasses.replace(res, **dict.fromkeys(DIAGNOSTIC_FIELDS))

    def __repr__(self) -> str:
        eps, delta = self._budget
        where = f", ledger={os.fspath(self._path)!r}" if self._path is not None else ""
        return (f"PrivateMemory(n={self._fingerprint['shape'][0]}, "
                f"d={self._fingerprint['shape'][1]}, radius={self._memory.radius_:g}, "
                f"budget=({eps:g}, {delta:g}){where})")

