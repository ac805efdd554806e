"""The GIL switch interval is short while a live session or a threaded chain runs, and given back
afterwards, whatever overlaps (livefuse.gil)."""

from __future__ import annotations

import sys

import pytest

from livefuse.gil import hold_switch_interval, switch_interval
from livefuse.io.pipeline import CHAIN_SWITCH_INTERVAL_S, Stage, run_chain


@pytest.fixture(autouse=True)
def _default_interval():  # type: ignore[no-untyped-def]
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


def test_overlapping_holders_restore_the_value_from_before_the_first() -> None:
    a = hold_switch_interval(0.001)
    assert sys.getswitchinterval() == pytest.approx(0.001)
    b = hold_switch_interval(0.0005)
    assert sys.getswitchinterval() == pytest.approx(0.0005)
    b()
    assert sys.getswitchinterval() == pytest.approx(0.001)  # a still holds its own
    c = hold_switch_interval(0.002)
    a()
    a()  # a second call does nothing
    assert sys.getswitchinterval() == pytest.approx(0.002)
    c()
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_an_interval_shorter_already_is_kept() -> None:
    sys.setswitchinterval(0.0001)
    with switch_interval(0.0005):
        assert sys.getswitchinterval() == pytest.approx(0.0001, abs=2e-6)
    assert sys.getswitchinterval() == pytest.approx(0.0001, abs=2e-6)


def test_a_threaded_chain_runs_with_the_short_interval_and_gives_it_back() -> None:
    seen: list[float] = []

    def look(x: int) -> int:
        seen.append(sys.getswitchinterval())
        return x

    run_chain(iter(range(5)), [Stage("look", look)], lambda x: None, threaded=True)
    assert seen and all(v == pytest.approx(CHAIN_SWITCH_INTERVAL_S) for v in seen)
    assert sys.getswitchinterval() == pytest.approx(0.005)

    def fail(x: int) -> int:
        raise ValueError("bad frame")

    with pytest.raises(ValueError, match="bad frame"):
        run_chain(iter(range(5)), [Stage("fail", fail)], lambda x: None, threaded=True)
    assert sys.getswitchinterval() == pytest.approx(0.005)
