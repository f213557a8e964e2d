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
    check_int_at_least,
    check_positive,
    check_privacy_delta,
    check_queries,
    check_steps,
)
from ..ledger.state import weights
from ..mechanisms import PRIVATE_METHODS
from ..plan import plan_release
from ..secure import check_noise
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
#: :meth:`PrivateMemory.recommend` with ``public_rows = p``: releasing nothing (public
#: data alone) is advised where the synopsis without public seeds affords ``cells = n/m*``
#: with ``p ≥ PUBLIC_PLENTY · cells``, or ``cells < PUBLIC_FEW_CELLS`` and
#: ``p ≥ PUBLIC_ENOUGH · cells``; fitted to the 33 measured comparisons of a public sample
#: with that synopsis (``docs/benchmarks.md``, "When private pays": 31 agreed when fitted,
#: 30 on the re-run of 2026-12-05)
PUBLIC_ENOUGH = 1.75
PUBLIC_FEW_CELLS = 24.0
PUBLIC_PLENTY = 4.0
#: below this many cells in the full space (and for ``d`` above the subspace's 32
#: directions), the private subspace (``project="auto"``) finds more: measured on the
#: shapes of ``benchmarks/bench_shapes.py`` (``docs/benchmarks.md``, "Cluster shapes")
FULL_SPACE_MIN_CELLS = 50.0


def synopsis_space(rho: float, n: int, d: int) -> tuple[float, str | None]:
    """``(cells, project)``: the setting of a synopsis without public seeds of total zCDP
    ``rho`` on ``n`` rows in ``d`` dimensions (default plans), by a public rule:
    ``cells = n/m*`` in the full space (:class:`brace.seeding.SeedingPlan`) or, where
    more — or where ``d > 32`` and the full space affords fewer than
    :data:`FULL_SPACE_MIN_CELLS` — in a private subspace (``project="auto"``, §15.1).
    A public function of ``(ρ, n, d)``: it reads no row. Used by
    :meth:`PrivateMemory.recommend` and as ``brace.private_synopsis``'s default."""
    from ..projection import K_MAX, MAX_DIM, ProjectionPlan
    from ..seeding import SeedingPlan

    if not rho > 0:
        return 0.0, None
    cells = n / SeedingPlan.make(rho, n, d).m_star
    if 2 <= d <= MAX_DIM:  # a private subspace first (§15.1)
        sub = n / ProjectionPlan.make(rho, n, d, "auto").seeding.m_star
        if sub > cells or (d > K_MAX and cells < FULL_SPACE_MIN_CELLS):
            return sub, "auto"
    return cells, None


def public_suffices(public_rows: int, cells: float) -> bool:
    """Whether ``public_rows = p`` rows of public data from the bank's population are about
    as good as a synopsis without public seeds that affords ``cells = n/m*`` cells
    (:func:`synopsis_space`): a public rule of two public numbers. True where

    * ``p ≥ PUBLIC_PLENTY · cells`` (4): the smallest cluster that synopsis resolves, a
      share ``m*/n = 1/cells`` of the rows, holds about four public rows or more — or
    * ``cells < PUBLIC_FEW_CELLS`` (24) and ``p ≥ PUBLIC_ENOUGH · cells`` (1.75): so
      coarse a synopsis merges classes, and a public row or two per cell matches it.

    Between (24 cells or more, fewer than four public rows per cell) the synopsis: the
    public sample misses clusters of a few of its rows (a share below ``t/p``, ``t`` the
    rows its clustering needs) that the synopsis resolves. Fitted to the 33 measured
    comparisons (``docs/benchmarks.md``, "When private pays": 30 agree; MNIST-784 on
    5,000 rows at ε = 1, 2 and the 10,000-row synthetic bank do not, and no rule
    monotone in ``p`` and ``cells`` gets all of its crossover cases right). No case with
    24 cells or more and over 3.45 public rows per cell was measured: there the first
    clause is the earlier rule's reasoning (public rows in every cluster the synopsis
    resolves) with more rows, not a measurement."""
    p = float(public_rows)
    return p > 0 and (p >= PUBLIC_PLENTY * cells
                      or (cells < PUBLIC_FEW_CELLS and p >= PUBLIC_ENOUGH * cells))


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """What :meth:`PrivateMemory.recommend` advises: ``use`` is ``"retrieve"``,
    ``"snapshot"`` (``seeds``: ``"public"`` — seeded with your public data — or
    ``"private"`` — found privately, ``snapshot(bounds=…)``, with ``project="auto"``
    when a private subspace first affords more cells) or ``"nothing"`` (release
    nothing: public data alone is as good, or no release is worth its noise);
    ``per_query_epsilon`` what each of ``queries`` queries of ``steps`` steps could spend
    now (all at one place); ``step_noise`` the predicted noise norm of a released step,
    in radii; ``cells`` the number ``n/m*`` of cells a synopsis without public seeds could
    resolve now (the better of the full space and a private subspace); ``project`` is
    ``"auto"`` when that is the subspace; ``reason`` says why."""

    use: str
    queries: int
    steps: int
    per_query_epsilon: float
    step_noise: float
    reason: str
    seeds: str | None = None  # a synopsis: "public" (your public data) or "private"
    cells: float | None = None  # n/m*: the cells a synopsis without public seeds affords
    project: str | None = None  # "auto": the synopsis without public seeds in a subspace

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"use {self.use}: {self.reason}."



class Advice:
    """Mixin: ``affordable_epsilon`` and ``recommend``. Both read only public values, so
    their plans are cached per call shape (:func:`_cached_plan`) and their answers per
    recorded spend: asked again before the next release, they answer at once."""

    def _answer(self, key: tuple, compute: Any) -> Any:
        """``compute(earlier)``, kept for ``key`` and the spend it was computed from (call
        with the lock held, after the ledger was read). ``earlier`` is the answer kept
        for ``key`` at an earlier spend (None if none): a public hint that narrows the
        next search (:func:`_largest_fitting`)."""
        cache = self.__dict__.setdefault("_advice_answers", {})
        state = (len(self._rows), self._last_id, self._last_mac, len(self._index))
        got = cache.get(key)
        if got is not None and got[0] == state:
            return got[1]
        out = compute(None if got is None else got[1])
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
        noise = check_noise(noise)
        dlt = self._budget[1] * QUERY_DELTA_SHARE if delta is None else check_privacy_delta(delta)
        plan_kw = {k: kw.pop(k) for k in _PLAN_KW if k in kw}
        if kw:
            raise TypeError(f"affordable_epsilon got unexpected keywords {sorted(kw)}.")

        def search(was: float | None) -> float:
            got = _largest_fitting(usage, 1e-5, 1e4, hint=was or None)
            if got == 0.0 and _plan(self._memory, method, 1e4, dlt, T, q.shape[0], noise,
                                    plan_kw) is None:
                # not even the largest ε can be planned: the arguments are at fault (a
                # count release that a tiny ε cannot plan still plans at the top)
                plan_release(self._memory, method=method, epsilon=1e4, delta=dlt, steps=T,
                             queries=q.shape[0], noise=noise, **plan_kw)
            return got

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
            return self._answer(key, search)

    def recommend(self, queries: int, *, steps: int = 1, public_seeds: bool = True,
                  gate_size: float | None = None, public_rows: int | None = None
                  ) -> Recommendation:
        """Per-query retrieval, a synopsis (seeded with public data or not) or no release,
        for a workload of ``queries`` queries of ``steps`` steps from what remains of the
        budget (``docs/guide.md``, "Which one should I use?"). Public: it reads the
        recorded spend, ``n``, ``d`` and the stated workload, never the bank.

        1. Each of the queries could spend ``ε_q`` (all at one place: the global price),
           which buys ``ρ`` per step. A released step of a gate of ``m = gate_size``
           memories (in ``[1, n]``: a gate holds at most the bank; default
           ``min(32, n)``) carries noise of norm about ``sqrt(d)·(2r/m)/sqrt(2ρ)``;
           per-query retrieval is advised when that is at most
           :data:`RETRIEVE_MAX_NOISE` ``· r`` (the answer is mostly signal).
        2. Otherwise a synopsis, whose cost does not grow with the number of queries. A
           synopsis without public seeds (``snapshot(bounds=…)``,
           ``docs/privacy-accounting.md`` §15) spending what remains resolves clusters of
           at least ``m*`` rows (:class:`brace.seeding.SeedingPlan`): ``cells = n/m*`` of
           them — in the full space, or, when more, in a private subspace
           (``project="auto"``, §15.1: ``m*`` at ``k = min(32, d − 1)`` dimensions and
           the 43 % of the budget its rounds get). The subspace is also advised when
           ``d > 32`` and the full space affords fewer than
           :data:`FULL_SPACE_MIN_CELLS` cells: there the full space's attractors are
           too coarse and the subspace's clusters were better in every measured case
           (digits, MNIST; ``docs/benchmarks.md``, "Cluster shapes"). With
           ``public_rows = p`` rows of public data from the same population, advise
           releasing nothing where public data alone are about as good
           (:func:`public_suffices`): ``p ≥ PUBLIC_PLENTY · cells`` (4 public rows in
           the smallest cluster the synopsis resolves), or ``cells < PUBLIC_FEW_CELLS``
           (24: a coarse synopsis) and ``p ≥ PUBLIC_ENOUGH · cells`` (1.75); else the
           synopsis without public seeds. Without ``public_rows``: with
           ``public_seeds`` a synopsis seeded with them (its cells start where the data
           are); without, the synopsis without public seeds.
        3. If that synopsis can afford fewer than two cells (``n/m* < 2``: the release
           would be the bank's noisy mean), nothing is worth releasing for this workload:
           ``use="nothing"``, unless per-query retrieval was advised.

        The thresholds were checked against ``brace experiment real``,
        ``benchmarks/bench_private_n.py`` and ``benchmarks/bench_shapes.py``
        (``docs/benchmarks.md``, "When private pays").
        """
        from ..accounting import GaussianStep

        Q = check_int_at_least("queries", queries, 1)
        T = check_steps(steps)
        n = int(self._fingerprint["shape"][0])
        if gate_size is None:
            m = min(RECOMMEND_GATE, float(n))
        else:
            m = check_positive("gate_size", gate_size)
            if not 1.0 <= m <= n:
                raise ValueError(f"gate_size must be in [1, n] = [1, {n}] (a gate holds at "
                                 f"most the bank's {n} memories); got {gate_size!r}.")
        public_seeds = check_bool("public_seeds", public_seeds)
        if public_rows is not None:
            public_rows = check_int_at_least("public_rows", public_rows, 0)
        dlt = self._budget[1] * QUERY_DELTA_SHARE

        def plan(eps: float) -> Any:
            return _plan(self._memory, "brace", eps, dlt, T, Q, "plain", {})

        def search(base: np.ndarray, was: tuple | None) -> tuple[float, float, float]:
            def usage(eps: float) -> float:  # Q queries at one place: the global price
                p = plan(eps)
                if p is None:
                    return math.inf
                return self._filter.usage(base + weights(p.spent.step_event) * (Q * T))

            eps_q = _largest_fitting(usage, 1e-5, 1e4, hint=(was[0] or None) if was else None)
            rho = plan(eps_q).spent.rho_per_step if eps_q > 0 else 0.0
            # the synopsis without public seeds that what remains would buy (global price)
            rho_s = _largest_fitting(
                lambda x: self._filter.usage(base + weights(GaussianStep(x))), 1e-12, 1e6,
                hint=(was[2] or None) if was else None)
            return eps_q, rho, rho_s

        with self._locked():
            self._sync_outside()
            eps_q, rho, rho_s = self._answer(("recommend", Q, T),
                                             lambda was: search(self._worst(()), was))
        noise = (math.sqrt(self._dim) * 2.0 / m / math.sqrt(2.0 * rho)) if rho > 0 \
            else math.inf
        cells, project = synopsis_space(rho_s, n, self._dim)
        said = (f"each of the {Q} queries can spend eps = {eps_q:.3g}; a released step "
                f"of a {m:g}-memory gate then has noise of norm about {noise:.3g} r")
        syn = (f"a synopsis without public seeds spending what remains resolves clusters "
               f"of at least {n / max(cells, 1e-300):.3g} of the {n} rows "
               f"(n/m* = {cells:.3g} cells"
               + (", in a private subspace: project='auto'" if project else "") + ")")
        if noise <= RETRIEVE_MAX_NOISE:
            return Recommendation("retrieve", Q, T, eps_q, noise, (
                f"{said} <= {RETRIEVE_MAX_NOISE:g} r: per-query retrieval answers each query "
                "from its own neighbourhood"), None, cells)
        if public_rows is not None and public_suffices(public_rows, cells):
            why = (f"at least {PUBLIC_PLENTY:g} per such cell"
                   if public_rows >= PUBLIC_PLENTY * cells else
                   f"at least {PUBLIC_ENOUGH:g} per cell of a synopsis this coarse "
                   f"(fewer than {PUBLIC_FEW_CELLS:g} cells)")
            return Recommendation("nothing", Q, T, eps_q, noise, (
                f"{said}, mostly noise; {syn}, and your {public_rows} public rows are "
                f"{why}: releasing nothing (answering from public data alone) is about "
                "as good"), None, cells)
        if cells < 2.0:
            return Recommendation("nothing", Q, T, eps_q, noise, (
                f"{said}, mostly noise; {syn}: fewer than two, so a synopsis would be the "
                "bank's noisy mean; nothing is worth releasing at this budget (use public "
                "data if you have it, or a larger budget)"), None, cells)
        if public_seeds and public_rows is None:
            return Recommendation("snapshot", Q, T, eps_q, noise, (
                f"{said} > {RETRIEVE_MAX_NOISE:g} r, mostly noise; one synopsis costs the "
                "same for any number of queries: seed it with your public data "
                f"(snapshot(public_points)); without any, {syn} (snapshot(bounds=...))"),
                "public", cells)
        return Recommendation("snapshot", Q, T, eps_q, noise, (
            f"{said} > {RETRIEVE_MAX_NOISE:g} r, mostly noise; one synopsis costs the same "
            f"for any number of queries: {syn}"
            + ("" if public_rows is None else
               f", finer than your {public_rows} public rows resolve ("
               + (f"fewer than {PUBLIC_ENOUGH:g} per cell)" if cells < PUBLIC_FEW_CELLS
                  else f"at least {PUBLIC_FEW_CELLS:g} cells and fewer than "
                  f"{PUBLIC_PLENTY:g} public rows per cell)"))
            + "; find its seeds privately inside your public domain: "
            "snapshot(bounds=(lo, hi)) or snapshot(ball=(centre, radius))"
            + (", with project='auto'" if project else "")), "private", cells, project)
