"""BackgroundRebuild's pace: flat out while one more loss would be fatal or training leaves a core unused, else
``share`` of wall time. The machine's CPU readings are scripted (no timing)."""

from __future__ import annotations

from typing import Any

import pytest

from xdl_ec.ft import background_rebuild
from xdl_ec.ft.background_rebuild import BackgroundRebuild


def _rebuild(monkeypatch: Any, cores: int, share: float = 0.05, urgent: bool = False) -> BackgroundRebuild:
    monkeypatch.setattr(background_rebuild.os, "cpu_count", lambda: cores)
    return BackgroundRebuild(coordinator=None, share=share, urgent=lambda: urgent)


def _ticks_after(monkeypatch: Any, idle: int, total: int) -> None:
    """/proc/stat reads (idle, total) jiffies of the whole machine from now on."""
    monkeypatch.setattr(background_rebuild, "_cpu_ticks", lambda: (idle, total))


@pytest.mark.parametrize(
    "idle_cores, own_cpu, pauses",
    [
        (1.2, 0.0, False),  # a core and more sat idle
        (0.3, 0.08, False),  # 0.3 idle + the rebuild's own 0.8 of a core: training left a core unused (3 cores, 2 busy)
        (0.1, 0.05, True),  # 0.1 idle + 0.5 own: the rebuild competes with training
        (0.0, 0.0, True),
    ],
)
def test_the_rebuild_pauses_only_when_training_uses_more_than_all_cores_but_one(
    monkeypatch: Any, idle_cores: float, own_cpu: float, pauses: bool
) -> None:
    rebuild = _rebuild(monkeypatch, cores=3)
    took = 0.1  # seconds of the batch; 300 jiffies of the machine's 3 cores
    _ticks_after(monkeypatch, idle=1000 + round(idle_cores * 100), total=10_000 + 300)
    pause = rebuild._pause(took, (1000, 10_000), own_cpu)
    assert pause == (pytest.approx(took * (1 - 0.05) / 0.05) if pauses else 0.0)


def test_urgent_or_unthrottled_never_pauses(monkeypatch: Any) -> None:
    _ticks_after(monkeypatch, idle=1000, total=10_300)  # no idle CPU at all
    assert _rebuild(monkeypatch, cores=2, urgent=True)._pause(0.1, (1000, 10_000), 0.0) == 0.0
    assert _rebuild(monkeypatch, cores=2, share=1.0)._pause(0.1, (1000, 10_000), 0.0) == 0.0


def test_without_cpu_readings_it_keeps_to_its_share(monkeypatch: Any) -> None:
    monkeypatch.setattr(background_rebuild, "_cpu_ticks", lambda: None)
    rebuild = _rebuild(monkeypatch, cores=2, share=0.25)
    assert rebuild._pause(0.2, None, 0.2) == pytest.approx(0.2 * 0.75 / 0.25)
