"""Output folders a job makes, and their removal when the job keeps nothing in them.

A run that fails, is interrupted or keeps no output must not leave behind the folders it made
for that output (README: "no output folder the run made and left empty"). Called on the thread
that writes the output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path


def missing_folders(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist yet, deepest first: the ones a
    ``path.parent.mkdir(parents=True)`` would make."""
    return [p for p in path.absolute().parents if not p.exists()]


def remove_empty(folders: Sequence[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that exists and is empty; a folder that holds
    anything (a file the user or another job put there meanwhile) is left as it is."""
    for d in folders:
        with contextlib.suppress(OSError):  # not empty, or gone: leave it
            d.rmdir()


__all__ = ["missing_folders", "remove_empty"]
