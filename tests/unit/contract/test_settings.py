import pytest
from pydantic import ValidationError

from contract.settings import Settings


def test_environment_variables_are_read_and_typed():
    settings = Settings.from_env(
        {"SYNAPSE_API_PORT": "9000", "SYNAPSE_MODELS": "a, b", "SYNAPSE_MAX_WAIT_MS": "5"}
    )
    assert settings.api_port == 9000
    assert settings.models == ("a", "b")
    assert settings.max_wait_ms == 5.0


def test_an_explicit_argument_wins_over_the_environment():
    assert Settings.from_env({"SYNAPSE_API_PORT": "9000"}, api_port=7000).api_port == 7000


def test_a_bad_value_names_the_setting():
    with pytest.raises(ValidationError, match="api_port"):
        Settings.from_env({"SYNAPSE_API_PORT": "not-a-port"})


def test_to_env_round_trips():
    settings = Settings.from_env({"SYNAPSE_MODELS": "gpu-sim", "SYNAPSE_MAX_WAIT_MS": "7"})
    assert Settings.from_env(settings.to_env()) == settings


def test_the_deployment_s_redis_cluster_and_iam_user_are_read_from_the_environment():
    settings = Settings.from_env(
        {
            "SYNAPSE_REDIS_CLUSTER": "true",
            "SYNAPSE_REDIS_IAM_USER": "synapse-app",
            "SYNAPSE_REDIS_IAM_CACHE": "synapse",
            "SYNAPSE_REDIS_IAM_REGION": "eu-west-1",
        }
    )
    assert settings.redis_cluster is True
    assert (settings.redis_iam_user, settings.redis_iam_cache, settings.redis_iam_region) == (
        "synapse-app", "synapse", "eu-west-1",
    )  # fmt: skip
    assert Settings.from_env({}).redis_cluster is False  # the local stack's plain Redis
