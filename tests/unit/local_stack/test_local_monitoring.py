"""Settings and process specs of the local Prometheus, Pushgateway and Redis exporter."""

from pathlib import Path

import yaml

from contract.settings import Settings
from local_stack.stack import banner, local_stack


def test_workers_push_to_the_pushgateway_port_unless_a_url_is_given():
    assert Settings.from_env({"SYNAPSE_PUSHGATEWAY_PORT": "9391"}).pushgateway_url == "http://127.0.0.1:9391"
    explicit = {
        "SYNAPSE_PUSHGATEWAY_PORT": "9391",
        "SYNAPSE_PUSHGATEWAY_URL": "http://pushgateway.internal:9091",
    }
    assert Settings.from_env(explicit).pushgateway_url == "http://pushgateway.internal:9091"
    moved = Settings.from_env({"SYNAPSE_PUSHGATEWAY_PORT": "9391", "SYNAPSE_PROMETHEUS_PORT": "9390"})
    assert Settings.from_env(moved.to_env()) == moved


def test_up_runs_the_pushgateway_before_the_manager_and_prometheus_on_the_configured_ports(tmp_path: Path):
    settings = Settings.from_env(
        {
            "SYNAPSE_STATE_DIR": str(tmp_path),
            "SYNAPSE_PROMETHEUS_PORT": "9390",
            "SYNAPSE_PUSHGATEWAY_PORT": "9391",
        }
    )
    specs = {spec.name: spec for spec in local_stack(settings)}
    names = list(specs)
    # The manager starts (and stops) the workers, which delete their groups on the way out.
    assert names.index("pushgateway") < names.index("manager")
    assert "--web.listen-address=127.0.0.1:9391" in specs["pushgateway"].argv
    assert specs["prometheus"].ready_port == 9390
    assert "--web.listen-address=127.0.0.1:9390" in specs["prometheus"].argv
    config = yaml.safe_load((tmp_path / "prometheus" / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert targets == {
        "synapse-manager": ["127.0.0.1:9100"],
        "pushgateway": ["127.0.0.1:9391"],
        "redis": ["127.0.0.1:9121"],
    }
    assert all(Path(rules).is_file() for rules in config["rule_files"])


def test_up_runs_a_redis_exporter_on_the_stack_s_redis_with_the_password_out_of_its_argv(tmp_path: Path):
    settings = Settings.from_env(
        {
            "SYNAPSE_STATE_DIR": str(tmp_path),
            "SYNAPSE_REDIS_URL": "redis://127.0.0.1:6391/0",
            "SYNAPSE_REDIS_AUTH_TOKEN": "s3cret",
            "SYNAPSE_REDIS_EXPORTER_PORT": "9321",
        }
    )
    exporter = next(spec for spec in local_stack(settings) if spec.name == "redis-exporter")
    assert "-redis.addr=redis://127.0.0.1:6391/0" in exporter.argv
    assert exporter.ready_port == 9321
    assert exporter.env == {"REDIS_PASSWORD": "s3cret"}
    assert not any("s3cret" in arg for arg in exporter.argv)


def test_a_redis_exporter_port_of_0_runs_none_and_scrapes_none(tmp_path: Path):
    settings = Settings.from_env({"SYNAPSE_STATE_DIR": str(tmp_path), "SYNAPSE_REDIS_EXPORTER_PORT": "0"})
    assert "redis-exporter" not in [spec.name for spec in local_stack(settings)]
    config = yaml.safe_load((tmp_path / "prometheus" / "prometheus.yml").read_text())
    assert "redis" not in [job["job_name"] for job in config["scrape_configs"]]


def test_the_banner_shows_where_prometheus_the_pushgateway_and_the_redis_exporter_are():
    text = banner(Settings.from_env({"SYNAPSE_PROMETHEUS_PORT": "9390", "SYNAPSE_API_KEY": "k"}))
    assert "http://127.0.0.1:9390" in text
    assert "http://127.0.0.1:9091" in text
    assert "http://127.0.0.1:9121/metrics" in text
