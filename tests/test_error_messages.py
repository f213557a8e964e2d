"""One error-message style across the package: name the argument, echo the value, say
how to fix it (a requirement such as "must be > 0", or an instruction such as "use …").

The cases below sample raise sites of every layer: validation helpers, the memory, the
mechanisms, the accounting, UQ, the audit, the experiments and the CLI helpers.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from brace import LSRMemory, accounting, policy, private_retrieve
from brace._io import load_npy
from brace.audit import AuditConfig
from brace.audit.pairs import _given_pair
from brace.audit.stats import clopper_pearson_upper, epsilon_lower_bound
from brace.cli._args import check_output_file, parse_vector
from brace.datasets import MixtureSpec
from brace.experiments._common import mean_ci95
from brace.uq import analyze

X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
Q = np.array([[0.1, 0.1]])
MEM = LSRMemory(X, radius=1.0)
FIX = re.compile(r"\b(must|use|pass|give|need|needs|set|choose|replace|supported|expected"
                 r"|at least|at most|one of)\b", re.IGNORECASE)


def _retrieve(**kw):
    args = {"method": "global", "epsilon": 1.0, "delta": 1e-5, "steps": 2, "seed": 0}
    return private_retrieve(MEM, Q, **{**args, **kw})


def _audit(**kw):
    return AuditConfig(**{"method": "global", "epsilon": 1.0, "steps": 1,
                          "radius": 1.0, **kw}).validated()


# (call, argument name, echoed value, exception type)
CASES = [
    (lambda: LSRMemory(X, radius=-0.5).radius_, "radius", "-0.5", ValueError),
    (lambda: LSRMemory(X, beta=0.0).beta_, "beta", "0.0", ValueError),
    (lambda: LSRMemory(X, radius=1.0, beta=2.0).radius_, "beta", "2.0", ValueError),
    (lambda: MEM.retrieve(Q, 0), "steps", "0", ValueError),
    (lambda: MEM.retrieve(Q, 2.5), "steps", "2.5", TypeError),
    (lambda: MEM.retrieve(np.ones(3), 1), "queries", "d = 3", ValueError),
    (lambda: LSRMemory(np.full((2, 2), np.nan), radius=1.0).retrieve(Q, 1), "bank",
     "non-finite", ValueError),
    (lambda: _retrieve(method="laplace"), "method", "'laplace'", ValueError),
    (lambda: _retrieve(epsilon=-1.0), "epsilon", "-1.0", ValueError),
    (lambda: _retrieve(delta=1.5), "delta", "1.5", ValueError),
    (lambda: _retrieve(kappa=-2.0), "kappa", "-2.0", ValueError),
    (lambda: _retrieve(accounting="zcdp"), "accounting", "'zcdp'", ValueError),
    (lambda: _retrieve(seed=-3), "seed", "-3", ValueError),
    (lambda: _retrieve(seed="abc"), "seed", "'abc'", TypeError),
    (lambda: _retrieve(steps=10**6), "steps", "1000000", ValueError),
    (lambda: _retrieve(epsilon=None), "epsilon", "None", ValueError),
    (lambda: _retrieve(delta=None, seed=None), "delta", "None", ValueError),
    (lambda: accounting.calibrate(1.0, 1e-5, 3, dim=2, accounting="zcdp"), "accounting",
     "'zcdp'", ValueError),
    (lambda: policy.choose_gamma(1.0, 1e-5, 3, dim=2, fraction=2.0), "fraction", "2.0",
     ValueError),
    (lambda: accounting.calibrate(1.0, 1e-5, 3, dim=384, gamma=0.5), "gamma", "0.5",
     ValueError),
    (lambda: accounting.RdpAccountant().rdp(0.5), "alpha", "0.5", ValueError),
    (lambda: _audit(method="laplace"), "method", "'laplace'", ValueError),
    (lambda: _audit(alpha=1.5), "alpha", "1.5", ValueError),
    (lambda: _audit(seed=-1), "seed", "-1", ValueError),
    (lambda: _given_pair(X, Q[0], 1.0, 5), "replacement", "5", TypeError),
    (lambda: _given_pair(X, Q[0], 1.0, (7, [0.0, 0.0])), "replacement row", "7", ValueError),
    (lambda: _given_pair(X, Q[0], 1.0, (0, [np.inf, 0.0])), "replacement value", "inf",
     ValueError),
    (lambda: clopper_pearson_upper(5, 3, 0.05), "k", "k=5", ValueError),
    (lambda: epsilon_lower_bound(1.5, 0.1, 0.0), "fpr_upper", "1.5", ValueError),
    (lambda: MixtureSpec(stds=((1.0, 1.0), (0.0, 1.0), (1.0, 1.0))).arrays(), "stds",
     "0.0", ValueError),
    (lambda: mean_ci95([1.0, -2.0], nonnegative=True), "nonnegative", "-2", ValueError),
    (lambda: parse_vector("1,x", "--replace-value"), "--replace-value", "'1,x'", ValueError),
    (lambda: load_npy("/nonexistent/bank.npy", "bank"), "bank", "/nonexistent/bank.npy",
     FileNotFoundError),
]


def _uq_bad_privacy():
    res = _retrieve(method="brace", kappa=float("inf"))
    return analyze(MEM, res, Q, privacy="exact")


CASES.append((_uq_bad_privacy, "privacy", "'exact'", ValueError))


@pytest.mark.parametrize("call,name,value,exc", CASES,
                         ids=[f"{i}-{c[1]}" for i, c in enumerate(CASES)])
def test_message_names_echoes_and_says_how_to_fix(call, name, value, exc):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    assert name in msg, f"argument {name!r} not named: {msg!r}"
    assert value in msg, f"value {value!r} not echoed: {msg!r}"
    assert FIX.search(msg), f"no requirement or fix in: {msg!r}"
    assert "\n" not in msg.strip() and len(msg) < 400  # one line, readable


def test_output_file_errors(tmp_path):
    with pytest.raises(ValueError, match=rf"--out {re.escape(str(tmp_path))} is a directory; "
                       "give a file name"):
        check_output_file(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_output_file(tmp_path / "missing" / "x.json")


@pytest.mark.parametrize("noise", ["auto", "plain", "secure"])
@pytest.mark.parametrize("method", ["brace", "global"])
def test_private_retrieve_without_budget_is_refused(noise, method):
    # no budget: refused before planning, whatever the noise (secure mode used to fail
    # with an AttributeError, plain mode to release with privacy=None)
    seed = 0 if noise == "plain" else None
    with pytest.raises(ValueError, match=r"private_retrieve needs the budget: epsilon and "
                       r"delta must be numbers; got epsilon=None, delta=None\. Without a "
                       r"budget use brace\.certificate or brace\.plan_release"):
        private_retrieve(MEM, Q, method=method, epsilon=None, delta=None, steps=2,
                         gamma=0.1, noise=noise, seed=seed)
