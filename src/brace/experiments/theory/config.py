"""The configuration of the theory checks: the items and their parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..._validation import (
    check_delta,
    check_epsilon,
    check_int_at_least,
    check_nonnegative,
    check_positive,
    check_rng,
)
from ...mechanisms import no_correction_kappa

ITEMS = ("dimension", "horizon", "activation", "root_n", "correction_cost")


@dataclass(frozen=True)
class TheoryConfig:
    """Parameters of all five items (``None`` κ grids: the built-in defaults).

    Shared: bank size ``n``, radius ``r``, horizon ``steps`` (T), budget
    ``(epsilon, delta)``, BRACE threshold ``kappa`` (items 1–2), ``replications``
    (queries, each with its own noise draw, per cell), ``query_spread`` (queries are a
    random memory plus ``N(0, spread²)`` in the two mixture coordinates).
    """

    n: int = 256
    radius: float = 0.8
    steps: int = 5
    epsilon: float = 128.0
    delta: float = 1e-5
    kappa: float = 0.0
    replications: int = 500
    query_spread: float = 0.35
    off_plane_std: float = 0.1  # total std of the d − 2 extra coordinates (item 1)
    # 1. dimension
    dims: tuple = (2, 8, 32, 128, 512)
    # 2. horizon
    horizons: tuple = (1, 2, 3, 5, 8, 12)
    horizon_dim: int = 2
    # 3. activation
    activation_kappas: tuple | None = None  # None: (0, 0.01, 1, (2T+1)²/T)
    activation_dims: tuple = (2, 32, 512)
    # 4. root-n transition
    root_n_sizes: tuple = (100, 1000, 10_000, 100_000)
    root_n_alphas: tuple = (0.3, 0.5, 0.7)
    root_n_epsilon: float = 32.0
    root_n_gamma: float = 0.5
    root_n_steps: int = 3
    root_n_replications: int = 1000
    # 5. correction cost
    cost_kappas: tuple | None = None  # None: 0, 10^-3 … 10, (2T+1)²/T
    cost_replications: int = 1000
    data_seed: int = 0
    seed: int = 1
    accounting: str = "rdp"
    quick: bool = False

    @property
    def kappa_max(self) -> float:
        """``(2T+1)²/T`` (a hair above, for rounding): with the projection no bank activates."""
        return no_correction_kappa(self.steps)

    def activation_grid(self) -> tuple:
        if self.activation_kappas is not None:
            return tuple(self.activation_kappas)
        return (0.0, 0.01, 1.0, self.kappa_max)

    def cost_grid(self) -> tuple:
        if self.cost_kappas is not None:
            return tuple(self.cost_kappas)
        return (0.0, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0, self.kappa_max)

    def validate(self) -> TheoryConfig:
        """Check every field; raise ValueError/TypeError naming the field and value."""
        check_int_at_least("n", self.n, 2)
        check_positive("radius", self.radius)
        check_int_at_least("steps", self.steps, 1)
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        check_nonnegative("kappa", self.kappa, allow_inf=True)
        check_int_at_least("replications", self.replications, 2)
        check_nonnegative("query_spread", self.query_spread)
        check_nonnegative("off_plane_std", self.off_plane_std)
        for name in ("dims", "horizons", "activation_dims", "root_n_sizes", "root_n_alphas"):
            if len(getattr(self, name)) == 0:
                raise ValueError(f"{name} must not be empty. Found {getattr(self, name)!r}.")
        for d in self.dims + self.activation_dims:
            check_int_at_least("dims", d, 2)
        for T in self.horizons:
            check_int_at_least("horizons", T, 1)
        check_int_at_least("horizon_dim", self.horizon_dim, 2)
        for k in self.activation_grid() + self.cost_grid():
            check_nonnegative("kappa grid", k, allow_inf=True)
        for s in self.root_n_sizes:
            check_int_at_least("root_n_sizes", s, 4)
        for a in self.root_n_alphas:
            if not 0.0 < check_positive("root_n_alphas", a) < 1.0:
                raise ValueError(f"root_n_alphas must lie in (0, 1). Found {a}.")
        check_epsilon(self.root_n_epsilon, "root_n_epsilon")
        check_positive("root_n_gamma", self.root_n_gamma)
        check_int_at_least("root_n_steps", self.root_n_steps, 1)
        check_int_at_least("root_n_replications", self.root_n_replications, 2)
        check_int_at_least("cost_replications", self.cost_replications, 2)
        if self.accounting not in ("rdp", "paper"):
            raise ValueError(f"accounting must be 'rdp' or 'paper'. Found {self.accounting!r}.")
        check_rng(self.seed)
        check_rng(self.data_seed)
        return self


def quick_config(**overrides: Any) -> TheoryConfig:
    """A small configuration that exercises every item, figure and table (tests, CI)."""
    base = dict(
        n=64, replications=12, dims=(2, 512), horizons=(1, 3), activation_dims=(2, 512),
        root_n_sizes=(100, 1000), root_n_replications=60, cost_replications=24,
        cost_kappas=(0.0, 0.01, 1.0, TheoryConfig().kappa_max), quick=True,
    )
    base.update(overrides)
    return TheoryConfig(**base)
