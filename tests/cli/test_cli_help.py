"""Every flag of every ``brace`` command has a help text that shows its default."""

from __future__ import annotations

import argparse

import pytest

from brace.cli import build_parser


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, path + (name,))


PARSERS = list(_walk(build_parser()))
FLAGS = [
    (" ".join(("brace",) + path), parser, action)
    for path, parser in PARSERS
    for action in parser._actions
    if action.option_strings
    and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
]


def test_every_command_is_walked():
    names = {" ".join(path) for path, _ in PARSERS}
    assert {"retrieve", "account", "uq", "audit", "experiment synthetic", "experiment mnist",
            "experiment coverage", "experiment theory"} <= names
    assert len(FLAGS) > 50


@pytest.mark.parametrize("command,parser,action", FLAGS,
                         ids=[f"{c}:{a.option_strings[-1]}" for c, _, a in FLAGS])
def test_flag_help_shows_its_default(command, parser, action):
    assert action.help, f"{command} {action.option_strings[-1]} has no help text"
    shown = parser._get_formatter()._expand_help(action)
    flag = f"{command} {action.option_strings[-1]}"
    lowered = shown.lower()
    assert "default" in lowered or "(required)" in lowered, f"{flag}: {shown!r}"
    d = action.default
    if d not in (None, False, argparse.SUPPRESS):  # the value itself is shown
        forms = {str(d)} | ({f"{d:g}"} if isinstance(d, float) else set())
        assert any(f in shown for f in forms), f"{flag}: default {d!r} not in {shown!r}"


def test_help_renders_for_every_command(capsys):
    for path, _ in PARSERS:
        with pytest.raises(SystemExit) as info:
            build_parser().parse_args([*path, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert "usage: brace" in out and "%(" not in out
