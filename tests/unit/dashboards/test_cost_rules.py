"""The cost recording rules count each fleet-wide part once across managers and add up the managers."""

from tests.unit.dashboards.test_monitoring_config import ALERT_TESTS, promtool

COST_TESTS = ALERT_TESTS.parent / "synapse_cost_test.yml"


def test_cost_per_thousand_by_part_and_the_honest_saving_across_two_managers():
    result = promtool("test", "rules", COST_TESTS.name, cwd=COST_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
