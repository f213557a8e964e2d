"""Public questions about a budget: the largest per-query ε a call could spend now
(``affordable_epsilon``) and per-query retrieval or a synopsis for a workload
(``recommend``, ``docs/guide.md`` "Which one should I use?"). They read the recorded
spend and the stated workload, never the bank."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

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

#: answers kept per PrivateMemory (each for the recorded spend it was computed from)
_ANSWERS = 64


@functools.lru_cache(maxsize=8192)
def _cached_plan(n: int, d: int, r: float, method: str, eps: float, dlt: float, T: int,
                 Q: int, noise: str, plan_kw: tuple) -> Any:
    """:func:`brace.plan_release` of public values only (the bank's shape and radius and
    the call's parameters), kept: the searches below price the same plans again and
    again. None where the call cannot be planned (a ``ValueError``)."""
    try:
        return plan_release((n, d), radius=r, method=method, epsilon=eps, delta=dlt,
                            steps=T, queries=Q, noise=noise, **dict(plan_kw))
    except ValueError:
        return None


def _plan(memory: Any, method: str, eps: float, dlt: float, T: int, Q: int, noise: str,
          plan_kw: dict[str, Any]) -> Any:
    """The plan of a call (:func:`_cached_plan`; uncached if a keyword is unhashable)."""
    kw = tuple(sorted(plan_kw.items()))
    args = (memory.n_memories, memory.dim, memory.radius_, method, eps, dlt, T, Q, noise)
    try:
        hash(kw)
    except TypeError:
        try:
            return plan_release(memory, method=method, epsilon=eps, delta=dlt, steps=T,
                                queries=Q, noise=noise, **plan_kw)
        except ValueError:
            return None
    return _cached_plan(*args, kw)


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
    """Mixin: ``affordable_epsilon`` and ``recommend``. Both read only public values, so
    their plans are cached per call shape (:func:`_cached_plan`) and their answers per
    recorded spend: asked again before the next release, they answer at once."""

    def _answer(self, key: tuple, compute: Any) -> Any:
        """``compute()``, kept for ``key`` and the spend it was computed from (call with
        the lock held, after the ledger was read)."""
        cache = self.__dict__.setdefault("_advice_answers", {})
        state = (len(self._rows), self._last_id, self._last_mac, len(self._index))
        got = cache.get(key)
        if got is not None and got[0] == state:
            return got[1]
        out = compute()
        if len(cache) >= _ANSWERS:
            cache.pop(next(iter(cache)))
        cache[key] = (state, out)
        return out

    def affordable_epsilon(self, queries: Any, *, steps: int, delta: float | None = None,
                           method: str = "brace", noise: str = "auto",
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
            plan = _plan(self._memory, method, eps, dlt, T, q.shape[0], noise, plan_kw)
            if plan is None:  # e.g. an explicit count release at a tiny ε
                return math.inf
            return self._filter.usage(self._worst((self._reserved(plan, q),),
                                                  admission=True))

        key = ("affordable", np.ascontiguousarray(q, dtype=np.float64).tobytes(), q.shape,
               T, dlt, method, noise, repr(sorted(plan_kw.items())))
        with self._locked():
            self._sync_outside()
            return self._answer(key, lambda: _largest_fitting(usage, 1e-5, 1e4))

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
        dlt = self._budget[1] * QUERY_DELTA_SHARE

        def plan(eps: float) -> Any:
            return _plan(self._memory, "brace", eps, dlt, T, Q, "plain", {})

        def search(base: np.ndarray) -> tuple[float, float]:
            def usage(eps: float) -> float:  # Q queries at one place: the global price
                p = plan(eps)
                if p is None:
                    return math.inf
                return self._filter.usage(base + weights(p.spent.step_event) * (Q * T))

            eps_q = _largest_fitting(usage, 1e-5, 1e4)
            return eps_q, plan(eps_q).spent.rho_per_step if eps_q > 0 else 0.0

        with self._locked():
            self._sync_outside()
            eps_q, rho = self._answer(("recommend", Q, T), lambda: search(self._worst(())))
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
