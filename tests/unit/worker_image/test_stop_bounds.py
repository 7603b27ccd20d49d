"""A stop passes down a chain of bounds (engine, Triton, agent, whoever stops the agent), each inside
the next: an inner bound as long as its outer one is cut short on a loaded host, and a Triton killed
before its models unloaded leaves its Python stubs behind."""

from __future__ import annotations

import ast
from pathlib import Path

from manager.providers import local
from worker_image import agent, triton_server

ENGINE = Path(__file__).parents[3] / "triton_backends" / "synapse_llm" / "engine_lifecycle.py"


def engine_constant(name: str) -> float:
    """A constant of the engine's module, read from its source (it imports Triton's Python utilities,
    which only a Triton stub provides)."""
    for node in ast.parse(ENGINE.read_text()).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            value = ast.literal_eval(node.value)
            assert isinstance(value, float | int)
            return float(value)
    raise AssertionError(f"{name} is not set in {ENGINE}")


def test_the_engine_unloads_in_half_of_triton_s_exit_timeout() -> None:
    assert engine_constant("STOP_TIMEOUT_S") * 2 <= triton_server.EXIT_TIMEOUT_S


def test_the_agent_waits_for_triton_s_exit_timeout_and_the_provider_for_the_agent() -> None:
    assert triton_server.EXIT_TIMEOUT_S < agent.TRITON_STOP_TIMEOUT_S < agent.SHUTDOWN_BOUND_S
    assert agent.SHUTDOWN_BOUND_S < local.STOP_TIMEOUT_S


def test_triton_is_told_its_exit_timeout() -> None:
    argv = triton_server.command(
        triton_server.TritonInstall(Path("/opt/tritonserver/bin/tritonserver"), None, {}),
        model_repository=Path("/models"), models=[], host="127.0.0.1",
        http_port=1, grpc_port=2, metrics_port=3,
    )  # fmt: skip
    assert f"--exit-timeout-secs={triton_server.EXIT_TIMEOUT_S}" in argv
