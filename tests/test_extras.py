"""The optional extras (issue 15, items 12 and 13): one table (livefuse.extras) that equals
pyproject.toml, one install line that agrees with the README, and `livefuse doctor` listing every
extra with that line."""

from __future__ import annotations

import contextlib
import re
import sys
import tomllib
from pathlib import Path

import pytest

from livefuse import extras
from livefuse.cli import main
from livefuse.doctor import check_extras, collect
from livefuse.imaging import save_image
from livefuse.samples import astronaut

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_is_pyprojects_extras() -> None:
    """A new extra in pyproject.toml (ray for `batch`, ...) needs its row in livefuse.extras:
    what it enables and the module that tells it is installed; doctor then lists it."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    declared.pop("test")
    table = {e.name: [p.requirement for p in e.packages] for e in extras.EXTRAS}
    assert table == declared


def test_the_pins_keep_out_pyside6_6_12_0() -> None:
    """PySide6 6.12.0's emit() returned True without a reference of its own: every signal
    emitted from Python dropped one, and the app died with "Fatal Python error: bool_dealloc"
    after a long session or at exit (Python 3.11; True is immortal from 3.12 on). The pins in
    the gui and test extras are the guard; this fails when they go."""
    from importlib import metadata

    from packaging.requirements import Requirement

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for group in ("gui", "test"):
        pyside = [r for r in map(Requirement, declared[group])
                  if r.name.lower().startswith("pyside6")]
        assert pyside and all(not r.specifier.contains("6.12.0") for r in pyside), group
    for dist in ("PySide6-Essentials", "PySide6"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            assert metadata.version(dist) != "6.12.0"


def test_every_install_hint_comes_from_the_table_and_the_readme_agrees() -> None:
    hand_written = []
    for path in [*(ROOT / "livefuse").rglob("*.py"), *(ROOT / "ui").rglob("*.py")]:
        if path.name == "extras.py":
            continue
        text = path.read_text(encoding="utf-8")
        hand_written += [f"{path.name}: {m}" for m in re.findall(r"livefuse\[\w[\w,]*\]|"
                                                                  r"\.\[\w[\w,]*\]", text)]
    assert hand_written == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = {n for group in re.findall(r'pip install "\.\[([\w,]+)\]"', readme)
             for n in group.split(",")}
    assert named == {e.name for e in extras.EXTRAS}
    assert "livefuse[" not in readme
    assert extras.install_hint("gui", "vcam").startswith('pip install ".[gui,vcam]"')


def test_doctor_lists_every_extra_with_its_install_line() -> None:
    none = check_extras(installed=lambda module: False)
    assert [c.name for c in none] == [f"extra {e.name}" for e in extras.EXTRAS]
    for check, e in zip(none, extras.EXTRAS, strict=True):
        assert check.level == "info" and e.enables in check.summary
        assert check.detail == (extras.install_hint(e.name),)
        assert all(p.distribution in check.summary for p in e.packages)
    everything = check_extras(installed=lambda module: True, version_of=lambda d: "9.9")
    assert all(c.level == "ok" and c.detail == () and "9.9" in c.summary for c in everything)
    partly = check_extras(installed=lambda module: module != "pynvml")
    metrics = next(c for c in partly if c.name == "extra metrics")
    assert metrics.summary.startswith("missing nvidia-ml-py:") and metrics.detail
    assert [c.name for c in collect() if c.name.startswith("extra ")] == \
        [f"extra {e.name}" for e in extras.EXTRAS]


def test_a_missing_extra_is_named_with_its_install_line_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    src = save_image(tmp_path / "src.png", astronaut())
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # find_spec: not installed
    monkeypatch.setitem(sys.modules, "pyvirtualcam", None)
    for option, extra in ((["--metrics-port", "9999"], "metrics"), (["--virtual-cam"], "vcam")):
        assert main(["live", "-s", str(src), "--video", str(src), *option]) == 2
        err = capsys.readouterr().err
        assert extras.install_hint(extra) in err and option[0] in err
        assert "source:" not in err and "[status]" not in err  # before the engine loads
