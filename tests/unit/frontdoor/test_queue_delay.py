"""A lane tells a standing queue (refuse new requests at once) from a burst (serve it), by how long its
requests waited for a thread: frontdoor/queue_delay.py, on a clock the test moves."""

from __future__ import annotations

from frontdoor.queue_delay import QueueDelay


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_that_drains_within_the_interval_is_never_refused() -> None:
    clock = Clock()
    delay = QueueDelay(target_s=0.1, interval_s=1.0, clock=clock)
    tickets = [delay.queued() for _ in range(1000)]  # all at once
    for i, ticket in enumerate(tickets):
        clock.now = i * 0.0009  # drained in 0.9 s: late, but for less than the interval
        delay.started(ticket)
        assert not delay.standing()


def test_a_steady_offer_above_capacity_is_refused_once_every_start_was_late_for_an_interval() -> None:
    clock = Clock()
    delay = QueueDelay(target_s=0.1, interval_s=1.0, clock=clock)
    backlog = [delay.queued() for _ in range(50)]
    clock.now = 0.5
    delay.started(backlog.pop(0))  # waited 0.5 s: late from now on
    clock.now = 1.4
    delay.started(backlog.pop(0))
    assert not delay.standing(), "late for 0.9 s only"
    clock.now = 1.6
    assert delay.standing()
    # A request that starts within the target ends it: the queue has drained to what the threads serve.
    fresh = delay.queued()
    clock.now = 1.65
    delay.started(fresh)
    assert not delay.standing()


def test_an_empty_queue_is_never_standing_however_late_its_last_request_was() -> None:
    clock = Clock()
    delay = QueueDelay(target_s=0.1, interval_s=1.0, clock=clock)
    late = delay.queued()
    clock.now = 2.0
    delay.started(late)
    clock.now = 5.0
    assert not delay.standing(), "nothing waits: the next request would start at once"


def test_a_request_whose_client_left_before_its_thread_no_longer_counts_as_waiting() -> None:
    clock = Clock()
    delay = QueueDelay(target_s=0.1, interval_s=1.0, clock=clock)
    backlog = [delay.queued() for _ in range(3)]
    first, gone, last = backlog
    clock.now = 0.5
    delay.started(first)  # late: from now on
    delay.abandoned(gone)
    delay.abandoned(first)  # after its start: nothing changes
    delay.started(gone)  # a thread that took it anyway: counted once
    clock.now = 3.0
    assert delay.standing(), "one still waits, and every start for 2.5 s was late"
    delay.abandoned(last)
    assert not delay.standing(), "nothing waits"


def test_a_queue_that_emptied_forgets_how_late_its_last_request_was() -> None:
    clock = Clock()
    delay = QueueDelay(target_s=0.1, interval_s=1.0, clock=clock)
    late = delay.queued()
    clock.now = 2.0
    delay.started(late)  # late, and the queue is empty now
    clock.now = 60.0
    delay.queued()  # a request long after: it would start at once
    assert not delay.standing()
