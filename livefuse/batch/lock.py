"""One batch at a time per output folder.

Two batches into one folder (the same command started in a second terminal, or a second
`--output-dir` that is the same folder) each took the other's outputs for missing, wrote the
same part files and removed each other's chunk folders: a new user's trial got broken chunks
and outputs with exit 0. The second batch is now refused before it writes anything.

The lock is an OS file lock (:mod:`filelock`: ``flock`` on POSIX, ``msvcrt`` on Windows) on
``DIR/.livefuse-batch.lock``, held by the driver (the process that writes the outputs, whatever
runs the workers) for the whole batch, and released by the OS when that process dies, so a
crashed batch never leaves the folder locked. The file is removed while still held; filelock
(>= 4) retries a lock won on a file removed meanwhile, so no two holders can follow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from livefuse.errors import LivefuseError

LOCK_NAME = ".livefuse-batch.lock"


class OutputBusyError(LivefuseError):
    """Another batch is writing into the output folder."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = output_dir
        super().__init__(f"--output-dir '{output_dir}': another livefuse batch is writing into "
                         f"this folder (it holds '{output_dir / LOCK_NAME}'); wait for it to "
                         "end, or give another --output-dir")


@contextlib.contextmanager
def output_lock(output_dir: Path) -> Iterator[None]:
    """Hold ``output_dir``'s batch lock for the ``with`` block; the folder is made if missing
    (the caller removes it if it stays empty). Called on the batch's driver thread.

    Raises:
        OutputBusyError: another process holds it (never waits).
        LivefuseError: the folder cannot be made or written.
    """
    path = output_dir / LOCK_NAME
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path, timeout=0)
        lock.acquire()
    except Timeout:
        raise OutputBusyError(output_dir) from None
    except OSError as exc:
        raise LivefuseError(f"--output-dir '{output_dir}': cannot write in it "
                            f"({exc.strerror or exc})") from exc
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        # on a filesystem without flock, filelock's fallback marker is this file, gone already
        with contextlib.suppress(FileNotFoundError):
            lock.release()


def batch_writing(path: Path) -> Path | None:
    """The output folder of a batch running now that ``path`` lies in (at any depth), or
    ``None``: ``livefuse run`` must not write there (a new user's trial: a file `run` wrote
    into a running batch's output folder was replaced by the batch, both exit 0). A lock file
    that no process holds (a batch that crashed) does not count."""
    for folder in path.absolute().parents:
        lock_file = folder / LOCK_NAME
        if not lock_file.is_file():
            continue
        lock = FileLock(lock_file, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return folder
        except OSError:
            continue
        lock.release()
    return None


__all__ = ["LOCK_NAME", "OutputBusyError", "batch_writing", "output_lock"]
