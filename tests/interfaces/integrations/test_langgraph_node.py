"""``context_node`` in a real LangGraph ``StateGraph``: the lesson block and the context are
in the state before the node that calls a (fake) chat model, which receives them."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph

from contextstore import Scope, Store, connect_async
from contextstore.errors import ValidationError
from contextstore.interfaces.integrations.langgraph import ContextState, context_node
from tests.interfaces.integrations.conftest import FAILOVER

QUESTION = "How do I fail over Postgres by promoting a replica?"


class RecordingModel(BaseChatModel):
    """A chat model that answers "ok" and keeps every list of messages it was sent."""

    seen: list[list[BaseMessage]]

    @property
    def _llm_type(self) -> str:
        return "recording"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))])


class State(ContextState, total=False):
    question: str
    scope: dict[str, list[str]]
    answers: Annotated[list[str], operator.add]


def graph(node: Any, model: RecordingModel) -> Any:
    def call_model(state: State) -> dict[str, Any]:
        reply = model.invoke([SystemMessage(state["prompt"]), HumanMessage(state["question"])])
        return {"answers": [str(reply.content)]}

    builder = StateGraph(State)
    builder.add_node("context", node)
    builder.add_node("model", call_model)
    builder.add_edge(START, "context")
    builder.add_edge("context", "model")
    builder.add_edge("model", END)
    return builder.compile()


def test_the_model_receives_the_lesson_block_then_the_context(store: Store) -> None:
    model = RecordingModel(seen=[])
    app = graph(context_node(store, scope=Scope(tags=("ops",))), model)
    final = app.invoke({"question": QUESTION})
    expected = store.engine().run(QUESTION, scope=Scope(tags=("ops",)))
    assert final["lesson_block"] == expected.lesson_block
    assert "Check replica lag first." in final["lesson_block"]
    assert FAILOVER in final["context"]
    assert final["prompt"] == f"{final['lesson_block']}\n\n{final['context']}"
    assert final["answers"] == ["ok"]
    [sent] = model.seen
    assert [type(message) for message in sent] == [SystemMessage, HumanMessage]
    assert sent[0].content == final["prompt"]
    assert sent[1].content == QUESTION


def test_the_scope_in_the_state_wins_over_the_default(store: Store) -> None:
    model = RecordingModel(seen=[])
    app = graph(context_node(store, scope=Scope(tags=("ops",))), model)
    final = app.invoke({"question": QUESTION, "scope": {"tags": ["billing"]}})
    assert final["lesson_block"] == ""
    assert final["prompt"] == final["context"]
    assert FAILOVER in final["context"]


def test_an_async_store_gives_a_coroutine_node_for_ainvoke(url: str, store: Store) -> None:
    model = RecordingModel(seen=[])

    async def scenario() -> dict[str, Any]:
        async with connect_async(database_url=url, redis_url="") as async_store:
            node = context_node(async_store, scope=Scope(tags=("ops",)))
            assert asyncio.iscoroutinefunction(node)
            result: dict[str, Any] = await graph(node, model).ainvoke({"question": QUESTION})
            return result

    final = asyncio.run(scenario())
    assert "Check replica lag first." in final["lesson_block"]
    assert model.seen[0][0].content == final["prompt"]


def test_the_question_from_the_last_message(store: Store) -> None:
    node = context_node(store, query="messages", scope=Scope(tags=("ops",)))
    state = node({"messages": [HumanMessage("hello"), HumanMessage(QUESTION)]})
    assert isinstance(state, dict)
    assert FAILOVER in state["context"]
    with pytest.raises(ValidationError) as refused:
        node({"messages": []})
    assert refused.value.field == "messages"
