"""``PrivateMemory``: a bank that only answers privately, within one budget.

Every release is admitted by a privacy *filter* (``docs/privacy-accounting.md`` §12,
:mod:`brace.accounting.filter`) before the bank is read, and charged once released:

* ``accounting="local"`` (the default): a released step is charged only to the rows its
  public *footprint* can hold (:mod:`brace.footprints`); the filter bounds the worst pair
  of neighbouring banks.
* ``accounting="global"``: every step is charged to every row (plain composition).

A call that does not fit raises :class:`BudgetExceededError` before anything is
computed, and spends nothing. Pricing, computing and recording are one critical section
under a lock (threads) and, with a ``ledger``, one SQLite transaction (processes): the
spend is durable *before* the release is returned (:mod:`brace.ledger`). A call identical
to a recorded one returns the recorded release and spends nothing (``fresh=True`` asks
for new noise and pays).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy.optimize import brentq

from . import accounting as acc_events
from . import ledger as _ledger
from ._validation import (
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_queries,
    check_steps,
    rng_and_record,
)
from .accounting import rho_from_eps_delta
from .accounting.filter import ROUNDING, FilterSpec, FootprintIndex, K, convert
from .footprints import (
    CLEAN_MARGIN,
    GATE_MARGIN,
    footprints,
    reserved_radius,
    reserved_steps,
)
from .ledger_state import (
    LedgerState,
    check_budget,
    inspect_ledger,
    migrate_json_ledger,
    plural,
    weights,
)
from .mechanisms import (
    DIAGNOSTIC_FIELDS,
    PRIVATE_METHODS,
    PrivateRetrievalResult,
    private_retrieve,
)
from .memory import LSRMemory, pins_bank
from .plan import plan_release
from .secure import SECURE_SEED_REASON
from .synopsis import (
    CELL_SHARE,
    Synopsis,
    cell_sensitivity,
    cell_unit,
    default_min_count,
    first_centres,
    next_centres,
    public_seeds,
    release_cell_round,
)

__all__ = ["BudgetExceededError", "PrivateMemory", "private_synopsis", "ACCOUNTINGS",
           "QUERY_DELTA_SHARE", "RETRIEVE_MAX_NOISE", "Recommendation",
           "LedgerState", "inspect_ledger", "migrate_json_ledger"]

ACCOUNTINGS = ("local", "global")
#: default per-query δ of :meth:`PrivateMemory.retrieve`: this share of the budget's δ
QUERY_DELTA_SHARE = 0.01
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


class BudgetExceededError(RuntimeError):
    """A release would take the privacy loss past the budget; nothing was released and
    nothing was spent. ``spent``, ``remaining`` and ``requested_total`` are ε at the
    budget's δ (``requested_total``: what the history would cost with the call at its
    reserved footprints); ``reason`` is ``"epsilon"`` or ``"delta"``;
    ``affordable_epsilon`` is the largest per-query ε of the same call that would fit
    (0 if none)."""

    def __init__(self, message: str, *, spent: float, remaining: float,
                 requested_total: float, reason: str = "epsilon",
                 affordable_epsilon: float = 0.0) -> None:
        super().__init__(message)
        self.spent = spent
        self.remaining = remaining
        self.requested_total = requested_total
        self.reason = reason
        self.affordable_epsilon = affordable_epsilon


_PLAN_KW = ("kappa", "gamma", "accounting", "output_projection", "release")
_REFUSED_KW = {
    "return_clean": "the noiseless trajectory is not private",
    "_innovations": "caller-supplied innovations carry no guarantee",
    "memory": "the bank is the PrivateMemory's own",
    "queries": "pass the queries as the first argument",
    "rng": "pass seed= (the release's random draws)",
}


class PrivateMemory:
    """An LSR memory that answers only private retrievals, within a total budget.

    Parameters
    ----------
    bank : array_like (n, d)
        The private memories (an array, a memory map, a Dask array, or an
        :class:`LSRMemory`, whose bank, radius and β are taken).
    radius : float
        Support radius ``r`` (as :class:`LSRMemory`); give it or ``beta``; taken from
        ``bank`` when that is an :class:`LSRMemory`.
    budget : (epsilon, delta)
        Total budget for everything released from this bank: the whole adaptive
        history is ``(ε, δ)``-DP for every pair of neighbouring banks (replace one row).
    beta : float, optional
        LSR's β instead of ``radius`` (as :class:`LSRMemory`: ``r = sqrt(2/β)``).
    ledger : path, optional
        SQLite ledger file (``docs/ledger.md``). It persists the spend across processes
        and restarts, is bound to this bank, radius and budget, and is written before
        each release is returned. Without it the spend lives in this object only.
    create : bool, default False
        Create the ledger (refused if the file exists). Opening a ledger that does not
        exist is an error: a mistyped path never starts a fresh budget.
    accounting : {"local", "global"}, default "local"
        How releases are charged (module docstring; ``docs/privacy-accounting.md`` §12).
        Local never reports more than global on the same history.
    lock_timeout : float, default 10
        Seconds to wait for the ledger's write lock (another thread or process) before
        :class:`brace.ledger.LedgerLockTimeout`.
    ledger_key : bytes or str, optional
        Key of the ledger's HMAC (default ``$BRACE_LEDGER_KEY``; none: an unkeyed
        SHA-256 chain, which detects damage but not a deliberate edit).

    Examples
    --------
    >>> import numpy as np, brace
    >>> X = np.random.default_rng(0).normal(size=(50, 2))
    >>> pm = brace.PrivateMemory(X, radius=0.8, budget=(8.0, 1e-5))
    >>> res = pm.retrieve(X[:2], steps=3, epsilon=1.0, seed=0)
    >>> 0 < pm.spent < 8 and abs(pm.spent + pm.remaining - 8) < 1e-9
    True
    """

    def __init__(self, bank: Any, *, radius: float | None = None,
                 budget: tuple[float, float], beta: float | None = None,
                 ledger: str | os.PathLike | None = None, create: bool = False,
                 accounting: str = "local", lock_timeout: float = 10.0,
                 ledger_key: bytes | str | None = None) -> None:
        if isinstance(bank, LSRMemory):
            if radius is None and beta is None:
                radius = bank.radius_
            bank = bank.bank
        if radius is None and beta is None:
            raise TypeError("PrivateMemory needs radius= (the support radius r) or beta= "
                            "(r = sqrt(2/beta)).")
        if accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS}; got {accounting!r}.")
        if not isinstance(create, bool):
            raise TypeError(f"create must be a bool; got {create!r}.")
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, int | float) \
                or not (lock_timeout >= 0 and math.isfinite(lock_timeout)):
            raise ValueError(f"lock_timeout must be a finite number of seconds >= 0; got "
                             f"{lock_timeout!r}.")
        if create and ledger is None:
            raise ValueError("create=True needs a ledger path.")
        # canonical sums: a step reads nothing outside its footprint (privacy-accounting §12.1)
        self._memory = LSRMemory(bank, radius=radius, beta=beta, canonical_sums=True)
        X = self._memory._state().X
        self._budget = check_budget(budget)
        self._accounting = accounting
        self._dim = int(X.shape[1])
        self._fingerprint = _ledger.bank_fingerprint(X, self._memory.radius_)
        self._filter = FilterSpec.for_budget(*self._budget)
        self._lock = threading.RLock()
        self._lock_timeout = float(lock_timeout)
        self._index = FootprintIndex(self._dim)
        self._rows: list[dict[str, Any]] = []  # records, in order
        self._keys: dict[str, int] = {}  # call key -> position in _rows
        self._results: dict[int, PrivateRetrievalResult] = {}
        self._last_id, self._last_mac = 0, ""
        self._worst_cache: tuple[int, np.ndarray] | None = None
        self._db: _ledger.Ledger | None = None
        if ledger is not None:
            spec = dataclasses.asdict(self._filter)
            spec["orders"] = list(spec["orders"])
            if create:
                self._db = _ledger.Ledger.create(
                    ledger, fingerprint=self._fingerprint, budget=self._budget,
                    filter_spec=spec, key=ledger_key, timeout=self._lock_timeout)
            else:
                self._db = _ledger.Ledger.open(ledger, key=ledger_key,
                                               timeout=self._lock_timeout)
                self._check_binding(self._db.meta)
                self._filter = FilterSpec(self._budget[0], self._budget[1],
                                          tuple(self._db.meta["filter"]["orders"]),
                                          float(self._db.meta["filter"]["delta_direct"]))
            self._sync()

    def close(self) -> None:
        """Close the ledger's connection (a later call to a closed ledger fails)."""
        if self._db is not None:
            self._db.close()

    def __enter__(self) -> PrivateMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ----------------------------------------------------------------------------------
    bank = property(lambda self: self._memory._state().X,
                    doc="The validated bank (read-only).")
    radius = property(lambda self: self._memory.radius_, doc="Support radius r.")
    beta = property(lambda self: 2.0 / self._memory.radius_ ** 2, doc="LSR's β = 2/r².")
    budget = property(lambda self: self._budget, doc="(ε, δ) of the whole history.")
    accounting = property(lambda self: self._accounting, doc='"local" or "global".')
    filter = property(lambda self: self._filter, doc="The privacy filter (FilterSpec).")
    ledger = property(lambda self: None if self._db is None else self._db.path,
                      doc="The ledger's path, or None.")

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The bank's fingerprint (SHA-256 of bytes, shape, dtype, radius)."""
        return dict(self._fingerprint)

    @property
    def releases(self) -> tuple[dict[str, Any], ...]:
        """Every recorded release's record (from the ledger when there is one)."""
        with self._locked():
            self._sync_outside()
            return tuple(dict(r) for r in self._rows)

    @property
    def spent(self) -> float:
        """ε at the budget's δ of the worst pair of neighbouring banks: the composition
        (converted at the best order) of the recorded steps charged to that pair."""
        return convert(self._worst_now(), self._budget[1])

    @property
    def remaining(self) -> float:
        """``budget ε − spent`` (≥ 0), at the budget's δ."""
        return max(0.0, self._budget[0] - self.spent)

    @property
    def filter_usage(self) -> float:
        """Share of the filter used by the worst pair (≤ 1; a call is admitted only if
        it stays ≤ 1 with the call's reserved footprints)."""
        return self._filter.usage(self._worst_now())

    def spent_at(self, points: Any) -> np.ndarray:
        """``(k,)`` ε at the budget's δ charged to a row at each point: the composition
        of the recorded steps whose footprint holds it (global: every step)."""
        p, _ = check_queries(points, self._dim, name="points")
        with self._locked():
            self._sync_outside()
            if self._accounting == "global":
                return np.full(p.shape[0],
                               convert(self._index.global_weights(), self._budget[1]))
            cost = self._index.point_cost(p)
        return np.array([convert(c, self._budget[1]) for c in cost])

    # ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The object's lock (threads), waiting at most ``lock_timeout`` seconds."""
        t = self._lock_timeout
        if not self._lock.acquire(timeout=t if t > 0 else -1):
            raise _ledger.LedgerLockTimeout(
                f"could not acquire the PrivateMemory's lock within {t:g} s: another "
                "thread of this process holds it.")
        try:
            yield
        finally:
            self._lock.release()

    def _check_binding(self, meta: dict[str, Any]) -> None:
        fp = meta["fingerprint"]
        path = self._db.path if self._db is not None else "?"
        if fp.get("sha256") != self._fingerprint["sha256"]:
            raise _ledger.LedgerError(
                f"ledger {path} belongs to another bank: its fingerprint is "
                f"{fp.get('sha256')} (shape {fp.get('shape')}, radius {fp.get('radius')}), "
                f"this bank's is {self._fingerprint['sha256']} (shape "
                f"{self._fingerprint['shape']}, radius {self._fingerprint['radius']}). Use "
                "the ledger of this bank, or create a new one.")
        b = meta["budget"]
        if (float(b["epsilon"]), float(b["delta"])) != self._budget:
            raise _ledger.LedgerError(
                f"ledger {path} was created with budget ({b['epsilon']:g}, {b['delta']:g}); "
                f"it was opened with ({self._budget[0]:g}, {self._budget[1]:g}). A ledger's "
                "budget is fixed when it is created.")

    def _sync_outside(self) -> None:
        if self._db is not None:
            self._db.refresh_meta()
            self._check_binding(self._db.meta)
            self._sync()

    def _sync(self) -> None:
        """Read the releases other processes recorded since the last look."""
        rows = self._db.read_since(self._last_id, self._last_mac)
        if not rows:
            return
        self._absorb([(r.record, r.call_key, r.centres, r.radii) for r in rows])
        self._last_id = rows[-1].id
        self._last_mac = self._db.meta["head"]["mac"]

    def _absorb(self, rows: list[tuple[dict[str, Any], str, np.ndarray, np.ndarray]]
                ) -> None:
        """Record releases ``(record, call key, footprint centres, radii)`` in memory: one
        bulk update of the footprint index (a KD-tree proposes neighbours in bulk)."""
        ws = []
        for record, key, _, radii in rows:
            self._keys.setdefault(key, len(self._rows))
            self._rows.append(record)
            w = weights(_ledger.event_from_dict(record["event"]))
            ws.append(np.broadcast_to(w, (radii.shape[0], K + 1)))
        self._index.add(np.concatenate([r[2] for r in rows]),
                        np.concatenate([r[3] for r in rows]), np.concatenate(ws),
                        local=self._accounting == "local")
        self._worst_cache = None

    def _worst_now(self) -> np.ndarray:
        with self._locked():
            self._sync_outside()
            return self._worst(())

    def _worst(self, extra: tuple, admission: bool = False) -> np.ndarray:
        """The worst pair's weights; with ``admission`` only the filter's columns are
        searched (the others hold the global total, which bounds them too)."""
        if self._accounting == "global":
            out = self._index.total.copy()
            for _, _, w in extra:
                out += np.asarray(w).sum(axis=0)
            return out * ROUNDING
        cols = (*self._filter.orders, K) if admission else None
        if not extra and not admission:
            if self._worst_cache is None or self._worst_cache[0] != len(self._index):
                self._worst_cache = (len(self._index), self._index.worst_pair())
            return self._worst_cache[1]
        return self._index.worst_pair(extra, cols=cols)

    # ----------------------------------------------------------------------------------
    @pins_bank
    def retrieve(self, queries: Any, *, steps: int, epsilon: float,
                 delta: float | None = None, method: str = "brace", seed: Any = None,
                 fresh: bool = False, noise: str = "plain",
                 **kw: Any) -> PrivateRetrievalResult:
        """A private release (as :func:`brace.private_retrieve`, per-query (ε, δ)),
        admitted by the budget's filter and charged to it.

        ``delta`` defaults to ``QUERY_DELTA_SHARE`` (1 %) of the budget's δ. Raises
        :class:`BudgetExceededError` — before the bank is read, spending nothing — if
        the call does not fit. A call identical to a recorded one (same queries bit for
        bit, steps, ε, δ, method and release parameters) returns the recorded release
        and spends nothing, unless ``fresh=True``. ``method="naive"`` (not private),
        ``return_clean`` and caller-chosen innovations are refused. The result carries
        no diagnostics (they are data-dependent and not covered by ε).
        ``noise="secure"``: exact discrete noise from the operating system's CSPRNG, no
        seed (:func:`brace.private_retrieve`; ``docs/deploying.md``); same accounting.
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
        if not isinstance(fresh, bool):
            raise TypeError(f"fresh must be a bool; got {fresh!r}.")
        q, _ = check_queries(queries, self._dim, name="queries")
        T = check_steps(steps)
        eps = check_epsilon(epsilon)
        dlt = (self._budget[1] * QUERY_DELTA_SHARE if delta is None
               else check_delta(delta))
        plan_kw = {k: kw[k] for k in _PLAN_KW if k in kw}
        plan = plan_release(self._memory, method=method, epsilon=eps, delta=dlt, steps=T,
                            queries=q.shape[0], noise=noise, **plan_kw)
        if plan.noise == "secure":
            if seed is not None:
                raise ValueError(f"seed must be None with noise='secure': {SECURE_SEED_REASON}")
            kw = {**kw, "noise": "secure"}  # in the call key and passed on
        key = _call_key(q, T, eps, dlt, method, plan, kw)
        with self._locked():
            if self._db is None:
                return self._admit_and_run(plan, q, T, eps, dlt, method, seed, kw, key,
                                           fresh)
            with self._db.transaction():
                self._check_binding(self._db.meta)
                self._sync()
                return self._admit_and_run(plan, q, T, eps, dlt, method, seed, kw, key,
                                           fresh)

    def _admit_and_run(self, plan, q, T, eps, dlt, method, seed, kw, key, fresh):
        if not fresh and key in self._keys:
            return self._repeat(self._keys[key], q)
        reserved = self._reserved(plan, q)
        worst = self._worst((reserved,), admission=True)
        if not self._filter.admits(worst):
            self._refuse(worst, reserved[2], plan, q, T, eps, dlt, method)
        res = private_retrieve(self._memory, q, method=method, epsilon=eps, delta=dlt,
                               steps=T, seed=seed, **kw)
        if res.privacy.rho_per_step != plan.spent.rho_per_step or not res.is_private:
            raise RuntimeError("PrivateMemory: the release was not calibrated as priced.")
        fp = footprints(plan, q, res.outputs)
        record = self._record(method, q, T, eps, dlt, plan, res)
        counts = getattr(res, "released_counts", None)
        if self._db is not None:  # write-ahead: inserted before the release is returned
            row = self._db.append(call_key=key, record=record, outputs=res.outputs,
                                  released_counts=counts, centres=fp.centres,
                                  radii=fp.radii)
            record = row.record
        self._absorb([(record, key, fp.centres, fp.radii)])
        out = dataclasses.replace(res, **dict.fromkeys(DIAGNOSTIC_FIELDS))
        if self._db is not None:
            self._last_id, self._last_mac = row.id, self._db.meta["head"]["mac"]
        else:  # in memory, the object is the only record of the outputs (for repeats)
            self._results[len(self._rows) - 1] = out
        return out

    def _record(self, method, q, T, eps, dlt, plan, res) -> dict[str, Any]:
        public = res.to_dict()
        return {
            "method": method,
            "queries": int(q.shape[0]),
            "steps": T,
            "dim": self._dim,
            "epsilon": eps,
            "delta": dlt,
            "release": plan.release,
            "event": _ledger.event_to_dict(plan.spent.step_event),
            # no seed: it regenerates the noise of the release (docs/ledger.md)
            "params": {k: v for k, v in public["params"].items() if k != "seed"},
            "privacy": public["privacy"],
            # secure mode: the public grid unit of each released step (for repeats)
            **({} if res.grid is None else {"grid": np.asarray(res.grid).tolist()}),
        }

    def _repeat(self, pos: int, q: np.ndarray) -> PrivateRetrievalResult:
        """The recorded release at ``pos`` (post-processing: free)."""
        if self._db is None:
            return self._results[pos]
        from .accounting import PrivacySpent

        rec = self._rows[pos]
        outputs, counts = self._db.arrays(pos + 1)
        return PrivateRetrievalResult(
            method=rec["method"], is_private=True, outputs=outputs,
            privacy=PrivacySpent.from_dict(rec["privacy"]), params=dict(rec["params"]),
            queries=q.copy(), released_counts=counts,
            grid=None if "grid" not in rec else np.asarray(rec["grid"], dtype=np.float64),
            **dict.fromkeys(DIAGNOSTIC_FIELDS))

    def _refuse(self, worst, reserved_w, plan, q, T, eps, dlt, method) -> None:
        b_eps, b_delta = self._budget
        before = convert(self._worst(()), b_delta)
        after = convert(worst, b_delta)
        left = max(0.0, b_eps - before)
        what = (f"this release ({plural(q.shape[0], 'query', 'queries')} x "
                f"{plural(T, 'step')} at ({eps:g}, {dlt:g}) per query, {method}, "
                f"{plan.release} release)")
        if not worst[K] <= self._filter.delta_direct:
            raise BudgetExceededError(
                f"{what} would bring the direct failure probability charged to one pair "
                f"of neighbours to {worst[K]:.3g}, over the filter's delta share "
                f"{self._filter.delta_direct:.3g} of the budget delta {b_delta:g}: delta is "
                "the problem. Ask with a smaller per-query delta (the count release spends "
                "a share of it directly) or fewer queries. Nothing was released or spent.",
                spent=before, remaining=left, requested_total=after, reason="delta")
        afford = self._affordable(q, reserved_w, plan, dlt)
        where = ""
        if self._accounting == "local" and len(self._index):
            i = int(np.argmax(self._index.U[:, self._filter.orders[0]]))
            c = np.array2string(self._index.centres[i], precision=3, threshold=6)
            where = (f" The most charged place is around {c}; queries whose reserved "
                     f"balls (radius {float(reserved_radius(plan, q)[0]):.3g}) stay away "
                     "from the charged places cost less.")
        raise BudgetExceededError(
            f"{what} would take the worst pair of neighbouring banks to eps = {after:.6g} "
            f"at delta = {b_delta:g} (with the call's reserved footprints), past what the "
            f"filter admits for the budget eps = {b_eps:g}. Spent so far: {before:.6g}; "
            f"remaining: {left:.6g}. " + (
                "No call of this shape fits: ask for fewer queries or steps."
                if afford == 0.0 else
                f"The same call fits at a per-query epsilon of about {afford:.3g} "
                "(Gaussian conversion of its admissible share).")
            + where + " Nothing was released or spent.",
            spent=before, remaining=left, requested_total=after, reason="epsilon",
            affordable_epsilon=afford)

    def _affordable(self, q, reserved_w, plan, dlt) -> float:
        """The largest share ``c ∈ [0, 1]`` of the call's reserved weight that the filter
        admits now (bisection), and about what per-query ε that is (the Gaussian
        conversion of ``c`` times the query's zCDP cost at the call's δ)."""
        res_fp = reserved_steps(plan, q)

        def fits(c: float) -> bool:
            return self._filter.admits(self._worst(
                ((res_fp.centres, res_fp.radii, reserved_w * c),), admission=True))

        lo, hi = 0.0, 1.0
        for _ in range(14):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        if lo == 0.0:
            return 0.0
        from .accounting import eps_from_rho_delta

        rho = plan.spent.rho_per_step * plan.releases
        return eps_from_rho_delta(lo * rho, dlt)

    # ----------------------------------------------------------------------------------
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

    def _reserved(self, plan: Any, q: np.ndarray) -> tuple:
        fp = reserved_steps(plan, q)  # a public ball per step, before the bank is read
        return (fp.centres, fp.radii,
                np.broadcast_to(weights(plan.spent.step_event), (len(fp), K + 1)))

    @pins_bank
    def snapshot(self, seeds: Any, *, steps: int = 0, epsilon: float | None = None,
                 seed: Any = None, bounds: Any = None, public_seed: int = 0,
                 method: str = "brace", rounds: int = 2, cell_share: float = CELL_SHARE,
                 merge_radius: float | None = None, min_count: float | None = None,
                 seed_delta: float | None = None, cell_radius: float | None = None,
                 keep_seeds: bool = False, **kw: Any) -> Synopsis:
        """A one-shot private synopsis: private retrieval from public ``seeds``, merged
        into attractors, refined by private cell means with noisy counts, charged once
        (``docs/privacy-accounting.md`` §14). Later queries are answered from the
        returned :class:`Synopsis` by post-processing, free.

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
        seed : the noise's random draws (retrieval, then the cell rounds).
        method : ``"brace"`` or ``"global"``.
        merge_radius : radius of the merges (leader clustering; default ``r``).
        keep_seeds : cells whose noisy count is below ``min_count`` keep their centre,
            unmoved, instead of being dropped (default False). With seeds taken from
            public data, the synopsis then never has fewer attractors than the seeds
            that merge into them: at worst it is the public seeds themselves.
        cell_radius : radius ``r_c`` of the cells (default ``r``; public). Larger cells
            hold more rows each, so their noisy means are more accurate, at a coarser
            summary; the sensitivity is about ``2·r_c``.
        min_count : noisy-count threshold (default: the count noise's std times
            ``sqrt(2·log(4k))`` for ``k`` cells, so an empty cell survives with
            probability below about ``1/(4k)``).
        **kw : ``release``, ``kappa``, ``gamma`` as in :meth:`retrieve`.

        Raises :class:`BudgetExceededError` before the bank is read if no snapshot of
        this shape fits.
        """
        if method not in ("brace", "global"):
            raise ValueError(f"snapshot method must be 'brace' or 'global'; got {method!r}.")
        for k in kw:
            if k not in ("release", "kappa", "gamma"):
                raise TypeError(f"snapshot does not take {k}=.")
        T = 0 if isinstance(steps, int) and not isinstance(steps, bool) and steps == 0 \
            else check_steps(steps)
        R = check_int_at_least("rounds", rounds, 1)
        S = public_seeds(seeds, self._dim, self.radius, bounds=bounds,
                         public_seed=public_seed)
        share = float(cell_share)
        if not 0.0 < share < 1.0:
            raise ValueError(f"cell_share must be in (0, 1); got {cell_share!r}.")
        dlt = (self._budget[1] / (4.0 * S.shape[0]) if seed_delta is None
               else check_delta(seed_delta, "seed_delta"))
        mr = self.radius if merge_radius is None else check_epsilon(merge_radius,
                                                                    "merge_radius")
        r, n, b_delta = self.radius, self._fingerprint["shape"][0], self._budget[1]
        rc = r if cell_radius is None else check_epsilon(cell_radius, "cell_radius")
        unit = cell_unit(rc, n)
        sens = cell_sensitivity(rc, unit, self._dim)
        rng, seed_record = rng_and_record(seed)
        ctx = self._db.transaction() if self._db is not None else contextlib.nullcontext()
        with self._locked(), ctx:
            if self._db is not None:
                self._check_binding(self._db.meta)
                self._sync()
            total = (max(0.0, self._budget[0] - convert(self._worst(()), b_delta))
                     if epsilon is None else check_epsilon(epsilon))
            if total <= 0.0:
                raise BudgetExceededError(
                    "no budget remains for a snapshot. Nothing was released or spent.",
                    spent=self._budget[0], remaining=0.0, requested_total=math.inf)
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

                rho_cell = _largest_fitting(cell_usage, 1e-12, 1e6)
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
                                        steps=T, queries=S.shape[0], **kw)
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
            if T:
                plan = plans[eps_q]
                res = private_retrieve(self._memory, S, method=method, epsilon=eps_q,
                                       delta=dlt, steps=T, seed=rng, **kw)
                if res.privacy.rho_per_step != plan.spent.rho_per_step \
                        or not res.is_private:
                    raise RuntimeError("snapshot: the release was not calibrated as priced.")
                Y = res.outputs[:, -1]
                key = _call_key(S, T, eps_q, dlt, method, plan, kw)
                fp = footprints(plan, S, res.outputs)
                rows = [(self._record(method, S, T, eps_q, dlt, plan, res), key,
                         fp.centres, fp.radii, res.outputs,
                         getattr(res, "released_counts", None))]
                step_w = weights(plan.spent.step_event) * (S.shape[0] * T)
            else:
                Y, eps_q, dlt, rows, step_w = np.empty((0, self._dim)), 0.0, 0.0, [], 0.0
                key = hashlib.sha256(np.ascontiguousarray(S).tobytes()).hexdigest()
            # round 1's centres: the endpoints and the (public) seeds, merged at the
            # merge radius (leader clustering, densest first): post-processing
            centres = first_centres(np.concatenate([Y, S]), mr)
            sigma = sens / math.sqrt(2.0 * rho_cell)
            groups = centres.shape[0]
            released = []
            for _ in range(R):  # each round: one Gaussian release over disjoint cells
                noisy, _ = release_cell_round(self._memory, centres, rc, rho_cell, rng)
                released.append((centres, noisy))
                thr = (default_min_count(sigma / rc, centres.shape[0]) if min_count is None
                       else float(min_count))
                centres, counts = next_centres(centres, noisy, rc, mr, thr, sigma,
                                               keep_unmoved=bool(keep_seeds))
            for i, (c, v) in enumerate(released):
                rows.append(({
                    # outputs (k, 2, d): each cell's centre and noisy offset sum
                    "method": _ledger.CELLS_METHOD, "queries": int(c.shape[0]), "steps": 2,
                    "dim": self._dim, "epsilon": convert(cell_w, b_delta),
                    "delta": b_delta, "release": "cells",
                    "event": _ledger.event_to_dict(acc_events.GaussianStep(rho_cell)),
                    "params": {"radius": rc, "sensitivity": sens, "unit": unit,
                               "round": i + 1, "of": key,
                               "noisy_counts": (v[:, -1] / rc).tolist()}, "privacy": {},
                }, f"cells:{key}:{len(self._rows)}:{i}", hc[None], np.array([hr]),
                    np.concatenate([c[:, None, :], v[:, None, :-1]], axis=1),
                    None))
            if self._db is not None:
                for k_, row in enumerate(rows):
                    got = self._db.append(call_key=row[1], record=row[0], outputs=row[4],
                                          released_counts=row[5], centres=row[2],
                                          radii=row[3])
                    rows[k_] = (got.record, *row[1:])
            self._absorb([row[:4] for row in rows])
            if self._db is not None:
                self._last_id, self._last_mac = got.id, self._db.meta["head"]["mac"]
            elif T:
                self._results[len(self._rows) - len(rows)] = dataclasses.replace(
                    res, **dict.fromkeys(DIAGNOSTIC_FIELDS))
            cost = convert(step_w + cell_w * R, b_delta)
        return Synopsis(
            attractors=centres, counts=np.rint(counts).astype(np.int64), radius=r, seeds=S,
            endpoints=Y, epsilon=cost, delta=b_delta, seed_epsilon=eps_q, seed_delta=dlt,
            cell_rho=rho_cell,
            params={"method": method if T else "none",
                    "release": plan.release if T else "none", "steps": T, "rounds": R,
                    "seeds": int(S.shape[0]), "groups": int(groups), "merge_radius": mr,
                    "min_count": thr, "count_std": sigma / rc, "cell_radius": rc,
                    "keep_seeds": bool(keep_seeds),
                    "accounting": self._accounting,
                    "seed": seed_record, **{k_: repr(v) for k_, v in kw.items()}})

    def __repr__(self) -> str:
        eps, delta = self._budget
        where = f", ledger={os.fspath(self._db.path)!r}" if self._db is not None else ""
        spent = self.spent
        return (f"PrivateMemory(n={self._fingerprint['shape'][0]}, "
                f"d={self._fingerprint['shape'][1]}, radius={self._memory.radius_:g}, "
                f"budget=({eps:g}, {delta:g}), accounting={self._accounting!r}{where}; "
                f"spent {spent:.4g}, remaining {max(0.0, eps - spent):.4g})")


def _call_key(q: np.ndarray, T: int, eps: float, dlt: float, method: str, plan: Any,
              kw: dict[str, Any]) -> str:
    """SHA-256 of everything that defines a release: the queries' bytes and shape, the
    horizon, (ε, δ), the method, the plan's decisions and every other keyword."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(q, dtype=np.float64).tobytes())
    other = {k: repr(v) for k, v in sorted(kw.items())
             if k not in _PLAN_KW and k != "progress"}
    h.update(json.dumps({
        "shape": list(q.shape), "steps": T, "epsilon": float(eps).hex(),
        "delta": float(dlt).hex(), "method": method, "release": plan.release,
        "gamma": float(plan.gamma).hex(), "kappa": repr(plan.kappa),
        "projection": plan.output_projection, "accounting": plan.accounting,
        "other": other,
    }, sort_keys=True).encode())
    return h.hexdigest()


def _largest_fitting(usage: Any, lo: float, hi: float, rel: float = 1e-5) -> float:
    """The largest ``x ∈ [lo, hi]`` whose filter ``usage(x)`` is ≤ 1 (``usage``
    nondecreasing; ``inf`` where the call cannot be planned), to about a relative
    ``rel``: Brent's method on ``log usage`` against ``log x`` (nearly linear for
    Gaussian steps), then a check that the answer itself is admitted; 0.0 if ``lo`` is
    not."""
    cache: dict[float, float] = {}

    def g(t: float) -> float:
        if t not in cache:
            u = usage(math.exp(t))
            cache[t] = 700.0 if not u < math.inf else math.log(max(u, 1e-300))
        return cache[t]

    a, b = math.log(lo), math.log(hi)
    if g(a) > 0.0:
        return 0.0
    if g(b) <= 0.0:
        return hi
    t = brentq(g, a, b, xtol=rel * 0.1, rtol=1e-12, maxiter=200)
    t = min(t, b)
    step = rel
    while g(t) > 0.0 and t > a:  # land on the admitted side
        t = max(a, t - step)
        step *= 2.0
    return math.exp(t) if g(t) <= 0.0 else 0.0


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


def private_synopsis(bank: Any, *, epsilon: float, delta: float, seeds: Any,
                     radius: float | None = None, beta: float | None = None,
                     steps: int = 0, seed: Any = None, **kw: Any) -> Synopsis:
    """A one-shot ``(epsilon, delta)``-DP synopsis of ``bank``: a fresh
    :class:`PrivateMemory` with that budget (global accounting) spent on one
    :meth:`PrivateMemory.snapshot` (``docs/privacy-accounting.md`` §14). Keywords as
    :meth:`PrivateMemory.snapshot`."""
    pm = PrivateMemory(bank, radius=radius, beta=beta, budget=(epsilon, delta),
                       accounting="global")
    return pm.snapshot(seeds, steps=steps, epsilon=None, seed=seed, **kw)
