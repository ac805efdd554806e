"""`livefuse run` and `livefuse demo` end to end through the CLI entry point."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from livefuse.cli import main
from livefuse.errors import EXIT_FAILED, SHARP_FACE_PX, LivefuseError
from livefuse.imaging import load_image, save_image
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.io.video import probe, read_frames
from livefuse.run import FINDABLE_FACE_PX


@pytest.fixture(scope="module")
def face_clip_frames(t1_path: Path, analyser) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    photo = load_image(t1_path).bgr
    face = max(analyser.detect(photo), key=lambda f: f.area)
    c = (float(face.bbox[0] + face.bbox[2]) / 2, float(face.bbox[1] + face.bbox[3]) / 2)
    return list(motion_clip(photo, (321, 241), 12, centre=c, face_px=face.width,
                            face_width=110))


def _run(*args: str | Path) -> int:
    return main(["run", "--quiet", *map(str, args)])


def test_run_image(tmp_path: Path, astronaut_path: Path, t1_path: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.png"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out) == 0
    text = capsys.readouterr().out
    assert "faces found:         6" in text and "faces swapped:       6" in text
    assert load_image(out).bgr.shape == load_image(t1_path).bgr.shape


@pytest.mark.parametrize("missing", ["source", "target", "reference"])
def test_a_missing_input_is_named_before_any_work(tmp_path: Path, astronaut_path: Path,
                                                  t1_path: Path, missing: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A missing source, target or reference is refused first: its name and path, exit 2, and
    no engine line or source note before it (no model was chosen, no face detected)."""
    gone = tmp_path / f"no_{missing}.jpg"
    paths = {"source": astronaut_path, "target": t1_path, "reference": astronaut_path,
             missing: gone}
    out = tmp_path / "out.jpg"
    code = _run("-s", paths["source"], "-t", paths["target"], "-o", out,
                "--face-selector", "reference", "--reference", paths["reference"])
    err = capsys.readouterr().err
    assert code == 2 and f"{missing} '{gone}': file not found" in err
    assert "engine:" not in err and "source:" not in err and not out.exists()


@pytest.mark.parametrize("option", [["--video-encoder", "libx265"],
                                    ["--video-decoder", "nvdec"], ["--detect-every", "5"],
                                    ["--no-smooth"]])
def test_video_options_on_an_image_are_refused(tmp_path: Path, astronaut_path: Path,
                                               t1_path: Path, option: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.png"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out, *option) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{' '.join(option)}: only for a video target" in err[0]
    assert "t1.jpg' is an image" in err[0] and not out.exists()


def test_run_keeps_target_alpha(tmp_path: Path, astronaut_path: Path, t1_path: Path) -> None:
    t1 = load_image(t1_path).bgr
    alpha = np.full(t1.shape[:2], 255, np.uint8)
    alpha[:40] = 0  # a transparent band far from the faces
    target = save_image(tmp_path / "t1_rgba.png", t1, alpha)
    out = tmp_path / "out.png"
    assert _run("-s", astronaut_path, "-t", target, "-o", out) == 0
    np.testing.assert_array_equal(load_image(out).alpha, alpha)


def test_target_index_out_of_range(tmp_path: Path, astronaut_path: Path, t1_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.png"
    code = _run("-s", astronaut_path, "-t", t1_path, "-o", out,
                "--face-selector", "one", "--target-face-index", "9")
    assert code == 2
    err = capsys.readouterr().err
    # the file named, as the source index's error names its photo (a new user's trial)
    assert f"face index 9 is out of range: 6 faces found in '{t1_path}'" in err
    assert not out.exists()


@pytest.mark.parametrize("selector", [("--face-selector", "one"), ()],
                         ids=["explicit-one", "index-implies-one"])
def test_target_index_picks_that_face(tmp_path: Path, astronaut_path: Path, t1_path: Path,
                                      analyser, selector: tuple[str, ...],  # type: ignore[no-untyped-def]
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`run` swaps every face by default; --target-face-index alone used to be ignored then
    (all six swapped, exit 0): it now means that one face. The summary still counts the six
    faces found (it said 1: the selected ones)."""
    out = tmp_path / "out.png"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out,
                *selector, "--target-face-index", "2") == 0
    text = capsys.readouterr().out
    assert "faces found:         6" in text and "faces swapped:       1" in text
    t1, res = load_image(t1_path).bgr, load_image(out).bgr
    faces = analyser.detect(t1)
    changed = []
    for f in faces:
        x1, y1, x2, y2 = f.bbox.astype(int)
        changed.append(np.abs(res[y1:y2, x1:x2].astype(int) - t1[y1:y2, x1:x2]).mean() > 3)
    assert changed == [i == 2 for i in range(6)]


def test_faces_too_small_to_swap_are_named_not_smeared(tmp_path: Path, astronaut_path: Path,
                                                      t1_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """t1.jpg at 160x111: its faces are 12-16 px wide. They were all "swapped" into white and
    blue smears, exit 0 (a new user's trial); now none is, and each is named."""
    import cv2

    tiny = save_image(tmp_path / "tiny.png", cv2.resize(load_image(t1_path).bgr, (160, 111),
                                                       interpolation=cv2.INTER_AREA))
    out = tmp_path / "o.png"
    assert _run("-s", astronaut_path, "-t", tiny, "-o", out) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "no face was swapped" in err and "too small to swap (under 24 px wide)" in err
    assert not out.exists()


def test_source_with_no_face(tmp_path: Path, t1_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    src = save_image(tmp_path / "blank.png", np.full((200, 200, 3), 90, np.uint8))
    assert _run("-s", src, "-t", t1_path, "-o", tmp_path / "o.png") == 2
    err = capsys.readouterr().err
    assert "no face in source" in err and f"about {SHARP_FACE_PX} px wide or more" in err


@pytest.mark.parametrize("role", ["source", "reference"])
def test_an_unreadable_photo_is_named_by_its_role(tmp_path: Path, t1_path: Path,
                                                 astronaut_path: Path, role: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `-s notes.txt` said "cannot read image 'notes.txt'", not which
    input it was."""
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    args = ["-s", notes if role == "source" else astronaut_path, "-t", t1_path,
            "-o", tmp_path / "o.png"]
    if role == "reference":
        args += ["--face-selector", "reference", "--reference", notes]
    assert _run(*args) == 2
    err = capsys.readouterr().err
    assert f"cannot read the {role} image '{notes}': not a recognised image format" in err
    assert "Traceback" not in err


def test_source_with_two_faces_is_deterministic(tmp_path: Path, t1_path: Path,
                                                analyser) -> None:  # type: ignore[no-untyped-def]
    """t1.jpg as a source: the most confident face is used (not the largest: on a grey photo the
    largest detection was a suit patch), and --source-face-index picks another."""
    from livefuse.config import EngineConfig
    from livefuse.engine import Engine

    faces = analyser.detect(load_image(t1_path).bgr)
    confident = max(faces, key=lambda f: f.score)
    assert confident is not max(faces, key=lambda f: f.area)  # the two rules differ here
    engine = Engine(EngineConfig(), analyser=analyser)
    assert engine.set_source(load_image(t1_path)) is not None
    np.testing.assert_allclose(engine.source_face.bbox, confident.bbox)
    assert any("6 faces" in n for n in engine.source_notes)
    engine.set_source(load_image(t1_path), face_index=0)
    np.testing.assert_allclose(engine.source_face.bbox, faces[0].bbox)
    assert faces[0].bbox[0] == min(f.bbox[0] for f in faces)


def _centre(face) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    return float(face.bbox[0] + face.bbox[2]) / 2, float(face.bbox[1] + face.bbox[3]) / 2


def test_source_face_index_counts_left_to_right(t1_path: Path,
                                                analyser) -> None:  # type: ignore[no-untyped-def]
    """t1.jpg as a source: index 0 is the left-most face, near x = 117; index 5 the right-most."""
    from livefuse.config import EngineConfig
    from livefuse.engine import Engine

    engine = Engine(EngineConfig(), analyser=analyser)
    cx, _ = _centre(engine.set_source(load_image(t1_path), face_index=0))
    assert cx < 150
    assert _centre(engine.source_face)[0] == cx  # the index choice is the one kept
    cx5, _ = _centre(engine.set_source(load_image(t1_path), face_index=5))
    assert cx5 > 1100  # t1.jpg is 1280 px wide: index 5 is the right-most


def test_source_face_index_flag_reaches_the_source(tmp_path: Path, t1_path: Path,
                                                   astronaut_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.png"
    assert _run("-s", t1_path, "-t", astronaut_path, "-o", out,
                "--source-face-index", "9") == 2
    err = capsys.readouterr().err
    assert f"face index 9 is out of range: 6 faces found in '{t1_path}'" in err
    assert not out.exists()


def test_nothing_swapped_exits_non_zero(tmp_path: Path, astronaut_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    target = save_image(tmp_path / "sky.jpg", np.full((240, 320, 3), 200, np.uint8))
    # 1, as a failed batch item: the command was right, the target gave nothing (2 is for a
    # bad command or an unreadable file, before any work)
    assert _run("-s", astronaut_path, "-t", target, "-o", tmp_path / "o.jpg") == EXIT_FAILED
    err = capsys.readouterr().err
    assert "no face was swapped" in err and "no face found" in err
    assert f"about {FINDABLE_FACE_PX} px wide or more" in err
    assert not (tmp_path / "o.jpg").exists()


def test_output_never_overwrites_input(tmp_path: Path, astronaut_path: Path, t1_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "t.jpg"
    target.write_bytes(t1_path.read_bytes())
    before = target.read_bytes()
    assert _run("-s", astronaut_path, "-t", target, "-o", target) == 2
    assert "inputs are never overwritten" in capsys.readouterr().err
    assert target.read_bytes() == before


def _audio_streams(path: Path) -> list[str]:
    with av.open(str(path)) as c:
        return [s.codec_context.name for s in c.streams.audio]


def test_video_with_audio_odd_size(tmp_path: Path, astronaut_path: Path,
                                   face_clip_frames: list[np.ndarray],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    clip = write_clip(face_clip_frames, tmp_path / "odd.mp4", rate=Fraction(30000, 1001))
    assert probe(clip).width == 321
    out = tmp_path / "out.mp4"
    assert _run("-s", astronaut_path, "-t", clip, "-o", out) == 0
    text = capsys.readouterr().out
    assert "input is 321x241" in text and "output is 322x242" in text
    info = probe(out)
    assert (info.width, info.height) == (322, 242)
    assert info.rate == Fraction(30000, 1001)
    assert _audio_streams(out) == ["aac"]
    frames_in, frames_out = read_frames(clip), read_frames(out)
    assert len(frames_out) == len(frames_in) == 12
    # the face region changed, the border did not (beyond codec noise)
    diff = np.abs(frames_out[5][:241, :321].astype(int) - frames_in[5]).mean(axis=2)
    assert diff[80:180, 110:210].mean() > 6.0
    assert diff[:20, :].mean() < 4.0
    assert [p.name for p in tmp_path.iterdir() if "part" in p.name] == []


def test_video_without_audio(tmp_path: Path, astronaut_path: Path,
                             face_clip_frames: list[np.ndarray]) -> None:
    frames = [f[:240, :320] for f in face_clip_frames]
    clip = write_clip(frames, tmp_path / "silent.mp4", audio=False)
    out = tmp_path / "out.mkv"
    assert _run("-s", astronaut_path, "-t", clip, "-o", out) == 0
    assert _audio_streams(out) == []
    assert len(read_frames(out)) == 12


def test_video_audio_not_first_stream(tmp_path: Path, astronaut_path: Path,
                                      face_clip_frames: list[np.ndarray]) -> None:
    frames = [f[:240, :320] for f in face_clip_frames]
    clip = write_clip(frames, tmp_path / "afirst.mkv", audio_first=True)
    with av.open(str(clip)) as c:
        assert c.streams[0].type == "audio"
        in_audio_packets = sum(1 for p in c.demux(audio=0) if p.dts is not None)
    out = tmp_path / "out.mp4"
    assert _run("-s", astronaut_path, "-t", clip, "-o", out) == 0
    assert _audio_streams(out) == ["aac"]
    with av.open(str(out)) as c:
        out_audio_packets = sum(1 for p in c.demux(audio=0) if p.dts is not None)
    assert out_audio_packets == in_audio_packets  # copied untouched, none lost
    assert len(read_frames(out)) == 12
    with av.open(str(out)) as c:
        assert [st.type for st in c.streams] == ["video", "audio"]  # the video first


def test_broken_video_is_a_clear_error(tmp_path: Path, astronaut_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 50)
    assert _run("-s", astronaut_path, "-t", bad, "-o", tmp_path / "o.mp4") == 2
    assert "broken.mp4" in capsys.readouterr().err


@pytest.mark.parametrize("damaged", ["source", "target image", "target video"])
def test_a_damaged_input_is_the_first_line_before_any_engine_is_built(
        tmp_path: Path, astronaut_path: Path, t1_path: Path, damaged: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: a damaged target was reported after the engine's line and the
    source photo's notes, as if the run had started."""
    bad = tmp_path / ("broken.mp4" if damaged == "target video" else "broken.jpg")
    bad.write_bytes(b"not a picture nor a video" * 20)
    source = bad if damaged == "source" else astronaut_path
    target = t1_path if damaged == "source" else bad
    out = tmp_path / ("o.mp4" if damaged == "target video" else "o.png")
    assert _run("-s", source, "-t", target, "-o", out) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("livefuse: error: ") and "broken" in captured.err
    assert len(captured.err.splitlines()) == 1, captured.err


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quiet", "--out", str(tmp_path / "demo")]) == 0
    text = capsys.readouterr().out
    assert "faces swapped:       6" in text
    for name in ("source_astronaut.png", "t1_swapped.jpg", "clip.mp4", "clip_swapped.mp4"):
        assert (tmp_path / "demo" / name).stat().st_size > 1000
    assert _audio_streams(tmp_path / "demo" / "clip_swapped.mp4") == ["aac"]


def test_demo_never_replaces_files_it_did_not_write(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `demo --out` into a folder holding their own clip.mp4 replaced it
    without a word; a demo's own folder (its marker, or an earlier version's four files and
    nothing else) is replaced as before."""
    from livefuse.demo import DEMO_FILES, MARKER, check_out_dir

    mine = tmp_path / "videos"
    mine.mkdir()
    (mine / "clip.mp4").write_bytes(b"my own clip")
    (mine / "notes.txt").write_text("x")
    assert main(["demo", "--quiet", "--out", str(mine)]) == 2
    assert "holds files of the names the demo writes (clip.mp4) that no demo wrote" in \
        capsys.readouterr().err
    assert (mine / "clip.mp4").read_bytes() == b"my own clip"
    (mine / "clip.mp4").unlink()
    check_out_dir(mine)  # other files only: the demo's are added beside them
    old = tmp_path / "old-demo"
    old.mkdir()
    for name in DEMO_FILES:
        (old / name).write_bytes(b"x")
    check_out_dir(old)
    (old / "extra.txt").write_text("x")
    with pytest.raises(LivefuseError):
        check_out_dir(old)
    (old / MARKER).write_text("")
    check_out_dir(old)


def test_bench_prints_a_row_per_setting(capsys: pytest.CaptureFixture[str]) -> None:
    from livefuse.bench import bench_classic

    rows = bench_classic(frames=4, detect_every=(1, 2), selectors=("one",))
    text = capsys.readouterr().out
    assert len(rows) == 4  # 2 sizes x 2 detection intervals
    assert all(r["fps"] > 0 and r["faces"] >= 1 for r in rows)
    assert "640x480" in text and "1280x720" in text


def test_engine_auto_falls_back_to_classic_without_models(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jpg"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out,
                "--models-dir", tmp_path / "no-models") == 0
    captured = capsys.readouterr()
    assert "engine: classic (no neural models installed" in captured.err
    assert "faces swapped:       6" in captured.out


@pytest.mark.parametrize("role", ["source", "reference"])
def test_output_never_overwrites_source_or_reference(
        tmp_path: Path, astronaut_path: Path, t1_path: Path, role: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(astronaut_path.read_bytes())
    before = photo.read_bytes()
    args = ["-s", photo if role == "source" else astronaut_path, "-t", t1_path, "-o", photo]
    if role == "reference":
        args += ["--face-selector", "reference", "--reference", photo]
    assert _run(*args) == 2
    assert f"is the {role} itself; inputs are never overwritten" in capsys.readouterr().err
    assert photo.read_bytes() == before


def test_outputs_get_normal_file_permissions(tmp_path: Path, astronaut_path: Path,
                                             t1_path: Path) -> None:
    import os
    import stat

    out = tmp_path / "out.png"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_an_engine_reused_for_still_images_carries_no_faces_between_them(
        tmp_path: Path, t1_path: Path, astronaut_path: Path, analyser) -> None:  # type: ignore[no-untyped-def]
    """One Engine over a folder of photos: each still is detected on its own (a folder of
    six-face photos reported 11-16 faces swapped per photo when tracks were carried over)."""
    from livefuse.config import EngineConfig
    from livefuse.engine import Engine
    from livefuse.run import run_image

    engine = Engine(EngineConfig(detect_every=3), analyser=analyser)
    engine.set_source(load_image(astronaut_path))
    counts = []
    for i, target in enumerate([t1_path, astronaut_path, t1_path, t1_path]):
        summary = run_image(engine, target, tmp_path / f"out{i}.png")
        counts.append((summary.faces_found, summary.faces_swapped))
    assert counts == [(6, 6), (1, 1), (6, 6), (6, 6)]


@pytest.mark.parametrize(("args", "said"), [
    (("--engine", "classic", "--face-mask-types", "occlusion"),
     "--face-mask-types: only the neural engine uses this option, and this run uses the "
     "classic engine (--engine neural)"),
    (("--face-mask-types", "box", "--pixel-boost", "256"),
     "--pixel-boost --face-mask-types: only the neural engine uses these options, and this run "
     "uses the classic engine (the neural models are not installed"),
    (("--engine", "classic", "--precision", "fp16"), "--precision: only the neural engine"),
    (("--engine", "neural", "--blend", "seamless"), "--blend: only the classic engine"),
    # given with its default value: as ignored as any other value (a new user's trial)
    (("--engine", "classic", "--face-mask-blur", "0.3"), "--face-mask-blur: only the neural"),
    (("--engine", "classic", "--precision", "auto"), "--precision: only the neural engine"),
    (("--enhancer-blend", "50",), "--enhancer-blend 50: it sets how much of the enhancer's "
     "output is used, and no --enhancer was given"),
    (("--engine", "classic", "--enhancer", "gpen_bfr_512"), "--enhancer: only the neural"),
    (("--face-selector", "many", "--target-face-index", "1"),
     "--target-face-index picks one face: it cannot be used with --face-selector many"),
    # an option trial: the classic engine never reads the folder (with auto it looks there)
    (("--engine", "classic", "--models-dir", "elsewhere"),
     "--models-dir: only the neural engine uses this option"),
    # ... and the masks read their tuning only under the mask it tunes
    (("--engine", "neural", "--face-mask-blur", "0.9"),
     "--face-mask-blur: it tunes the box mask, and --face-mask-types does not include box"),
    (("--engine", "neural", "--face-mask-types", "occlusion", "--face-mask-padding", "10", "10",
      "10", "10"), "--face-mask-padding: it tunes the box mask"),
    (("--engine", "neural", "--face-mask-regions", "nose"),
     "--face-mask-regions: it tunes the region mask, and --face-mask-types does not include "
     "region (give --face-mask-types region)"),
])
def test_an_option_the_run_would_ignore_is_an_error(
        tmp_path: Path, astronaut_path: Path, t1_path: Path, args: tuple[str, ...], said: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Options that only the other engine reads were silently ignored with exit 0."""
    out = tmp_path / "out.jpg"
    # the folder makes --engine auto fall back to classic here; an explicit classic refuses it
    models = () if "classic" in args else ("--models-dir", tmp_path / "no-models")
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out, *models, *args) == 2
    err = capsys.readouterr().err
    assert said in " ".join(err.split())
    assert "engine:" not in err  # the refusal alone, not after a line naming the engine
    assert not out.exists()


def test_neural_engine_without_models_names_every_missing_file(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """It named det_10g only; the user fetched it and met w600k_r50, then inswapper_128."""
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", tmp_path / "o.jpg",
                "--engine", "neural", "--models-dir", tmp_path / "none") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "models 'det_10g.onnx', 'w600k_r50.onnx', 'inswapper_128.onnx' are not in" in err
    assert "`livefuse models fetch det_10g w600k_r50 inswapper_128`" in err
    # and the command it names is one the parser takes
    from livefuse.cli import build_parser

    args = build_parser().parse_args(["models", "fetch", "det_10g", "w600k_r50", "inswapper_128"])
    assert args.name == ["det_10g", "w600k_r50", "inswapper_128"]


@pytest.mark.parametrize(("target", "output", "says"), [
    ("t1.jpg", "x.xyz", "is an image, so the output 'x.xyz' must be an image livefuse writes"),
    ("t1.jpg", "x.mp4", "is an image, so the output 'x.mp4' must be an image livefuse writes"),
    ("t1.jpg", "x.gif", "must be an image livefuse writes: .bmp, .jpeg, .jpg, .png, .tif"),
    ("clip.mp4", "x.jpg", "is a video, so the output 'x.jpg' must be .m4v, .mkv, .mov, .mp4"),
    ("clip.mp4", "x.webm", "is a video, so the output 'x.webm' must be"),
    # every type run takes is named (.jpeg, .tiff and .m4v were accepted and left unnamed)
    ("t1.xyz", "x.jpg", "unknown file type '.xyz' (images: .bmp .jpeg .jpg .png .tif .tiff "
                        ".webp; videos: .avi .flv .m2ts .m4v .mkv .mov .mp4 .mts .ts .webm)"),
])
def test_an_impossible_output_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, output: str,
        says: str) -> None:
    """An image target with `-o x.xyz` was refused only after the models, the source and the
    detection had run (12 s); now before the source is even read (it does not exist here)."""
    code = main(["run", "--quiet", "-s", str(tmp_path / "no_such_source.png"),
                 "-t", str(tmp_path / target), "-o", output])
    assert code == 2
    err = capsys.readouterr().err
    assert says in err and "no_such_source" not in err


def test_a_video_summary_says_why_faces_were_not_swapped(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Six faces in every frame, one swapped: the summary counts the other five per reason."""
    t1 = load_image(t1_path).bgr
    h, w = (d // 2 * 2 for d in t1.shape[:2])
    clip = write_clip([t1[:h, :w]] * 4, tmp_path / "six.mp4", audio=False)
    out = tmp_path / "out.mp4"
    assert _run("-s", astronaut_path, "-t", clip, "-o", out, "--face-selector", "one",
                "--detect-every", "1") == 0
    text = capsys.readouterr().out
    assert "faces found:         24" in text and "faces swapped:       4" in text
    assert "skipped: 20 faces in 4 frames: not selected (face selector 'one')" in text


def test_paths_the_system_refuses_are_one_line_errors(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: an output under a file, or a demo folder that is a file, ended in a
    FileExistsError traceback; any OSError a check did not foresee is one line too."""
    (tmp_path / "afile").write_text("x")
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", tmp_path / "afile" / "x.jpg") == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path / "afile")]) == 2
    said = capsys.readouterr()
    assert "is a file; give a folder" in said.err and "writing to" not in said.out
    assert said.err.count("afile") == 1, said.err
    assert main(["demo", "--out", str(tmp_path / "afile" / "deeper")]) == 2
    assert f"'{tmp_path / 'afile'}' above it is a file" in capsys.readouterr().err

    def refused(*a: object, **k: object) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "out.png"))

    monkeypatch.setattr("livefuse.run.save_image", refused)
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", tmp_path / "out.png") == 2
    err = capsys.readouterr().err
    assert f"'{tmp_path / 'out.png'}': permission denied" in err and "Traceback" not in err


def test_a_reference_photo_with_several_faces_says_which_is_the_reference(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", tmp_path / "o.png",
                "--reference", t1_path) == 0
    err = capsys.readouterr().err
    assert "reference: 6 faces in" in err and "the largest, at" in err


def test_an_output_folder_the_system_refuses_is_named_by_the_output(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o /proc/x.jpg` named the temp file '/proc/.x.jpg.2oiu8zg4.part' (a new user's trial)."""
    import tempfile

    def refused(*a: object, dir: str = "", **k: object) -> None:
        raise FileNotFoundError(2, "No such file or directory", f"{dir}/.out.jpg.abc123.part")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    out = tmp_path / "out.jpg"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out) == 2
    err = capsys.readouterr().err
    assert f"'{out}': cannot write there" in err and ".part" not in err


def test_a_reference_person_absent_from_the_target_swaps_nobody(
        tmp_path: Path, astronaut_path: Path, t1_path: Path, analyser,  # type: ignore[no-untyped-def]
        capsys: pytest.CaptureFixture[str]) -> None:
    """The nearest face is swapped only when it is the reference person: with a reference who
    is not in the picture, the nearest stranger was swapped (exit 0)."""
    out = tmp_path / "o.png"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out, "--reference",
                astronaut_path) == EXIT_FAILED
    text = capsys.readouterr()
    assert "not the reference person (identity distance" in text.out + text.err
    assert not out.exists()
    # the same person, from another picture of them (a larger crop): that face, and only it
    photo = load_image(t1_path).bgr
    face = max(analyser.detect(photo), key=lambda f: f.area)
    x0, y0, x1, y1 = (int(v) for v in face.bbox)
    pad = (x1 - x0) // 2
    crop = photo[max(0, y0 - pad):y1 + pad, max(0, x0 - pad):x1 + pad]
    ref = tmp_path / "ref.png"
    save_image(ref, np.ascontiguousarray(cv2.resize(crop, None, fx=1.5, fy=1.5)))
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out, "--reference", ref) == 0
    text = capsys.readouterr()
    assert "faces swapped:       1" in text.out


def _pcm_clip(path: Path, frames: list[np.ndarray]) -> Path:
    """H.264 with PCM sound (what some cameras and screen recorders write into .mkv/.mov)."""
    from livefuse.io.synthetic import write_tone

    h, w = frames[0].shape[:2]
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=30)
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        pcm = out.add_stream("pcm_s16le", rate=48000)
        for i, f in enumerate(frames):
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="bgr24")
            vf.pts = i
            for pkt in vs.encode(vf):
                out.mux(pkt)
        for pkt in vs.encode(None):
            out.mux(pkt)
        write_tone(out, pcm, len(frames) / 30)
    return path


def test_audio_an_mp4_cannot_hold_is_refused_before_the_frames(
        tmp_path: Path, astronaut_path: Path, face_clip_frames: list[np.ndarray],
        capsys: pytest.CaptureFixture[str]) -> None:
    """PCM sound into an .mp4 failed only when the finished file was closed, with a traceback
    (a new user's trial)."""
    clip = _pcm_clip(tmp_path / "pcm.mkv", [f[:240, :320] for f in face_clip_frames])
    out = tmp_path / "out.mp4"
    assert _run("-s", astronaut_path, "-t", clip, "-o", out) == 2
    said = capsys.readouterr()
    err = said.err.strip().splitlines()
    assert "its audio (pcm_s16le) cannot be copied into a .mp4 file" in err[-1]
    assert "write a .mkv instead" in err[-1] and "Traceback" not in said.err
    assert "frames:" not in said.out  # refused before the run, not after it
    assert not out.exists() and not [p for p in tmp_path.iterdir() if "part" in p.name]
    # .m4v (FFmpeg's ipod muxer): PyAV refuses the pair itself, with a ValueError (a traceback)
    assert _run("-s", astronaut_path, "-t", clip, "-o", tmp_path / "out.m4v") == 2
    said = capsys.readouterr()
    assert "its audio (pcm_s16le) cannot be copied into a .m4v file" in said.err
    assert "Traceback" not in said.err and not (tmp_path / "out.m4v").exists()
    assert _run("-s", astronaut_path, "-t", clip, "-o", tmp_path / "out.mkv") == 0
    assert _audio_streams(tmp_path / "out.mkv") == ["pcm_s16le"]


def test_a_video_with_nobody_swapped_says_why(tmp_path: Path, astronaut_path: Path,
                                              face_clip_frames: list[np.ndarray],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """An image said which faces were skipped and why; a video said only that none was."""
    clip = write_clip([f[:240, :320] for f in face_clip_frames], tmp_path / "c.mp4",
                      audio=False)
    out = tmp_path / "new" / "o.mp4"
    assert _run("-s", astronaut_path, "-t", clip, "-o", out, "--reference",
                astronaut_path) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "no face was swapped in any of the 12 frames" in err
    assert "not the reference person (identity distance" in err and not out.exists()
    assert not out.parent.exists()  # no output kept: nor the folder made for it


def test_an_output_that_was_there_is_replaced_and_the_summary_says_so(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `run` replaced an existing file without a word (`batch` skips one
    unless --overwrite)."""
    out = tmp_path / "o.png"
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out) == 0
    assert "has been replaced" not in capsys.readouterr().out
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", out) == 0
    assert f"note: '{out}' was there before and has been replaced" in capsys.readouterr().out
    link = tmp_path / "link.png"  # a dangling symlink is replaced too, and said
    link.symlink_to(tmp_path / "gone.png")
    assert _run("-s", astronaut_path, "-t", t1_path, "-o", link) == 0
    assert f"note: '{link}' was there before and has been replaced" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["t1.jpg", "clip.mp4"])
def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(
        tmp_path: Path, astronaut_path: Path, t1_path: Path, target: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: a read-only folder was found only after the engine was built, and
    the message named the output by its file name with a hint about audio codecs."""
    import os

    from livefuse import run as run_module

    if target == "clip.mp4":
        t1 = cv2.imread(str(t1_path))
        h, w = (d // 2 * 2 for d in t1.shape[:2])
        src = write_clip([t1[:h, :w]] * 2, tmp_path / "clip.mp4", audio=True)
    else:
        src = t1_path
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(run_module.os, "access",
                        lambda p, mode: False if Path(p) == locked else real(p, mode))
    out = locked / f"x{Path(target).suffix}"
    assert _run("-s", astronaut_path, "-t", src, "-o", out) == 2
    said = capsys.readouterr()
    assert said.err == f"livefuse: error: output '{out}': cannot write in '{locked}' " \
                       "(read-only or no permission)\n"
    assert "engine" not in said.err + said.out


def test_a_write_the_system_refuses_gets_no_hint_about_audio_codecs() -> None:
    from livefuse.io.video import _hint_for

    hint = " (an audio codec the container cannot hold? try a .mkv output)"
    denied = av.error.PermissionError(13, "Permission denied")
    assert _hint_for(denied, hint) == ""
    assert _hint_for(av.error.InvalidDataError(1094995529, "Invalid data"), hint) == hint


def test_a_deep_or_grey_image_says_what_its_output_is(
        tmp_path: Path, astronaut_path: Path, t1_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: a 16-bit PNG came out 8-bit and a grey one in colour, unsaid."""
    t1 = cv2.imread(str(t1_path))
    grey = cv2.cvtColor(t1, cv2.COLOR_BGR2GRAY)
    cases = {"c16.png": (t1.astype(np.uint16) * 257, ["more than 8 bits"]),
             "g16.png": (grey.astype(np.uint16) * 257, ["more than 8 bits", "grey"]),
             "g8.png": (grey, ["grey"]),
             "c8.png": (t1, [])}
    for name, (pixels, says) in cases.items():
        cv2.imwrite(str(tmp_path / name), pixels)
        assert _run("-s", astronaut_path, "-t", tmp_path / name, "-o", tmp_path / f"o_{name}") \
            == 0
        notes = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("note: ")]
        assert len(notes) == len(says) and all(w in n for w, n in zip(says, notes, strict=True)), \
            (name, notes)
