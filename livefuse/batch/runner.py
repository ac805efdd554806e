"""``livefuse batch`` from start to end: plan, pick the workers, dispatch, join chunks, show
progress, summarise, and clean up on Ctrl-C. No Ray here (the executor has it).

Rules a batch keeps:

* an output is written to a temp name and renamed when complete; an input is never overwritten;
* an item whose output exists is skipped (a resumed batch) unless ``overwrite``;
* one bad item (corrupt, no face, unreadable) fails alone: the others go on, and the summary
  lists each failure with its message;
* Ctrl-C (or SIGTERM) stops every worker, removes every half-written file, and stops an
  embedded Ray cluster; a long video's finished chunks stay, and a rerun with the same job key
  processes only the rest (:mod:`livefuse.batch.resume`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from livefuse.batch import made_from, resume
from livefuse.batch.dispatch import Dispatcher, VramReader, WorkerPool
from livefuse.batch.lock import output_lock
from livefuse.batch.plan import (
    CHUNK_DIR,
    Item,
    Plan,
    Unit,
    auto_chunk_seconds,
    chunk_dir,
    incomplete_marker,
    input_stamp,
    leftovers,
    most_units,
    plan_items,
    plan_units,
    write_incomplete_marker,
)
from livefuse.batch.resume import KeptChunks
from livefuse.batch.worker import UnitResult, WorkerStats, item_problem
from livefuse.errors import LivefuseError
from livefuse.extras import install_hint
from livefuse.io.folders import remove_empty
from livefuse.io.video import Span, VideoOptions, media_types

Executor = str
"""``auto`` (Ray when installed), ``ray`` or ``local``."""


@dataclass(frozen=True)
class BatchOptions:
    """Everything ``livefuse batch`` takes besides the engine.

    Attributes:
        inputs: files, folders and glob patterns.
        output_dir: outputs mirror the inputs' names here.
        recursive: folders' subfolders too (and ``**`` in patterns).
        overwrite: process items whose output exists (default: skip them).
        workers: worker count (``None``: Ray picks from the cluster's GPUs or CPUs; 1 without).
        gpus_per_worker: each worker's GPU share (``None``: 1 when the cluster has GPUs and the
            engine is neural, else 0).
        cpus_per_worker: each Ray worker's CPU share: its OpenCV threads, and 1.5 codec
            threads per CPU (``None``: the cluster's CPUs shared evenly among the workers).
        address: join this Ray cluster (``auto`` or ``HOST:PORT``); ``None`` embedded.
        chunk_seconds: cut long videos into chunks of this length (``None``: automatic; 0: never).
        video: decoder and encoder.
        executor: ``auto``, ``ray`` or ``local``.
    """

    inputs: tuple[str, ...]
    output_dir: Path
    recursive: bool = False
    overwrite: bool = False
    workers: int | None = None
    gpus_per_worker: float | None = None
    cpus_per_worker: float | None = None
    address: str | None = None
    chunk_seconds: float | None = None
    video: VideoOptions = field(default_factory=VideoOptions)
    executor: Executor = "auto"


@dataclass
class ItemResult:
    """One item's outcome: ``done``, ``skipped`` or ``failed``."""

    item: Item
    status: str
    message: str = ""
    frames: int = 0
    incomplete: str | None = None
    worker: str = ""


@dataclass
class BatchSummary:
    """What a batch did."""

    results: list[ItemResult] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    startup_s: float = 0.0
    executor: str = ""
    workers: list[WorkerStats] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reused_frames: int = 0
    """Frames of done items that came from chunks an earlier, interrupted run finished."""
    failed_frames: int = 0
    """Frames this run processed for items that then failed (a video with no face): in the
    time, so in the rate too (a new user's trial read 16.0 fps where 19.2 ran)."""

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def frames(self) -> int:
        return sum(r.frames for r in self.results if r.status == "done")

    @property
    def failed(self) -> int:
        return self.count("failed") + len(self.problems)

    @property
    def incomplete(self) -> list[ItemResult]:
        """Items whose input ended early: done now, or skipped with an output an earlier run
        kept from such an input."""
        return [r for r in self.results if r.status in ("done", "skipped") and r.incomplete]

    def lines(self) -> list[str]:
        done, skipped = self.count("done"), self.count("skipped")
        total = len(self.results) + len(self.problems)
        processed = self.frames - self.reused_frames + self.failed_frames
        fps = processed / self.seconds if self.seconds > 0 else 0.0
        out = [f"items:    {total}: {done} done, {skipped} skipped (output exists), "
               f"{self.failed} failed"]
        failed = f", {self.failed_frames} of them in items that failed" \
            if self.failed_frames else ""
        if self.reused_frames or self.failed_frames:
            # the rate is of the frames this run processed: not the reused, and the failed too
            reused = f" ({self.reused_frames} of them in chunks an earlier run finished)" \
                if self.reused_frames else ""
            out.append(f"frames:   {self.frames}{reused} in {self.seconds:.1f} s ({fps:.1f} fps "
                       f"over the {processed} processed{failed}; worker start-up "
                       f"{self.startup_s:.1f} s of it)")
        elif self.frames:  # nothing was processed: no rate to give
            out.append(f"frames:   {self.frames} in {self.seconds:.1f} s ({fps:.1f} fps; worker "
                       f"start-up {self.startup_s:.1f} s of it)")
        if self.executor:  # none started when there was nothing to do
            out.append(f"workers:  {self.executor}")
        for w in self.workers:
            i = w.info
            gpu = ",".join(i.gpu_ids) or "-"
            vram = "-" if w.peak_vram_mib is None else f"{w.peak_vram_mib:.0f} MiB"
            out.append(f"  {i.name}: pid {i.pid} on {i.host}, {w.device}, GPU {gpu}, "
                       f"CUDA_VISIBLE_DEVICES={i.cuda_visible_devices or '-'}: {w.units} unit"
                       f"{'s' if w.units != 1 else ''}, "
                       f"{w.frames} frame{'s' if w.frames != 1 else ''}, busy {w.busy_s:.1f} s, "
                       f"peak VRAM {vram}"
                       + (f", busiest stage {w.busiest()}" if w.stage_s else ""))
        out += [f"note: {n}" for n in self.notes]
        for r in self.incomplete:
            earlier = " (an earlier run's output, kept)" if r.status == "skipped" else ""
            out.append(f"incomplete: {r.item.input}: {r.incomplete}{earlier}")
        for raw, msg in self.problems:
            out.append(f"failed: {raw}: {msg}")
        for r in self.results:
            if r.status == "failed":
                out.append(f"failed: {r.item.input}: {r.message}")
        return out


class Progress:
    """One progress display for the whole batch: frames (images count one), items, fps, ETA."""

    def __init__(self, total_frames: int, items: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total_frames or None, unit="frame", desc="batch",
                        disable=None if enabled else True, dynamic_ncols=True, leave=False)
        self.items, self.done, self.failed, self.frames = items, 0, 0, 0

    def frames_to(self, n: int) -> None:
        if n > self.frames:
            self.bar.update(n - self.frames)
            self.frames = n

    def unit_failed(self, expected: int, written: int) -> None:
        """A unit wrote fewer frames than planned (it failed): the total shrinks to match."""
        if self.bar.total is not None and expected > written:
            self.bar.total -= expected - written
            self.bar.refresh()

    def item(self, ok: bool) -> None:
        self.done += 1
        self.failed += not ok
        self.bar.set_postfix_str(f"items {self.done}/{self.items}"
                                 + (f", {self.failed} failed" if self.failed else ""))

    def close(self) -> None:
        self.bar.close()


def runs_on_ray(opts: BatchOptions) -> bool:
    """Whether :func:`make_pool` gives Ray's workers for ``opts`` (``--executor ray``,
    ``--address``, or ``auto`` with Ray installed)."""
    from livefuse.batch.executor import ray_available

    return opts.executor != "local" and (
        opts.executor == "ray" or opts.address is not None or ray_available())


def make_pool(opts: BatchOptions, factory: Callable[[], Any], neural: bool,
              most: int | None = None, device: str | None = None
              ) -> tuple[WorkerPool, list[str]]:
    """The worker pool ``opts`` asks for, at most ``most`` workers (the batch's units: each
    worker builds an engine before its first unit), and notes for the summary.

    ``device``: the neural engine's device setting (``None``: no neural engine). In this
    process, engines on a CUDA device would capture their graphs into the process's one graph
    pool on one capture stream (:mod:`livefuse.models.graph_cache`), and four worker threads
    doing so at once failed every item on the H200 ("operation failed due to a previous error
    during capture"): the in-process pool then runs one worker, and says that Ray's worker
    processes run one engine each.

    Raises:
        LivefuseError: ``executor='ray'`` or ``--address`` without Ray installed, or Ray refuses.
    """
    from livefuse.batch.executor import LocalPool, RayPool, ray_available

    notes: list[str] = []
    if most is not None and opts.workers is not None and opts.workers > most:
        notes.append(f"--workers {opts.workers}: this batch makes {most} unit"
                     f"{'s' if most != 1 else ''} of work, so {most} worker"
                     f"{'s' if most != 1 else ''} started")
    ray_only = [name for name, value in (("--address", opts.address),
                                         ("--gpus-per-worker", opts.gpus_per_worker),
                                         ("--cpus-per-worker", opts.cpus_per_worker))
                if value is not None]
    if opts.executor == "local" and ray_only:  # accepted and ignored would be a lie
        raise LivefuseError(f"{', '.join(ray_only)}: only for Ray's workers; --executor local "
                            "runs the items in this process")
    if not runs_on_ray(opts):
        if ray_only:
            notes.append(f"{', '.join(ray_only)}: not used: Ray's workers take them, and "
                         "without Ray the items run in this process")
        workers = min(opts.workers or 1, most or 1 << 30)
        if workers > 1 and device is not None and _on_cuda(device):
            notes.append(f"--workers {workers}: GPU engines in one process would share its "
                         "CUDA graph pool and capture stream, so 1 worker runs here; worker "
                         f"processes run one engine each: {install_hint('batch')}")
            workers = 1
        if opts.executor != "local":
            how = "one after another" if workers == 1 else \
                f"on {workers} threads that share one Python (one machine, one GIL)"
            notes.append(f"Ray is not installed: items run in this process, {how}; for "
                         f"worker processes and more machines: {install_hint('batch')}")
        why = "--executor local" if opts.executor == "local" else "no Ray"
        return LocalPool(factory, opts.video, workers, why), notes
    if not ray_available():
        raise LivefuseError(f"--address and --executor ray need Ray: {install_hint('batch')}")
    return RayPool(factory, opts.video, opts.workers, opts.gpus_per_worker,
                   opts.cpus_per_worker, opts.address, neural, most), notes


def _on_cuda(device: str) -> bool:
    from livefuse.swap.neural_engine import resolve_device

    return resolve_device(device).startswith("cuda")


def _remove(paths: Sequence[Path]) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _missing_dirs(output_dir: Path, items: Sequence[Item]) -> list[Path]:
    """The output folders (``output_dir``, the folders above it and those under it the items
    write into) that do not exist yet, deepest first: the run makes them."""
    wanted = {output_dir, *(i.output.parent for i in items), *output_dir.parents}
    for d in list(wanted):
        wanted.update(p for p in d.parents if output_dir in p.parents)
    return sorted((d for d in wanted if not d.exists()), key=lambda d: -len(d.parts))


def chunked_note(units: Sequence[Unit], workers: int, asked: float | None = None
                 ) -> list[str]:
    """One line on the videos cut into chunks (how many, into how many chunks of about what
    length, and whether ``workers`` run them side by side), or none when no video was cut.
    ``asked``: the ``--chunk-seconds`` given; chunks well over it are explained (a cut goes
    only where the input has a keyframe)."""
    cut = {u.item: u for u in units if u.chunks > 1}
    if not cut:
        return []
    chunks = sum(u.chunks for u in cut.values())
    seconds = sum(u.item.seconds for u in cut.values()) / chunks
    videos = "1 video" if len(cut) == 1 else f"{len(cut)} videos"
    # with one worker the chunks still pay: a stopped batch keeps the finished ones
    how = "side by side" if workers > 1 else "in turn"
    # a new user's --chunk-seconds 2 gave "chunks of about 8 s" with no word on why
    why = (f" (not the {asked:g} s asked: a cut goes only where the input has a keyframe, "
           "and its keyframes lie further apart)" if asked and seconds > 1.5 * asked else "")
    def text(s: float) -> str:
        return f"{s:.0f}" if s >= 2 else f"{s:.1g}"  # not "about 0 s"

    # each chunk's own length from its frames: cut only at keyframes, chunks can differ (a new
    # user's "7 chunks of about 1 s" were 2 s and 1 s pieces)
    lengths = [u.frames * u.item.seconds / u.item.frames for u in units
               if u.chunks > 1 and u.frames > 0 and u.item.frames > 0]
    size = f"of about {text(seconds)} s"
    if lengths and max(lengths) > 1.3 * min(lengths) and text(min(lengths)) != \
            text(max(lengths)):
        size = f"of {text(min(lengths))}-{text(max(lengths))} s"
    return [f"{videos} cut at keyframes into {chunks} chunks {size}{why}, "
            f"processed {how} and joined (every frame, timestamp and audio packet of the input "
            "kept)"]


EARLIER_RUN = "an earlier run"
"""The worker named for a chunk reused from an interrupted batch."""


def _cut_spans(units: Sequence[Unit]) -> dict[Item, list[Span]]:
    """The spans of each video cut into chunks, in chunk order."""
    spans: dict[Item, list[Span]] = {}
    for u in sorted(units, key=lambda u: u.chunk):
        if u.chunks > 1 and u.span is not None:
            spans.setdefault(u.item, []).append(u.span)
    return spans


def _resumed_note(kept: dict[Item, KeptChunks]) -> list[str]:
    return [f"'{i.input}': chunks an earlier run with the same settings finished: "
            f"{len(k.done)} of {len(k.spans)}; only the rest are processed"
            for i, k in kept.items()]


def _clean_chunks(items: Sequence[Item]) -> None:
    """Remove chunk folders of ``items`` (and the shared chunk folder when it is empty)."""
    for item in items:
        folder = chunk_dir(item)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        parent = item.output.parent / CHUNK_DIR
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _stamp(path: Path) -> dict[str, int] | None:
    try:
        return input_stamp(path)
    except OSError:
        return None


class _Collector:
    """Turns unit results into item results; joins a chunked video once its chunks are in."""

    def __init__(self, units: Sequence[Unit], progress: Progress,
                 on_line: Callable[[str], None], job: str | None = None,
                 output_dir: Path | None = None) -> None:
        self.progress, self.on_line, self.job = progress, on_line, job
        self.output_dir = output_dir  # where each finished output's input is recorded
        self.expected: dict[Item, int] = {}
        for u in units:
            self.expected[u.item] = u.chunks
        self.chunks: dict[Item, list[UnitResult]] = {}
        self.processed: dict[Item, int] = {}  # frames each item's units ran through the engine
        self.results: list[ItemResult] = []
        self.finished: set[Item] = set()
        self.engine_notes: list[str] = []  # every worker's engine says the same: once each
        self.item_notes: list[str] = []  # what a run would say of its target's content
        # as `run` says it: `--video-decoder nvdec` fell back to the CPU unsaid (a new user's
        # trial); the same line from every item is said once
        self.video_notes: list[str] = []
        # each input as the run starts reading it: one that changes meanwhile (a recording
        # still being written) was read in part
        self.stamps = {item: _stamp(item.input) for item in self.expected}

    def __call__(self, res: UnitResult) -> None:
        item = res.unit.item
        if res.worker != EARLIER_RUN:
            self.processed[item] = self.processed.get(item, 0) + res.processed
        for note in res.engine_notes:
            if note not in self.engine_notes:
                self.engine_notes.append(note)
                self.on_line(note)
        if not res.ok:
            self.progress.unit_failed(res.unit.frames, res.frames)
        for note in res.input_notes:  # each chunk of a video says the same: once each
            line = f"'{item.input}': {note}"
            if line not in self.item_notes:
                self.item_notes.append(line)
        for note in res.notes:  # which encoder and decoder ran, and why: once per kind
            if note.startswith("video: ") and note not in self.video_notes:
                self.video_notes.append(note)
        if res.unit.chunks == 1:
            self._finish(item, res.ok, res.message, res.frames, res.incomplete, res.worker,
                         lasting=res.lasting)
            return
        got = self.chunks.setdefault(item, [])
        # counted before the manifest lists it: a Ctrl-C in between must not let the cleanup
        # remove a chunk file that the manifest calls done
        got.append(res)
        if res.ok and self.job is not None and res.worker != EARLIER_RUN:
            resume.finished(res.unit, res.frames, res.faces_found, res.faces_swapped, self.job)
        if len(got) == self.expected[item]:
            self._join(item, sorted(got, key=lambda r: r.unit.chunk))

    def _join(self, item: Item, parts: list[UnitResult]) -> None:
        from livefuse.batch.join import join_chunks
        from livefuse.io.video import (
            ERROR_LAG_FRAMES,
            gap_reason,
            incomplete_reason,
            paused_note,
            probe,
        )

        failed = next((r for r in parts if not r.ok), None)
        keep = False
        try:
            if failed is not None:
                ok = sum(r.ok for r in parts)
                # a chunk lost to a dead worker or a bad stretch of the input costs only
                # itself: the rerun processes the chunks that failed
                keep = self.job is not None and ok > 0
                more = (f"; {ok} of {len(parts)} chunks finished and are kept in "
                        f"'{chunk_dir(item)}': the same command processes only the rest"
                        if keep else "")
                self._finish(item, False, failed.message + more, 0, None, failed.worker)
                return
            # a chunk wholly inside a damaged stretch wrote no file: the join goes past it
            written = [r.unit.output for r in parts if r.frames > 0]
            if not written:
                self._finish(item, False, "no video frame could be decoded (damaged data)", 0,
                             None, "")
                return
            if sum(r.faces_swapped for r in parts) == 0:
                frames = sum(r.frames for r in parts)
                # as `run` says it (a new user's trial: the chunked batch left the why out)
                skipped = list(dict.fromkeys(line for r in parts for line in r.skipped))
                why = f"the faces found: {'; '.join(skipped[:3])}" if skipped else \
                    "no face was found"
                self._finish(item, False, f"no face was swapped in any of the {frames} frames "
                             f"of '{item.input}'; {why}; no output was kept", 0, None, "",
                             lasting=True)
                return
            joined = join_chunks(item.input, written, item.output)
            info = probe(item.input)
            # packets that failed to decode near the hole make it damage, whatever the sound
            # did, as `run` tells it (a review: a chunked batch called such a stretch a paused
            # picture, exit 0)
            lead = Fraction(0) if info.start is None else max(Fraction(0),
                                                              joined.first - info.start)
            at = joined.gap_at + lead  # from the stream's start, as a player shows it
            start = joined.first + joined.gap_at
            near = any(start - ERROR_LAG_FRAMES / info.rate <= t <= start + joined.gap
                         for r in parts for t in r.failures)
            paused = joined.sound_through_gap and not near
            bad = sum(r.bad_packets for r in parts)
            # a container that declares no frame count (Matroska) still declares a duration
            early = incomplete_reason(joined.frames, info.frames, info.duration,
                                      joined.span + 1 / info.rate, info.rate,
                                      bad_packets=bad,
                                      hole=None if paused else (joined.gap, at),
                                      skipped="damaged data" if bad else None, lead=lead)
            if early is None and gap_reason(joined.gap, at, info.rate) is not None:
                if paused:  # a paused picture, as `run` says it
                    line = f"'{item.input}': {paused_note(joined.gap, at)}"
                    if line not in self.item_notes:
                        self.item_notes.append(line)
                else:
                    early = gap_reason(joined.gap, at, info.rate)
            self._finish(item, True, "", joined.frames, early, ",".join(sorted({r.worker
                                                                        for r in parts})))
        except LivefuseError as exc:
            self._finish(item, False, item_problem(exc, item.input), 0, None, "")
        finally:
            if not keep:
                _clean_chunks([item])

    def chunks_done(self) -> set[Unit]:
        """Chunks whose file is complete, of videos not joined yet."""
        return {r.unit for item, got in self.chunks.items() if item not in self.finished
                for r in got if r.ok}

    def _finish(self, item: Item, ok: bool, message: str, frames: int,
                incomplete: str | None, worker: str, lasting: bool = False) -> None:
        """``lasting``: a failure of the input's own (:attr:`UnitResult.lasting`), recorded
        so that a rerun of this job skips the item."""
        self.finished.add(item)
        if ok:
            stamp = self.stamps.get(item)
            if stamp is not None and stamp != _stamp(item.input):
                incomplete = ("input changed while it was read (a recording still being "
                              "written?): the output has what was there; the same command "
                              "makes it again from the file as it is then")
            if incomplete:
                write_incomplete_marker(item.output, incomplete, stamp)
            else:
                incomplete_marker(item.output).unlink(missing_ok=True)
            if self.output_dir is not None:
                made_from.record(self.output_dir, item.output, item.input, self.job)
        elif lasting and self.output_dir is not None and self.job is not None and \
                self.stamps.get(item) == _stamp(item.input):
            # only of the input as it was read: a recording finished meanwhile is tried again
            made_from.record(self.output_dir, item.output, item.input, self.job,
                             failed=message)
        if not ok and _size(item.output) > 0:
            # a new user's trial: a photo replaced by one with no face failed, and the old
            # photo's swap stayed in the folder unsaid
            message += f"; the file already at '{item.output}' is left as it was"
        self.results.append(ItemResult(item, "done" if ok else "failed", message, frames,
                                       incomplete, worker))
        self.progress.item(ok)
        if not ok:  # as it happens: a season's batch runs for hours before its summary
            self.on_line(f"failed: {item.input}: {message}")


def run_batch(opts: BatchOptions, factory: Callable[[], Any], *, neural: bool = False,
              device: str | None = None,
              detect_every: int = 1, quiet: bool = False,
              on_line: Callable[[str], None] = lambda s: None,
              vram: VramReader | None = None, plan: Plan | None = None,
              job: str | None = None) -> BatchSummary:
    """Run a batch.

    Args:
        opts: inputs, outputs and workers.
        factory: builds one worker's engine (picklable for Ray: an
            :class:`~livefuse.batch.worker.EngineSpec`).
        neural: the engine is the neural one (GPU workers by default when the cluster has GPUs).
        device: the neural engine's device setting (``auto``, ``cuda``...; ``None`` for the
            classic engine): in-process workers on CUDA are one (:func:`make_pool`).
        detect_every: the engine's detection interval (chunks start their warm-up on its phase).
        quiet: no progress display.
        on_line: status lines (the executor chosen, a GPU held back by the VRAM guard).
        vram: reads a GPU's memory for the admission (tests); by default each worker's own.
        plan: a plan made earlier (the CLI plans first, to refuse bad paths before any start).
        job: what decides the outputs' pixels (:func:`livefuse.batch.worker.job_key`). Given,
            an interrupted batch keeps a long video's finished chunks and a rerun with the
            same key processes only the rest (:mod:`livefuse.batch.resume`); ``None``: Ctrl-C
            removes every chunk.

    Raises:
        OutputBusyError: another batch is writing into ``opts.output_dir``
            (:mod:`livefuse.batch.lock`); nothing was written.
        LivefuseError: bad paths (two inputs to one output, an output that is an input), Ray
            asked for but missing, or an engine that cannot be built (no face in the source).
        KeyboardInterrupt: after every worker was stopped and every partial output removed.
    """
    made = _missing_dirs(opts.output_dir, [])
    try:
        with output_lock(opts.output_dir):
            return _run_batch(opts, factory, neural, device, detect_every, quiet, on_line, vram,
                              plan, job)
    finally:  # the folder the lock made, when the batch left it empty
        remove_empty(made)


def _run_batch(opts: BatchOptions, factory: Callable[[], Any], neural: bool,
               device: str | None, detect_every: int, quiet: bool,
               on_line: Callable[[str], None], vram: VramReader | None, plan: Plan | None,
               job: str | None) -> BatchSummary:
    t0 = time.perf_counter()
    plan = plan or plan_items(opts.inputs, opts.output_dir, opts.recursive, opts.overwrite,
                              job=job)
    summary = BatchSummary(problems=list(plan.problems))
    for raw, msg in plan.problems:  # now, not hours later in the summary only
        on_line(f"failed: {raw}: {msg}")
    for item, msg in plan.failed_before.items():
        msg += (" (an earlier run's result with the same input and settings: not tried "
                "again; this file alone with --overwrite tries it)")
        if item.output.exists():
            msg += f"; '{item.output}' is from an earlier run, not of this input as it is now"
        summary.results.append(ItemResult(item, "failed", msg))
        on_line(f"failed: {item.input}: {msg}")
    summary.results += [ItemResult(i, "skipped", incomplete=plan.earlier_incomplete.get(i))
                        for i in plan.skipped]
    if plan.left_out:
        outs = "1 file" if plan.left_out == 1 else f"{plan.left_out} files"
        summary.notes.append(f"{outs} in the output folder '{opts.output_dir}' "
                             "left out: an input folder or pattern walks into it, and what "
                             "lies there is taken as output, not input (name a file itself "
                             "to process it)")
    for kept_dir, files in plan.earlier_outputs:
        summary.notes.append(f"'{kept_dir}': {files} output{'s' if files > 1 else ''} of an "
                             "earlier batch into that folder left out (its record of outputs "
                             "lists them); give the folder itself to swap them again")
    if plan.linked:
        names = ", ".join(f"'{f}'" for f in plan.linked[:3]) + \
            (f" and {len(plan.linked) - 3} more" if len(plan.linked) > 3 else "")
        one = len(plan.linked) == 1
        summary.notes.append(f"{len(plan.linked)} linked folder{'' if one else 's'} (a "
                             f"symbolic link) not walked into: {names}; give "
                             f"{'it' if one else 'one'} as an input to take "
                             f"{'its' if one else 'their'} files")
    for folder, deeper in plan.below:
        summary.notes.append(f"'{folder}' has {deeper} image{'s' if deeper > 1 else ''} or "
                             f"video{'s' if deeper > 1 else ''} in its subfolders, left out: "
                             "--recursive takes them too")
    if plan.hidden:
        n_hidden = len(plan.hidden)
        names = ", ".join(f"'{f}'" for f in plan.hidden[:3]) + \
            (f" and {n_hidden - 3} more" if n_hidden > 3 else "")
        kind = "images or videos" if n_hidden > 1 else "image or video"
        summary.notes.append(f"{n_hidden} hidden {kind} (a name starting with a dot) left "
                             f"out: {names}; name one itself to process it")
    if plan.changed:
        n_changed = len(plan.changed)
        names = ", ".join(f"'{i.input}'" for i in plan.changed[:3]) + \
            (f" and {n_changed - 3} more" if n_changed > 3 else "")
        since = "inputs changed since their outputs were" if n_changed > 1 else \
            "input changed since its output was"
        summary.notes.append(f"{n_changed} {since} made, processed again: {names}")
    if plan.remade:
        n_remade = len(plan.remade)
        what = sorted({part for parts in plan.remade.values() for part in parts})
        names = ", ".join(f"'{i.output}'" for i in list(plan.remade)[:3]) + \
            (f" and {n_remade - 3} more" if n_remade > 3 else "")
        summary.notes.append(
            f"{n_remade} output{'s' if n_remade > 1 else ''} made with other settings "
            f"({' and '.join(what)} changed since), processed again: {names}")
    if plan.not_media:
        others = len(plan.not_media)
        shown = ", ".join(f"'{f.name}'" for f in plan.not_media[:3]) + \
            (f" and {others - 3} more" if others > 3 else "")
        many = others > 1
        summary.notes.append(f"{others} file{'s' if many else ''} in the folders given "
                             f"{'are' if many else 'is'} neither an image nor a video and "
                             f"{'were' if many else 'was'} left out: {shown} "
                             f"({media_types()})")
    if not plan.items:
        if plan.skipped:
            every = "the other inputs' outputs exist" if plan.problems or plan.failed_before \
                else "every output exists"
            summary.notes.append(f"{every} already (--overwrite processes them again)")
        elif not plan.problems and not plan.failed_before:
            # with failures, those listed say why nothing ran
            summary.notes.append("nothing to do")
        return summary
    pool, notes = make_pool(opts, factory, neural, most_units(plan.items, opts.chunk_seconds),
                            device)
    summary.notes += notes
    summary.executor = pool.description
    on_line(f"workers: {pool.description}")
    for n in notes:
        on_line(f"note: {n}")
    made = _missing_dirs(opts.output_dir, plan.items)
    units: list[Unit] = []
    progress: Progress | None = None
    collector: _Collector | None = None
    try:
        pool.prepare()
        summary.startup_s = time.perf_counter() - t0
        chunk_s = opts.chunk_seconds if opts.chunk_seconds is not None else \
            auto_chunk_seconds(plan.items, len(pool.names()))
        # --overwrite redoes the outputs, and so the chunks an earlier run kept for them
        loaded = {} if job is None or opts.overwrite else {
            i: resume.load(i, job) for i in plan.items if i.kind == "video"}
        kept = {i: got.kept for i, got in loaded.items() if got.kept is not None}
        _clean_chunks([i for i in plan.items if i not in kept])
        whole: list[str] = []
        units = plan_units(plan.items, chunk_s, detect_every, whole,
                           {i: k.spans for i, k in kept.items()})
        if job is not None:
            for item, spans in _cut_spans(units).items():
                if item not in kept:
                    resume.start(item, job, spans)
        earlier = [u for u in units if u.item in kept and u.chunk in kept[u.item].done]
        units = [u for u in units if u not in set(earlier)]
        cut = chunked_note([*units, *earlier], len(pool.names()), opts.chunk_seconds)
        discarded = [got.note for got in loaded.values() if got.note]
        for n in [*whole, *cut, *_resumed_note(kept), *discarded]:
            summary.notes.append(n)
            on_line(f"note: {n}")
        # the longest first: the last unit to finish is a short one
        units.sort(key=lambda u: -u.frames)
        progress = Progress(sum(u.frames for u in units), len(plan.items), not quiet)
        collector = _Collector([*units, *earlier], progress, on_line, job, opts.output_dir)
        for u in earlier:
            d = kept[u.item].done[u.chunk]
            collector(UnitResult(u, True, frames=d.frames, faces_found=d.faces_found,
                                 faces_swapped=d.faces_swapped, worker=EARLIER_RUN))
        dispatcher = Dispatcher(pool, vram=vram, on_status=on_line)
        bar = progress
        dispatcher.run(units, collector, lambda: bar.frames_to(pool.frames_done()))
        summary.workers = pool.stats()
    except BaseException:
        if progress is not None:
            progress.close()
        try:
            pool.cancel()
        finally:
            pool.close()
            finished = collector.finished if collector is not None else set()
            done = collector.chunks_done() if collector is not None and job is not None \
                else set()
            _remove([p for u in units if u.item not in finished and u not in done
                     for p in leftovers(u)])
            # finished chunks stay: this run's, and an earlier run's when the interrupt came
            # before they were taken up (while the workers started)
            keep = {i: got for i in plan.items if job is not None and i not in finished
                    for got in [resume.kept(i, job)] if got[0] > 0}
            _clean_chunks([i for i in plan.items if i not in finished and i not in keep])
            for item, (ready, total) in keep.items():
                on_line(f"kept finished chunks of '{item.input}', {ready} of {total}, in "
                        f"'{chunk_dir(item)}': the same command processes only the rest")
            # an interrupted run leaves no empty folder it made behind (one it found stays)
            remove_empty(made)
        raise
    progress.close()
    pool.close()
    remove_empty(made)  # every item failed: no empty folder made for nothing
    summary.seconds = time.perf_counter() - t0
    summary.results += collector.results
    joined = {r.item for r in collector.results if r.status == "done"}
    summary.reused_frames = sum(kept[u.item].done[u.chunk].frames for u in earlier
                                if u.item in joined)
    summary.failed_frames = sum(collector.processed.get(r.item, 0) for r in collector.results
                                if r.status == "failed")
    summary.notes = (collector.engine_notes + summary.notes + collector.video_notes
                     + collector.item_notes)
    order = {i.input: k for k, i in enumerate([*plan.items, *plan.skipped])}
    summary.results.sort(key=lambda r: order.get(r.item.input, 0))
    return summary


__all__ = ["BatchOptions", "BatchSummary", "ItemResult", "chunked_note", "make_pool", "run_batch"]
