"""Low bits of plain noise: a *certain* distinguisher against numpy's float64 normals.

``docs/audit.md``, "Low bits of plain noise". Plain mode (``noise="plain"``) releases
``Y = fl(p + fl(s·ξ))`` (then, where it does not bind, the projection
``fl(q + fl(Y − q))``), with ``ξ`` from numpy's ``Generator.standard_normal``. numpy's
ziggurat (``random_standard_normal`` in ``numpy/random/src/distributions/distributions.c``)
draws one 64-bit word ``w``, takes the layer ``i = w & 0xff``, a sign bit and a 52-bit
integer ``k``, and returns ``±fl(k·wi[i])`` — unless ``k`` falls outside the layer's
rectangle, where it returns the same value after a wedge test or, in layer 0, a tail
value of magnitude at least ``r = 3.654…``. So every value it can return is in

    P = {±fl(k·wi[i]) : 0 ≤ i < 256, 0 ≤ k < 2^52}  ∪  {ξ : |ξ| ≥ r}

(a superset of its support: it keeps the wedge and counts layer 0's points beyond its
rectangle, so a value outside ``P`` is certainly impossible). ``P`` is porous at the scale
of the last bits: where few layers reach (``|ξ|`` near ``r``) or where ``ξ`` is small
(its ulp is finer than the layers' steps), many doubles are not in it.

The attacker knows two neighbouring banks, the public query, the release's parameters and
its public noise std ``s``; not the seed. For a released coordinate ``Y`` and a bank's
pre-noise point ``p`` it computes the exact set of ``ξ`` with ``fl(p + fl(s·ξ)) == Y``
(an interval of doubles: each rounding is monotone, so the preimages are found by
bisection on the ordered bit patterns) and asks whether the interval meets ``P``. A
release is *consistent* with a bank when every coordinate's interval meets ``P``; a bank
is *identified* when the release is consistent with it and not with the other — never
wrongly, since the true bank is always consistent (the tests assert it).

Most identifications need no ziggurat at all: the interval is often *empty*. ``fl(s·ξ)``
does not reach every double — where the product's exponent does not grow, consecutive
``ξ`` land ``m`` ulps apart (``m ∈ [1, 2)`` the mantissa of ``s``), skipping a share of
about ``(1 − 1/m)(2 − m)`` of the doubles (17 % at ``m = √2``, none for a power of two) —
and which doubles ``fl(p + ·)`` then reaches depends on ``p``. :class:`Verdict` records
this "any double" test beside the ziggurat one.

``wi`` (numpy's ``wi_double``) is not exposed in Python: :func:`recover_wi` recovers it
exactly from a known-seed generator (the raw PCG64 words against the normals drawn from
the same state), and :func:`check_wi` re-predicts fresh normals bit for bit.

Secure mode (``noise="secure"``) releases ``g·(u + Z)`` with ``Z`` an exact discrete
Gaussian (full support on ℤ) and a public power-of-two grid ``g`` that, for the global and
count releases, is a function of public values only: a release is consistent with a bank
iff every coordinate is an integer multiple of ``g`` — the same answer under every bank
(:func:`consistent_secure`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

import brace

__all__ = [
    "R_TAIL",
    "Verdict",
    "attack",
    "check_wi",
    "consistent_secure",
    "history",
    "neighbour_banks",
    "preimage",
    "producible",
    "public_grid",
    "recover_wi",
    "trace",
    "windows",
]

R_TAIL = 3.6541528853610088  # numpy's ziggurat_nor_r: tail values have |ξ| ≥ R_TAIL
_K_MAX = 2**52 - 1  # the 52-bit integer k of a ziggurat draw
_MASK = np.int64(0x7FFF_FFFF_FFFF_FFFF)


# --- numpy's ziggurat: the layer widths wi[i], recovered exactly ----------------------------

def _split(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A raw 64-bit word's layer ``i``, sign bit and 52-bit integer ``k``."""
    w = np.asarray(words, dtype=np.uint64)
    idx = (w & np.uint64(0xFF)).astype(np.intp)
    sign = ((w >> np.uint64(8)) & np.uint64(1)).astype(bool)
    k = ((w >> np.uint64(9)) & np.uint64(_K_MAX)).astype(np.int64)
    return idx, sign, k


def _fast_path_pairs(seed: int, n: int, block: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """At least ``n`` (raw word, normal) pairs, each normal drawn from that one word.

    Two PCG64 generators with the same seed: one gives raw words, the other normals. A
    block of ``block`` normals whose draw consumed exactly ``block`` words (the states
    agree after it) took the fast path in every draw (the wedge and tail paths read
    further words); other blocks are dropped and the raw generator resynchronised."""
    raw_bg = np.random.PCG64(seed)
    norm_bg = np.random.PCG64(seed)
    gen = np.random.Generator(norm_bg)
    words, xs, got = [], [], 0
    while got < n:
        w = raw_bg.random_raw(block)
        x = gen.standard_normal(block)
        if raw_bg.state == norm_bg.state:
            words.append(w)
            xs.append(x)
            got += block
        else:
            raw_bg.state = norm_bg.state
    return np.concatenate(words), np.concatenate(xs)


def _wedge_pairs(seed: int, layer: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (first word, normal) pairs of draws in ``layer`` that read exactly two words.

    A draw reads one word on the fast path; two when its first word fails the rectangle
    test and passes the wedge test (one uniform more) — and then returns the same
    ``±fl(k·wi[i])`` of its first word; the tail reads three or more. numpy's layer 1
    never takes the fast path, so its width comes from these draws. One draw at a time."""
    raw_bg = np.random.PCG64(seed)
    norm_bg = np.random.PCG64(seed)
    gen = np.random.Generator(norm_bg)
    words, xs = [], []
    while len(words) < n:
        x = gen.standard_normal()
        target = norm_bg.state
        w = raw_bg.random_raw(2)
        if int(w[0]) & 0xFF == layer and raw_bg.state == target:
            words.append(w[0])
            xs.append(x)
        raw_bg.state = target
    return np.array(words, dtype=np.uint64), np.array(xs)


def _exact_pairs(seed: int, n: int, n_wedge: int) -> tuple[np.ndarray, np.ndarray]:
    """Fast-path pairs (:func:`_fast_path_pairs`) and two-word draws of layer 1."""
    w, x = _fast_path_pairs(seed, n)
    w1, x1 = _wedge_pairs(seed + 1, 1, n_wedge)
    return np.concatenate([w, w1]), np.concatenate([x, x1])


def recover_wi(seed: int = 20240611, n: int = 1 << 16, n_wedge: int = 32) -> np.ndarray:
    """numpy's ``wi_double`` table (256 doubles), recovered exactly.

    For each layer ``i``, draws that returned ``±fl(k·w)`` from their first word (fast
    path; layer 1: wedge, :func:`_wedge_pairs`) give ``|x| = fl(k·w)``; the candidates for
    ``w`` are the doubles within 8 ulps of ``|x|/k`` at the largest ``k`` seen, and the
    table entry is the one candidate with ``fl(k·w) == |x|`` for every draw of the layer.
    Raises if some layer has no or several candidates (draw more)."""
    words, x = _exact_pairs(seed, n, n_wedge)
    idx, _, k = _split(words)
    ax = np.abs(x)
    wi = np.empty(256)
    for i in range(256):
        sel = (idx == i) & (k > 0)
        if not np.any(sel):
            raise RuntimeError(f"no draws in layer {i}; increase n")
        ki, xi = k[sel].astype(np.float64), ax[sel]
        j = int(np.argmax(ki))
        w0 = xi[j] / ki[j]
        cands = [w0]
        lo = hi = w0
        for _ in range(8):
            lo, hi = np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)
            cands += [lo, hi]
        ok = [w for w in cands if np.array_equal(ki * w, xi)]
        if len(ok) != 1:
            raise RuntimeError(f"layer {i}: {len(ok)} consistent widths; increase n")
        wi[i] = ok[0]
    return wi


def predict(words: np.ndarray, wi: np.ndarray) -> np.ndarray:
    """The normals numpy's fast path returns for raw words: ``±fl(k·wi[i])``."""
    idx, sign, k = _split(words)
    x = k.astype(np.float64) * wi[idx]
    return np.where(sign, -x, x)


def check_wi(wi: np.ndarray, seed: int, n: int = 1 << 15, n_wedge: int = 16
             ) -> tuple[int, int]:
    """Re-predict fresh normals from their raw words (``n`` fast-path draws and
    ``n_wedge`` two-word draws of layer 1): (checked, exact)."""
    words, x = _exact_pairs(seed, n, n_wedge)
    pred = predict(words, wi)
    exact = (pred == x) & (np.signbit(pred) == np.signbit(x))
    return int(x.size), int(np.sum(exact))


# --- exact preimages of monotone float maps ---------------------------------------------------

def _key(x: np.ndarray) -> np.ndarray:
    """Doubles to int64 keys in the same order (−0.0 just below +0.0)."""
    b = np.ascontiguousarray(x, dtype=np.float64).view(np.int64)
    return b ^ ((b >> 63) & _MASK)


def _val(k: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_key`."""
    k = np.ascontiguousarray(k, dtype=np.int64)
    return (k ^ ((k >> 63) & _MASK)).view(np.float64)


def _first(pred: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Smallest key ``k`` (elementwise) with ``pred(value(k))`` for a predicate monotone in
    the value, false at −∞ and true at +∞: bisection over every non-NaN double."""
    lo = np.full(shape, _key(np.array(-np.inf)), dtype=np.int64)
    hi = np.full(shape, _key(np.array(np.inf)), dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        while True:
            act = lo + 1 < hi
            if not act.any():
                return hi
            mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)
            t = pred(_val(mid))
            hi = np.where(act & t, mid, hi)
            lo = np.where(act & ~t, mid, lo)


def preimage(f: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``{x : lo ≤ f(x) ≤ hi}`` for ``f`` monotone non-decreasing in floating point
    (elementwise, with ±∞ mapped to ±∞): ``(a, b, nonempty)``, the interval's first and
    last doubles."""
    lo, hi = np.broadcast_arrays(np.asarray(lo, float), np.asarray(hi, float))
    ka = _first(lambda x: f(x) >= lo, lo.shape)
    kb = _first(lambda x: f(x) > hi, lo.shape) - 1
    return _val(ka), _val(kb), ka <= kb


# --- the porous set P -------------------------------------------------------------------------

def producible(a: np.ndarray, b: np.ndarray, wi: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Whether ``[a, b]`` (doubles, ``a ≤ b``) contains a value numpy's ziggurat can return
    (a member of ``P``, module docstring), elementwise.

    Per layer, the smallest ``k`` with ``fl(k·w) ≥ a`` lies within ``floor(a/w) − 1 …
    floor(a/w) + 3`` (the division is off by under one step and the product's rounding by
    under half a step), and the interval meets the layer iff that ``fl(k·w) ≤ b``; six
    ``k`` per layer are tried."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    shape = a.shape
    a, b = a.ravel(), b.ravel()
    out = (a <= 0) & (b >= 0)  # 0 = fl(0·w)
    neg = b < 0
    lo = np.where(neg, -b, a)
    hi = np.where(neg, -a, b)
    out |= hi >= R_TAIL  # the tail: anything (conservative)
    # wide windows meet the widest layer reaching past the tail cut: a shortcut only
    reach = wi * _K_MAX >= R_TAIL
    w_big = float(wi[reach].max())
    out |= (hi - lo) >= 4.0 * w_big
    todo = np.flatnonzero(~out)
    kmax = float(_K_MAX)
    for s in range(0, todo.size, chunk):
        j = todo[s:s + chunk]
        lj, hj = lo[j, None], hi[j, None]
        k0 = np.floor(lj / wi[None, :])
        hit = np.zeros(j.size, dtype=bool)
        for off in (-2.0, -1.0, 0.0, 1.0, 2.0, 3.0):
            k = np.clip(k0 + off, 0.0, kmax)
            v = k * wi[None, :]
            hit |= np.any((v >= lj) & (v <= hj), axis=1)
        out[j] = hit
    return out.reshape(shape)


# --- consistency of a release with a bank -----------------------------------------------------

def windows(Y: np.ndarray, pre: np.ndarray, s: np.ndarray, *,
            centre: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per coordinate, every double ``ξ`` with ``fl(p + fl(s·ξ)) == Y``: ``(lo, hi,
    nonempty)``, an interval (each rounding is monotone). With ``centre`` (the
    projection's centre, where it did not bind) ``Y = fl(c + fl(y − c))``, ``y`` as
    before. Arrays broadcast."""
    Y, pre, s = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (Y, pre, s)))
    ok = np.ones(Y.shape, dtype=bool)
    ylo, yhi = Y, Y
    if centre is not None:
        c = np.broadcast_to(np.asarray(centre, dtype=np.float64), Y.shape)
        ylo, yhi, ne = preimage(lambda y: c + (y - c), Y, Y)
        ok &= ne
    vlo, vhi, ne = preimage(lambda v: pre + v, ylo, yhi)
    ok &= ne
    xlo, xhi, ne = preimage(lambda x: s * x, vlo, vhi)
    ok &= ne
    return np.where(ok, xlo, 0.0), np.where(ok, xhi, 0.0), ok


def consistent_secure(outputs: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Per query: every released coordinate an integer multiple of the public grid (below
    2^52 units) — the support of a secure release under *every* bank, since the discrete
    Gaussian gives every integer positive probability."""
    k = outputs / grid[..., None]
    return np.all((k == np.rint(k)) & (np.abs(k) < 2.0**52), axis=(1, 2))


def _only(this: str, other: str, doc: str) -> property:
    """The mask ``this & ~other``: where the first of two masks holds and the other not."""
    return property(lambda v: getattr(v, this) & ~getattr(v, other), doc=doc)


@dataclass(frozen=True)
class Verdict:
    """Per query of a release against banks A and B: ``consistent_*`` — every coordinate
    reachable with a value numpy's ziggurat returns (the attack); ``reachable_*`` — with
    any double ``ξ`` (what the float arithmetic ``fl(p + fl(s·ξ))`` alone reveals, for
    comparison). The true bank is always consistent; ``identified_*`` names a bank only
    when the release is impossible under the other."""

    consistent_a: np.ndarray
    consistent_b: np.ndarray
    reachable_a: np.ndarray
    reachable_b: np.ndarray

    identified_a = _only("consistent_a", "consistent_b", "Identified as A by the attack.")
    identified_b = _only("consistent_b", "consistent_a", "Identified as B by the attack.")
    identified_any_a = _only("reachable_a", "reachable_b",
                             "Identified as A from the arithmetic alone (any double ξ).")
    identified_any_b = _only("reachable_b", "reachable_a",
                             "Identified as B from the arithmetic alone (any double ξ).")


def neighbour_banks(d: int, *, n: int = 100, radius: float = 1.0, offset: float = 0.0,
                    seed: int = 0) -> tuple[brace.LSRMemory, brace.LSRMemory, np.ndarray]:
    """Two neighbouring banks and a public query: ``n`` rows uniform in the ball of radius
    ``0.8·radius`` around the query ``(offset, …, offset)`` (so the query's gate holds
    the whole bank); bank B replaces row 0 by its reflection through the query, which
    moves the gate mean at the query in every coordinate. Returns ``(A, B, q)``,
    ``q`` of shape (1, d)."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    X = offset + u * (0.8 * radius * rng.uniform(0.0, 1.0, (n, 1)) ** (1.0 / d))
    q = np.full((1, d), float(offset))
    Xb = X.copy()
    Xb[0] = 2.0 * q[0] - X[0]
    return brace.LSRMemory(X, radius=radius), brace.LSRMemory(Xb, radius=radius), q


PROJECTION_SLACK = 1e-9  # ‖Y − q‖ below (1 − slack)·R: the projection did not bind


def history(res: brace.PrivateRetrievalResult) -> np.ndarray:
    """``Y_0 = q, Y_1, …, Y_{T−1}``: the public centres of the release's steps."""
    return np.concatenate([res.queries[:, None, :], res.outputs[:, :-1]], axis=1)


def trace(res: brace.PrivateRetrievalResult, memory: brace.LSRMemory, *, epsilon: float,
          delta: float, **kw) -> tuple[np.ndarray, np.ndarray]:
    """A bank's pre-noise points ``(Q, T, d)``, sensitivities ``(Q, T)`` and plan along the
    released history: :func:`brace.certificate` with the release's plan arguments ``kw``
    (``release``, ``gamma``, ``kappa``), evaluated on the release's whole batch of
    queries, as the release computed it (a gate pass's sums may round differently in
    another batch)."""
    T = res.outputs.shape[1]
    proj = res.params["output_projection"]
    noise = res.params.get("noise", "plain")
    cert = brace.certificate(memory, res.queries, history(res), method=res.method, steps=T,
                             epsilon=epsilon, delta=delta, released_counts=res.released_counts,
                             output_projection=proj, noise=noise, **kw)
    plan = brace.plan_release(memory, method=res.method, epsilon=epsilon, delta=delta,
                              steps=T, output_projection=proj,
                              queries=res.queries.shape[0], noise=noise, **kw)
    return cert.pre_noise, cert.noise_scale, plan


def public_grid(res: brace.PrivateRetrievalResult, memory: brace.LSRMemory, *,
                epsilon: float, delta: float, **kw) -> np.ndarray:
    """The secure grid ``(Q, T)`` a bank's certificate gives along the released history
    (``brace.steps.secure_grid`` of the plan and the step's sensitivity)."""
    from brace.steps import secure_grid

    _, sens, plan = trace(res, memory, epsilon=epsilon, delta=delta, **kw)
    return np.stack([secure_grid(plan, sens[:, t]) for t in range(sens.shape[1])], axis=1)


def attack(res: brace.PrivateRetrievalResult, banks: Sequence[brace.LSRMemory],
           wi: np.ndarray, *, epsilon: float, delta: float,
           public_std: bool = True, **kw) -> Verdict:
    """The attack on a release against two banks (``banks``: A, B).

    Plain (``wi``, :func:`recover_wi`): every coordinate of every step must be reachable
    from the bank's pre-noise point with the step's std — ``res.noise_std`` when
    ``public_std`` (global, the count release: checked equal to each bank's certificate
    times the noise multiplier), else each bank's own (the smooth release). A step whose
    projection may have bound (``‖Y_t − q‖ ≥ (1 − 1e-9)(t+1)r``) is skipped. Secure:
    every coordinate a multiple of the grid each bank's certificate gives
    (:func:`public_grid`, :func:`consistent_secure`; ``wi`` unused): a grid that
    depended on the bank would name it. ``kw``: the release's plan arguments
    (``release``, ``gamma``, ``kappa``)."""
    if res.params.get("noise") == "secure":
        ok_a, ok_b = (consistent_secure(res.outputs, public_grid(
            res, m, epsilon=epsilon, delta=delta, **kw)) for m in banks)
        return Verdict(ok_a, ok_b, ok_a.copy(), ok_b.copy())
    Q, T, d = res.outputs.shape
    r = res.params["radius"]
    proj = res.params["output_projection"]
    q = res.queries
    free = np.ones((Q, T), dtype=bool)
    if proj:
        R = (np.arange(1, T + 1) + 1) * r
        free = np.linalg.norm(res.outputs - q[:, None, :], axis=2) < (1 - PROJECTION_SLACK) * R
    out = []
    for mem in banks:
        pre, sens, plan = trace(res, mem, epsilon=epsilon, delta=delta, **kw)
        std = sens * plan.noise_multiplier
        if public_std:
            if not np.array_equal(std, res.noise_std):
                raise AssertionError("the public noise std is not the certificate's")
            std = res.noise_std
        lo, hi, ne = windows(res.outputs, pre, std[:, :, None],
                             centre=q[:, None, :] if proj else None)
        hit = ne & producible(lo, hi, wi)
        skip = ~free[:, :, None]
        out += [np.all(hit | skip, axis=(1, 2)), np.all(ne | skip, axis=(1, 2))]
    return Verdict(out[0], out[2], out[1], out[3])
