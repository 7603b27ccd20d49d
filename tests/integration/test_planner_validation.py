"""The capacity planner against the real stack: the simulator, driving the manager's own batching policy
on the very arrival times short real runs saw, must predict their P99 and worker busy share within 10 %."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.measure import pct
from bench.report import VALIDATION_TOLERANCE
from bench.scenarios import STANDARD, Options, start_synapse, sweep
from bench.stack import BenchStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Shares of one worker's batched capacity (1,000 jobs/s at T(b) = 100 ms). Not 80 %: there the load
# generator, the manager and Triton's Python backend contend for this 2-core machine's CPU, a cost the
# simulator leaves out by design (it sizes GPUs). Single runs there, before the GC freeze, erred by
# 7 % to 13 %; CI's shared machines are noisier than the one that measured 0 % since, so the test keeps
# the loads with a wide margin. `make bench` still measures 80 % and reports its error.
LEVELS = [0.2, 0.4, 0.6]
TRIALS = 5  # per level; the median error counts (see SweepPoint), so two stalled runs of five cannot fail it


def test_simulated_p99_and_busy_are_within_10_percent_of_the_stack_at_three_loads(tmp_path: Path):
    opts = Options(out=tmp_path, duration_s=5, progress=False)
    with BenchStack(tmp_path / "stack") as stack:
        stack.start_redis()
        start_synapse(stack, STANDARD, "validation")
        points = sweep(stack, STANDARD, LEVELS, opts, trials=TRIALS)

    for point in points:
        for trial in point.trials:
            p99_error, busy_error = trial.errors()
            measured, simulated = trial.measured, trial.simulated
            p99 = f"P99 measured {pct(measured.server_ms, 99):.0f} ms, "
            p99 += f"simulated {simulated.percentile_ms(99):.0f} ms"
            busy = f"busy measured {measured.busy:.1%}, simulated {simulated.busy_ratio:.1%}"
            errors = f"{p99} ({p99_error:.1%}); {busy} ({busy_error:.1%})"
            print(f"\nPLANNER-VALIDATION {point.rate:.0f}/s: {errors}")
            assert measured.lost == 0 and measured.failed == 0
            assert measured.completed == measured.sent

    for point in points:
        p99_error, busy_error = point.errors()
        assert p99_error <= VALIDATION_TOLERANCE, f"median P99 error {p99_error:.1%} at {point.rate:.0f}/s"
        assert busy_error <= VALIDATION_TOLERANCE, f"median busy error {busy_error:.1%} at {point.rate:.0f}/s"
