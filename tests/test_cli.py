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
