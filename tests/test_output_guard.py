"""An output is never an input (issue 15, item 1), at every entry point: the rule itself
(livefuse.io.paths), `livefuse run`, `livefuse live --record` and the live Session that the app
drives. Every spelling of the input is tried: the same name, ``./``, ``..``, a symlink to the
file, a symlinked folder, a hard link; the input's bytes must be unchanged afterwards."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from stub_engine import PassEngine

from livefuse.cli import main
from livefuse.config import AppConfig, CaptureConfig, OutputConfig
from livefuse.imaging import LoadedImage, load_image, save_image
from livefuse.io.paths import OutputIsInputError, check_output, same_file
from livefuse.io.sources import ImageSource
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.samples import astronaut, insightface_image
from livefuse.session import Session

SPELLINGS = ("same", "dot", "dotdot", "file symlink", "folder symlink", "hard link")


def spell(name: str, how: str, base: Path) -> str:
    """The file ``base/name`` spelled another way, relative to ``base`` (the test's cwd): the
    folders and links it needs are made here."""
    (base / "sub").mkdir(exist_ok=True)
    if not (base / "linked").exists():
        (base / "linked").symlink_to(base, target_is_directory=True)
    if how == "same":
        return name
    if how == "dot":
        return f"./{name}"
    if how == "dotdot":
        return f"sub/../{name}"
    if how == "file symlink":
        link = base / f"link-{name}"
        link.unlink(missing_ok=True)
        link.symlink_to(base / name)
        return link.name
    if how == "folder symlink":
        return f"linked/{name}"
    assert how == "hard link"
    hard = base / f"hard-{name}"
    hard.unlink(missing_ok=True)
    os.link(base / name, hard)
    return hard.name


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    photo = load_image(insightface_image("t1.jpg")).bgr
    frames = motion_clip(photo, (320, 240), 12, centre=(514.0, 362.0), face_px=90.0)
    path = write_clip(frames, tmp_path_factory.mktemp("clip") / "cam.mp4", audio=False)
    return path.read_bytes()


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clip: bytes) -> Path:
    """A cwd holding the inputs: ``cam.mp4``, ``src.png``, ``t.jpg``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cam.mp4").write_bytes(clip)
    save_image(tmp_path / "src.png", astronaut())
    (tmp_path / "t.jpg").write_bytes(insightface_image("t1.jpg").read_bytes())
    return tmp_path


# -- the rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize("how", SPELLINGS)
def test_every_spelling_of_an_input_is_the_input(here: Path, how: str) -> None:
    out = spell("cam.mp4", how, here)
    assert same_file(out, "cam.mp4")
    with pytest.raises(OutputIsInputError, match="is the video input itself"):
        check_output(out, {"source": "src.png", "video input": here / "cam.mp4"})


def test_a_new_file_beside_the_input_is_not_the_input(here: Path) -> None:
    check_output("cam-swapped.mp4", {"video input": "cam.mp4", "source": "src.png",
                                     "reference": None})
    check_output("linked/sub/cam.mp4", {"video input": "cam.mp4"})
    assert not same_file("sub/cam.mp4", "cam.mp4")


def test_paths_that_do_not_exist_yet_are_compared_through_their_symlinked_folders(
        here: Path) -> None:
    """Neither file exists (settings that name a video to come): the folder symlink is still
    followed, and ``..`` is applied after the link it follows, not lexically."""
    real = here / "real"
    (real / "deep").mkdir(parents=True)
    (here / "to-deep").symlink_to(real / "deep", target_is_directory=True)
    assert not (real / "new.mp4").exists()
    with pytest.raises(OutputIsInputError):
        check_output("to-deep/../new.mp4", {"video input": "real/new.mp4"})
    check_output("new.mp4", {"video input": "real/new.mp4"})  # lexically the same folder


# -- livefuse run -----------------------------------------------------------------------------

@pytest.mark.parametrize("how", SPELLINGS)
def test_run_never_writes_over_its_target(here: Path, how: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    before = (here / "t.jpg").read_bytes()
    assert main(["run", "-q", "-s", "src.png", "-t", "t.jpg", "-o", spell("t.jpg", how, here),
                 "--engine", "classic"]) == 2
    assert "is the target itself" in capsys.readouterr().err
    assert (here / "t.jpg").read_bytes() == before


@pytest.mark.parametrize("how", ["folder symlink", "dotdot"])
def test_run_never_writes_over_its_source_video_or_reference(
        here: Path, how: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = {n: (here / n).read_bytes() for n in ("cam.mp4", "src.png")}
    assert main(["run", "-q", "-s", "src.png", "-t", "cam.mp4", "-o",
                 spell("cam.mp4", how, here)]) == 2
    assert main(["run", "-q", "-s", "src.png", "-t", "t.jpg", "-o",
                 spell("src.png", how, here)]) == 2
    assert main(["run", "-q", "-s", "src.png", "-t", "t.jpg", "--reference", "t.jpg", "-o",
                 spell("t.jpg", how, here)]) == 2
    err = capsys.readouterr().err
    assert "is the target itself" in err and "is the source itself" in err
    assert {n: (here / n).read_bytes() for n in before} == before


# -- livefuse live ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", SPELLINGS)
def test_live_never_records_over_its_video(here: Path, how: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    before = (here / "cam.mp4").read_bytes()
    code = main(["live", "-s", "src.png", "--video", "cam.mp4", "--record",
                 spell("cam.mp4", how, here), "--duration", "3", "--engine", "classic"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "recording" in err and "is the video input itself" in err
    assert "frames processed" not in err
    assert (here / "cam.mp4").read_bytes() == before
    assert not list(here.glob(".*livefuse-part*"))


@pytest.mark.parametrize(("photo", "role"), [("src.png", "source"), ("t.jpg", "reference")])
def test_live_never_records_over_its_photos(here: Path, photo: str, role: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = (here / photo).read_bytes()
    assert main(["live", "-s", "src.png", "--reference", "t.jpg", "--video", "cam.mp4",
                 "--record", spell(photo, "folder symlink", here), "--duration", "3"]) == 2
    assert f"is the {role} photo itself" in capsys.readouterr().err
    assert (here / photo).read_bytes() == before


# -- the Session (what the app drives) --------------------------------------------------------

def _config(record: str | None, video: str = "cam.mp4") -> AppConfig:
    return AppConfig(capture=CaptureConfig(kind="video", video=video, loop=False),
                     output=OutputConfig(record=record))


def _photo(path: str) -> LoadedImage:
    return LoadedImage(bgr=np.zeros((8, 8, 3), np.uint8), alpha=None, path=Path(path))


@pytest.mark.parametrize("how", SPELLINGS)
def test_session_start_refuses_a_recording_over_its_video(here: Path, how: str) -> None:
    before = (here / "cam.mp4").read_bytes()
    session = Session(_config(spell("cam.mp4", how, here)), engine_factory=lambda c: PassEngine())
    with pytest.raises(OutputIsInputError, match=r"recording .* is the video input itself"):
        session.start()
    assert not session.running
    with pytest.raises(OutputIsInputError):
        session.prepare()
    session.stop()
    assert (here / "cam.mp4").read_bytes() == before


def test_session_apply_refuses_a_recording_over_its_video_and_changes_nothing(
        here: Path) -> None:
    """The app changes the record path while running: refused, the running session keeps its
    settings and sinks, and the input is untouched when it stops."""
    before = (here / "cam.mp4").read_bytes()
    session = Session(AppConfig(capture=CaptureConfig(kind="test pattern", width=64, height=48)),
                      engine_factory=lambda c: PassEngine(),
                      source_factory=lambda c: ImageSource(np.zeros((48, 64, 3), np.uint8), 50))
    session.set_source_face(_photo("src.png"))
    session.start()
    try:
        old = session.config
        bad = _config(spell("cam.mp4", "folder symlink", here))
        with pytest.raises(OutputIsInputError):
            session.apply(bad)
        assert session.config == old and session.sinks == []
        with pytest.raises(OutputIsInputError, match="is the source photo itself"):
            session.apply(AppConfig(capture=old.capture, output=OutputConfig(record="src.png")))
        time.sleep(0.1)
    finally:
        session.stop()
    assert (here / "cam.mp4").read_bytes() == before


def test_session_refuses_a_recording_over_its_photos(here: Path) -> None:
    spell("src.png", "folder symlink", here)  # makes sub/ and linked/
    session = Session(_config("ref.mov"), engine_factory=lambda c: PassEngine())
    with pytest.raises(OutputIsInputError, match="is the reference photo itself"):
        session.set_reference(_photo("sub/../ref.mov"))
    with pytest.raises(OutputIsInputError, match="is the source photo itself"):
        session.set_source_face(_photo("linked/ref.mov"))
    session.set_source_face(_photo("src.png"))
    session.set_reference(_photo("t.jpg"))
    with pytest.raises(OutputIsInputError, match="is the reference photo itself"):
        session.apply(_config("linked/t.jpg"))


def test_two_processes_never_write_one_part_file(tmp_path: Path) -> None:
    """A new user's trial: two `live --record same.mp4` sessions wrote one part file; the
    second's recording was lost (exit 0) and the first failed at its rename. Each process
    writes its own, and a recording's errors call the file a recording."""
    import subprocess
    import sys

    from livefuse.errors import LivefuseError, VideoError
    from livefuse.io.paths import part_path
    from livefuse.io.sinks import RecorderSink
    from livefuse.run import check_run_paths

    out = tmp_path / "same.mp4"
    other = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from livefuse.io.paths import part_path; print(part_path(Path(sys.argv[1])))",
         str(out)], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(other) != part_path(out) != part_path(out)  # in one process too
    assert Path(other).parent == out.parent and Path(other).suffix == ".mp4"
    assert Path(other).name.startswith(".same.livefuse-part")
    with pytest.raises(VideoError, match=r"^recording '"):
        RecorderSink(tmp_path / "rec.avi")
    # a second writer of one file is refused while the first runs: both finished, the later
    # rename won and neither said so; a part file left by a process that ended does not count
    if os.name == "posix":
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            part = out.with_name(f".same.livefuse-part-{sleeper.pid}-abc123.mp4")
            part.write_bytes(b"")
            said = rf"another livefuse process \(pid {sleeper.pid}\)"
            with pytest.raises(VideoError, match=said):
                RecorderSink(out)
            with pytest.raises(LivefuseError, match=said):
                check_run_paths(tmp_path / "in.mp4", out)
        finally:
            sleeper.kill()
            sleeper.wait()
        RecorderSink(out).close()  # its process ended: a leftover, not a writer


def test_a_write_protected_output_is_never_replaced(here: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `run`, `live --record` and `batch --overwrite` replaced a 0444 file
    (and another user's file) with a note, exit 0: the rename needs no write permission on the
    file itself. Each refuses it now; `batch` fails that item only."""
    for name in ("kept.jpg", "kept.mp4"):
        (here / name).write_bytes(b"mine")
        (here / name).chmod(0o444)
    assert main(["run", "-q", "-s", "src.png", "-t", "t.jpg", "-o", "kept.jpg"]) == 2
    assert "'kept.jpg' exists and is write-protected" in capsys.readouterr().err
    assert main(["live", "-s", "src.png", "--video", "cam.mp4", "--record", "kept.mp4",
                 "--duration", "3", "--engine", "classic"]) == 2
    err = capsys.readouterr().err
    assert "recording 'kept.mp4' exists and is write-protected" in err
    assert "frames processed" not in err
    (here / "in").mkdir()
    (here / "in" / "kept.mp4").write_bytes((here / "cam.mp4").read_bytes())
    (here / "in" / "new.jpg").write_bytes((here / "t.jpg").read_bytes())
    (here / "out").mkdir()
    (here / "out" / "kept.mp4").write_bytes(b"mine")
    (here / "out" / "kept.mp4").chmod(0o444)
    code = main(["batch", "-q", "-s", "src.png", "in", "--output-dir", "out", "--overwrite",
                 "--executor", "local"])
    out = capsys.readouterr().out
    assert code != 0 and "write-protected" in out, out
    assert (here / "out" / "new.jpg").stat().st_size > 1000
    for kept in (here / "kept.jpg", here / "kept.mp4", here / "out" / "kept.mp4"):
        assert kept.read_bytes() == b"mine"
    assert main(["run", "-q", "-s", "src.png", "-t", "t.jpg", "-o", "fresh.jpg"]) == 0
    # a symlink is replaced as a link, its target untouched: not refused
    (here / "link.jpg").symlink_to(here / "kept.jpg")
    assert main(["run", "-q", "-s", "src.png", "-t", "t.jpg", "-o", "link.jpg"]) == 0
    assert (here / "kept.jpg").read_bytes() == b"mine" and not (here / "link.jpg").is_symlink()
    # the app: an old protected recording does not refuse its settings (it records to a free
    # name); the recorder refuses to replace one
    from livefuse.errors import VideoError
    from livefuse.io.sinks import RecorderSink

    session = Session(AppConfig(output=OutputConfig(record=str(here / "kept.mp4"))))
    session.check_outputs()
    with pytest.raises(VideoError, match=r"kept\.mp4': exists and is write-protected"):
        RecorderSink(here / "kept.mp4")


@pytest.mark.parametrize("suffix", [".mp4", ".jpg"])
def test_a_name_as_long_as_the_file_system_allows_is_written(here: Path, suffix: str) -> None:
    """A new user's trial: names of 236-255 bytes, which the file system takes, were refused
    ("file name too long" from the part file), and `live --record` with one streamed a whole
    session, then lost the recording at its end. The part names cut the stem instead; in a
    batch, the marker of an output kept from a cut input too (a review: the batch stopped
    after its first item, on the marker's name)."""
    out = Path(("é" * 60 + "v" * 120)[:255 - len(suffix) - 60] + suffix)  # 2-byte characters
    assert len(os.fsencode(out.name)) > 230
    target = "cam.mp4" if suffix == ".mp4" else "t.jpg"
    assert main(["run", "-q", "-s", "src.png", "-t", target, "-o", str(out)]) == 0
    assert out.is_file() and sorted(p.name for p in here.iterdir() if p.name.startswith(".")) == []
    folder = here / "in"
    folder.mkdir()
    for k in (1, 2):
        (folder / f"{k}{out.stem[1:]}{'.jpg' if suffix == '.jpg' else '.mp4'}").write_bytes(
            (here / target).read_bytes())
    assert main(["batch", "-q", "-s", "src.png", "in", "-o", "o", "--executor", "local"]) == 0
    assert len([p for p in (here / "o").iterdir() if not p.name.startswith(".")]) == 2


def test_part_names_of_long_names_fit_and_are_found_again(tmp_path: Path) -> None:
    from livefuse.io.paths import other_writer, part_path, part_paths
    from livefuse.names import NAME_MAX, short_name

    a, b = tmp_path / ("x" * 246 + "a.mkv"), tmp_path / ("x" * 246 + "b.mkv")
    pa, pb = part_path(a), part_path(b)
    for part in (pa, pb):
        assert len(os.fsencode(part.name)) <= NAME_MAX and part.suffix == ".mkv"
    assert pa.name.split(".livefuse-part")[0] != pb.name.split(".livefuse-part")[0]
    pa.write_bytes(b"")
    assert part_paths(a) == [pa] and part_paths(b) == []
    assert other_writer(a) is None  # this process's own
    assert short_name("é" * 200, 101).encode() == ("é" * 46).encode() + b"~" + \
        short_name("é" * 200, 101).encode()[-8:]  # cut at a character boundary


def test_run_never_writes_into_a_running_batchs_output_folder(tmp_path: Path) -> None:
    """A new user's trial: `run -o out/z.webp` while a batch wrote into out/ exited 0, and the
    batch then replaced that file (also exit 0). A crashed batch's lock file does not count."""
    from livefuse.batch.lock import LOCK_NAME, output_lock
    from livefuse.errors import LivefuseError
    from livefuse.run import check_run_paths

    target = save_image(tmp_path / "t.png", astronaut())
    out = tmp_path / "out"
    with output_lock(out), pytest.raises(LivefuseError, match="a livefuse batch is writing into"):
        check_run_paths(target, out / "sub" / "z.png")
    (out / LOCK_NAME).write_text("")  # left by a batch that crashed: no process holds it
    check_run_paths(target, out / "sub" / "z.png")


def test_a_clip_cut_short_leaves_no_file(tmp_path: Path) -> None:
    """A new user's trial: Ctrl-C during `livefuse demo` left half a clip.mp4 (53 of 90 frames)
    while it said that no partial output was kept. The clip is written under a part name."""
    good = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(ValueError):
        write_clip([good] * 60 + [np.zeros((64, 64, 4), np.uint8)], tmp_path / "clip.mp4")
    assert list(tmp_path.iterdir()) == []
    assert write_clip([good] * 4, tmp_path / "clip.mp4").stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]


def test_a_full_disk_names_the_output(here: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial on a full file system: `run` said only "no space left on device",
    naming no file. The output is named (not its hidden part file), and nothing is left."""
    import errno

    import livefuse.imaging
    import livefuse.io.video

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    for module in (livefuse.imaging, livefuse.io.video):
        monkeypatch.setattr(module.os, "replace", full)  # type: ignore[attr-defined]
    for target, out in (("t.jpg", "o.jpg"), ("cam.mp4", "o.mp4")):
        assert main(["run", "-q", "-s", "src.png", "-t", target, "-o", out]) == 2
        assert f"livefuse: error: '{out}': no space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in here.iterdir()) == ["cam.mp4", "src.png", "t.jpg"]
