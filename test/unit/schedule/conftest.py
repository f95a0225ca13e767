"""Fixtures shared by the scheduler's unit tests."""

import pytest


@pytest.fixture(scope="module")
def resnet_graph():
    """The op graph of ResNet-18 at 32x32 (10 classes), as the scheduler sees it."""
    from m100.frontend import models

    from .test_shared_costs import _graph
    return _graph(models.resnet18(hw=32, num_classes=10))


@pytest.fixture
def placements(monkeypatch):
    """The placements ``m100_schedule.schedule`` returns during the test, in order (a spy)."""
    from m100.passes.schedule import m100_schedule
    seen = []
    orig = m100_schedule.schedule

    def spy(*a, **kw):
        pl = orig(*a, **kw)
        seen.append(pl)
        return pl

    monkeypatch.setattr(m100_schedule, "schedule", spy)
    return seen
