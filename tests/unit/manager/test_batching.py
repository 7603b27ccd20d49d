import pytest

from manager.batching import BatchDecision, BatchPolicy, promoted

POLICY = BatchPolicy(max_batch_size=8, max_wait_s=0.020)


def decide(*, now: float, pending: int, oldest_at: float | None = 0.0, idle: bool = False, free: bool = True):
    return POLICY.decide(now=now, pending=pending, oldest_at=oldest_at, idle_worker=idle, free_slot=free)


def test_nothing_pending_waits_for_an_event():
    assert decide(now=1.0, pending=0, oldest_at=None) == BatchDecision(take=0)


def test_a_full_batch_goes_at_once():
    assert decide(now=0.001, pending=8) == BatchDecision(take=8)


def test_more_than_a_batch_takes_only_max_batch_size():
    assert decide(now=0.001, pending=30) == BatchDecision(take=8)


def test_a_partial_batch_waits_until_its_oldest_job_has_waited_the_window():
    assert decide(now=0.005, pending=3) == BatchDecision(take=0, wake_at=pytest.approx(0.020))
    assert decide(now=0.020, pending=3) == BatchDecision(take=3)
    assert decide(now=0.500, pending=3) == BatchDecision(take=3)


def test_an_idle_worker_takes_waiting_jobs_without_waiting_for_the_window():
    assert decide(now=0.001, pending=2, idle=True) == BatchDecision(take=2)


def test_without_a_free_slot_nothing_goes_even_when_full():
    assert decide(now=5.0, pending=100, free=False) == BatchDecision(take=0)


@pytest.mark.parametrize(("size", "wait"), [(0, 0.01), (-1, 0.01), (4, -0.001)])
def test_rejects_impossible_limits(size: int, wait: float):
    with pytest.raises(ValueError, match="must be"):
        BatchPolicy(max_batch_size=size, max_wait_s=wait)


def test_with_every_worker_busy_a_partial_batch_waits_until_just_before_one_frees_up():
    # Window over at 20 ms, but the busy worker is expected to finish at 100 ms: go at 95 ms (lead 5 ms).
    early = POLICY.decide(
        now=0.030, pending=3, oldest_at=0.0, idle_worker=False, free_slot=True, busy_until=0.100
    )
    assert early == BatchDecision(take=0, wake_at=pytest.approx(0.095))
    assert POLICY.decide(
        now=0.095, pending=3, oldest_at=0.0, idle_worker=False, free_slot=True, busy_until=0.100
    ) == (BatchDecision(take=3))


def test_a_full_batch_goes_to_a_busy_worker_at_once():
    assert POLICY.decide(
        now=0.001, pending=8, oldest_at=0.0, idle_worker=False, free_slot=True, busy_until=1.0
    ) == (BatchDecision(take=8))


def test_an_interactive_batch_is_topped_up_with_batch_jobs_to_its_spare_room():
    assert POLICY.decide(
        now=0.001, pending=3, oldest_at=0.0, idle_worker=True, free_slot=True, batch_pending=100
    ) == BatchDecision(take=3, fill=5)
    assert POLICY.decide(
        now=0.001, pending=30, oldest_at=0.0, idle_worker=True, free_slot=True, batch_pending=100
    ) == BatchDecision(take=8), "a full interactive batch has no room"


def test_batch_jobs_do_not_close_an_interactive_batch_early():
    # Three interactive jobs and a deep batch backlog: the window still decides, batch jobs join then.
    early = POLICY.decide(
        now=0.005, pending=3, oldest_at=0.0, idle_worker=False, free_slot=True, batch_pending=100
    )
    assert early == BatchDecision(take=0, wake_at=pytest.approx(0.020))
    assert POLICY.decide(
        now=0.020, pending=3, oldest_at=0.0, idle_worker=False, free_slot=True, batch_pending=100
    ) == BatchDecision(take=3, fill=5)


def test_batch_jobs_alone_go_only_to_an_idle_worker():
    assert POLICY.decide(
        now=5.0, pending=0, oldest_at=None, idle_worker=True, free_slot=True, batch_pending=30
    ) == BatchDecision(take=0, fill=8)
    busy = POLICY.decide(
        now=5.0,
        pending=0,
        oldest_at=None,
        idle_worker=False,
        free_slot=True,
        busy_until=5.1,
        batch_pending=30,
    )
    assert busy == BatchDecision(take=0), "never queued in Triton behind another batch"


def test_batch_jobs_alone_wait_for_a_full_batch_or_their_window():
    def alone(now: float, batch_pending: int) -> BatchDecision:
        return POLICY.decide(
            now=now, pending=0, oldest_at=None, idle_worker=True, free_slot=True, batch_pending=batch_pending,
            batch_oldest_at=5.0,
        )  # fmt: skip

    assert alone(5.1, 3) == BatchDecision(take=0, wake_at=5.0 + POLICY.batch_wait_s), "a GPU's time is dearer"
    assert alone(5.1, 8) == BatchDecision(take=0, fill=8), "a full batch goes at once"
    assert alone(5.0 + POLICY.batch_wait_s, 3) == BatchDecision(take=0, fill=3), "a few still go soon"


def test_a_batch_job_goes_as_interactive_once_half_its_time_to_the_deadline_has_passed():
    created, deadline = 1_000, 61_000  # ms: a minute to its deadline
    assert not promoted(created, deadline, now=30_999)
    assert promoted(created, deadline, now=31_000)
    assert promoted(created, deadline, now=90_000)
