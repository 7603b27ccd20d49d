"""Context values: parsed from cdk.json or the command line, checked before anything is built."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import aws_cdk as cdk
import pytest

from contract.catalog import Catalog, ModelKind
from stacks.config import (
    BUFFERED_HEADROOM,
    LAMBDA_UNRESERVED_MINIMUM,
    SYNC_TIMEOUT_S,
    WORKER_DISK_RESERVED_GB,
    ConfigError,
    Profile,
    SynapseConfig,
)
from tests.infra.synthesis import REPO

pytestmark = pytest.mark.infra


def config(**context: object) -> SynapseConfig:
    return SynapseConfig.from_context(cdk.App(context={f"synapse:{k}": v for k, v in context.items()}))


def test_cdk_json_defaults_parse_and_match_the_documented_ones() -> None:
    context = json.loads((REPO / "cdk.json").read_text())["context"]
    defaults = {k: v for k, v in context.items() if k.startswith("synapse:")}
    config(**{k.removeprefix("synapse:"): v for k, v in defaults.items()})
    # docs/deploy.md's context table: | `synapse:<name>` | `<default>` | meaning |
    page = (REPO / "docs" / "deploy.md").read_text()
    documented = dict(re.findall(r"^\| `(synapse:\w+)` \| `([^`]*)`", page, re.M))
    for key, value in defaults.items():
        assert key in documented, f"{key} is not in docs/deploy.md's context table"
        assert documented[key] == str(value), f"{key}: cdk.json has {value!r}, the page {documented[key]!r}"


def test_command_line_strings_are_parsed() -> None:
    parsed = config(
        maxWorkers="8", warmPoolSize="3", skipBundling="true", availabilityZones="eu-west-1a,eu-west-1c"
    )
    assert (parsed.max_workers, parsed.warm_pool_size, parsed.skip_bundling) == (8, 3, True)
    assert parsed.availability_zones == ("eu-west-1a", "eu-west-1c")


def test_zones_come_from_the_command_line_then_preflights_answer() -> None:
    answer = [
        {"zoneId": "euc1-az3", "zoneName": "eu-central-1b"},
        {"zoneId": "euc1-az1", "zoneName": "eu-central-1c"},
    ]
    key = "synapse:zones:account=111122223333:region=eu-central-1"
    app = cdk.App(context={"synapse:region": "eu-central-1", "synapse:account": "111122223333", key: answer})
    assert SynapseConfig.from_context(app).availability_zones == ("eu-central-1b", "eu-central-1c")
    named = config(region="eu-central-1", availabilityZones="eu-central-1a,eu-central-1b")
    assert named.availability_zones == ("eu-central-1a", "eu-central-1b")


@pytest.mark.parametrize(
    ("context", "complaint"),
    [
        ({"maxWorkers": 0}, "maxWorkers"),
        ({"maxWorkers": 2, "warmPoolSize": 3}, "warmPoolSize"),
        ({"availabilityZones": ["us-east-1a"]}, "two zones"),
        ({"maxWorkers": "many"}, "synapse:maxWorkers"),
        ({"skipBundling": "yes"}, "synapse:skipBundling"),
    ],
)
def test_bad_values_are_refused_with_the_key_named(context: dict[str, object], complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        config(**context)


def test_lean_is_the_default_profile_and_production_changes_its_defaults() -> None:
    lean, production = config(), config(profile="production")
    assert lean.profile is Profile.LEAN
    assert (lean.nat_gateways, lean.private_workloads, lean.warm_pool_size) == (0, False, 1)
    assert (production.nat_gateways, production.private_workloads, production.warm_pool_size) == (2, True, 2)
    assert production.max_workers > lean.max_workers
    assert production.worker_disk_gb > lean.worker_disk_gb


def test_a_context_value_wins_over_its_profile_default() -> None:
    chosen = config(profile="production", warmPoolSize=0, maxWorkers=3, workerDiskGb=80)
    assert (chosen.warm_pool_size, chosen.max_workers, chosen.worker_disk_gb) == (0, 3, 80)
    assert chosen.private_workloads  # the structural part stays the profile's


def test_the_model_cache_gets_the_disk_left_after_the_ami_and_the_image() -> None:
    assert config(workerDiskGb=60).worker_model_cache_bytes == (60 - WORKER_DISK_RESERVED_GB) * 1024**3


def test_nothing_is_reserved_unless_asked_so_a_reduced_account_quota_deploys() -> None:
    # New accounts may get a concurrency quota far below 1,000: the default reserves nothing at all.
    assert config().stream_reserved_concurrency is None
    small = config(accountConcurrency=10)
    assert small.stream_reserved_concurrency is None
    assert small.v1_rate_limit >= 1


def test_an_asked_reservation_fits_the_account_concurrency() -> None:
    chosen = config(reserveStreamConcurrency="true")
    assert chosen.account_concurrency == 1000
    # Little's law: each /v1 call may hold a streaming environment for the whole sync wait.
    assert chosen.stream_reserved_concurrency == math.ceil(chosen.v1_rate_limit * SYNC_TIMEOUT_S)
    assert chosen.stream_reserved_concurrency <= 1000 - LAMBDA_UNRESERVED_MINIMUM - BUFFERED_HEADROOM
    with pytest.raises(ConfigError):  # one more no longer fits...
        config(reserveStreamConcurrency="true", v1RateLimit=chosen.v1_rate_limit + 1)
    raised = config(reserveStreamConcurrency="true", accountConcurrency=10000)
    assert raised.v1_rate_limit > chosen.v1_rate_limit  # ...unless the quota was raised


def test_a_v1_rate_the_account_cannot_reserve_names_the_quota_to_raise() -> None:
    with pytest.raises(ConfigError, match="Lambda: Concurrent executions") as refused:
        config(reserveStreamConcurrency="true", v1RateLimit=100)
    assert "synapse:accountConcurrency" in str(refused.value)
    assert "2500 reserved" in str(refused.value)
    assert "synapse:reserveStreamConcurrency" in str(refused.value)


@pytest.mark.parametrize(
    ("context", "complaint"),
    [
        ({"profile": "cheap"}, "synapse:profile"),
        ({"workerDiskGb": 40}, "synapse:workerDiskGb"),
        ({"cacheMaxEcpuPerSecond": 10}, "synapse:cacheMaxEcpuPerSecond"),
        ({"accountConcurrency": 150, "reserveStreamConcurrency": "true"}, "synapse:v1RateLimit"),
        ({"reserveStreamConcurrency": "yes"}, "synapse:reserveStreamConcurrency"),
        ({"instanceTypes": "g4dn.xlarge"}, "synapse:instanceTypes"),
        ({"instanceTypes": "g5.xlarge,g5.12xlarge"}, "synapse:instanceTypes"),
        ({"spot": "sometimes"}, "synapse:spot"),
    ],
)
def test_bad_profile_values_are_refused_with_the_key_named(
    context: dict[str, object], complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint):
        config(**context)


def test_a_served_model_without_a_folder_fails_synth_by_name_and_a_bucket_models_folder_describes_it(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="my-llm") as refused:
        config(models="tiny-gpt2,my-llm")
    assert "synapse:modelFolders" in str(refused.value)
    folder = shutil.copytree(REPO / "triton_models" / "tiny-gpt2", tmp_path / "my-llm")
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    served = Catalog.from_json(config(models="tiny-gpt2,my-llm", modelFolders=str(folder)).model_catalog)
    assert served.names() == ("tiny-gpt2", "my-llm")
    assert served["my-llm"].kind is ModelKind.GENERATIVE
    template = served["my-llm"].chat_template
    assert template is not None and template.source == "{{ messages[0]['content'] }}"


def test_a_catalog_past_its_share_of_lambdas_environment_fails_synth(tmp_path: Path) -> None:
    folder = shutil.copytree(REPO / "triton_models" / "tiny-gpt2", tmp_path / "wordy")
    (folder / "chat_template.jinja").write_text("{{ 'x' }}" * 400)
    with pytest.raises(ConfigError, match="4 KB"):
        config(models="wordy", modelFolders=str(folder))


def test_the_lambdas_catalog_names_no_tokenizer_even_where_a_checkpoint_has_one(tmp_path: Path) -> None:
    """A folder with its own checkpoint names its tokenizer.json, a path on the synth machine that the
    Lambda does not carry: the front door there leaves a prompt's count to the engine."""
    from worker_image.checkpoint import build_tiny_gpt2

    folder = shutil.copytree(REPO / "triton_models" / "tiny-gpt2", tmp_path / "my-llm")
    build_tiny_gpt2(folder / "checkpoint")
    assert (folder / "checkpoint" / "tokenizer.json").is_file()
    served = Catalog.from_json(config(models="my-llm", modelFolders=str(folder)).model_catalog)
    assert served["my-llm"].tokenizer is None
