"""Admission through the privacy filter (``docs/privacy-accounting.md`` §12): the worst
pair of neighbours with a call at its reserved footprints, the refusal
(:class:`BudgetExceededError`) and what would fit, the call key of a free repeat, and
the search for the largest parameter the filter admits."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

from .. import accounting as acc_events
from .._validation import PRIVACY_FLOOR, check_privacy_epsilon
from ..accounting import eps_from_rho_delta
from ..accounting.filter import ROUNDING, K, convert
from ..footprints import reserved_radius, reserved_steps
from ..ledger.state import plural, weights

#: default per-query δ of :meth:`PrivateMemory.retrieve`: this share of the budget's δ
QUERY_DELTA_SHARE = 0.01


def record_epsilon(w: np.ndarray, delta: float) -> float:
    """A cell row's recorded ε: the conversion of its weights at ``delta``, floored at the
    smallest ε a ledger records (a tiny ρ at a large δ converts to 0; the accounting
    composes the row's event, never this field)."""
    return max(convert(w, delta), PRIVACY_FLOOR)


class BudgetExceededError(RuntimeError):
    """A release would take the privacy loss past the budget; nothing was released and
    nothing was spent. ``spent``, ``remaining`` and ``requested_total`` are ε at the
    budget's δ (``requested_total``: what the history would cost with the call at its
    reserved footprints); ``reason`` is ``"epsilon"`` or ``"delta"``;
    ``affordable_epsilon`` is the largest per-query ε of the same call that would fit
    (0 if none); ``place`` is the message's sentence naming where the most charged
    footprint lies (``""`` if none): a place earlier queries were asked at, which a
    server shows only to an admin (``docs/deploying.md``)."""

    def __init__(self, message: str, *, spent: float, remaining: float,
                 requested_total: float, reason: str = "epsilon",
                 affordable_epsilon: float = 0.0, place: str = "") -> None:
        super().__init__(message)
        self.place = place
        self.spent = spent
        self.remaining = remaining
        self.requested_total = requested_total
        self.reason = reason
        self.affordable_epsilon = affordable_epsilon


class AdmittedCallFailed(RuntimeError):
    """A call was admitted and charged, then failed while it read the bank (or while its
    release was recorded): nothing was released, and the charge it was admitted with —
    recorded before the bank was read (``docs/ledger.md`` §4.1) — stays, so the failure
    is not a free repeatable answer (``docs/privacy-accounting.md`` §12). The message is
    fixed (public); the cause is chained for the bank's owner. Inside the stated input
    ranges no call reaches it but for a failure of the ledger itself."""


#: the message of :class:`AdmittedCallFailed` (fixed: what failed may depend on the bank)
CHARGED_FAILURE = ("the call was admitted and its budget was charged, then it failed while "
                   "reading the bank; nothing was released. The charge stays recorded.")


_PLAN_KW = ("kappa", "gamma", "accounting", "output_projection", "release")
_REFUSED_KW = {
    "return_clean": "the noiseless trajectory is not private",
    "_innovations": "caller-supplied innovations carry no guarantee",
    "memory": "the bank is the PrivateMemory's own",
    "queries": "pass the queries as the first argument",
    "rng": "pass seed= (the release's random draws)",
}



class Admission:
    """Mixin: pricing a call against the filter before the bank is read."""

    def _worst(self, extra: tuple, admission: bool = False) -> np.ndarray:
        """The worst pair's weights, the standing pending charges (``_pending``: calls
        admitted, not yet completed, at their reserved footprints) and ``extra`` included;
        with ``admission`` only the filter's columns are searched (the others hold the
        global total, which bounds them too)."""
        standing = tuple(self._pending.open.values())
        if self._accounting == "global":
            out = self._index.total.copy()
            for _, _, w in (*standing, *extra):
                out += np.asarray(w).sum(axis=0)
            return out * ROUNDING
        if not extra and not admission:  # the spend: cached until a row or charge changes
            key = (len(self._index), tuple(self._pending.open))
            if self._worst_cache is None or self._worst_cache[0] != key:
                self._worst_cache = (key, self._index.worst_pair(standing))
            return self._worst_cache[1]
        cols = (*self._filter.orders, K) if admission else None
        return self._index.worst_pair((*standing, *extra), cols=cols)

    # ----------------------------------------------------------------------------------

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
            affordable_epsilon=afford, place=where.strip())

    def _affordable(self, q, reserved_w, plan, dlt) -> float:
        """The largest share ``c ∈ [0, 1]`` of the call's reserved weight that the filter
        admits now (bisection), and about what per-query ε that is (the Gaussian
        conversion of ``c`` times the query's zCDP cost at the call's δ)."""
        res_fp = reserved_steps(plan, q)

        def fits(c: float, w: np.ndarray) -> bool:
            return self._filter.admits(self._worst(
                ((res_fp.centres, res_fp.radii, w * c),), admission=True))

        def largest(w: np.ndarray) -> float:
            lo, hi = 0.0, 1.0
            for _ in range(14):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if fits(mid, w) else (lo, mid)
            return lo

        lo = largest(reserved_w)
        if lo == 0.0 and plan.gamma > 0.0:
            # a smooth release's weight is infinite past its largest order α_max(γ), so no
            # share of it fits a filter whose orders lie beyond; a smaller ε would choose a
            # smaller γ: estimate with the γ → 0 limit, the Gaussian of the same ρ
            lo = largest(np.broadcast_to(
                weights(acc_events.GaussianStep(plan.spent.rho_per_step)),
                reserved_w.shape))
        if lo == 0.0:
            return 0.0
        rho = plan.spent.rho_per_step * plan.releases
        return eps_from_rho_delta(lo * rho, dlt)

    # ----------------------------------------------------------------------------------

    def _reserved(self, plan: Any, q: np.ndarray) -> tuple:
        fp = reserved_steps(plan, q)  # a public ball per step, before the bank is read
        return (fp.centres, fp.radii,
                np.broadcast_to(weights(plan.spent.step_event), (len(fp), K + 1)))

    def _snapshot_total(self, epsilon: Any) -> float:
        """What a snapshot may spend: ``epsilon`` (checked as a ledger records it), or all
        that remains when None; refused (nothing spent) when nothing remains."""
        total = (max(0.0, self._budget[0] - convert(self._worst(()), self._budget[1]))
                 if epsilon is None else check_privacy_epsilon(epsilon))
        if total <= 0.0:
            raise BudgetExceededError(
                "no budget remains for a snapshot. Nothing was released or spent.",
                spent=self._budget[0], remaining=0.0, requested_total=math.inf)
        return total

    def _after_admission(self, fn: Any, /, *args: Any, **kw: Any) -> Any:
        """``fn(*args, **kw)``: a part of an admitted call that reads the bank (a hook:
        :class:`brace.serve.ServedMemory` hides what an error there says), under a fixed
        floating-point error state: no caller's ``np.seterr`` turns a data-dependent
        underflow into an error, and no data-dependent warning is printed."""
        with np.errstate(all="ignore"):
            return fn(*args, **kw)



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


def _largest_fitting(usage: Any, lo: float, hi: float, rel: float = 1e-5,
                     hint: float | None = None, exact: bool = False) -> float:
    """The largest ``x ∈ [lo, hi]`` whose filter ``usage(x)`` is ≤ 1 (``usage``
    nondecreasing; ``inf`` where the call cannot be planned), to about a relative
    ``rel``: Brent's method on ``log usage`` against ``log x`` (nearly linear for
    Gaussian steps), then a check that the answer itself is admitted; 0.0 if ``lo`` is
    not.

    ``hint`` (a public earlier answer, e.g. before the last release) only narrows the
    bracket: the search first tries the hint's neighbour at a relative ``rel``, then
    secant steps (at most four, then steps growing ×8) to a point just across the
    answer, so an answer that did not move costs one or two trials and one that moved
    a little about three, instead of some thirty over ``[lo, hi]``. What is returned
    satisfies the same contract either way (the largest admitted ``x`` to a relative
    ``rel``, itself admitted). ``exact`` (without a hint): Brent's method runs on to the
    rounding level (a trial or two more), so that what spending the answer leaves of the
    filter is at that level and a later search for what fits finds nothing, not a scrap
    (a call that spends what remains)."""
    cache: dict[float, float] = {}

    def g(t: float) -> float:
        if t not in cache:
            u = usage(math.exp(t))
            cache[t] = 700.0 if not u < math.inf else math.log(max(u, 1e-300))
        return cache[t]

    a, b = math.log(lo), math.log(hi)
    xtol = rel * 0.1
    if hint is not None and lo < hint < hi:
        # first the nearest neighbour of the hint (an answer that did not move, or
        # moved across a jump of usage, e.g. where the release mode changes); then
        # secant steps on log usage against log x through the last two trials, each
        # landing just past the root it predicts, and the neighbour back across it
        h, xtol = math.log(hint), rel * 0.5
        up = g(h) <= 0.0  # the answer is at or above the hint: step up to a refusal
        side = 1.0 if up else -1.0

        def crossed(t: float) -> bool:  # t is on the far side of the answer
            return (g(t) > 0.0) == up

        near, prev, nxt = h, None, h + side * rel
        for trial in range(64):  # ×8 growth reaches any end of [lo, hi] well before
            nxt = min(max(nxt, a), b)
            if nxt in (a, b) or crossed(nxt):
                break
            prev, near = near, nxt
            slope = (g(near) - g(prev)) / (near - prev)
            root = near - g(near) / slope if 0.25 < slope < 16.0 else math.nan
            if trial < 4 and math.isfinite(root) and side * (root - near) > 0.0:
                nxt = root + side * 0.5 * rel
            else:
                nxt = near + side * max(8.0 * abs(near - prev), 0.5 * abs(g(near)))
        else:  # pragma: no cover - the steps grow ×8 from the fifth on
            nxt = b if up else a
        far = nxt
        if abs(far - near) > 1.01 * rel and far not in (a, b):  # confirm just back across
            back = far - side * 0.9 * rel
            if crossed(back):
                far = back
            else:
                near = back
        a, b = (near, far) if up else (far, near)
    if g(a) > 0.0:
        return 0.0
    if g(b) <= 0.0:  # only b = log(hi) can be admitted here: the value it priced
        return math.exp(b)
    if b - a <= 2.0 * xtol:
        return math.exp(a)
    polish = exact and hint is None  # log usage is nearly linear in log x: cheap
    rtol = 4.0 * np.finfo(float).eps if polish else 1e-12
    xtol = 1e-14 if polish else xtol
    from scipy.optimize import brentq  # lazy (as in accounting.calibration)

    t = brentq(g, a, b, xtol=xtol, rtol=rtol, maxiter=200)
    t = min(t, b)
    step = 2.0 * (xtol + rtol * abs(t)) if polish else rel
    while g(t) > 0.0 and t > a:  # land on the admitted side
        t = max(a, t - step)
        step *= 2.0
    return math.exp(t) if g(t) <= 0.0 else 0.0
