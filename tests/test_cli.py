"""The ``livefuse`` command's own entry point (the subcommands have their own test files)."""

from __future__ import annotations

import pytest


def test_the_command_ends_at_once_after_an_interrupt_when_ray_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while batch workers started: the clean-up ran, then the interpreter's own shutdown
    crashed in Ray's threads (exit 139). The command now ends with os._exit after it."""
    import sys
    import types

    from livefuse import cli

    exits: list[int] = []
    monkeypatch.setattr(cli, "main", lambda: 130)
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    monkeypatch.setattr(cli.os, "_exit", lambda code: exits.append(code))
    with pytest.raises(SystemExit):  # the stand-in os._exit returns; sys.exit follows
        cli.entry()
    assert exits == [130]
    monkeypatch.delitem(sys.modules, "ray")
    with pytest.raises(SystemExit) as done:
        cli.entry()
    assert done.value.code == 130 and exits == [130]


def test_an_interrupt_while_starting_up_is_one_line_and_exit_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: Ctrl-C in live's first half second printed a traceback, or exit 1
    with "ImportError: initialization failed" from dlib's import (pybind11 raises it from the
    KeyboardInterrupt)."""
    from livefuse import cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["doctor"]) == 130
    assert capsys.readouterr().err == "livefuse: interrupted while starting up\n"

    def import_interrupted() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    monkeypatch.setattr(cli, "build_parser", import_interrupted)
    assert cli.main(["doctor"]) == 130

    def broken() -> None:
        raise ImportError("a broken install")

    monkeypatch.setattr(cli, "build_parser", broken)
    with pytest.raises(ImportError, match="a broken install"):
        cli.main(["doctor"])
    monkeypatch.undo()
    # ... and inside a command: its own interrupt handling (batch says what it kept)
    monkeypatch.setattr("livefuse.doctor.cmd_doctor", lambda args: import_interrupted())
    capsys.readouterr()
    assert cli.main(["doctor"]) == 130
    assert capsys.readouterr().err == "livefuse: interrupted\n"
