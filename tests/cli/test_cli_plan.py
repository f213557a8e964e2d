"""The command line predicts what it spends: ``brace plan`` and ``brace account`` report
what ``brace retrieve`` with the same flags spends; one default release (auto) and every
γ the library takes, everywhere; uq prints public values unless asked for diagnostics."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

import brace
from brace import load_result
from brace.cli import build_parser, main
from brace.cli.plan import reads_n

pytestmark = pytest.mark.filterwarnings("ignore::brace.NotPrivateWarning")

N, D, R, T, Q = 300, 2, 0.8, 3, 3


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "bank.npy", rng.normal(size=(N, D)))
    np.save(tmp_path / "q.npy", rng.normal(size=(Q, D)) * 0.3)
    return tmp_path


def _json_out(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


FLAG_SETS = {
    "defaults": [],
    "auto-count": ["--kappa", "inf"],
    "gates": ["--gamma", "gates"],
    "smooth": ["--release-mode", "smooth"],
    "count": ["--release-mode", "count", "--kappa", "0"],
    "gamma": ["--gamma", "0.1", "--kappa", "0"],
    "paper": ["--accounting", "paper", "--gamma", "0.05"],
    "global": ["--method", "global"],
    "endpoint": ["--method", "endpoint"],
}


@pytest.mark.parametrize("name", list(FLAG_SETS))
def test_plan_account_and_retrieve_report_the_same_epsilon(files, capsys, name):
    flags = ["--epsilon", "8", "--steps", str(T), *FLAG_SETS[name]]
    plan = _json_out(capsys, ["plan", "--n", str(N), "--dim", str(D), "--radius", str(R),
                              "--queries", str(Q), "--json", *flags])
    acct = _json_out(capsys, ["account", "--n", str(N), "--dim", str(D), "--queries", str(Q),
                              "--json", *flags])
    out = files / "r.json"
    assert main(["retrieve", "--bank", str(files / "bank.npy"), "--queries",
                 str(files / "q.npy"), "--radius", str(R), "--seed", "0", "--out", str(out),
                 *flags]) == 0
    capsys.readouterr()
    res = load_result(out)
    spent = res.privacy.to_dict()
    for key in ("epsilon", "delta", "epsilon_total", "rho_per_step", "noise_multiplier",
                "gamma", "release", "mechanism", "queries"):
        assert plan["spent"][key] == acct[key] == spent[key], key
    assert acct["mechanism"] == res.method != ""
    assert plan["release"] == res.params["release"]
    assert plan["release_rule"] == res.params["release_rule"]
    assert plan["gamma_rule"] == res.params["gamma_rule"]
    assert plan["kappa_rule"] == res.params["kappa_rule"]


def test_plan_text_names_every_public_choice(capsys):
    assert main(["plan", "--n", "1000", "--dim", "2", "--beta", "8", "--steps", "5",
                 "--epsilon", "8", "--queries", "3"]) == 0
    text = capsys.readouterr().out
    for part in ("ReleasePlan: method='brace', release=", "auto", "gamma =",
                 "noise multiplier =", "(8, 1e-05)-DP", "all 3 queries: eps ="):
        assert part in text, part
    with pytest.raises(SystemExit) as info:  # the radius is required
        main(["plan", "--n", "1000", "--dim", "2", "--steps", "5", "--epsilon", "8"])
    assert info.value.code == 2
    assert "one of the arguments --beta --radius is required" in capsys.readouterr().err


def test_account_needs_n_only_where_the_plan_reads_it(capsys):
    """--n is asked for exactly when plan_release reads it: elsewhere the spend is the same
    for every n, so account's placeholder cannot change what it reports."""
    kw = dict(radius=0.5, epsilon=2.0, delta=1e-5, steps=3, queries=2)
    for method in ("brace", "global", "endpoint", "naive"):
        for accounting in ("rdp", "paper"):
            for release in (None, "auto", "smooth", "count"):
                for gamma in (None, "gates", 0.05):
                    try:
                        plans = [brace.plan_release((n, 16), method=method, release=release,
                                                    gamma=gamma, accounting=accounting, **kw)
                                 for n in (1, 50, 10**6)]
                    except ValueError:
                        continue  # a combination the library refuses
                    if not reads_n(method, accounting, release, gamma):
                        assert plans[0].spent == plans[1].spent == plans[2].spent
    # where it is read, the choice does depend on n (d = 16, ε = 2: small gates → smooth)
    small, big = (brace.plan_release((n, 16), method="brace", **kw) for n in (50, 10**6))
    assert reads_n("brace", "rdp", None, None) and small.spent != big.spent
    assert main(["account", "--epsilon", "2", "--steps", "3", "--dim", "16"]) == 2
    assert "--n (the bank's number of memories, public) is required" in \
        capsys.readouterr().err


def test_account_defaults_are_retrieves():
    account = {a.dest: a.default for a in _parser("account")._actions}
    retrieve = {a.dest: a.default for a in _parser("retrieve")._actions}
    for dest in ("method", "delta", "kappa", "gamma", "accounting", "release_mode",
                 "no_output_projection"):
        assert account[dest] == retrieve[dest], dest
    assert account["gamma"] is None and account["release_mode"] is None


def _parser(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


RELEASE_COMMANDS = [("retrieve",), ("plan",), ("account",), ("uq",), ("audit",)]


@pytest.mark.parametrize("path", RELEASE_COMMANDS, ids=" ".join)
def test_one_default_release_and_every_gamma_everywhere(path):
    parser = _parser(*path)
    acts = {a.dest: a for a in parser._actions}
    mode, gamma = acts["release_mode"], acts["gamma"]
    assert mode.default is None and set(mode.choices) == set(brace.plan.RELEASE_MODES)
    assert "default auto for BRACE" in mode.help
    assert brace.plan.DEFAULT_RELEASE == "auto"
    for text, want in (("gates", "gates"), ("auto", None), ("0.25", 0.25)):
        assert gamma.type(text) == want
    assert "'gates'" in gamma.help and "fraction-0.9" in gamma.help


def test_gamma_gates_is_accepted_by_the_experiments():
    p = _parser("experiment", "synthetic")
    assert p.parse_args(["--gamma", "gates"]).gamma == "gates"
    cov = next(a for a in _parser("experiment", "coverage")._actions
               if a.dest == "gamma_fraction")
    assert "library's own default is 0.9" not in cov.help
    assert "choose_gamma's own default is 0.9" in cov.help


def test_retrieve_takes_gamma_gates(files, capsys):
    out = files / "g.npz"
    assert main(["retrieve", "--bank", str(files / "bank.npy"), "--queries",
                 str(files / "q.npy"), "--radius", str(R), "--steps", str(T), "--epsilon", "8",
                 "--gamma", "gates", "--seed", "0", "--out", str(out)]) == 0
    capsys.readouterr()
    res = load_result(out)
    assert res.params["gamma_rule"] == "gates"
    assert res.privacy.gamma == brace.plan_release(
        (N, D), radius=R, method="brace", epsilon=8.0, delta=1e-5, steps=T,
        gamma="gates").gamma


@pytest.mark.parametrize("flags", [[], ["--kappa", "0"], ["--gamma", "gates"],
                                   ["--release-mode", "count"]],
                         ids=["default", "kappa0", "gates", "count"])
def test_audit_audits_the_release_retrieve_runs(files, capsys, monkeypatch, flags):
    """brace audit's default release is retrieve's (auto), resolved the same way; the
    audited configuration is the smooth release with retrieve's γ, or the count release."""
    import brace.audit

    seen = {}

    class Done:
        verdict = "PASS"

        def __str__(self) -> str:
            return "audit stub"

    def fake_audit(bank, query, cfg, **kw):
        seen["cfg"] = cfg
        return Done()

    monkeypatch.setattr(brace.audit, "audit", fake_audit)
    np.save(files / "q1.npy", np.load(files / "q.npy")[:1])
    common = ["--radius", str(R), "--steps", str(T), "--epsilon", "8", *flags]
    assert main(["audit", "--bank", str(files / "bank.npy"), "--query", str(files / "q1.npy"),
                 "--method", "brace", "--no-progress", *common]) == 0
    out = files / "a.json"
    assert main(["retrieve", "--bank", str(files / "bank.npy"), "--queries",
                 str(files / "q1.npy"), "--seed", "0", "--out", str(out), *common]) == 0
    capsys.readouterr()
    res, cfg = load_result(out), seen["cfg"]
    assert cfg.release == res.privacy.release
    if cfg.release == "smooth":
        assert cfg.gamma == res.privacy.gamma
    else:
        assert cfg.gamma is None
    assert cfg.kappa == (0.0 if "0" in flags else brace.DEFAULT_KAPPA)


def test_uq_prints_public_values_unless_asked(files, capsys):
    base = ["uq", "--bank", str(files / "bank.npy"), "--queries", str(files / "q.npy"),
            "--radius", str(R), "--steps", "2", "--epsilon", "8", "--seed", "1",
            "--n-boot", "50", "--privacy", "linear"]
    for mode, sens in (("count", "mean proposed sensitivity b_t per step"),
                       ("smooth", "mean smooth sensitivity per step")):
        assert main(base + ["--release-mode", mode]) == 0
        text = capsys.readouterr().out
        assert "diagnostics" not in text and "sensitivity per step" not in text
        assert "mean per-coordinate sd by step" not in text
        assert "NOT covered by epsilon" in text and "bank ±" in text
        assert main(base + ["--release-mode", mode, "--diagnostics"]) == 0
        text = capsys.readouterr().out
        assert sens in text and "mean per-coordinate sd by step" in text
        if mode == "count":
            assert "smooth sensitivity" not in text


def test_every_default_claimed_in_help_is_the_parsed_default():
    """Each ``(default X)`` written into a flag's own help names the value argparse uses."""
    import re

    def walk(parser, path=()):
        yield path, parser
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from walk(sub, path + (name,))

    checked = 0
    for path, parser in walk(build_parser()):
        for a in parser._actions:
            m = re.search(r"\(default (-?[0-9.e+-]+|rdp|brace|off)[;)]", a.help or "")
            if not m or a.default is None:
                continue
            claim = m.group(1)
            value = a.default
            if isinstance(value, float):
                assert math.isclose(float(claim), value), (path, a.dest, claim, value)
            else:
                assert str(value) == claim, (path, a.dest, claim, value)
            checked += 1
    assert checked >= 10
