"""Public questions about a budget: the largest per-query ε a call could spend now
(``affordable_epsilon``) and per-query retrieval or a synopsis for a workload
(``recommend``, ``docs/guide.md`` "Which one should I use?"). They read the recorded
spend and the stated workload, never the bank."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._validation import (
    check_bool,
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_queries,
    check_steps,
)
from ..ledger_state import weights
from ..mechanisms import PRIVATE_METHODS
from ..plan import plan_release
from .admission import _PLAN_KW, QUERY_DELTA_SHARE, _largest_fitting

#: :meth:`PrivateMemory.recommend` advises per-query retrieval when a released step's
#: noise norm is at most this many radii, and assumes gates of this many memories
RETRIEVE_MAX_NOISE = 0.5
RECOMMEND_GATE = 32.0


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What :meth:`PrivateMemory.recommend` advises: ``use`` is ``"retrieve"`` or
    ``"snapshot"``; ``per_query_epsilon`` what each of ``queries`` queries of ``steps``
    steps could spend now (all at one place); ``step_noise`` the predicted noise norm
    of a released step, in radii; ``reason`` says why."""

    use: str
    queries: int
    steps: int
    per_query_epsilon: float
    step_noise: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"use {self.use}: {self.reason}."



class Advice:
    """Mixin: ``affordable_epsilon`` and ``recommend``."""

    def affordable_epsilon(self, queries: Any, *, steps: int, delta: float | None = None,
                           method: str = "brace", noise: str = "plain",
                           **kw: Any) -> float:
        """The largest per-query ε at which ``retrieve(queries, steps=…, epsilon=ε, …)``
        with the same arguments would be admitted now (0.0 if none), to about a relative
        ``1e-5``. Public: it reads only the recorded footprints and the queries. Brent's
        method on ``log ε`` (:func:`_largest_fitting`); each trial prices the call as
        :meth:`retrieve` does (its plan and reserved footprints)."""
        if method not in PRIVATE_METHODS:
            raise ValueError(f"method must be one of {PRIVATE_METHODS}; got {method!r}.")
        q, _ = check_queries(queries, self._dim, name="queries")
        T = check_steps(steps)
        dlt = self._budget[1] * QUERY_DELTA_SHARE if delta is None else check_delta(delta)
        plan_kw = {k: kw.pop(k) for k in _PLAN_KW if k in kw}
        if kw:
            raise TypeError(f"affordable_epsilon got unexpected keywords {sorted(kw)}.")

        def usage(eps: float) -> float:
            try:
                plan = plan_release(self._memory, method=method, epsilon=eps, delta=dlt,
                                    steps=T, queries=q.shape[0], noise=noise, **plan_kw)
            except ValueError:  # e.g. an explicit count release at a tiny ε
                return math.inf
            return self._filter.usage(self._worst((self._reserved(plan, q),),
                                                  admission=True))

        with self._locked():
            self._sync_outside()
            return _largest_fitting(usage, 1e-5, 1e4)

    def recommend(self, queries: int, *, steps: int = 1, public_seeds: bool = True,
                  gate_size: float = RECOMMEND_GATE) -> Recommendation:
        """Per-query retrieval or a synopsis, for a workload of ``queries`` queries of
        ``steps`` steps from what remains of the budget (``docs/guide.md``, "Which one
        should I use?"). Public: it reads the recorded spend and the stated workload,
        never the bank.

        Each of the queries could spend ``ε_q`` (all at one place: the global price),
        which buys ``ρ`` per step. A released step of a gate of ``m = gate_size``
        memories (your typical gate; default 32) then carries noise of norm about
        ``sqrt(d)·(2r/m)/sqrt(2ρ)``; per-query retrieval is advised when that is at most
        :data:`RETRIEVE_MAX_NOISE` ``· r`` (the answer is mostly signal), else a
        synopsis seeded from public data (``public_seeds``), whose cost does not grow
        with the number of queries. Without public seeds a synopsis needs ``d ≤ 3``
        (a public grid), so per-query retrieval is the remaining option. The rule was
        checked against ``brace experiment real`` (``docs/experiments.md`` §6).
        """
        Q = check_int_at_least("queries", queries, 1)
        T = check_steps(steps)
        m = check_epsilon(gate_size, "gate_size")
        public_seeds = check_bool("public_seeds", public_seeds)
        with self._locked():
            self._sync_outside()
            base = self._worst(())
        dlt = self._budget[1] * QUERY_DELTA_SHARE
        plans: dict[float, Any] = {}

        def usage(eps: float) -> float:  # Q queries at one place: the global price
            try:
                plans[eps] = plan_release(self._memory, method="brace", epsilon=eps,
                                          delta=dlt, steps=T, queries=Q)
            except ValueError:
                return math.inf
            return self._filter.usage(base + weights(plans[eps].spent.step_event) * (Q * T))

        eps_q = _largest_fitting(usage, 1e-5, 1e4)
        rho = plans[eps_q].spent.rho_per_step if eps_q > 0 else 0.0
        noise = (math.sqrt(self._dim) * 2.0 / m / math.sqrt(2.0 * rho)) if rho > 0 \
            else math.inf
        said = (f"each of the {Q} queries can spend eps = {eps_q:.3g}; a released step "
                f"of a {m:g}-memory gate then has noise of norm about {noise:.3g} r")
        if noise <= RETRIEVE_MAX_NOISE:
            use, why = "retrieve", (f"{said} <= {RETRIEVE_MAX_NOISE:g} r: per-query "
                                    "retrieval answers each query from its own "
                                    "neighbourhood")
        elif public_seeds or self._dim <= 3:
            use, why = "snapshot", (
                f"{said} > {RETRIEVE_MAX_NOISE:g} r, mostly noise; one synopsis costs the "
                "same for any number of queries" + (
                    "" if public_seeds else " (seed it with seeds='grid' over a public box)"))
        else:
            use, why = "retrieve", (
                f"{said}, but a synopsis in d = {self._dim} needs public seeds near the "
                "data (points drawn in a box see empty gates); per-query retrieval is the "
                "remaining private option")
        return Recommendation(use, Q, T, eps_q, noise, why)
