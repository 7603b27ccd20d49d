"""Agent frameworks as their users run them, unchanged, against the local stack and the real chat model:
the OpenAI Agents SDK (the Responses API, its default) running an agent with two function tools to its
final answer, and LangChain's `ChatOpenAI.bind_tools` (chat completions, `tool_choice` left to its
default, auto) through a tool loop that ends with a `ToolMessage` sent back. Assertions are on the
loop's structure (calls made with valid arguments, results sent back, a final answer), not on what a
135M model knows."""

from __future__ import annotations

import asyncio
from typing import Any

import agents
import openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool

from contract.catalog import CHAT_MODEL
from tests.integration.conftest import PLAIN_REDIS_ONLY, Stack

pytestmark = [pytest.mark.integration, PLAIN_REDIS_ONLY]

CALLS: list[tuple[str, int, int]] = []


def add(a: int, b: int) -> int:
    """Adds two integers."""
    CALLS.append(("add", a, b))
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiplies two integers."""
    CALLS.append(("multiply", a, b))
    return a * b


def test_an_openai_agents_sdk_agent_with_two_tools_runs_to_its_final_answer(stack: Stack) -> None:
    agents.set_tracing_disabled(True)  # traces would go to OpenAI's servers
    client = openai.AsyncOpenAI(base_url=f"{stack.api}/v1", api_key=stack.api_key, max_retries=0, timeout=180)
    agent = agents.Agent(
        name="calculator",
        instructions="You are a calculator. Use the tools to compute, then give the result.",
        tools=[agents.function_tool(add), agents.function_tool(multiply)],
        model=agents.OpenAIResponsesModel(model=CHAT_MODEL, openai_client=client),
        # required on the first turn; the SDK resets it to auto after a call, so the agent can finish
        model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=64),
    )
    CALLS.clear()
    result = asyncio.run(agents.Runner.run(agent, "What is 6 times 7?", max_turns=6))
    assert CALLS and all(name in ("add", "multiply") for name, _, _ in CALLS)
    called = [item for item in result.new_items if item.type == "tool_call_item"]
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert len(called) == len(outputs) == len(CALLS)
    assert isinstance(result.final_output, str) and result.final_output.strip()


def test_langchain_bind_tools_with_the_default_choice_takes_the_whole_tool_loop(stack: Stack) -> None:
    """bind_tools leaves tool_choice to OpenAI's default, auto, on every turn: the model may answer text
    or calls, and either is well-formed. SmolLM2-135M answers text under auto (it puts under 1 % on a
    call's first token for these prompts), so the call that starts the loop is asked for by name, as
    `bind_tools(tool_choice=...)` does; the loop's later turns, the ToolMessage among them, go back with
    the default binding."""
    langchain_openai = pytest.importorskip("langchain_openai")

    llm = langchain_openai.ChatOpenAI(
        model=CHAT_MODEL, base_url=f"{stack.api}/v1", api_key=stack.api_key, temperature=0, max_tokens=64,
        max_retries=0,
    )  # fmt: skip
    tools = {t.name: t for t in (tool(add), tool(multiply))}
    bound = llm.bind_tools(list(tools.values()))
    messages: list[Any] = [HumanMessage("Use the multiply tool: what is 6 times 7?")]
    either = bound.invoke(messages)
    assert either.content or either.tool_calls
    for call in either.tool_calls:
        assert call["name"] in tools and set(call["args"]) == {"a", "b"}

    asked = llm.bind_tools(list(tools.values()), tool_choice="multiply").invoke(messages)
    (call,) = asked.tool_calls
    assert call["name"] == "multiply" and call["id"]
    CALLS.clear()
    result = tools["multiply"].invoke(call["args"])
    assert [("multiply", call["args"]["a"], call["args"]["b"])] == CALLS
    messages += [asked, ToolMessage(content=str(result), tool_call_id=call["id"])]
    answered = bound.invoke(messages)
    assert answered.content or answered.tool_calls
