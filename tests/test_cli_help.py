"""Every `livefuse` subcommand's --help has a description and shows its defaults."""

from __future__ import annotations

import argparse

import pytest

from livefuse.cli import build_parser
from livefuse.cli_args import add_engine_args
from livefuse.config import LIVE_DEFAULTS


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    top = _subparsers(build_parser())
    found = {name: top[name] for name in ("run", "demo", "models", "doctor", "bench")}
    found.update({f"models {k}": v for k, v in _subparsers(top["models"]).items()})
    return found


def _defaults_shown(parser: argparse.ArgumentParser) -> list[str]:
    """Options whose default is worth showing but does not appear in --help."""
    text = " ".join(parser.format_help().split())
    missing = []
    for a in parser._actions:
        if (a.default in (None, argparse.SUPPRESS) or a.nargs == 0 or not a.option_strings
                or isinstance(a, argparse._HelpAction)):
            continue
        if f"(default: {a.default})" not in text:
            missing.append(f"{a.option_strings[-1]} (default {a.default!r})")
    return missing


@pytest.mark.parametrize("name", ["run", "demo", "models", "models list", "models fetch",
                                  "models verify", "models import", "doctor", "bench"])
def test_help_has_a_description_and_every_default(name: str) -> None:
    parser = _parsers()[name]
    assert parser.description and len(parser.description) > 30, name
    shown = " ".join(parser.format_help().split()).replace("- ", "-")  # wrapped at hyphens
    assert " ".join(parser.description.split()) in shown
    assert _defaults_shown(parser) == []


def test_run_help_shows_the_engine_defaults() -> None:
    text = " ".join(_parsers()["run"].format_help().split())
    for shown in ("--engine", "(default: auto)", "(default: many)", "(default: feather)",
                  "(default: torch)", "(default: the most confident one)"):
        assert shown in text, shown


def test_presets_save_does_not_offer_the_reference_it_refuses() -> None:
    """A review: `presets save --help` offered --reference, which the command refuses (a preset
    keeps no photo: `live --preset NAME --reference PHOTO`)."""
    top = _subparsers(build_parser())
    text = _subparsers(top["presets"])["save"].format_help()
    assert "--reference PHOTO" not in text and "--reference PHOTO" in top["live"].format_help()


def test_engine_args_show_defaults_on_any_parser() -> None:
    """`livefuse live` builds its own parser: the shared options name their defaults."""
    parser = argparse.ArgumentParser()  # the plain formatter, as a caller may use
    add_engine_args(parser, LIVE_DEFAULTS.engine)
    assert _defaults_shown(parser) == []
    text = " ".join(parser.format_help().split())
    assert "(default: 3)" in text and "(default: one)" in text


def test_models_list_has_verbose_without_clobbering_the_global_flag() -> None:
    parser = build_parser()
    args = parser.parse_args(["-v", "models", "list"])
    assert args.verbose == 1 and args.details is False
    args = parser.parse_args(["models", "list", "-v"])
    assert args.verbose == 0 and args.details is True


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    """`livefuse models list -v | head -1` ended in a BrokenPipeError traceback."""
    import subprocess
    import sys

    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "livefuse", "models", "list", "-v"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read(1)
        proc.stdout.close()  # the reader leaves before the table is written
        err = proc.stderr.read().decode()
        assert proc.wait(60) in (0, 141), err
        assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize(("argv", "said"), [
    (["run", "-s", "a.png", "-t", "b.png", "-o", "c.png", "--detect-every", "0"],
     "--detect-every: 0 must be at least 1"),
    (["live", "-s", "a.png", "--duration", "-1"], "--duration: -1 must be more than 0"),
    (["live", "-s", "a.png", "--width", "wide"], "--width: 'wide' is not a whole number"),
    (["live", "-s", "a.png", "--cache-refresh", "0"], "--cache-refresh: 0 must be at least 1"),
    (["batch", "-s", "a.png", "in", "-o", "out", "--workers", "0"],
     "--workers: 0 must be at least 1"),
    (["bench", "--frames", "0"], "--frames: 0 must be at least 1"),
    (["models", "fetch", "det_10g", "--timeout", "nan"], "--timeout: nan is not a finite number"),
    (["models", "fetch", "det_10g", "--timeout", "-1"], "--timeout: -1 must be more than 0"),
    (["models", "--models-dir", __file__, "list"], f"'{__file__}' is a file, not a folder"),
    # these said the config field's name ("face_mask_blur=5.0 must be within 0..1")
    (["run", "-s", "a.png", "-t", "b.png", "-o", "c.png", "--face-mask-blur", "5"],
     "--face-mask-blur: 5 must be within 0..1"),
    (["run", "-s", "a.png", "-t", "b.png", "-o", "c.png", "--face-mask-padding", "-5", "0", "0",
      "0"], "--face-mask-padding: -5 must be within 0..100"),
    (["batch", "-s", "a.png", "in", "-o", "out", "--enhancer-blend", "200"],
     "--enhancer-blend: 200 must be within 0..100"),
    (["live", "-s", "a.png", "--cache-threshold", "0"],
     "--cache-threshold: 0 must be within (0, 1]"),
    (["live", "-s", "a.png", "--face-mask-blur", "nan"], "--face-mask-blur: nan is not a finite"),
])
def test_out_of_range_numbers_are_refused_in_the_options_own_terms(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--detect-every 0` said "detect_every=0 must be >= 1" (the config field); `live
    --duration -1` was taken and ran (a new user's trial)."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["bench", "--engine", "neural"],
                                  ["bench", "--models-dir", "somewhere"]])
def test_bench_refuses_quality_options_without_quality(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`bench --engine neural` printed the classic table and exited 0 (a new user's trial)."""
    from livefuse.cli import main

    assert main(argv) == 2
    assert "only with --quality" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["batch", "-s", "face.jpg"], ["run", "--detect-every", "0"],
                                  ["no-such-command"]])
def test_a_bad_command_line_is_one_line_that_says_where_help_is(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `batch` printed its 12 lines of usage before the error."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert len(err.strip().splitlines()) == 1 and "usage:" not in err
    assert err.startswith("livefuse") and "error: " in err and "--help')" in err


@pytest.mark.parametrize(("argv", "prog"), [
    (["run", "-s", "a", "-t", "b", "-o", "c", "--detect-evry", "2"], "run"),
    (["batch", "x.mp4", "-s", "a", "-o", "o", "--bogus"], "batch"),
    (["models", "frob"], "models")])
def test_an_unknown_option_or_command_is_named_by_the_command_it_was_given_to(
        argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `run ... --detect-evry 2` said `livefuse: error: unrecognized
    arguments` and pointed at the top-level help; `models frob` named `models_command`."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(f"livefuse {prog}: error: ")
    assert f"(see 'livefuse {prog} --help')" in err and "models_command" not in err


@pytest.mark.parametrize("argv", [
    ["batch", "x.mp4", "-s", "a", "-o", "o", "--worker", "2"],
    ["run", "-s", "a", "-t", "b.mp4", "-o", "c.mp4", "--detect", "2"]])
def test_an_abbreviated_option_is_refused(argv: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """argparse took `--worker` for `--workers`: a script written so breaks the day another
    option starting the same way is added. Only full names are accepted."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "unrecognized arguments: " in err
    assert argv[-2] in err


@pytest.mark.parametrize("given", ["out/", "some/where/"])
def test_an_output_named_as_a_folder_is_refused_as_one(
        given: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `-o out/` said "the output 'out' must be .m4v, .mkv, .mov, .mp4"
    (the slash dropped), not that a file name was needed."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "-s", "a.png", "-t", "b.mp4", "-o", given])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"'{given}' names a folder; give a file name (e.g. '{given}swapped.mp4')" in err
