"""An interrupted batch keeps a long video's finished chunks, and a rerun with the same settings
processes only the rest (:mod:`livefuse.batch.resume`). In-process pool, marking engine."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from clips import audio_packets, frame_times, ntsc_clip

from livefuse.batch.plan import CHUNK_DIR
from livefuse.batch.resume import MANIFEST
from livefuse.batch.runner import BatchOptions, run_batch
from livefuse.batch.worker import EngineSpec, _pixel_settings, job_changes, job_key, same_job
from livefuse.config import EngineConfig
from livefuse.io.video import VideoOptions
from livefuse.testing.stub_engine import MarkingEngine


class _Counted:
    """A factory of slow marking engines that counts the frames they processed."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.engines: list[MarkingEngine] = []

    def __call__(self) -> MarkingEngine:
        engine = MarkingEngine(delay_s=self.delay_s)
        self.engines.append(engine)
        return engine

    @property
    def frames(self) -> int:
        return sum(len(e.indices) + len(e.tracked) for e in self.engines)


def _done(manifest: Path) -> int:
    try:
        return len(json.loads(manifest.read_text())["done"])
    except (OSError, ValueError, KeyError):
        return 0


def _interrupt_after(manifest: Path, chunks: int) -> None:
    main_id = threading.main_thread().ident
    assert main_id is not None

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _done(manifest) < chunks:
            time.sleep(0.01)
        signal.pthread_kill(main_id, signal.SIGINT)

    threading.Thread(target=watch, daemon=True).start()


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


@pytest.fixture
def long_clip(tmp_path: Path) -> Path:
    return ntsc_clip(tmp_path / "long.mp4", frames=240, audio_tracks=1, gop=15)


def _opts(src: Path, out: Path) -> BatchOptions:
    return BatchOptions((str(src),), out, executor="local", workers=1, chunk_seconds=1.0)


def test_a_rerun_after_ctrl_c_processes_only_the_chunks_not_finished(
        long_clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = out / CHUNK_DIR / "long.mp4"
    first = _Counted(0.02)
    lines: list[str] = []
    _interrupt_after(folder / MANIFEST, 3)
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), first, quiet=True, on_line=lines.append, job="k1")
    done = _done(folder / MANIFEST)
    assert done >= 3
    listed = json.loads((folder / MANIFEST).read_text())["done"]
    assert sorted(p.name for p in folder.iterdir()) == \
        sorted([MANIFEST, *(f"chunk-{int(k):04d}.mp4" for k in listed)])
    assert not (out / "long.mp4").exists()
    assert not list(out.rglob("*part*"))  # nothing half-written is kept
    assert any(ln.startswith(f"kept finished chunks of '{long_clip}', {done} of 8, in ")
               for ln in lines), lines

    again = _Counted(0.0)
    lines.clear()
    summary = run_batch(_opts(long_clip, out), again, quiet=True, on_line=lines.append,
                        job="k1")
    assert summary.count("done") == 1, summary.lines()
    # the rate is of what this run processed, not of the frames it reused
    frames_line = next(ln for ln in summary.lines() if ln.startswith("frames:"))
    assert frames_line.startswith(f"frames:   240 ({done * 30} of them in chunks an earlier "
                                  f"run finished) in "), frames_line
    assert f"fps over the {240 - done * 30} processed;" in frames_line
    assert f"note: '{long_clip}': chunks an earlier run with the same settings finished: " \
        f"{done} of 8; only the rest are processed" in lines
    whole = _Counted(0.0)
    run_batch(_opts(long_clip, tmp_path / "ref"), whole, quiet=True)
    assert 0 < again.frames < whole.frames  # the finished chunks were not processed again
    # the joined output is the one an uninterrupted run writes
    assert frame_times(out / "long.mp4") == frame_times(long_clip)
    assert audio_packets(out / "long.mp4") == audio_packets(long_clip)
    a, b = _frames(out / "long.mp4"), _frames(tmp_path / "ref" / "long.mp4")
    assert len(a) == len(b) == 240
    # not byte for byte: libx264 in PyAV's wheel now and then encodes the same frames a little
    # differently on a loaded machine (a mean difference near 0.1 of 255, once 1.46 while two
    # other jobs ran; neighbouring frames of this clip differ by 3.5 or more)
    worst = max(float(np.abs(x.astype(np.int16) - y).mean()) for x, y in zip(a, b, strict=True))
    assert worst < 2.0, worst
    assert not (out / CHUNK_DIR).exists()


def test_ctrl_c_just_after_a_chunk_is_listed_keeps_its_file(
        long_clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI on a loaded machine: the Ctrl-C came after the manifest listed a chunk as done and
    before the run counted it, and the cleanup removed the listed chunk's file."""
    from livefuse.batch import resume

    real = resume.finished
    calls: list[int] = []

    def finished_then_stopped(unit: Any, *args: Any) -> None:
        real(unit, *args)
        calls.append(unit.chunk)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(resume, "finished", finished_then_stopped)
    out = tmp_path / "out"
    folder = out / CHUNK_DIR / "long.mp4"
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), _Counted(0.0), quiet=True, job="k1")
    listed = json.loads((folder / MANIFEST).read_text())["done"]
    assert sorted(int(k) for k in listed) == sorted(calls)
    assert sorted(p.name for p in folder.iterdir()) == \
        sorted([MANIFEST, *(f"chunk-{k:04d}.mp4" for k in calls)])
    monkeypatch.setattr(resume, "finished", real)
    again = _Counted(0.0)
    summary = run_batch(_opts(long_clip, out), again, quiet=True, job="k1")
    assert summary.count("done") == 1
    assert not any("changed or went missing" in n for n in summary.notes), summary.notes
    assert len(set(again.engines[0].indices)) == 240 - 2 * 30


def test_ctrl_c_while_the_workers_start_keeps_an_earlier_runs_chunks(
        long_clip: Path, tmp_path: Path) -> None:
    """The rerun's own start-up (Ray, model loading) takes seconds: a Ctrl-C then must not
    cost the chunks the first run kept."""
    out = tmp_path / "out"
    folder = out / CHUNK_DIR / "long.mp4"
    _interrupt_after(folder / MANIFEST, 2)
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), _Counted(0.02), quiet=True, job="k1")
    done = _done(folder / MANIFEST)
    chunks = sorted(p.name for p in folder.iterdir())

    def stopped() -> MarkingEngine:
        raise KeyboardInterrupt

    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), stopped, quiet=True, on_line=lines.append, job="k1")
    assert sorted(p.name for p in folder.iterdir()) == chunks
    assert f"kept finished chunks of '{long_clip}', {done} of 8, in '{folder}': the " \
        "same command processes only the rest" in lines
    again = _Counted(0.0)
    assert run_batch(_opts(long_clip, out), again, quiet=True, job="k1").count("done") == 1
    assert len(set(again.engines[0].indices)) == 240 - done * 30


@pytest.mark.parametrize("change", ["job", "input"])
def test_kept_chunks_of_other_settings_or_another_input_are_not_reused(
        long_clip: Path, tmp_path: Path, change: str) -> None:
    out = tmp_path / "out"
    folder = out / CHUNK_DIR / "long.mp4"
    _interrupt_after(folder / MANIFEST, 2)
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), _Counted(0.02), quiet=True, job="k1")
    assert _done(folder / MANIFEST) >= 2
    if change == "input":
        st = long_clip.stat()
        os.utime(long_clip, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = _Counted(0.0)
    lines: list[str] = []
    summary = run_batch(_opts(long_clip, out), again, quiet=True, on_line=lines.append,
                        job="k2" if change == "job" else "k1")
    assert summary.count("done") == 1
    assert not any("finished by an earlier run" in ln for ln in lines)
    why = ("they were made with other settings" if change == "job"
           else "the input changed since (its size or modification time)")
    assert f"note: '{long_clip}': the chunks an earlier run finished are not used: {why}" \
        in "\n".join(lines)
    assert len(set(again.engines[0].indices)) == 240  # every frame written again


@pytest.mark.parametrize("damage", ["cut short", "same size"])
def test_a_damaged_chunk_is_processed_again(long_clip: Path, tmp_path: Path,
                                            damage: str) -> None:
    """A new user's trial: a chunk damaged in place (its size unchanged) was reused and joined
    into a broken output, exit 0."""
    out = tmp_path / "out"
    folder = out / CHUNK_DIR / "long.mp4"
    _interrupt_after(folder / MANIFEST, 2)
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), _Counted(0.02), quiet=True, job="k1")
    done = sorted(int(k) for k in json.loads((folder / MANIFEST).read_text())["done"])
    chunk = folder / f"chunk-{done[0]:04d}.mp4"
    data = chunk.read_bytes()
    if damage == "cut short":
        chunk.write_bytes(data[:100])
    else:  # bytes in the middle of a packet: the file still opens
        middle = len(data) // 2
        chunk.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 64])
                          + data[middle + 64:])
    again = _Counted(0.0)
    summary = run_batch(_opts(long_clip, out), again, quiet=True, job="k1")
    assert summary.count("done") == 1
    assert f"'{long_clip}': chunks an earlier run finished that changed or went missing " \
        f"since: 1 of {len(done)}; those are processed again" in summary.notes
    assert any("chunks of about 1 s, processed in turn and joined" in n  # one worker
               for n in summary.notes), summary.notes
    assert frame_times(out / "long.mp4") == frame_times(long_clip)
    written = set(again.engines[0].indices)
    # 240 frames in 8 chunks of 30: the damaged chunk is processed again, the others not
    assert set(range(done[0] * 30, done[0] * 30 + 30)) <= written
    assert not written & {i for k in done[1:] for i in range(k * 30, k * 30 + 30)}


def test_chunks_kept_under_a_key_spelt_otherwise_are_reused_and_an_older_key_is_said(
        long_clip: Path, tmp_path: Path, astronaut_path: Path) -> None:
    """``--device cuda`` against ``auto`` on one GPU is the same job: an interrupted video's
    chunks are reused. Chunks an older livefuse recorded under a key with other parts are not,
    and the note says so instead of naming settings that did not change (a review)."""
    from livefuse.batch import resume
    from livefuse.batch.plan import Item
    from livefuse.swap.neural_engine import resolve_device

    item = Item(long_clip, tmp_path / "out" / "long.mp4", "video", 240, 8.0)

    def key(device: str) -> str:
        return job_key(EngineSpec(EngineConfig(engine="neural", device=device), astronaut_path),
                       VideoOptions())

    resume.start(item, key("auto"), [])
    assert resume._read_why(item, key(resolve_device("auto")))[1] == ""
    old = ";".join(p for p in key("auto").split(";") if not p.startswith("settings="))
    resume.start(item, old, [])
    data, why = resume._read_why(item, key("auto"))
    assert data is None and why == ("they were made by a livefuse that recorded their "
                                    "settings otherwise")


@pytest.mark.parametrize("manifest", ["not json", "[]", '{"format": 2}', ""])
def test_a_manifest_that_cannot_be_read_discards_the_folder(long_clip: Path, tmp_path: Path,
                                                            manifest: str) -> None:
    from livefuse.batch import resume
    from livefuse.batch.plan import Item, chunk_dir

    item = Item(long_clip, tmp_path / "out" / "long.mp4", "video", 240, 8.0)
    folder = chunk_dir(item)
    folder.mkdir(parents=True)
    (folder / "chunk-0000.mp4").write_bytes(b"x")
    if manifest:
        (folder / MANIFEST).write_text(manifest)
    got = resume.load(item, "k1")
    assert got.kept is None and not folder.exists()
    # a new user's trial: an unreadable list restarted the video without a word
    said = "the chunks an earlier run finished are not used: their list of chunks cannot be read"
    assert (said in got.note) == (manifest in ("not json", "")), got.note


def test_without_a_job_key_ctrl_c_keeps_no_chunk(long_clip: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    main_id = threading.main_thread().ident
    assert main_id is not None

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(out.rglob("chunk-*.mp4"))) < 3:
            time.sleep(0.01)
        signal.pthread_kill(main_id, signal.SIGINT)

    threading.Thread(target=watch, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), _Counted(0.02), quiet=True)
    assert not out.exists()


def test_the_job_key_follows_what_decides_the_pixels(tmp_path: Path, t1_path: Path,
                                                     astronaut_path: Path) -> None:
    spec = EngineSpec(EngineConfig(engine="classic"), astronaut_path)
    base = job_key(spec, VideoOptions())
    same: dict[str, Any] = {"pipelined": False, "depth": 2, "threads": 3, "decoder": "cpu"}
    assert job_key(spec, VideoOptions(**same)) == base  # how, not what, is written
    assert job_key(spec, VideoOptions(crf=23)) != base
    assert job_key(spec, VideoOptions(encoder="libx265")) != base
    # a new user's trial: the encoder auto picks, named, remade every video
    from livefuse.io.codecs import choose_encoder

    assert same_job(job_key(spec, VideoOptions(encoder=choose_encoder("auto").name)), base)
    assert job_key(EngineSpec(EngineConfig(engine="classic"), t1_path), VideoOptions()) != base
    assert job_key(EngineSpec(EngineConfig(engine="classic", detect_every=3), astronaut_path),
                   VideoOptions()) != base
    # the photo's bytes, not its path or time: a copy, moved or touched, is the same face
    copy = tmp_path / "moved" / astronaut_path.name
    copy.parent.mkdir()
    copy.write_bytes(astronaut_path.read_bytes())
    os.utime(copy, ns=(1, 1))
    assert job_key(EngineSpec(EngineConfig(engine="classic"), copy), VideoOptions()) == base
    copy.write_bytes(astronaut_path.read_bytes() + b"\0")  # another file: another face
    assert job_key(EngineSpec(EngineConfig(engine="classic"), copy), VideoOptions()) != base
    # a new user's trial: another --chunk-seconds kept the old cuts, "with the same settings"
    assert job_key(spec, VideoOptions(), 4.0) != base
    # and the note said only "face photo, engine or video options": now it names the part
    assert job_changes(base, job_key(spec, VideoOptions(crf=23), 4.0)) == [
        "the video options", "--chunk-seconds"]
    assert job_changes(base, job_key(EngineSpec(EngineConfig(engine="classic"), copy),
                                      VideoOptions())) == ["the face photo"]
    assert job_changes("k1", "k2") == []
    # a review: --device cuda against auto, or a relative --models-dir against its absolute
    # path, made a season again; a device of another kind or precision, or another models
    # folder, is another job
    from livefuse.swap.neural_engine import resolve_device

    def key(**settings: Any) -> str:
        return job_key(EngineSpec(EngineConfig(engine="neural", **settings), astronaut_path),
                       VideoOptions())

    here = key(models_dir="models")
    assert same_job(key(models_dir=str(Path("models").resolve())), here)
    assert same_job(key(models_dir="models", device=resolve_device("auto")), here)
    assert same_job(key(device="cuda:0"), key(device="cuda"))  # the kind, not the index
    assert same_job(key(device="cpu", precision="fp32"), key(device="cpu"))  # auto: fp32
    assert job_changes(key(device="cpu"), key(device="cpu", precision="fp16")) == [
        "the engine settings"]
    assert job_changes(here, key(models_dir=str(tmp_path))) == ["the engine settings"]
    # a review: a joined cluster's workers have GPUs and encoders this machine cannot see, and
    # --gpus-per-worker 0 runs them on the CPU: neither is resolved here
    def far(device: str, **kw: Any) -> str:
        return job_key(EngineSpec(EngineConfig(engine="neural", device=device), astronaut_path),
                       VideoOptions(), **kw)

    assert not same_job(far("auto", workers_here=False), far("cpu", workers_here=False))
    assert same_job(far("cuda:1", workers_here=False), far("cuda", workers_here=False))
    assert same_job(far("auto", cpu_workers=True), far("cpu"))
    assert not same_job(far("auto", workers_here=False),
                        job_key(EngineSpec(EngineConfig(engine="neural"), astronaut_path),
                                VideoOptions(encoder="libx264"), workers_here=False))
    # the default folder is not keyed by the user's home it is in
    assert "models_dir=None" in _pixel_settings(EngineConfig(engine="neural"))
    # a record from before "settings": its settings are compared as it hashed them
    old = ";".join(p for p in base.split(";")
                   if not p.startswith(("settings=", "encoding=")))
    assert job_changes(old, base) == [] and same_job(old, base) is None
    other = EngineSpec(EngineConfig(engine="classic", blend="seamless"), astronaut_path)
    assert job_changes(old, job_key(other, VideoOptions())) == ["the engine settings"]
    assert job_changes(old, job_key(spec, VideoOptions(crf=23))) == ["the video options"]
    # ... and its encoder as named: another spelling of the same one is a change there
    named = job_key(spec, VideoOptions(encoder=choose_encoder("auto").name))
    assert job_changes(old, named) == ["the video options"]
    assert job_changes(base, named) == []

class _FailsOnce(_Counted):
    """Marking engines whose process raises on frame ``bad`` (a bad stretch of the input, or a
    worker lost mid-chunk)."""

    def __init__(self, bad: int) -> None:
        super().__init__(0.0)
        self.bad = bad

    def __call__(self) -> MarkingEngine:
        engine = super().__call__()
        process = engine.process

        def failing(frame: Any, index: int = 0, **kw: Any) -> Any:
            if index == self.bad:
                raise RuntimeError(f"frame {index} cannot be processed")
            return process(frame, index, **kw)

        engine.process = failing  # type: ignore[method-assign]
        return engine


def test_a_failed_chunk_costs_only_itself_on_the_rerun(long_clip: Path,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_batch(_opts(long_clip, out), _FailsOnce(bad=100), quiet=True, job="k1")
    assert summary.failed == 1
    message = next(r.message for r in summary.results if r.status == "failed")
    assert message.endswith(f"; 7 of 8 chunks finished and are kept in "
                            f"'{out / CHUNK_DIR / 'long.mp4'}': the same command processes "
                            "only the rest"), message
    again = _Counted(0.0)
    summary = run_batch(_opts(long_clip, out), again, quiet=True, job="k1")
    assert summary.count("done") == 1, summary.lines()
    assert set(again.engines[0].indices) == set(range(90, 120))  # chunk 3 only
    assert frame_times(out / "long.mp4") == frame_times(long_clip)
    assert not (out / CHUNK_DIR).exists()


def test_without_a_job_key_a_failed_chunk_keeps_nothing(long_clip: Path,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_batch(_opts(long_clip, out), _FailsOnce(bad=100), quiet=True)
    assert summary.failed == 1
    assert not (out / CHUNK_DIR).exists()



def test_overwrite_processes_the_kept_chunks_again(long_clip: Path, tmp_path: Path) -> None:
    """A new user's trial: --overwrite reused an interrupted run's chunks; only deleting the
    chunk folder by hand made the video run from the start."""
    from dataclasses import replace

    out = tmp_path / "out"
    _interrupt_after(out / CHUNK_DIR / "long.mp4" / MANIFEST, 2)
    with pytest.raises(KeyboardInterrupt):
        run_batch(_opts(long_clip, out), _Counted(0.02), quiet=True, job="k1")
    again = _Counted(0.0)
    summary = run_batch(replace(_opts(long_clip, out), overwrite=True), again, quiet=True,
                        job="k1")
    assert summary.count("done") == 1 and summary.reused_frames == 0
    assert len(set(again.engines[0].indices)) == 240


def test_the_cli_keys_the_chunks_on_chunk_seconds(long_clip: Path, tmp_path: Path,
                                                  astronaut_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: a rerun with another --chunk-seconds kept the old cuts."""
    from livefuse import cli
    from livefuse.batch import runner

    jobs: list[str | None] = []

    def record(*a: object, job: str | None = None, **k: object) -> runner.BatchSummary:
        jobs.append(job)
        return runner.BatchSummary()

    monkeypatch.setattr(runner, "run_batch", record)
    for seconds in ("2", "4", "4"):
        assert cli.main(["batch", str(long_clip), "-o", str(tmp_path / "o"), "-s",
                         str(astronaut_path), "-q", "--executor", "local", "--engine",
                         "classic", "--chunk-seconds", seconds]) == 0
    assert jobs[0] != jobs[1] == jobs[2]
