"""``livefuse batch`` without Ray: the planner's rules, the dispatcher's VRAM admission (with a
fake pool and an injected VRAM reader), and whole batches on the in-process pool (issue 16).
The Ray executor's own tests are in test_batch_ray.py."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import signal
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import av
import pytest
from clips import ntsc_clip

from livefuse.batch.dispatch import Dispatcher, GpuKey, WorkerLost
from livefuse.batch.made_from import RECORD, record
from livefuse.batch.plan import CHUNK_DIR, Item, Unit, expand, most_units, plan_items
from livefuse.batch.runner import BatchOptions, run_batch
from livefuse.batch.worker import EngineSpec, UnitResult, WorkerStats
from livefuse.config import EngineConfig
from livefuse.errors import LivefuseError
from livefuse.extras import install_hint
from livefuse.io.video import VideoOptions
from livefuse.testing.stub_engine import MarkingEngine, marking_engine, slow_marking_engine

GiB = 2**30


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _made(output_dir: Path, rel: str, source: Path) -> Path:
    """An output an earlier batch made from ``source``: the file, and its line in the record."""
    out = _touch(output_dir / rel)
    record(output_dir, out, source)
    return out


# ------------------------------------------------------------------------------------ planner

def test_inputs_expand_files_folders_and_globs(tmp_path: Path) -> None:
    _touch(tmp_path / "a" / "one.jpg")
    _touch(tmp_path / "a" / "two.mp4")
    _touch(tmp_path / "a" / "notes.txt")
    _touch(tmp_path / "a" / "sub" / "three.png")
    _touch(tmp_path / "b" / "four.webm")
    found, problems, _, not_media, *_ = expand([str(tmp_path / "a"), str(tmp_path / "b" / "*.webm"),
                              str(tmp_path / "nope.jpg"), str(tmp_path / "a" / "notes.txt"),
                              str(tmp_path / "none*.png")])
    assert [str(rel) for _, rel in found] == ["one.jpg", "two.mp4", "four.webm"]
    assert [p[1] for p in problems] == ["file not found", problems[1][1],
                                        "no image or video matches this pattern"]
    assert "unknown file type '.txt'" in problems[1][1]
    assert not_media == [tmp_path / "a" / "notes.txt"]  # in the folder: said as left out
    found, *_ = expand([str(tmp_path / "a")], recursive=True)
    assert [str(rel) for _, rel in found] == ["one.jpg", "sub/three.png", "two.mp4"]


def test_a_pattern_names_its_matches_as_a_folder_names_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: ``in`` --recursive wrote out/a/clip.mp4 and out/b/clip.mp4, while
    ``'in/**/*.mp4'`` put both on out/clip.mp4 (two inputs, one output: refused)."""
    _touch(tmp_path / "in" / "a" / "clip.mp4")
    _touch(tmp_path / "in" / "b" / "clip.mp4")
    _touch(tmp_path / "in" / "top.jpg")
    _touch(tmp_path / "in" / "b" / "c" / "deep.mp4")
    _touch(tmp_path / "in" / ".hidden" / "clip.mp4")  # ** leaves hidden folders out, so does -r
    folder, *_ = expand([str(tmp_path / "in")], recursive=True)
    pattern, *_ = expand([str(tmp_path / "in" / "**" / "*.*")], recursive=True)
    assert sorted(str(rel) for _, rel in folder) == sorted(str(rel) for _, rel in pattern) == \
        ["a/clip.mp4", "b/c/deep.mp4", "b/clip.mp4", "top.jpg"]
    # `**` asks for every depth: without --recursive deep.mp4 was left out, exit 0
    stars, *_ = expand([str(tmp_path / "in" / "**" / "*.mp4")])
    assert sorted(str(rel) for _, rel in stars) == ["a/clip.mp4", "b/c/deep.mp4", "b/clip.mp4"]
    one_level, *_ = expand([str(tmp_path / "in" / "*" / "clip.mp4")])
    assert [str(rel) for _, rel in one_level] == ["a/clip.mp4", "b/clip.mp4"]
    monkeypatch.chdir(tmp_path / "in")  # a pattern with no fixed part: as given
    here, *_ = expand(["*/clip.mp4", "*.jpg"])
    assert [str(rel) for _, rel in here] == ["a/clip.mp4", "b/clip.mp4", "top.jpg"]


def test_outputs_mirror_names_and_resume_skips_existing(tmp_path: Path) -> None:
    src = tmp_path / "in"
    _touch(src / "x.jpg")
    _touch(src / "deep" / "y.png")
    _touch(src / "clip.webm")  # planned by its name; probed later
    out = tmp_path / "out"
    _made(out, "x.jpg", src / "x.jpg")  # done in an earlier run
    plan = plan_items([str(src)], out, recursive=True)
    assert [i.output.relative_to(out).as_posix() for i in plan.items] == \
        ["clip.mkv", "deep/y.png"]  # .webm is written as .mkv
    assert [i.output.name for i in plan.skipped] == ["x.jpg"]
    again = plan_items([str(src)], out, recursive=True, overwrite=True)
    assert len(again.items) == 3 and not again.skipped


def test_an_output_folder_inside_an_input_folder_is_not_read_as_input(tmp_path: Path) -> None:
    _touch(tmp_path / "in" / "x.jpg")
    _made(tmp_path / "in" / "out", "x.jpg", tmp_path / "in" / "x.jpg")  # an earlier run's
    plan = plan_items([str(tmp_path / "in")], tmp_path / "in" / "out", recursive=True)
    assert [i.input.name for i in plan.skipped] == ["x.jpg"] and plan.items == []
    assert plan.skipped[0].input == tmp_path / "in" / "x.jpg" and plan.left_out == 1
    glob_plan = plan_items([str(tmp_path / "in" / "**" / "*.jpg")], tmp_path / "in" / "out",
                           recursive=True)
    assert [i.input for i in glob_plan.skipped] == [tmp_path / "in" / "x.jpg"]
    # without --recursive the output folder is neither walked nor a hint about subfolders
    flat = plan_items([str(tmp_path / "in")], tmp_path / "in" / "out")
    assert flat.left_out == 0 and flat.below == []


def test_a_file_no_batch_made_is_neither_done_nor_left_out_nor_replaced(tmp_path: Path) -> None:
    """A new user's trial: files of the user's own in an output folder inside the walked input
    folder were left out as outputs and the inputs of their names skipped as done (exit 0),
    then --overwrite replaced the user's originals; a file of that name in any output folder
    was skipped as done."""
    src = tmp_path / "sea"
    _touch(src / "x.jpg")
    _touch(src / "sub" / "x.jpg", b"the user's own")
    for overwrite in (False, True):
        with pytest.raises(LivefuseError, match="is also an input of this batch"):
            plan_items([str(src)], src / "sub", recursive=True, overwrite=overwrite)
    assert (src / "sub" / "x.jpg").read_bytes() == b"the user's own"
    # not walked into: the file of that name is no batch's output, so not done
    plan = plan_items([str(src / "x.jpg")], src / "sub")
    assert plan.skipped == [] and plan.items == []
    assert "no batch into this folder recorded making it" in plan.problems[0][1]
    again = plan_items([str(src / "x.jpg")], src / "sub", overwrite=True)
    assert [i.output for i in again.items] == [src / "sub" / "x.jpg"]


def test_an_output_cut_or_edited_since_its_batch_is_not_done(tmp_path: Path) -> None:
    src = _touch(tmp_path / "in" / "x.jpg")
    out = _made(tmp_path / "out", "x.jpg", src)
    assert [i.output for i in plan_items([str(src)], tmp_path / "out").skipped] == [out]
    out.write_bytes(b"xx")  # another size than the record's
    plan = plan_items([str(src)], tmp_path / "out")
    assert plan.skipped == [] and plan.items == []
    assert "changed since a batch made it (1 bytes then, 2 now" in plan.problems[0][1]
    assert [i.output for i in plan_items([str(src)], tmp_path / "out", overwrite=True).items] \
        == [out]


def test_inputs_inside_the_output_folder_are_inputs(tmp_path: Path) -> None:
    """Only a walk into the output folder leaves files out: a file named itself, or an input
    folder that lies inside the output folder, is processed (they were silently planned away,
    'nothing to do', exit 0)."""
    _touch(tmp_path / "bo" / "sub" / "x.jpg")
    _touch(tmp_path / "bo2" / "in" / "y.png")
    plan = plan_items([str(tmp_path / "bo" / "sub" / "x.jpg")], tmp_path / "bo")
    assert [i.output for i in plan.items] == [tmp_path / "bo" / "x.jpg"] and not plan.left_out
    plan = plan_items([str(tmp_path / "bo2" / "in")], tmp_path / "bo2")
    assert [i.output for i in plan.items] == [tmp_path / "bo2" / "y.png"]


def test_an_output_that_is_an_input_or_a_clash_is_refused(tmp_path: Path) -> None:
    _touch(tmp_path / "a" / "x.jpg")
    _touch(tmp_path / "b" / "x.jpg")
    with pytest.raises(LivefuseError, match="inputs are never overwritten"):
        plan_items([str(tmp_path / "a")], tmp_path / "a")
    with pytest.raises(LivefuseError, match="would both be written"):
        plan_items([str(tmp_path / "a" / "x.jpg"), str(tmp_path / "b" / "x.jpg")],
                   tmp_path / "out")
    with pytest.raises(LivefuseError, match="is the source itself"):
        plan_items([str(tmp_path / "a")], tmp_path / "b",
                   other_inputs={"source": tmp_path / "b" / "x.jpg"})


# ---------------------------------------------------------------------------------- dispatcher

class FakePool:
    """Workers that finish a unit after ``seconds`` on a thread; GPUs given per worker."""

    description = "fake"

    def __init__(self, gpus: dict[str, GpuKey | None], seconds: float = 0.02,
                 dies: str | None = None) -> None:
        self.gpus, self.seconds, self.dies = gpus, seconds, dies
        self.done: dict[Hashable, tuple[str, Unit]] = {}
        self.ran: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._n = 0

    def names(self) -> list[str]:
        return list(self.gpus)

    def prepare(self) -> None:
        pass

    def submit(self, worker: str, unit: Unit) -> Hashable:
        with self._lock:
            self._n += 1
            handle = (worker, self._n)
        ev = threading.Event()

        def work() -> None:
            time.sleep(self.seconds)
            with self._lock:
                self.done[handle] = (worker, unit)
            ev.set()

        threading.Thread(target=work, daemon=True).start()
        return handle

    def wait(self, handles: Sequence[Hashable], timeout: float) -> list[Hashable]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                ready = [h for h in handles if h in self.done]
            if ready:
                return ready
            time.sleep(0.005)
        return []

    def result(self, handle: Hashable) -> UnitResult:
        worker, unit = self.done.pop(handle)
        if worker == self.dies:
            raise WorkerLost("killed")
        self.ran.append((worker, unit.item.input.name))
        return UnitResult(unit, ok=True, worker=worker, frames=1)

    def gpu(self, worker: str) -> GpuKey | None:
        return self.gpus[worker]

    def mem_info(self, worker: str) -> tuple[int, int] | None:
        return None

    def frames_done(self) -> int:
        return len(self.ran)

    def stats(self) -> list[WorkerStats]:
        return []

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


def _units(n: int) -> list[Unit]:
    return [Unit(Item(Path(f"in/{k}.jpg"), Path(f"out/{k}.jpg"), "image"), Path(f"out/{k}.jpg"))
            for k in range(n)]


TWO_GPUS: dict[str, GpuKey | None] = {"w0": ("n", "0"), "w1": ("n", "0"), "w2": ("n", "1"),
                                      "w3": ("n", "1")}


def test_admission_sends_no_work_to_a_gpu_above_85_percent() -> None:
    pool = FakePool(TWO_GPUS)
    reads: list[GpuKey] = []

    def vram(gpu: GpuKey, worker: str) -> tuple[int, int]:
        reads.append(gpu)
        used = 0.90 if gpu == ("n", "1") else 0.40  # another program filled GPU 1
        return int((1 - used) * 80 * GiB), 80 * GiB

    lines: list[str] = []
    results: list[UnitResult] = []
    Dispatcher(pool, vram=vram, on_status=lines.append).run(_units(12), results.append)
    assert len(results) == 12 and all(r.ok for r in results)
    assert {w for w, _ in pool.ran} == {"w0", "w1"}  # both workers of GPU 0, none of GPU 1
    assert ("n", "1") in reads
    assert len(lines) == 1 and "GPU 1" in lines[0] and "90% of 80.0 GiB" in lines[0]
    assert "no new work for it until it frees" in lines[0]


def test_admission_resumes_when_the_gpu_frees() -> None:
    pool = FakePool({"w0": ("n", "0")})
    calls = {"n": 0}

    def vram(gpu: GpuKey, worker: str) -> tuple[int, int]:
        calls["n"] += 1
        used = 0.95 if calls["n"] <= 3 else 0.10
        return int((1 - used) * 8 * GiB), 8 * GiB

    lines: list[str] = []
    results: list[UnitResult] = []
    Dispatcher(pool, vram=vram, on_status=lines.append, poll_s=0.01).run(_units(3),
                                                                          results.append)
    assert all(r.ok for r in results) and len(results) == 3
    assert "memory back under 85%" in lines[-1]


def test_every_gpu_full_fails_the_rest_after_the_timeout() -> None:
    pool = FakePool(TWO_GPUS)

    def vram(gpu: GpuKey, worker: str) -> tuple[int, int]:
        return 1 * GiB, 80 * GiB

    results: list[UnitResult] = []
    Dispatcher(pool, vram=vram, poll_s=0.01, admission_timeout_s=0.2).run(_units(3),
                                                                          results.append)
    assert [r.ok for r in results] == [False] * 3
    assert "above the 85% limit" in results[0].message and "for 0 s" in results[0].message


def test_a_dead_worker_costs_its_unit_only() -> None:
    pool = FakePool({"w0": None, "w1": None}, dies="w1")
    results: list[UnitResult] = []
    Dispatcher(pool).run(_units(6), results.append)
    failed = [r for r in results if not r.ok]
    assert len(failed) == 1 and "worker w1 died: killed" in failed[0].message
    assert sum(r.ok for r in results) == 5  # w0 ran the rest


# ------------------------------------------------------------------------------ whole batches

@pytest.fixture
def mixed(tmp_path: Path, t1_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(t1_path, folder / "a.jpg")
    ntsc_clip(folder / "b.mp4", frames=60, audio_tracks=1)
    (folder / "c.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50)
    _touch(folder / "d.png", b"not a png")
    return folder


def _opts(src: Path, out: Path, **kw: object) -> BatchOptions:
    return BatchOptions((str(src),), out, executor="local", **kw)  # type: ignore[arg-type]


def _noise_clip(path: Path, frames: int, audio_tracks: int = 0) -> Path:
    """Incompressible 64x96 frames at 30 fps (a cut or zeroed byte range loses frames, not
    padding); an MP4's index at the front."""
    from fractions import Fraction

    import numpy as np
    from clips import write_clip

    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 255, (64, 96, 3), dtype=np.uint8) for _ in range(frames)]
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_clip(path, list(range(frames)), Fraction(1, 30), Fraction(30),
                      audio_tracks=audio_tracks, pictures=noise,
                      options={"movflags": "faststart"} if path.suffix == ".mp4" else None)


def _first_video_byte(clip: Path) -> int:
    """Where the first video frame's data starts in ``clip`` (zeroed from there: its GOP)."""
    with av.open(str(clip)) as c:
        return int(next(p.pos for p in c.demux(video=0) if p.size))


def test_one_bad_item_fails_alone_and_resume_skips_what_is_done(
        mixed: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    lines: list[str] = []
    summary = run_batch(_opts(mixed, out), marking_engine, quiet=True, on_line=lines.append)
    status = {r.item.input.name: r.status for r in summary.results}
    assert status == {"a.jpg": "done", "b.mp4": "done", "c.mp4": "failed", "d.png": "failed"}
    # each failure is also a status line as it happens, not only in the summary at the end
    assert sum(line.startswith(f"failed: {mixed / 'c.mp4'}: ") for line in lines) == 1
    assert sum(line.startswith(f"failed: {mixed / 'd.png'}: ") for line in lines) == 1
    assert summary.failed == 2 and summary.frames == 61
    text = "\n".join(summary.lines())
    assert "failed: " + str(mixed / "c.mp4") in text and "damaged or incomplete" in text
    # the line names the file once: the error's own mention of it is left out
    for name in ("c.mp4", "d.png"):
        line = next(x for x in text.splitlines() if x.startswith(f"failed: {mixed / name}"))
        assert line.count(name) == 1, line
    # beside the outputs, the record of which input made each (livefuse.batch.made_from)
    assert sorted(p.name for p in out.iterdir()) == [RECORD, "a.jpg", "b.mp4"]
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = run_batch(_opts(mixed, out), marking_engine, quiet=True)
    assert {r.item.input.name: r.status for r in again.results} == {
        "a.jpg": "skipped", "b.mp4": "skipped", "c.mp4": "failed", "d.png": "failed"}
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_an_output_another_input_made_is_not_taken_as_this_ones(tmp_path: Path,
                                                                t1_path: Path) -> None:
    """A new user's trial: clip.webm and clip.avi both map to clip.mkv, and the batch said to
    give them in separate batches; given so into one folder, the second was skipped as done
    (its output was the first one's), exit 0."""
    a, b = tmp_path / "a" / "pic.jpg", tmp_path / "b" / "pic.jpg"
    for p in (a, b):
        p.parent.mkdir()
        shutil.copy(t1_path, p)
    os.utime(b, ns=(1, 1))  # another file of the same name and size
    out = tmp_path / "out"
    first = run_batch(BatchOptions((str(a),), out, executor="local"), marking_engine,
                      quiet=True)
    assert first.failed == 0
    second = run_batch(BatchOptions((str(b),), out, executor="local"), marking_engine,
                       quiet=True)
    assert second.failed == 1
    assert f"'{out / 'pic.jpg'}' holds the output of '{a.resolve()}'" in \
        "\n".join(second.lines())
    # the same input again, or moved with its folder: done, skipped
    assert [r.status for r in run_batch(BatchOptions((str(a),), out, executor="local"),
                                        marking_engine, quiet=True).results] == ["skipped"]
    moved = tmp_path / "moved"
    (tmp_path / "a").rename(moved)
    assert [r.status for r in run_batch(BatchOptions((str(moved / "pic.jpg"),), out,
                                                     executor="local"),
                                        marking_engine, quiet=True).results] == ["skipped"]
    # --overwrite makes it from this input, and the record says so from then on
    over = run_batch(BatchOptions((str(b),), out, overwrite=True, executor="local"),
                     marking_engine, quiet=True)
    assert [r.status for r in over.results] == ["done"]
    assert [r.status for r in run_batch(BatchOptions((str(b),), out, executor="local"),
                                        marking_engine, quiet=True).results] == ["skipped"]


def test_an_input_changed_since_its_output_was_made_is_processed_again(tmp_path: Path,
                                                                      t1_path: Path) -> None:
    """A new user's trial: a photo replaced in the input folder after a batch kept its old
    output on the next run ("skipped (output exists)", exit 0)."""
    src = tmp_path / "in" / "pic.jpg"
    src.parent.mkdir()
    shutil.copy(t1_path, src)
    out = tmp_path / "out"
    opts = BatchOptions((str(src.parent),), out, executor="local")
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True).results] == ["done"]
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True).results] == \
        ["skipped"]
    src.write_bytes(src.read_bytes() + b"\0")  # another picture, another size
    again = run_batch(opts, marking_engine, quiet=True)
    assert [r.status for r in again.results] == ["done"]
    assert f"1 input changed since its output was made, processed again: '{src}'" in \
        "\n".join(again.lines())
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True).results] == \
        ["skipped"]


def test_an_earlier_batchs_output_folder_inside_the_inputs_is_left_out_and_said(
        tmp_path: Path, t1_path: Path) -> None:
    """A new user's trial: a batch into ``in/out``, then ``in`` --recursive into ``in/out2``
    swapped ``in/out``'s outputs a second time, exit 0. A walk leaves out the outputs an
    earlier batch recorded in a folder, and says so; an original in that folder (a batch into a
    folder of photos) is still taken, and named itself, the folder is taken whole."""
    src = tmp_path / "in"
    (src / "week1").mkdir(parents=True)
    shutil.copy(t1_path, src / "week1" / "pic.jpg")
    first = run_batch(BatchOptions((str(src),), src / "out", recursive=True, executor="local"),
                      marking_engine, quiet=True)
    assert [r.status for r in first.results] == ["done"]
    assert (src / "out" / RECORD).is_file()
    shutil.copy(t1_path, src / "out" / "original.jpg")  # not an output: the record says so
    second = run_batch(BatchOptions((str(src),), src / "out2", recursive=True,
                                    executor="local"), marking_engine, quiet=True)
    assert sorted(r.item.input for r in second.results) == [src / "out" / "original.jpg",
                                                           src / "week1" / "pic.jpg"]
    assert f"'{(src / 'out').resolve()}': 1 output of an earlier batch into that folder left " \
        "out" in "\n".join(second.lines())
    named = run_batch(BatchOptions((str(src / "out"),), tmp_path / "again", recursive=True,
                                   executor="local"), marking_engine, quiet=True)
    assert [r.status for r in named.results] == ["done", "done"]
    # a review: the hint that subfolders need --recursive counted that batch's outputs too
    shutil.copy(t1_path, src / "top.jpg")
    flat = plan_items([str(src)], tmp_path / "flat", False, False)
    assert flat.below == [(str(src), 2)]  # week1/pic.jpg and out/original.jpg, not out/pic.jpg
    # and an output folder reached through a symbolic link was swapped again: ** follows no
    # link to a folder, as --recursive does not (said), and a single * still does
    season = tmp_path / "season"
    season.mkdir()
    (season / "link").symlink_to(src / "out", target_is_directory=True)
    for linked in (plan_items([f"{season}/**/*.jpg"], tmp_path / "linked", False, False),
                   plan_items([str(season)], tmp_path / "linked", True, False)):
        assert linked.items == [] and linked.linked == [season / "link"]
    one = plan_items([f"{season}/*/*.jpg", f"{season}/*/*/*.jpg"], tmp_path / "linked",
                     False, False)
    assert [i.input.name for i in one.items] == ["original.jpg"]
    assert [files for _, files in one.earlier_outputs] == [1]
    # a link to a folder above: glob's ** went round it, one photo made 41 items (a review),
    # and two such links ran for ten minutes while 4 GB of memory filled (a new user's trial)
    (src / "week1" / "up").symlink_to("..", target_is_directory=True)
    (src / "week1" / "self").symlink_to("../week1", target_is_directory=True)
    looped = plan_items([f"{src / 'week1'}/**/*.jpg"], tmp_path / "looped", False, False)
    assert [i.input for i in looped.items] == [src / "week1" / "pic.jpg"]
    assert looped.linked == [src / "week1" / "self", src / "week1" / "up"]
    everything = plan_items([f"{src / 'week1'}/**"], tmp_path / "looped", False, False)
    assert [i.input for i in everything.items] == [src / "week1" / "pic.jpg"]


def test_an_output_made_with_another_face_photo_is_made_again(tmp_path: Path,
                                                              t1_path: Path) -> None:
    """A new user's trial: a batch rerun into the same folder with another face photo skipped
    the finished outputs as done (the old face, exit 0). An output recorded under another face
    photo or other settings is made again and said; the same job again skips it, and another
    chunk length (not the pixels) does not make it again."""
    from livefuse.batch.worker import JOB_PARTS, job_key

    src = tmp_path / "in" / "pic.jpg"
    src.parent.mkdir()
    shutil.copy(t1_path, src)
    out = tmp_path / "out"
    opts = BatchOptions((str(src.parent),), out, executor="local")
    spec = EngineSpec(EngineConfig(), t1_path)
    other_photo = tmp_path / "other.jpg"
    other_photo.write_bytes(t1_path.read_bytes() + b"\0")  # another photo: other bytes
    first = job_key(spec, VideoOptions())
    again = job_key(EngineSpec(EngineConfig(), other_photo), VideoOptions())
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True,
                                        job=first).results] == ["done"]
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True,
                                        job=first).results] == ["skipped"]
    remade = run_batch(opts, marking_engine, quiet=True, job=again)
    assert [r.status for r in remade.results] == ["done"]
    assert f"1 output made with other settings ({JOB_PARTS['photos']} changed since), " \
        f"processed again: '{out / 'pic.jpg'}'" in "\n".join(remade.lines())
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True,
                                        job=again).results] == ["skipped"]
    # a photo has no video options, no chunks, and no settings across frames (a new user's
    # trial: --detect-every 2 remade a batch's photos, byte-identical)
    for config, video, chunks in ((EngineConfig(), VideoOptions(crf=30), None),
                                  (EngineConfig(), VideoOptions(), 5.0),
                                  (EngineConfig(detect_every=2, smooth=False), VideoOptions(),
                                   None)):
        same = job_key(EngineSpec(config, other_photo), video, chunks)
        assert [r.status for r in run_batch(opts, marking_engine, quiet=True,
                                            job=same).results] == ["skipped"]
    # a setting that does decide a photo's pixels still makes it again
    blended = job_key(EngineSpec(EngineConfig(blend="seamless"), other_photo), VideoOptions())
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True,
                                        job=blended).results] == ["done"]
    assert [r.status for r in run_batch(opts, marking_engine, quiet=True,
                                        job=again).results] == ["done"]
    # the season's folder renamed since, then another face photo: made again (the review)
    moved = tmp_path / "moved"
    src.parent.rename(moved)
    moved_opts = BatchOptions((str(moved),), out, executor="local")
    assert [r.status for r in run_batch(moved_opts, marking_engine, quiet=True,
                                        job=first).results] == ["done"]
    # a record written before the key had a "settings" part: its settings are still compared
    # (a review: after the upgrade, --blend seamless skipped outputs made with feather)
    record = out / RECORD
    old_style = ";".join(p for p in first.split(";")
                         if not p.startswith(("settings=", "still=", "encoding=")))
    record.write_text(record.read_text().replace(first, old_style))
    seamless = job_key(EngineSpec(EngineConfig(blend="seamless"), t1_path), VideoOptions())
    assert [r.status for r in run_batch(moved_opts, marking_engine, quiet=True,
                                        job=first).results] == ["skipped"]
    assert [r.status for r in run_batch(moved_opts, marking_engine, quiet=True,
                                        job=seamless).results] == ["done"]


def test_files_that_are_not_media_are_said_left_out_and_obs_recordings_are_media(
        tmp_path: Path, t1_path: Path) -> None:
    """A new user's trial: a season folder's OBS .flv recordings and an audio-only .m4a were
    left out of the batch without a word."""
    from livefuse.io.video import is_video_path

    assert all(is_video_path(f"rec{s}") for s in (".flv", ".ts", ".m2ts", ".mts"))
    folder = tmp_path / "season"
    folder.mkdir()
    shutil.copy(t1_path, folder / "thumb.jpg")
    _touch(folder / "notes.txt")
    _touch(folder / "audio only.m4a")
    _touch(folder / ".DS_Store")  # hidden: the system's, not the user's
    (folder / "week 1").mkdir()
    shutil.copy(t1_path, folder / "week 1" / "thumb.jpg")  # without --recursive: a hint
    summary = run_batch(BatchOptions((str(folder),), tmp_path / "out", executor="local"),
                        marking_engine, quiet=True)
    assert summary.failed == 0
    assert f"'{folder}' has 1 image or video in its subfolders, left out: --recursive takes " \
           "them too" in summary.notes
    assert any(n.startswith("2 files in the folders given are neither an image nor a video "
                            "and were left out: 'audio only.m4a', 'notes.txt' (images:")
               for n in summary.notes), summary.notes


def test_a_batch_where_every_item_fails_leaves_no_empty_folder(
        mixed: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "deeper"
    opts = BatchOptions((str(mixed / "c.mp4"), str(mixed / "d.png")), out, executor="local")
    summary = run_batch(opts, marking_engine, quiet=True)
    assert summary.failed == 2
    assert not (tmp_path / "out").exists()  # both folders it made, removed again
    kept = tmp_path / "kept"
    kept.mkdir()
    run_batch(BatchOptions((str(mixed / "d.png"),), kept, executor="local"), marking_engine,
              quiet=True)
    assert kept.is_dir()  # a folder that was there stays


def test_a_batch_of_missing_inputs_lists_them_and_does_not_say_nothing_to_do(
        tmp_path: Path) -> None:
    """A new user's trial: one missing input gave '1 failed' and 'note: nothing to do'."""
    lines: list[str] = []
    summary = run_batch(BatchOptions((str(tmp_path / "missing.jpg"),), tmp_path / "out",
                                     executor="local"), marking_engine, quiet=True,
                        on_line=lines.append)
    text = "\n".join(summary.lines())
    assert "file not found" in text and "nothing to do" not in text
    # said as the batch starts, not only in the summary after hours of work
    assert lines == [f"failed: {tmp_path / 'missing.jpg'}: file not found"]


def test_without_ray_the_batch_runs_in_process_and_says_what_the_extra_adds(
        mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("livefuse.batch.executor.ray_available", lambda: False)
    opts = BatchOptions((str(mixed / "a.jpg"), str(mixed / "b.mp4")), tmp_path / "out",
                        chunk_seconds=0.5)
    lines: list[str] = []
    summary = run_batch(opts, marking_engine, quiet=True, on_line=lines.append)
    assert summary.count("done") == 2
    assert summary.executor == "in-process: 1 worker thread (no Ray)"
    assert any("one after another; for worker processes and more machines: pip install "
               '".[batch]"' in ln for ln in lines)
    # with worker threads the note does not say "one after another" (a new user's trial)
    lines.clear()
    summary = run_batch(BatchOptions((str(mixed / "a.jpg"), str(mixed / "b.mp4")),
                                     tmp_path / "out2", workers=2), marking_engine, quiet=True,
                        on_line=lines.append)
    assert summary.executor == "in-process: 2 worker threads (no Ray)"
    note = next(ln for ln in lines if "Ray is not installed" in ln)
    assert "on 2 threads that share one Python" in note and "one after another" not in note


def test_the_summary_says_which_decoder_and_encoder_ran_and_why_the_executor(
        mixed: Path, tmp_path: Path) -> None:
    """A new user's trial: `batch --video-decoder nvdec` fell back to the CPU unsaid (`run`
    says it), and `--executor local` with Ray installed was described as '(no Ray)'."""
    from livefuse.io.video import VideoOptions

    opts = BatchOptions((str(mixed / "b.mp4"), str(mixed / "a.jpg")), tmp_path / "out",
                        chunk_seconds=0.5, executor="local", workers=1,
                        video=VideoOptions(decoder="nvdec"))
    summary = run_batch(opts, marking_engine, quiet=True)
    assert summary.count("done") == 2
    assert summary.executor == "in-process: 1 worker thread (--executor local)"
    video = [n for n in summary.notes if n.startswith("video: ")]
    assert len(video) == 1 and "encode libx264" in video[0] and "decode: " in video[0], \
        summary.notes


def test_chunks_longer_than_asked_are_explained(tmp_path: Path) -> None:
    """A new user's --chunk-seconds 2 on a clip with a keyframe every 8.3 s gave "chunks of
    about 8 s" with no word on why."""
    src = ntsc_clip(tmp_path / "gop.mp4", frames=240, audio_tracks=0, gop=60)  # 2 s apart
    opts = BatchOptions((str(src),), tmp_path / "out", executor="local", workers=1,
                        chunk_seconds=0.5)
    lines = run_batch(opts, marking_engine, quiet=True).lines()
    assert "note: 1 video cut at keyframes into 4 chunks of about 2 s (not the 0.5 s asked: a " \
        "cut goes only where the input has a keyframe, and its keyframes lie further apart), " \
        "processed in turn" in "\n".join(lines), lines


def test_in_process_workers_cut_a_long_video_and_join_it_exactly(
        tmp_path: Path) -> None:
    from clips import audio_packets, frame_times

    src = ntsc_clip(tmp_path / "long.mp4", frames=150, audio_tracks=2, gop=15)
    out = tmp_path / "out"
    opts = BatchOptions((str(src),), out, executor="local", workers=2, chunk_seconds=1.0)
    summary = run_batch(opts, marking_engine, quiet=True)
    assert summary.count("done") == 1, summary.lines()
    # the summary says the video was cut (5 s of 30000/1001 fps in chunks of 1 s)
    assert "note: 1 video cut at keyframes into 5 chunks of about 1 s, processed side by side " \
        "and joined" in "\n".join(summary.lines())
    assert frame_times(out / "long.mp4") == frame_times(src)
    assert audio_packets(out / "long.mp4") == audio_packets(src)
    assert not (out / CHUNK_DIR).exists()
    assert sum(w.units for w in summary.workers) >= 4  # chunks spread over both workers
    assert all(w.units > 0 for w in summary.workers)
    # each worker's stage seconds add up from its chunks, and its line names the busiest
    for w in summary.workers:
        assert set(w.stage_s) == {"source", "stage", "process", "convert", "sink"}
        assert 0 < sum(w.stage_s.values()) <= w.busy_s * 5
    assert all("busiest stage " in ln for ln in summary.lines() if ln.startswith("  w"))


def test_a_long_video_that_cannot_be_cut_runs_whole_and_the_summary_says_why(
        tmp_path: Path) -> None:
    """A new user's trial: a clip with one keyframe and ``--chunk-seconds 1`` ran whole, and
    nothing said why the chunks asked for did not happen."""
    src = ntsc_clip(tmp_path / "onekey.mp4", frames=150, gop=1000)
    lines: list[str] = []
    opts = BatchOptions((str(src),), tmp_path / "out", executor="local", workers=2,
                        chunk_seconds=1.0)
    summary = run_batch(opts, marking_engine, quiet=True, on_line=lines.append)
    assert summary.count("done") == 1
    note = [n for n in summary.notes if "runs whole on one worker" in n]
    assert note and "onekey.mp4" in note[0] and "0 clean cut points" in note[0], summary.notes
    assert any("runs whole on one worker" in ln for ln in lines)
    assert sum(w.units for w in summary.workers) == 1


def test_no_more_workers_start_than_the_batch_has_units(mixed: Path, tmp_path: Path) -> None:
    """A maintainer's find: ``--workers 3`` for one photo built three engines, two of them
    for nothing (on a GPU: their models and VRAM)."""
    lines: list[str] = []
    built: list[object] = []

    def counted() -> object:
        built.append(marking_engine())
        return built[-1]

    opts = BatchOptions((str(mixed / "a.jpg"),), tmp_path / "out", executor="local", workers=3)
    summary = run_batch(opts, counted, quiet=True, on_line=lines.append)
    assert summary.count("done") == 1
    assert len(summary.workers) == 1 and len(built) == 1
    assert "note: --workers 3: this batch makes 1 unit of work, so 1 worker started" in lines
    # a video long enough to cut still gets them all (the chunks of 1 s of a 5 s clip)
    src = ntsc_clip(tmp_path / "long.mp4", frames=150, gop=15)
    summary = run_batch(BatchOptions((str(src),), tmp_path / "out2", executor="local",
                                     workers=3, chunk_seconds=1.0), marking_engine, quiet=True)
    assert len(summary.workers) == 3


def test_most_units_bounds_the_units_a_plan_makes(tmp_path: Path) -> None:
    video = Item(tmp_path / "v.mp4", tmp_path / "o.mp4", "video", 3000, 100.0)
    image = Item(tmp_path / "a.jpg", tmp_path / "a.jpg", "image")
    assert most_units([image, image], None) == 2
    assert most_units([video], 0.0) == 1  # --chunk-seconds 0: never cut
    assert most_units([video, image], None) == 11  # auto chunks are 10 s or longer
    assert most_units([video], 30.0) == 4
    assert most_units([video], 80.0) == 1  # under one and a half chunks: whole


def _noting_engine() -> object:
    from livefuse.testing.stub_engine import MarkingEngine

    engine = MarkingEngine()
    engine.source_notes = ("the source face is 89 px wide (under 100 px): ...",)
    return engine


def test_what_the_engine_says_about_the_source_is_reported_once(mixed: Path,
                                                                tmp_path: Path) -> None:
    """A new user's trial: ``run`` warned of a small source face, ``batch`` said nothing."""
    lines: list[str] = []
    opts = BatchOptions((str(mixed / "a.jpg"), str(mixed / "b.mp4")), tmp_path / "out",
                        executor="local", workers=2)
    summary = run_batch(opts, _noting_engine, quiet=True, on_line=lines.append)
    want = "source: the source face is 89 px wide (under 100 px): ..."
    assert summary.notes.count(want) == 1
    assert lines.count(want) == 1
    assert f"note: {want}" in summary.lines()


def test_a_summary_with_nothing_processed_gives_no_rate(tmp_path: Path) -> None:
    opts = BatchOptions((str(tmp_path / "missing.jpg"),), tmp_path / "out", executor="local")
    summary = run_batch(opts, marking_engine, quiet=True)
    assert summary.failed == 1
    assert not any(ln.startswith("frames:") for ln in summary.lines())


@pytest.mark.parametrize("out_exists", [False, True])
def test_ctrl_c_stops_the_workers_and_removes_partial_outputs(tmp_path: Path,
                                                              out_exists: bool) -> None:
    """... and the folders the run made: an output folder that was not there is not left
    behind empty; one that was stays."""
    src = ntsc_clip(tmp_path / "long.mp4", frames=240, gop=15)
    ntsc_clip(tmp_path / "other.mp4", frames=120, gop=15)
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    opts = BatchOptions((str(src), str(tmp_path / "other.mp4")), out, executor="local",
                        workers=2, chunk_seconds=1.0)
    main_id = threading.main_thread().ident
    assert main_id is not None

    def interrupt() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not list(out.rglob("*livefuse-part*")):
            time.sleep(0.01)
        time.sleep(0.2)
        signal.pthread_kill(main_id, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_batch(opts, slow_marking_engine, quiet=True)
    assert out.exists() == out_exists
    assert not out_exists or list(out.rglob("*")) == []
    assert [t.name for t in threading.enumerate() if t.name.startswith("livefuse-")] == []


def test_workers_without_a_gpu_run_the_classic_engine(
        tmp_path: Path, t1_path: Path, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--engine auto`` with the neural models installed but no GPU for the workers: the
    classic engine, said once (the neural models would run on the CPU at ~1 fps). The
    ``--models-dir`` they were found in was read, so it is not refused as a neural-only
    option that the classic engine ignores."""
    from livefuse.cli import main

    monkeypatch.setattr("livefuse.models.engine_choice.neural_models_present", lambda d: True)
    out = tmp_path / "out"
    assert main(["batch", str(t1_path), "-o", str(out), "-s", str(astronaut_path), "-q",
                 "--executor", "local", "--models-dir", str(tmp_path / "models")]) == 0
    err = capsys.readouterr().err
    assert "engine: classic (the batch workers have no GPU" in err
    assert (out / "t1.jpg").exists()


def test_a_refused_option_is_the_only_line_when_workers_have_no_gpu(
        tmp_path: Path, t1_path: Path, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: the engine's line came first, then the refusal of an option that
    engine does not read; the refusal is the whole answer."""
    from livefuse.cli import main

    monkeypatch.setattr("livefuse.models.engine_choice.neural_models_present", lambda d: True)
    out = tmp_path / "out"
    assert main(["batch", str(t1_path), "-o", str(out), "-s", str(astronaut_path), "-q",
                 "--executor", "local", "--precision", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "--precision: only the neural engine uses this option" in " ".join(err.split())
    assert "engine:" not in err
    assert not out.exists()


def test_an_early_ended_input_is_said_again_when_a_rerun_skips_it(tmp_path: Path) -> None:
    """A new user's trial: the first batch exited 3 ("ended early: 37 of 90"), the rerun
    skipped the item (its output exists) and exited 0, passing the cut output as done."""
    from livefuse.batch.plan import incomplete_marker

    clip = _noise_clip(tmp_path / "in" / "cut.mp4", 90)
    clip.write_bytes(clip.read_bytes()[: int(clip.stat().st_size * 0.4)])
    out = tmp_path / "out"
    first = run_batch(_opts(tmp_path / "in", out), marking_engine, quiet=True)
    assert [r.status for r in first.incomplete] == ["done"]
    assert incomplete_marker(out / "cut.mp4").is_file()
    again = run_batch(_opts(tmp_path / "in", out), marking_engine, quiet=True)
    assert [r.status for r in again.incomplete] == ["skipped"]
    assert any("ended early" in ln and "earlier run" in ln for ln in again.lines())
    clip.unlink()
    # the input, fixed (the whole download): a rerun without --overwrite makes it again
    ntsc_clip(clip, frames=30, audio_tracks=0)
    fixed = run_batch(_opts(tmp_path / "in", out), marking_engine, quiet=True)
    assert fixed.count("done") == 1 and fixed.incomplete == []
    assert not incomplete_marker(out / "cut.mp4").exists()
    assert run_batch(_opts(tmp_path / "in", out), marking_engine,
                     quiet=True).count("skipped") == 1


def test_an_empty_output_is_made_again(mixed: Path, tmp_path: Path) -> None:
    """A new user's trial: a 0-byte file where an output goes was "skipped (output exists)"."""
    out = tmp_path / "out"
    first = run_batch(_opts(mixed, out), marking_engine, quiet=True)
    done = [r.item.output for r in first.results if r.status == "done"]
    done[0].write_bytes(b"")
    again = run_batch(_opts(mixed, out), marking_engine, quiet=True)
    assert [r.item.output for r in again.results if r.status == "done"] == [done[0]]
    assert done[0].stat().st_size > 0


@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
def test_an_input_that_changes_while_it_is_read_is_incomplete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_seconds: float | None) -> None:
    """A new user's trial: a recording still being written was "done" with 288 of its 720
    frames, exit 0, and skipped on every rerun."""
    from livefuse.batch import runner

    (tmp_path / "in").mkdir()
    src = ntsc_clip(tmp_path / "in" / "rec.mp4", frames=60, audio_tracks=0, gop=15)
    out = tmp_path / "out"
    real = runner._stamp
    calls = {"n": 0}

    def growing(path: Path) -> dict[str, int] | None:  # the file grows after the first look
        calls["n"] += 1
        got = real(path)
        return got if calls["n"] == 1 or got is None else {**got, "size": got["size"] + 4096}

    monkeypatch.setattr(runner, "_stamp", growing)
    first = run_batch(_opts(tmp_path / "in", out, chunk_seconds=chunk_seconds),
                      marking_engine, quiet=True)
    assert [r.status for r in first.incomplete] == ["done"]
    assert "input changed while it was read" in first.incomplete[0].incomplete
    assert any(ln.startswith(f"incomplete: {src}: input changed") for ln in first.lines())
    monkeypatch.setattr(runner, "_stamp", real)
    src.touch()  # the recording, finished: the rerun makes the output again, in full
    again = run_batch(_opts(tmp_path / "in", out, chunk_seconds=chunk_seconds),
                      marking_engine, quiet=True)
    assert again.count("done") == 1 and again.incomplete == []


@pytest.mark.parametrize("ext", ["mp4", "mkv"])
@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
def test_a_cut_input_says_it_ended_early_whole_or_in_chunks(
        tmp_path: Path, ext: str, chunk_seconds: float | None) -> None:
    """A new user's trial: a cut Matroska file (it declares 8 s but no frame count) cut into
    chunks was "done" with exit 0; whole, it said "ended early" and exited 3."""
    clip = _noise_clip(tmp_path / "in" / f"cut.{ext}", 240)
    whole = run_batch(_opts(tmp_path / "in", tmp_path / "whole", chunk_seconds=chunk_seconds),
                      marking_engine, quiet=True)
    assert whole.incomplete == [] and whole.count("done") == 1
    clip.write_bytes(clip.read_bytes()[: int(clip.stat().st_size * 0.4)])
    cut = run_batch(_opts(tmp_path / "in", tmp_path / "cut", chunk_seconds=chunk_seconds),
                    marking_engine, quiet=True)
    assert [r.status for r in cut.incomplete] == ["done"]
    assert "input ended early" in cut.incomplete[0].incomplete


@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
@pytest.mark.parametrize(("audio_tracks", "where"), [(0, 0.45), (1, 0.45), (0, None)])
def test_a_damaged_stretch_in_the_middle_is_not_an_early_end(
        tmp_path: Path, chunk_seconds: float | None, audio_tracks: int,
        where: float | None) -> None:
    """A new user's trial: "input ended early: 245 of 300 frames" for a file whose frames after
    a damaged stretch, to its end, were in the output. Zeroed data keeps its audio packets, so
    the sound "goes on" through the hole: the packets that failed to decode still make it
    damage, in chunks too (a review: "the picture pauses", exit 0). A review: a damaged first
    GOP was still "ended early" (the end was measured from the first frame decoded)."""
    clip = _noise_clip(tmp_path / "in" / "holed.mp4", 240, audio_tracks)
    data = bytearray(clip.read_bytes())
    # None: from the first frame's data on, its GOP
    a = _first_video_byte(clip) if where is None else int(len(data) * where)
    b = a + int(len(data) * 0.15)
    data[a:b] = bytes(b - a)
    clip.write_bytes(bytes(data))
    summary = run_batch(_opts(tmp_path / "in", tmp_path / "out", chunk_seconds=chunk_seconds),
                        marking_engine, quiet=True)
    assert [r.status for r in summary.incomplete] == ["done"]
    why = summary.incomplete[0].incomplete
    assert why is not None and " of 240 frames could not be decoded: no frame for " in why, why
    assert "ended early" not in why
    assert ("no frame for the first " in why) == (where is None), why


@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
def test_a_video_whose_every_frame_is_damaged_fails_whole_or_in_chunks(
        tmp_path: Path, chunk_seconds: float | None) -> None:
    """Chunks wholly inside a damaged stretch write no file and the join goes past them; when
    every chunk is such, the item fails as the whole file's run does."""
    clip = _noise_clip(tmp_path / "in" / "zeroed.mp4", 90)
    data = bytearray(clip.read_bytes())
    a = _first_video_byte(clip)
    data[a:] = bytes(len(data) - a)
    clip.write_bytes(bytes(data))
    summary = run_batch(_opts(tmp_path / "in", tmp_path / "out", chunk_seconds=chunk_seconds),
                        marking_engine, quiet=True)
    assert [r.status for r in summary.results] == ["failed"]
    assert "no video frame could be decoded" in summary.results[0].message
    assert not (tmp_path / "out" / "zeroed.mp4").exists()


@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
def test_a_cut_recording_whose_picture_paused_ended_early_whole_or_in_chunks(
        tmp_path: Path, chunk_seconds: float | None) -> None:
    """A review: a picture that pauses while its sound goes on, in a file cut at 90 %, was
    "input damaged ... no frame for 3.0 s" (the pause, not the cut end)."""
    from fractions import Fraction

    import numpy as np
    from clips import write_clip

    rng = np.random.default_rng(0)
    frames = [*range(60), *range(150, 240)]  # 3 s with no new picture after 2 s
    noise = [rng.integers(0, 255, (64, 96, 3), dtype=np.uint8) for _ in frames]
    (tmp_path / "in").mkdir()
    clip = write_clip(tmp_path / "in" / "paused.mp4", frames, Fraction(1, 30), Fraction(30),
                      audio_tracks=1, pictures=noise, options={"movflags": "faststart"})
    clip.write_bytes(clip.read_bytes()[: int(clip.stat().st_size * 0.9)])
    summary = run_batch(_opts(tmp_path / "in", tmp_path / "out", chunk_seconds=chunk_seconds),
                        marking_engine, quiet=True)
    why = summary.incomplete[0].incomplete
    assert why is not None and why.startswith("input ended early: ") and "no frame" not in why


@pytest.mark.parametrize("ext", ["mp4", "mkv"])
@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
def test_a_hole_in_the_timestamps_is_damage_and_a_stall_is_not(
        tmp_path: Path, ext: str, chunk_seconds: float | None) -> None:
    """A new user's trial: a Matroska file with a zeroed stretch went on after the demuxer's
    resync with a 1 s jump, "done" with exit 0 (the same damage in an MP4 gave exit 3)."""
    from fractions import Fraction

    from clips import vfr_clip, write_clip

    (tmp_path / "in").mkdir()
    holed = [*range(60), *range(90, 150)]  # 1 s without frames after 2 s
    write_clip(tmp_path / "in" / f"hole.{ext}", holed, Fraction(1, 30), Fraction(30),
               audio_tracks=0)
    vfr_clip(tmp_path / "in" / f"vfr.{ext}", frames=90, audio_tracks=0)  # a 0.3 s stall
    # the same pause with its sound going on through it: a screen recorder over a still
    # screen (a new user's trial: "input damaged", exit 3 on every rerun)
    write_clip(tmp_path / "in" / f"paused.{ext}", holed, Fraction(1, 30), Fraction(30),
               audio_tracks=1)
    summary = run_batch(_opts(tmp_path / "in", tmp_path / "out", chunk_seconds=chunk_seconds),
                        marking_engine, quiet=True)
    assert summary.count("done") == 3
    assert [r.item.input.name for r in summary.incomplete] == [f"hole.{ext}"]
    assert summary.incomplete[0].incomplete.startswith(
        "input damaged: no frame for 1.0 s after 0:01.97")
    assert "the picture pauses 1.0 s after 0:01.97 while the sound goes on" in \
        "\n".join(summary.lines())


def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only --output-dir failed every item after the workers started, each with
    "internal error: OSError ... (imaging.py:170)" (a new user's trial)."""
    from livefuse.errors import LivefuseError

    src = tmp_path / "in.png"
    src.write_bytes(b"x")
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr("livefuse.batch.plan.os.access",
                        lambda p, mode: False if Path(p) == locked else real(p, mode))
    for out in (locked, locked / "new" / "deeper"):
        with pytest.raises(LivefuseError, match=r"cannot write in '.*locked'"):
            plan_items([str(src)], out)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(LivefuseError, match=r"is a file, not a folder"):
        plan_items([str(src)], tmp_path / "file" / "sub")


@pytest.mark.parametrize("flag", ["--cpus-per-worker", "--gpus-per-worker", "--chunk-seconds"])
def test_a_share_that_is_not_a_finite_number_is_refused_by_the_parser(
        flag: str, tmp_path: Path, t1_path: Path, astronaut_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: ``nan`` passed the parser and ended in a ValueError traceback."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["batch", str(t1_path), "-o", str(tmp_path / "o"), "-s", str(astronaut_path),
              flag, "nan"])
    assert stop.value.code == 2
    assert "'nan' is not a finite number" in capsys.readouterr().err


def test_a_status_line_goes_above_the_progress_bar_not_into_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: the source note came out inside the progress bar's line."""
    import sys

    from tqdm import tqdm

    from livefuse.batch_cli import say

    bar = tqdm(total=10, desc="batch", file=sys.stderr, disable=False)
    bar.update(3)
    say("source: the source face is 81 px wide")
    bar.close()
    err = capsys.readouterr().err
    at = err.index("[batch] source:")
    assert err[at - 1] in "\r\n"  # the bar's line was cleared first


def test_a_worker_line_counts_its_units_in_words() -> None:
    """A new user's trial read "1 units"."""
    from livefuse.batch.runner import BatchSummary
    from livefuse.batch.worker import WorkerInfo, WorkerStats

    def line(units: int) -> str:
        stats = WorkerStats(WorkerInfo("w0", 1, "host", (), None, "local"), units=units,
                            frames=units)
        return next(ln for ln in BatchSummary(workers=[stats]).lines() if ln.startswith("  w0"))

    assert ": 1 unit, 1 frame, " in line(1) and ": 2 units, 2 frames, " in line(2)


def test_a_damaged_source_photo_is_the_only_line_before_any_engine(
        tmp_path: Path, t1_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It came after the engine's line ("engine: classic ..."), as if the batch had started."""
    from livefuse.cli import main

    bad = tmp_path / "face.jpg"
    bad.write_bytes(b"not a picture" * 20)
    assert main(["batch", str(t1_path), "-o", str(tmp_path / "o"), "-s", str(bad), "-q",
                 "--executor", "local"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"livefuse: error: cannot read the source image '{bad}': not a "
                            "recognised image format\n")
    assert captured.out == "" and not (tmp_path / "o").exists()


def test_a_source_without_a_face_is_refused_before_rays_start_up(
        tmp_path: Path, t1_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: on Ray, a source photo with no face was found by the workers, after
    the cluster's start-up (14 s on 2 cores, against 2.4 s for ``run``). The classic engine is
    built once before, and the batch never starts."""
    import cv2
    import numpy as np

    import livefuse.batch.executor as executor
    from livefuse.cli import main

    def no_cluster(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray's workers started for a source with no face")

    monkeypatch.setattr(executor, "ray_available", lambda: True)
    monkeypatch.setattr(executor, "RayPool", no_cluster)
    plain = tmp_path / "plain.png"
    cv2.imwrite(str(plain), np.full((200, 200, 3), 128, np.uint8))
    assert main(["batch", str(t1_path), "-o", str(tmp_path / "o"), "-s", str(plain), "-q",
                 "--engine", "classic"]) == 2
    err = capsys.readouterr().err
    assert f"no face in source '{plain}'" in err and "[batch] workers" not in err
    assert not (tmp_path / "o").exists()


def test_a_video_of_one_and_a_half_chunks_or_more_is_cut(tmp_path: Path) -> None:
    """A new user's trial: a 30 s video beside a 3 s clip on two workers got 16.5 s chunks
    (auto) and, being under two of them, ran whole on one worker while the other idled (64 s
    against 42 s for the video alone, cut)."""
    from livefuse.batch.plan import MIN_CHUNKS_TO_CUT, auto_chunk_seconds, plan_units

    src = ntsc_clip(tmp_path / "v.mp4", frames=50, gop=15)  # 1.67 s
    items = plan_items([str(src)], tmp_path / "out", False, False).items
    units = plan_units(items, 1.0)
    assert [u.chunks for u in units] == [2, 2]
    assert plan_units(items, 1.2)[0].chunks == 1  # 1.39 chunks: whole

    def video(seconds: float) -> Item:
        return Item(Path("in.mp4"), Path("out.mp4"), "video", seconds=seconds)

    chunk = auto_chunk_seconds([video(30.0), video(3.0)], 2)
    assert chunk == 16.5 and MIN_CHUNKS_TO_CUT * chunk <= 30.0


@pytest.mark.parametrize("share", ["0", "-1"])
def test_no_cpu_share_for_a_worker_is_refused_by_the_parser(
        share: str, tmp_path: Path, t1_path: Path, astronaut_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `--cpus-per-worker 0` started two Ray workers with "0 CPU each";
    a later one found -1 refused with another rule ("must be >= 0")."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["batch", str(t1_path), "-o", str(tmp_path / "o"), "-s", str(astronaut_path),
              "--cpus-per-worker", share])
    assert stop.value.code == 2
    assert "--cpus-per-worker: must be > 0" in capsys.readouterr().err


def test_a_pattern_through_a_folder_with_a_bracket_in_its_name_says_how_to_write_it(
        tmp_path: Path) -> None:
    _touch(tmp_path / "rec [old]" / "a.mp4")
    problems = expand([str(tmp_path / "rec [old]" / "*.mp4")]).problems
    assert len(problems) == 1 and "'[' in" in problems[0][1] and "[[]old]" in problems[0][1]
    found = expand([glob.escape(str(tmp_path / "rec [old]")) + "/*.mp4"]).found
    assert [f.name for f, _ in found] == ["a.mp4"]


def test_an_empty_output_dir_is_refused_by_the_parser(
        tmp_path: Path, t1_path: Path, astronaut_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: ``-o "$UNSET"`` wrote the outputs and the record into the working
    folder, exit 0 (``run -o ""`` is refused)."""
    from livefuse.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["batch", str(t1_path), "-o", "", "-s", str(astronaut_path)])
    assert stop.value.code == 2
    assert "--output-dir/-o: is empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_missing_neural_models_are_named_before_any_worker_starts(
        tmp_path: Path, t1_path: Path, astronaut_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `--engine neural` without models started the Ray cluster and its
    workers first (5.7 s), then failed; `run` says it in half a second."""
    from livefuse.cli import main

    assert main(["batch", str(t1_path), "-o", str(tmp_path / "o"), "-s", str(astronaut_path),
                 "-q", "--engine", "neural", "--models-dir", str(tmp_path / "none"),
                 "--executor", "local"]) == 2
    captured = capsys.readouterr()
    assert "'det_10g.onnx', 'w600k_r50.onnx', 'inswapper_128.onnx' are not in" in \
        " ".join(captured.err.split())
    assert "workers:" not in captured.err and captured.out == ""
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("terminated", "code", "first"), [
    (False, 130, "livefuse: interrupted"),
    (True, 143, "livefuse: terminated (SIGTERM)")])
def test_an_interrupted_batch_says_what_it_kept_and_how_to_go_on(
        tmp_path: Path, t1_path: Path, astronaut_path: Path, monkeypatch: pytest.MonkeyPatch,
        terminated: bool, code: int, first: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: Ctrl-C in a batch printed only "livefuse: interrupted", though the
    finished outputs were kept and a second run resumes after them."""
    from livefuse import cli

    def stopped(*args: object, **kwargs: object) -> None:
        if terminated:
            cli._TERMINATED.set()
        raise KeyboardInterrupt

    monkeypatch.setattr("livefuse.batch.runner.run_batch", stopped)
    try:
        assert cli.main(["batch", str(t1_path), "-o", str(tmp_path / "o"), "-s",
                         str(astronaut_path), "-q", "--executor", "local"]) == code
    finally:
        cli._TERMINATED.clear()
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{first}; what finished is kept (nothing half-written) and the same command goes on "
        "after it")
    # with --overwrite the same command does not go on: it makes every item again
    try:
        assert cli.main(["batch", str(t1_path), "-o", str(tmp_path / "o"), "-s",
                         str(astronaut_path), "-q", "--executor", "local",
                         "--overwrite"]) == code
    finally:
        cli._TERMINATED.clear()
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{first}; what finished is kept (nothing half-written); with --overwrite the same "
        "command makes every item again, without it the items not reached keep their earlier "
        "outputs")


def test_an_interrupted_run_says_no_partial_output_was_kept(
        tmp_path: Path, t1_path: Path, astronaut_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: SIGTERM said "no partial output was kept", Ctrl-C in the same job
    only "interrupted" (``run`` writes through part files either way)."""
    from livefuse import cli

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("livefuse.run.run", stopped)
    assert cli.main(["run", "-s", str(astronaut_path), "-t", str(t1_path), "-o",
                     str(tmp_path / "o.jpg")]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == \
        "livefuse: interrupted; no partial output was kept"


@pytest.mark.parametrize("was_there", [False, True])
def test_a_run_interrupted_after_its_output_landed_says_it_was_written(
        tmp_path: Path, t1_path: Path, astronaut_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], was_there: bool) -> None:
    """A new user's trial: a Ctrl-C in the milliseconds after the rename said "no partial
    output was kept" beside a complete output; an older output at the path is no sign."""
    from livefuse import cli

    out = tmp_path / "o.jpg"
    if was_there:
        out.write_bytes(b"an older output")

    def landed(engine: object, target: Path, output: Path, **kwargs: object) -> None:
        tmp = output.with_name(".o.jpg.part")
        tmp.write_bytes(b"the new output")
        os.replace(tmp, output)
        raise KeyboardInterrupt

    monkeypatch.setattr("livefuse.run.run", landed)
    assert cli.main(["run", "-s", str(astronaut_path), "-t", str(t1_path), "-o",
                     str(out)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == \
        f"livefuse: interrupted after '{out}' was written in full"


@pytest.mark.parametrize("one_terminal", [True, False])
def test_on_one_terminal_the_summary_does_not_repeat_the_status_lines(
        mixed: Path, tmp_path: Path, astronaut_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], one_terminal: bool) -> None:
    """A new user's trial read each failure and note twice in a terminal: live on stderr, then
    in the summary on stdout. Redirected, the summary keeps them: it is the record."""
    from livefuse import batch_cli, cli

    monkeypatch.setattr(batch_cli, "_one_terminal", lambda: one_terminal)
    monkeypatch.setattr("livefuse.batch.runner.make_pool", _marking_pool(monkeypatch))
    code = cli.main(["batch", str(mixed), str(tmp_path / "missing.jpg"), "-o",
                     str(tmp_path / "o"), "-s", str(astronaut_path), "--executor", "local"])
    assert code == 1
    said = capsys.readouterr()
    for name in ("missing.jpg", "c.mp4", "d.png"):
        assert said.err.count(name) == 1, said.err
        assert said.out.count(name) == (0 if one_terminal else 1), said.out
    assert "items:    5: 2 done, 0 skipped (output exists), 3 failed" in said.out


@pytest.mark.parametrize("one_terminal", [True, False])
def test_quiet_says_nothing_while_the_batch_runs_and_the_summary_says_it_all(
        mixed: Path, tmp_path: Path, astronaut_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], one_terminal: bool) -> None:
    """A new user's trial: -q left the ``[batch]`` lines (workers, notes, failures) on stderr.
    Quiet, the summary on stdout is all there is, and it lists every failure."""
    from livefuse import batch_cli, cli

    monkeypatch.setattr(batch_cli, "_one_terminal", lambda: one_terminal)
    monkeypatch.setattr("livefuse.batch.runner.make_pool", _marking_pool(monkeypatch))
    code = cli.main(["batch", str(mixed), str(tmp_path / "missing.jpg"), "-o",
                     str(tmp_path / "o"), "-s", str(astronaut_path), "-q", "--executor",
                     "local"])
    assert code == 1
    said = capsys.readouterr()
    assert "[batch]" not in said.err, said.err
    for name in ("missing.jpg", "c.mp4", "d.png"):
        assert said.out.count(name) == 1, said.out
    assert "items:    5: 2 done, 0 skipped (output exists), 3 failed" in said.out


def test_a_quiet_batch_interrupted_says_what_it_held_back(
        mixed: Path, tmp_path: Path, astronaut_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """No summary follows an interrupt: the lines -q held back (a failure so far) are said."""
    from livefuse import cli
    from livefuse.batch import runner

    def interrupted(*args: object, **kw: Any) -> object:
        kw["on_line"]("failed: x.mp4: no face")
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_batch", interrupted)
    code = cli.main(["batch", str(mixed), "-o", str(tmp_path / "o"), "-s",
                     str(astronaut_path), "-q", "--executor", "local"])
    assert code == 130
    assert "[batch] failed: x.mp4: no face" in capsys.readouterr().err


def _marking_pool(monkeypatch: pytest.MonkeyPatch) -> object:
    """``make_pool`` with the stub engine in place of the one the CLI asked for (fast)."""
    from livefuse.batch import runner

    real = runner.make_pool

    def make(opts: BatchOptions, factory: object, neural: bool,
             most: int | None = None, device: str | None = None) -> object:
        return real(opts, marking_engine, neural, most, device)

    return make


@pytest.mark.parametrize(("device", "workers"), [("cuda", 1), ("cpu", 3), (None, 3)])
def test_in_process_workers_on_a_gpu_are_one(mixed: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              device: str | None, workers: int) -> None:
    """On the H200 without Ray, ``--workers 4`` with the neural engine failed every item: four
    engines of one process captured CUDA graphs into its one pool and capture stream at once.
    In-process GPU engines are one; CPU engines keep their threads."""
    monkeypatch.setattr("livefuse.swap.neural_engine.resolve_device",
                        lambda d: "cuda" if d == "auto" and device == "cuda" else "cpu")
    lines: list[str] = []
    shutil.copy(mixed / "a.jpg", mixed / "e.jpg")
    opts = BatchOptions((str(mixed / "a.jpg"), str(mixed / "b.mp4"), str(mixed / "e.jpg")),
                        tmp_path / "out", executor="local", workers=3)
    summary = run_batch(opts, marking_engine, neural=device is not None,
                        device=None if device is None else "auto", quiet=True,
                        on_line=lines.append)
    assert summary.count("done") == 3
    assert len(summary.workers) == workers
    clamp = [ln for ln in lines if "share its CUDA graph pool" in ln]
    assert clamp == ([] if workers == 3 else [
        "note: --workers 3: GPU engines in one process would share its CUDA graph pool and "
        "capture stream, so 1 worker runs here; worker processes run one engine each: "
        f"{install_hint('batch')}"])



def test_a_second_batch_into_the_same_folder_is_refused_before_any_work(
        mixed: Path, tmp_path: Path) -> None:
    """A new user's trial: two batches into one folder took each other's outputs for missing
    and removed each other's chunks (broken outputs, exit 0)."""
    from livefuse.batch.lock import LOCK_NAME, OutputBusyError, output_lock

    out = tmp_path / "out"
    with output_lock(out):
        with pytest.raises(OutputBusyError, match=r"another livefuse batch is writing into"):
            run_batch(_opts(mixed, out), marking_engine, quiet=True)
        assert [p.name for p in out.iterdir()] == [LOCK_NAME]  # nothing written
    summary = run_batch(_opts(mixed, out), marking_engine, quiet=True)  # released: it runs
    assert summary.count("done") > 0 and not (out / LOCK_NAME).exists()


def test_a_failed_write_names_the_item_once(mixed: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: ``failed: long.mp4: 'long.mp4': cannot write ...`` (a full disk)."""
    import errno

    def full(engine: object, src: Path, dst: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr("livefuse.run.run_image", full)
    lines: list[str] = []
    summary = run_batch(_opts(mixed, tmp_path / "out"), marking_engine, quiet=True,
                        on_line=lines.append)
    failed = [ln for ln in lines if "No space left on device" in ln]
    assert len(failed) == summary.count("failed") - 1  # and the damaged video, c.mp4
    for ln in failed:
        name = Path(ln.split(": ")[1]).name
        # the item once, then the output the error names
        assert ln.count(name) == 2 and f"{name}: cannot write '" in ln, ln


def test_ray_only_options_are_refused_or_named_without_ray(
        mixed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: ``--gpus-per-worker 0.5 --executor local`` was accepted and
    ignored."""
    from livefuse.errors import LivefuseError

    with pytest.raises(LivefuseError, match=r"--gpus-per-worker: only for Ray's workers"):
        run_batch(_opts(mixed, tmp_path / "a", gpus_per_worker=0.5), marking_engine,
                  quiet=True)
    assert not (tmp_path / "a").exists()
    monkeypatch.setattr("livefuse.batch.executor.ray_available", lambda: False)
    summary = run_batch(BatchOptions((str(mixed),), tmp_path / "b", cpus_per_worker=1.0),
                        marking_engine, quiet=True)
    assert any(n.startswith("--cpus-per-worker: not used") for n in summary.notes), \
        summary.notes


def test_a_note_on_an_items_content_reaches_the_summary(tmp_path: Path) -> None:
    """A new user's trial: `run` said an odd-sized video was padded (641x361 -> 642x362);
    `batch` said nothing of it."""
    import av
    import numpy as np

    (tmp_path / "in").mkdir()
    with av.open(str(tmp_path / "in" / "odd.mp4"), "w") as out:  # 4:4:4 takes odd sizes
        vs = out.add_stream("libx264", rate=30, options={"keyint": "15"})
        vs.width, vs.height, vs.pix_fmt = 97, 65, "yuv444p"
        for k in range(60):
            img = np.full((65, 97, 3), (k * 4) % 256, np.uint8)
            for pkt in vs.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(pkt)
        for pkt in vs.encode():
            out.mux(pkt)
    for chunk_seconds in (None, 1.0):
        summary = run_batch(_opts(tmp_path / "in", tmp_path / f"out{chunk_seconds}",
                                  chunk_seconds=chunk_seconds), marking_engine, quiet=True)
        padded = [n for n in summary.notes if "input is 97x65" in n]
        assert padded == [f"'{tmp_path / 'in' / 'odd.mp4'}': input is 97x65; 4:2:0 video needs "
                          "even sizes, so the output is 98x66 (one edge pixel row/column "
                          "repeated)"], summary.notes


def test_the_chunk_note_never_says_about_0_s() -> None:
    from dataclasses import dataclass

    from livefuse.batch.runner import chunked_note

    @dataclass(frozen=True)
    class Item:
        seconds: float
        frames: int = 0

    @dataclass(frozen=True)
    class Unit:
        item: Item
        chunks: int
        frames: int = 0

    short, long = [Unit(Item(1.2), 3)], [Unit(Item(12.0), 3)]
    assert "3 chunks of about 0.4 s," in chunked_note(short, 1)[0]  # type: ignore[arg-type]
    assert "3 chunks of about 4 s," in chunked_note(long, 1)[0]  # type: ignore[arg-type]
    # cut only at keyframes, chunks can differ: their range, not a mean no chunk has (a new
    # user's "7 chunks of about 1 s" were 2 s and 1 s pieces)
    clip = Item(9.0, 270)
    uneven = [Unit(clip, 7, n) for n in (60, 30, 60, 30, 30, 30, 30)]
    assert "7 chunks of 1-2 s," in chunked_note(uneven, 2)[0]  # type: ignore[arg-type]
    even = [Unit(clip, 3, 90)] * 3
    assert "3 chunks of about 3 s," in chunked_note(even, 2)[0]  # type: ignore[arg-type]


@pytest.mark.parametrize("option", [["--crf", "20"], ["--video-encoder", "libx264"],
                                    ["--detect-every", "2"], ["--no-smooth"],
                                    ["--chunk-seconds", "5"]])
def test_video_options_for_a_batch_of_images_only_are_refused(
        tmp_path: Path, t1_path: Path, astronaut_path: Path, option: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--crf` was accepted and did nothing for images, where `run` refuses it for an image."""
    from livefuse.cli import main

    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(t1_path, folder / "a.jpg")
    shutil.copy(t1_path, folder / "b.jpg")
    out = tmp_path / "o"
    assert main(["batch", str(folder), "-o", str(out), "-s", str(astronaut_path), "-q",
                 "--executor", "local", *option]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("livefuse:")]
    assert err == [f"livefuse: error: {' '.join(option)}: only for videos; all 2 inputs are "
                   "images"]
    assert not out.exists()


def test_video_options_pass_when_a_video_is_among_the_inputs_done_or_not(tmp_path: Path) -> None:
    import argparse

    from livefuse.batch.plan import Plan
    from livefuse.batch_cli import _refuse_video_options_without_video

    args = argparse.Namespace(video_encoder="auto", video_decoder="auto", detect_every=1,
                              smooth=True, crf=20, chunk_seconds=None)
    image = Item(tmp_path / "a.jpg", tmp_path / "o" / "a.jpg", "image", 1, 0.0)
    video = Item(tmp_path / "b.mp4", tmp_path / "o" / "b.mp4", "video", 60, 2.0)
    _refuse_video_options_without_video(args, Plan(items=[image], skipped=[video]))
    _refuse_video_options_without_video(args, Plan(items=[video, image]))
    _refuse_video_options_without_video(args, Plan())  # nothing to do: said elsewhere
    with pytest.raises(LivefuseError, match="--crf 20: only for videos; the 1 input is an"):
        _refuse_video_options_without_video(args, Plan(items=[image]))


def test_a_clip_too_short_to_cut_says_why(tmp_path: Path) -> None:
    """A new user's trial: a 1-frame clip at --chunk-seconds 0.01 got "runs whole on one
    worker, not in 0.01 s chunks: " with no reason, and 2-3 frame clips were told to be
    re-encoded with a keyframe every few seconds."""
    from livefuse.batch.plan import plan_units

    one = ntsc_clip(tmp_path / "one.mp4", frames=1, audio_tracks=0)
    three = ntsc_clip(tmp_path / "three.mp4", frames=3, audio_tracks=0, gop=12)
    notes: list[str] = []
    items = [Item(one, tmp_path / "o" / "one.mp4", "video", 1, 0.04),
             Item(three, tmp_path / "o" / "three.mp4", "video", 3, 0.1)]
    units = plan_units(items, 0.01, notes=notes)
    assert [u.chunks for u in units] == [1, 1]
    assert notes[0].endswith("0.01 s chunks: its frames have no timestamps to cut by, or it "
                             "has under two frames"), notes
    assert "re-encode" not in notes[1] and "clean cut point" in notes[1], notes


def test_the_same_file_named_twice_is_one_item(tmp_path: Path) -> None:
    """It was refused: "'f.mp4' and 'f.mp4' would both be written to ...; rename one"."""
    clip = _touch(tmp_path / "in" / "f.jpg")
    plan = plan_items([str(clip), str(clip), str(tmp_path / "in")], tmp_path / "out")
    assert [i.input for i in plan.items] == [clip]


def test_hidden_media_and_a_source_among_the_inputs_are_said_and_recursive_needs_a_folder(
        tmp_path: Path, t1_path: Path, astronaut_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: a folder's '.take2.jpg' was left out without a word, the source
    photo lying among the inputs was swapped too with none, and `--recursive` with file inputs
    only was taken and ignored."""
    from livefuse.cli import main

    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(t1_path, folder / "a.jpg")
    shutil.copy(t1_path, folder / ".take2.jpg")
    shutil.copy(astronaut_path, folder / "src.png")
    (folder / ".a.livefuse-part-1-abcdef.mp4").write_bytes(b"")  # livefuse's own: not said
    summary = run_batch(BatchOptions((str(folder),), tmp_path / "o", executor="local"),
                        marking_engine, quiet=True)
    assert f"note: 1 hidden image or video (a name starting with a dot) left out: " \
        f"'{folder / '.take2.jpg'}'; name one itself to process it" in summary.lines()
    # a hidden output folder inside the input folder: its outputs are not hidden inputs
    inside = BatchOptions((str(folder),), folder / ".swapped", recursive=True, executor="local")
    for _ in range(2):
        lines = run_batch(inside, marking_engine, quiet=True).lines()
    assert [ln for ln in lines if "hidden" in ln] == [
        f"note: 1 hidden image or video (a name starting with a dot) left out: "
        f"'{folder / '.take2.jpg'}'; name one itself to process it"], lines
    assert main(["batch", "-q", "-s", str(folder / "src.png"), str(folder / "a.jpg"),
                 str(folder / "src.png"), "-o", str(tmp_path / "o2"), "--executor",
                 "local"]) == 0
    assert f"note: the source photo '{folder / 'src.png'}' is among the inputs: it is " \
        "swapped too" in capsys.readouterr().err
    assert main(["batch", "-q", "-s", str(astronaut_path), str(folder / "a.jpg"), "-r", "-o",
                 str(tmp_path / "o3")]) == 2
    assert "no input is a folder" in capsys.readouterr().err


class _DarkIsFaceless(MarkingEngine):
    """Finds no face in a dark frame (a BRB screen), one in any other; counts its frames."""

    frames = 0

    def process(self, frame: object, index: int = 0, *args: object,
                **kw: Any) -> Any:
        packet = super().process(frame, index, *args, **kw)  # type: ignore[arg-type]
        _DarkIsFaceless.frames += 1
        if float(packet.frame.mean()) < 10:
            packet.output, packet.found, packet.swapped = packet.frame, 0, 0
        return packet


@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
def test_a_rerun_skips_an_input_that_failed_for_its_own_reason_until_something_changes(
        tmp_path: Path, chunk_seconds: float | None) -> None:
    """A new user's trial: a video with no face (a BRB screen) was decoded in full again on
    every rerun of a season's batch, to fail the same way. Its failure is recorded with the
    job; the same job on the same input lists it as failed without running it, while another
    setting, a changed input or --overwrite tries again."""
    from fractions import Fraction

    import numpy as np
    from clips import write_clip

    folder = tmp_path / "in"
    folder.mkdir()
    dark = [np.zeros((64, 96, 3), np.uint8)] * 90
    brb = write_clip(folder / "brb.mp4", list(range(90)), Fraction(1, 30), Fraction(30),
                     pictures=dark)
    ntsc_clip(folder / "talk.mp4", frames=60)
    out = tmp_path / "out"

    def batch(job: str, **kw: object) -> tuple[dict[str, str], int, list[str]]:
        _DarkIsFaceless.frames = 0
        lines: list[str] = []
        summary = run_batch(_opts(folder, out, chunk_seconds=chunk_seconds, **kw),
                            _DarkIsFaceless, quiet=True, on_line=lines.append, job=job)
        return ({r.item.input.name: r.status for r in summary.results},
                _DarkIsFaceless.frames, summary.lines())

    status, frames, text = batch("k1")
    assert status == {"brb.mp4": "failed", "talk.mp4": "done"} and frames == 150
    # whole or in chunks, the line says why, as `run` does (a new user's trial)
    assert any("; no face was found; no output was kept" in ln for ln in text), text
    # the rate counts the failed item's frames, whose time it counts (a new user's trial)
    assert any(ln.startswith("frames:   60 in ") and
               "over the 150 processed, 90 of them in items that failed;" in ln
               for ln in text), text
    status, frames, text = batch("k1")
    assert status == {"brb.mp4": "failed", "talk.mp4": "skipped"} and frames == 0
    line = next(ln for ln in text if ln.startswith(f"failed: {brb}"))
    assert "no face was swapped" in line and "an earlier run's result" in line, line
    assert batch("k2")[1] == 90  # another job: tried again
    assert batch("k2")[1] == 0
    os.utime(brb, ns=(brb.stat().st_atime_ns, brb.stat().st_mtime_ns + 10**9))
    assert batch("k2")[1] == 90  # the input changed
    assert batch("k2", overwrite=True)[1] == 150


def test_a_failure_on_a_changed_input_is_not_passed_as_done_by_the_output_before_it(
        tmp_path: Path) -> None:
    """A review: a photo replaced by one with no face failed (exit 1) and left the old
    photo's output in place; the failure's record then stood for that output, and the next
    run skipped it as done, exit 0. It is listed as failed again, the output named as an
    earlier run's."""
    import cv2
    import numpy as np

    folder = tmp_path / "in"
    folder.mkdir()
    photo = folder / "a.png"
    cv2.imwrite(str(photo), np.full((64, 64, 3), 200, np.uint8))
    out = tmp_path / "out"

    def batch() -> tuple[str, str]:
        summary = run_batch(_opts(folder, out), _DarkIsFaceless, quiet=True, job="k1")
        return summary.results[0].status, summary.results[0].message

    assert batch()[0] == "done"
    cv2.imwrite(str(photo), np.zeros((64, 64, 3), np.uint8))
    os.utime(photo, ns=(photo.stat().st_atime_ns, photo.stat().st_mtime_ns + 10**9))
    status, message = batch()
    assert status == "failed" and "the file already at" in message, message
    status, message = batch()
    assert status == "failed" and "an earlier run's result" in message, message
    assert "is from an earlier run" in message, message
    # a review: with another setting the failure was not "the same job", and the old photo's
    # swap was skipped as done, exit 0: a failure recorded since the file was made runs again
    summary = run_batch(_opts(folder, out), _DarkIsFaceless, quiet=True, job="k2")
    assert [r.status for r in summary.results] == ["failed"]
    # the record's failure is no output: a walk of the folder does not take the path as one
    from livefuse.batch.made_from import outputs
    assert outputs(out) == {"a.png"}


class _TouchesItsInput(_DarkIsFaceless):
    """Finds no face, and the input changes while it is read (a recording still written)."""

    path: Path | None = None

    def process(self, frame: object, index: int = 0, *args: object, **kw: Any) -> Any:
        if index == 0 and self.path is not None:
            st = self.path.stat()
            os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return super().process(frame, index, *args, **kw)


def test_a_failure_on_an_input_that_changed_while_it_was_read_is_tried_again(
        tmp_path: Path) -> None:
    """A review: the failure was recorded with the input as it was at the end, so a recording
    whose faceless start was read while OBS still wrote it was never processed whole."""
    from fractions import Fraction

    import numpy as np
    from clips import write_clip

    folder = tmp_path / "in"
    folder.mkdir()
    clip = write_clip(folder / "rec.mp4", list(range(30)), Fraction(1, 30), Fraction(30),
                      pictures=[np.zeros((64, 96, 3), np.uint8)] * 30)
    _TouchesItsInput.path = clip
    try:
        first = run_batch(_opts(folder, tmp_path / "out"), _TouchesItsInput, quiet=True,
                          job="k1")
    finally:
        _TouchesItsInput.path = None
    assert first.results[0].status == "failed"
    _DarkIsFaceless.frames = 0
    again = run_batch(_opts(folder, tmp_path / "out"), _DarkIsFaceless, quiet=True, job="k1")
    assert again.results[0].status == "failed" and _DarkIsFaceless.frames == 30


@pytest.mark.parametrize("chunk_seconds", [None, 1.0])
def test_a_hole_after_a_damaged_start_is_placed_as_run_places_it(
        tmp_path: Path, chunk_seconds: float | None) -> None:
    """A review: a hole's place was counted from the first frame decoded, not from the
    stream's start, when the first GOP was damaged; whole or in chunks, it is the output
    frame's own time before the hole."""
    import re

    clip = _noise_clip(tmp_path / "in" / "holed.mp4", 240)
    data = bytearray(clip.read_bytes())
    n = int(len(data) * 0.1)
    for a in (_first_video_byte(clip), int(len(data) * 0.6)):
        data[a:a + n] = bytes(n)
    clip.write_bytes(bytes(data))
    summary = run_batch(_opts(tmp_path / "in", tmp_path / "out", chunk_seconds=chunk_seconds),
                        marking_engine, quiet=True)
    why = summary.incomplete[0].incomplete
    assert why is not None and "no frame for the first " in why, why
    found = re.search(r"no frame for [\d.]+ s after (\d+):([\d.]+)", why)
    assert found is not None, why
    with av.open(str(tmp_path / "out" / "holed.mp4")) as c:
        times = [float(f.time) for f in c.decode(video=0)]
    steps = [(b - a, a) for a, b in itertools.pairwise(times)]
    said = int(found.group(1)) * 60 + float(found.group(2))
    assert said == pytest.approx(max(steps)[1], abs=0.01), (said, max(steps))


def test_a_failure_recorded_under_an_older_key_still_holds_part_by_part(
        tmp_path: Path) -> None:
    """A review: failures were matched on the whole job key, so a key that gained a part in
    an upgrade ("still") decoded every recorded failure again. They are matched part by part
    on the settings that decide the pixels (a photo's: not --detect-every); another such
    setting tries again."""
    import cv2
    import numpy as np

    from livefuse.batch.worker import job_key

    folder = tmp_path / "in"
    folder.mkdir()
    photo = folder / "dark.png"
    cv2.imwrite(str(photo), np.zeros((64, 64, 3), np.uint8))
    out = tmp_path / "out"

    def key(config: EngineConfig) -> str:
        return job_key(EngineSpec(config, photo), VideoOptions())

    def frames(job: str) -> int:
        _DarkIsFaceless.frames = 0
        summary = run_batch(_opts(folder, out), _DarkIsFaceless, quiet=True, job=job)
        assert [r.status for r in summary.results] == ["failed"]
        return _DarkIsFaceless.frames

    assert frames(key(EngineConfig())) == 1
    assert frames(key(EngineConfig(detect_every=2))) == 0  # not a photo's setting
    record = out / RECORD
    older = ";".join(p for p in key(EngineConfig()).split(";") if not p.startswith("still="))
    record.write_text(record.read_text().replace(key(EngineConfig()), older))
    assert frames(key(EngineConfig())) == 0  # the upgrade's new part is not a change
    assert frames(key(EngineConfig(blend="seamless"))) == 1  # a photo's: tried again
