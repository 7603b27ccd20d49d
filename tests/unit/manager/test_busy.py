import pytest

from manager.busy import BusyClock


def test_a_worker_is_busy_while_a_batch_is_in_flight():
    clock = BusyClock()
    clock.begin("w", now=10.0)
    assert clock.busy_seconds("w", now=10.5) == pytest.approx(0.5)
    clock.end("w", now=11.0)
    assert clock.busy_seconds("w", now=20.0) == pytest.approx(1.0)


def test_overlapping_batches_count_once():
    clock = BusyClock()
    clock.begin("w", now=0.0)
    clock.begin("w", now=0.2)
    clock.end("w", now=0.5)
    clock.end("w", now=1.0)
    assert clock.busy_seconds("w", now=5.0) == pytest.approx(1.0)


def test_the_ratio_covers_the_window_and_never_exceeds_one():
    clock = BusyClock(window_s=10.0)
    for second in range(30):
        clock.track(["w"], now=float(second))
        if second >= 20:  # busy for the last ten seconds, half of each second
            clock.begin("w", now=second + 0.0)
            clock.end("w", now=second + 0.5)
    clock.track(["w"], now=30.0)
    assert clock.ratio("w", now=30.0) == pytest.approx(0.5)
    clock.begin("w", now=30.0)
    clock.begin("w", now=30.0)
    assert clock.ratio("w", now=40.0) <= 1.0


def test_a_worker_that_left_is_dropped_once_its_batches_are_done():
    clock = BusyClock()
    clock.track(["a", "b"], now=0.0)
    clock.begin("b", now=1.0)
    clock.track(["a"], now=2.0)
    assert clock.workers() == ["a", "b"], "b still has a batch in flight"
    clock.end("b", now=3.0)
    clock.track(["a"], now=4.0)
    assert clock.workers() == ["a"]
    clock.end("gone", now=5.0)  # a late reply from a forgotten worker is harmless


def test_a_new_worker_starts_idle():
    clock = BusyClock()
    clock.track(["new"], now=100.0)
    assert clock.busy_seconds("new", now=200.0) == 0.0
    assert clock.ratio("new", now=200.0) == 0.0
    assert clock.ratio("never-seen", now=200.0) == 0.0
