"""The deploy's region is found in the AWS CLI's order, so preflight and synth agree on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks.region import DEFAULT_REGION, deploy_region

SOURCES = ("AWS_REGION", "AWS_DEFAULT_REGION", "CDK_DEFAULT_REGION")


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No region anywhere: no variable, no profile; returns the AWS config file to write one into."""
    for name in (*SOURCES, "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config"
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return config


def test_each_source_in_the_clis_order(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare.write_text("[profile deploy]\nregion = ap-south-1\n")
    monkeypatch.setenv("AWS_PROFILE", "deploy")
    assert deploy_region() == "ap-south-1"
    for name, region in zip(reversed(SOURCES), ("ca-central-1", "eu-central-1", "eu-west-1"), strict=True):
        monkeypatch.setenv(name, region)
        assert deploy_region() == region  # each wins over the ones after it
    assert deploy_region("sa-east-1") == "sa-east-1"  # -c synapse:region wins over everything


def test_nothing_named_falls_back_to_the_documented_default(bare: Path) -> None:
    assert deploy_region() == DEFAULT_REGION == "us-east-1"


def test_synth_reads_the_same_region(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aws_cdk as cdk

    from stacks.config import SynapseConfig

    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert SynapseConfig.from_context(cdk.App()).region == "eu-west-1"
