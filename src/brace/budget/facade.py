"""``PrivateMemory``: a bank that only answers privately, within one budget.

Every release is admitted by a privacy *filter* (``docs/privacy-accounting.md`` §12,
:mod:`brace.accounting.filter`) before the bank is read, and charged once released:

* ``accounting="local"`` (the default): a released step is charged only to the rows its
  public *footprint* can hold (:mod:`brace.footprints`); the filter bounds the worst pair
  of neighbouring banks.
* ``accounting="global"``: every step is charged to every row (plain composition).

A call that does not fit raises :class:`BudgetExceededError` before anything is
computed, and spends nothing. Pricing, computing and recording are one critical section
under a lock (threads); with a ``ledger`` an admitted call's charge is committed as a
*pending* row before the bank is read, and its release replaces it in a second, durable
transaction before it is returned (``docs/ledger.md`` §4.1): a process that dies between
the two leaves its call charged. A call identical
to a recorded one returns the recorded release and spends nothing (``fresh=True`` asks
for new noise and pays).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from typing import Any

import numpy as np

from .. import ledger as _ledger
from .._validation import (
    check_budget,
    check_privacy_delta,
    check_privacy_epsilon,
    check_queries,
    check_steps,
)
from ..accounting.calibration import one_shot_filter
from ..accounting.filter import FilterSpec, FootprintIndex, convert
from ..footprints import footprints
from ..ledger.backend import ledger_class
from ..mechanisms import (
    DIAGNOSTIC_FIELDS,
    PRIVATE_METHODS,
    PrivateRetrievalResult,
    run_plan,
)
from ..memory import LSRMemory, pins_bank
from ..plan import plan_release
from ..secure import SECURE_SEED_REASON
from ..steps import public_checks
from ..synopsis import Synopsis
from .admission import (
    _PLAN_KW,
    _REFUSED_KW,
    CHARGED_FAILURE,
    QUERY_DELTA_SHARE,
    Admission,
    AdmittedCallFailed,
    _call_key,
)
from .advice import Advice
from .snapshot import Snapshots
from .sync import LedgerSync

ACCOUNTINGS = ("local", "global")


class PrivateMemory(LedgerSync, Admission, Advice, Snapshots):
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
    ledger : path or ``postgresql://`` URL, optional
        SQLite ledger file, or a PostgreSQL ledger for processes on several hosts
        (``docs/ledger.md``). It persists the spend across processes and restarts, is
        bound to this bank, radius and budget, and is written before each release is
        returned. Without it the spend lives in this object only.
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
        self._records: dict[int, dict[str, Any]] = {}  # id -> record of a counted row
        self._keys: dict[str, int] = {}  # call key -> its release's id - 1
        self._results: dict[int, PrivateRetrievalResult] = {}  # (in memory) id - 1 ->
        self._pending = _ledger.PendingCharges()  # standing pending charges' terms
        self._last_id, self._last_mac = 0, ""
        self._worst_cache: tuple[int, np.ndarray] | None = None
        self._db: _ledger.Ledger | None = None
        if ledger is not None:
            spec = dataclasses.asdict(self._filter)
            spec["orders"] = list(spec["orders"])
            backend = ledger_class(ledger)  # a path: SQLite; a postgresql:// URL
            if create:
                self._db = backend.create(
                    ledger, fingerprint=self._fingerprint, budget=self._budget,
                    filter_spec=spec, key=ledger_key, timeout=self._lock_timeout)
            else:
                self._db = backend.open(ledger, key=ledger_key,
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
        """Every recorded release's record (from the ledger when there is one), and the
        record of each pending charge no release replaced (``params["pending"]``: a call
        admitted and charged that failed, died or is still running; ``docs/ledger.md``
        §4.1)."""
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
                return np.full(p.shape[0], convert(self._worst(()), self._budget[1]))
            cost = self._index.point_cost(p)
            if self._pending.open:  # standing pending charges, at their reserved balls
                side = FootprintIndex(self._dim)
                for c, r, w in self._pending.open.values():
                    side.add(c, r, w, local=False)
                cost = cost + side.point_cost(p)
        return np.array([convert(c, self._budget[1]) for c in cost])

    # ----------------------------------------------------------------------------------

    @pins_bank
    def retrieve(self, queries: Any, *, steps: int, epsilon: float,
                 delta: float | None = None, method: str = "brace", seed: Any = None,
                 fresh: bool = False, noise: str = "auto",
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
        ``noise="auto"`` (the default) draws exact discrete noise from the operating
        system's CSPRNG when no ``seed`` is given and plain seeded noise when one is
        (:func:`brace.private_retrieve`; ``docs/deploying.md``); the accounting is the
        same. The call is planned once: the plan that is priced is the plan that runs.
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
        eps = check_privacy_epsilon(epsilon)  # the ranges a ledger records (and reads)
        dlt = (check_privacy_delta(self._budget[1] * QUERY_DELTA_SHARE,
                                   "delta (by default 1 % of the budget's delta)")
               if delta is None else check_privacy_delta(delta))
        unknown = sorted(set(kw) - set(_PLAN_KW) - {"progress"})
        if unknown:
            raise TypeError(f"PrivateMemory.retrieve got unexpected keyword(s) {unknown}.")
        if noise == "secure" and seed is not None:
            raise ValueError(f"seed must be None with noise='secure': {SECURE_SEED_REASON}")
        plan_kw = {k: kw[k] for k in _PLAN_KW if k in kw}
        plan = plan_release(self._memory, method=method, epsilon=eps, delta=dlt, steps=T,
                            queries=q.shape[0], noise=noise, seeded=seed is not None,
                            **plan_kw)
        if plan.noise == "secure":
            kw = {**kw, "noise": "secure"}  # in the call key
        key = _call_key(q, T, eps, dlt, method, plan, kw)
        public_checks(plan, q)  # every public refusal (range, grid) before admission
        with self._locked():
            return self._admit_and_run(plan, q, T, eps, dlt, method, seed, kw, key, fresh)

    def _admit_and_run(self, plan, q, T, eps, dlt, method, seed, kw, key, fresh):
        """Admit (phase 1: the charge recorded as pending before the bank is read), run,
        record (phase 2: the release replaces the pending charge) — ``docs/ledger.md``
        §4.1."""
        with self._admission():
            if not fresh and key in self._keys:
                return self._repeat(self._keys[key], q)
            reserved = self._reserved(plan, q)
            worst = self._worst((reserved,), admission=True)
            if not self._filter.admits(worst):
                self._refuse(worst, reserved[2], plan, q, T, eps, dlt, method)
            pending = self._reserve([self._charge_row(plan, q, T, eps, dlt, method,
                                                      reserved, key)])
        try:  # admitted and charged: a failure from here on keeps the charge (§12)
            res = self._after_admission(run_plan, self._memory, q, plan, seed=seed,
                                        progress=kw.get("progress"))
            fp = self._after_admission(footprints, plan, q, res.outputs)
            record = self._record(method, q, T, eps, dlt, plan, res)
            counts = getattr(res, "released_counts", None)
        except Exception as exc:
            raise AdmittedCallFailed(CHARGED_FAILURE) from exc
        # write-ahead: recorded before the release is returned
        (rid,) = self._complete(pending, [(record, key, fp.centres, fp.radii, res.outputs,
                                           counts)])
        out = dataclasses.replace(res, **dict.fromkeys(DIAGNOSTIC_FIELDS))
        if self._db is None:  # in memory, the object is the only record of the outputs
            self._results[rid - 1] = out
        return out

    def _charge_row(self, plan, q, T, eps, dlt, method, reserved, key) -> tuple:
        """The row of a retrieval's admitted charge (its reserved footprints and step
        event, zero outputs), recorded as pending before the bank is read."""
        T_out = 1 if method == "endpoint" else T
        record = {"method": method, "queries": int(q.shape[0]), "steps": T,
                  "dim": self._dim, "epsilon": eps, "delta": dlt, "release": plan.release,
                  "event": _ledger.event_to_dict(plan.spent.step_event),
                  "params": {}, "privacy": {}}
        return (record, key, np.asarray(reserved[0]), np.asarray(reserved[1]),
                np.zeros((q.shape[0], T_out, self._dim)), None)

    def __repr__(self) -> str:
        eps, delta = self._budget
        where = f", ledger={os.fspath(self._db.path)!r}" if self._db is not None else ""
        spent = self.spent
        return (f"PrivateMemory(n={self._fingerprint['shape'][0]}, "
                f"d={self._fingerprint['shape'][1]}, radius={self._memory.radius_:g}, "
                f"budget=({eps:g}, {delta:g}), accounting={self._accounting!r}{where}; "
                f"spent {spent:.4g}, remaining {max(0.0, eps - spent):.4g})")



def private_synopsis(bank: Any, *, epsilon: float, delta: float, seeds: Any = None,
                     radius: float | None = None, beta: float | None = None,
                     steps: int = 0, seed: Any = None, project: Any = "choose",
                     **kw: Any) -> Synopsis:
    """A one-shot ``(epsilon, delta)``-DP synopsis of ``bank``: a fresh
    :class:`PrivateMemory` with that budget (global accounting) spent on one
    :meth:`PrivateMemory.snapshot` (``docs/privacy-accounting.md`` §14; without
    ``seeds``, §15: pass the public domain, ``bounds=(lo, hi)`` or ``ball=(c, R)``).
    Keywords as :meth:`PrivateMemory.snapshot`.

    Without seeds, or with ``steps=0``, every release is a Gaussian step priced before
    the bank is read, and the call spends the ε asked for: its filter is the one order at
    which their composition converts best, at the full δ
    (:func:`brace.accounting.calibration.one_shot_filter`), so the total ρ is the largest
    whose reported conversion ``Synopsis.epsilon`` is at most ``epsilon`` (§14, "One
    call alone"). With trajectories (``steps ≥ 1``) the budget's own filter applies.

    Without seeds, ``radius`` (and ``beta``) may be left out: the synopsis's radius — the
    one ``complete(how="lsr")`` uses — is then its private scale (the released median
    distance of the rows to their nearest centre), a choice paid for by the snapshot's
    own releases (``params["radius_rule"] == "private scale"``); with ``project``,
    ``sqrt(s² + e)``, ``s`` the scale in the subspace and ``e`` the released mean squared
    distance of a (clipped) row from the subspace (post-processing of the second
    moments).

    ``project`` (without seeds): ``None`` (the full space), ``"auto"`` or an int ``k``
    (a private subspace first, §15.1), or the default ``"choose"``: for ``d > 32``, the
    public rule of :func:`brace.budget.advice.synopsis_space` at the call's total ρ
    (:func:`brace.accounting.calibration.calibrate_one_shot`), ``n`` and ``d`` — the
    subspace where it affords more cells or the full space fewer than 50
    (``docs/benchmarks.md``, "Cluster shapes"); for ``d ≤ 32`` always the full space
    (where :meth:`PrivateMemory.recommend` may still advise the subspace: measured, the
    full space was as good or better there). With ``seeds`` leave it at ``"choose"``."""
    from ..accounting.calibration import calibrate_one_shot
    from ..projection import K_MAX
    from ..seeding import parse_domain
    from .advice import synopsis_space

    X = bank.bank if isinstance(bank, LSRMemory) else bank
    if isinstance(project, str) and project == "choose":
        project = None
        if seeds is None:  # public values only: (ε, δ) → ρ, and the bank's shape
            if np.ndim(X) == 2 and np.shape(X)[1] > K_MAX:
                n_, d_ = (int(v) for v in np.shape(X))
                _, project = synopsis_space(calibrate_one_shot(epsilon, delta)[0], n_, d_)
    if project is not None:
        kw["project"] = project

    rule = None
    if seeds is None and radius is None and beta is None:
        dim = int(np.shape(X)[1]) if np.ndim(X) == 2 else 0
        if dim < 1:
            raise ValueError("bank must be a 2-D array (n, d).")
        # a public placeholder (nothing is released with it); replaced below
        radius = min(parse_domain(kw.get("bounds"), kw.get("ball"), dim).radius, 2.0**400)
        rule = "private scale"
    pm = PrivateMemory(bank, radius=radius, beta=beta, budget=(epsilon, delta),
                       accounting="global")
    if seeds is None or (isinstance(steps, int) and steps == 0):
        pm._filter = one_shot_filter(*pm.budget)  # Gaussian steps only, priced in advance
    syn = pm.snapshot(seeds, steps=steps, epsilon=None, seed=seed, **kw)
    if rule is not None:
        scale = float(syn.params["scale"])
        pr = syn.params.get("project")
        if pr is not None:  # the subspace's scale and the mean residual off it, combined
            scale = math.sqrt(scale * scale + float(pr["residual"]))
        syn = dataclasses.replace(syn, radius=scale,
                                  params={**syn.params, "radius_rule": rule})
    return syn
