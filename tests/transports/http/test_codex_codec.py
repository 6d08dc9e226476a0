"""The Responses codec on what Codex CLI really sends: its first request as Codex 0.169
sent it to a capturing server (``codex_first_request.json``: the long instruction texts and
tool descriptions shortened, every field and tool kept), namespace and free-form tools,
hosted tools, a replayed ``store: false`` conversation, sealed reasoning and
``item_reference`` — every event and object the builder emits validated by the ``openai``
SDK's own types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent

from kernel import model as m
from transports.http.openai.wire import OpenAIError
from transports.http.responses import codec
from transports.http.responses import wire as w
from transports.http.responses.sealed import seal, unseal
from transports.http.responses.stored import ResponseStore, StoredResponse
from transports.http.responses.tools import CUSTOM_PARAMETERS, ToolTarget, joined

AGENTS = [m.AgentInfo(id="id-1", name="Helper")]
STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
CODEX_FIRST = json.loads((Path(__file__).parent / "codex_first_request.json").read_text())
RUN = {"session_id": "s1", "run_id": "r1", "request_id": "resp_1"}
KEY = b"k" * 32
PATCH_GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF'
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
               "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR}}


def plan(body: dict[str, Any], **kw: Any) -> codec.ResponsePlan:
    result = plan_or_error(body, **kw)
    assert isinstance(result, codec.ResponsePlan), result
    return result


def plan_or_error(body: dict[str, Any], **kw: Any) -> codec.ResponsePlan | OpenAIError:
    request = codec.decode_request(json.dumps(body).encode())
    assert isinstance(request, w.ResponsesRequest), request
    return codec.plan_response(request, AGENTS, context_limit=100, **kw)


def builder_for(p: codec.ResponsePlan, seal_key: bytes | None = KEY) -> codec.ResponseBuilder:
    return codec.ResponseBuilder(
        response_id="resp_1", created_at=1, model="Helper", echo=p.echo, conversation_id=None, seal_key=seal_key,
        client_tools={tool.name: p.tools.targets[tool.name] for tool in p.options.client_tools},
    )


def checked(frames: list[codec.Frame]) -> list[Any]:
    events = []
    for name, data in frames:
        event = STREAM_EVENT.validate_python(json.loads(data))
        assert event.type == name
        events.append(event)
    return events


def test_codex_first_request_is_accepted_as_sent() -> None:
    p = plan(CODEX_FIRST)
    assert p.stream and not p.store and p.echo.sealed_reasoning and not p.continuation
    # Its two developer messages are the system prompt; the environment context stays a
    # user turn before the prompt.
    system = p.options.system_prompt or ""
    assert system.startswith("You are a coding agent running in the Codex CLI") and "<skills_instructions>" in system
    assert [message.role for message in p.history] == ["user"] and p.history[0].content.startswith("<environment_context>")
    assert p.prompt_parts == (m.TextPart("say hi"),)
    # Functions as they are, the namespace's functions under names that map back; web_search left out.
    offered = {tool.name: tool for tool in p.options.client_tools}
    namespace = next(tool for tool in CODEX_FIRST["tools"] if tool["type"] == "namespace")
    inner = [tool["name"] for tool in namespace["tools"]]
    functions = [tool["name"] for tool in CODEX_FIRST["tools"] if tool["type"] == "function"]
    assert set(offered) == {*functions, *(f"multi_agent_v1__{name}" for name in inner)}
    assert offered["exec_command"].parameters["required"] == ["cmd"]
    assert p.tools.targets["multi_agent_v1__spawn_agent"] == ToolTarget(name="spawn_agent", namespace="multi_agent_v1")
    assert p.tools.hosted == ("web_search",)
    # The response repeats the tools as offered: functions normalised, the namespace as sent.
    assert [tool["type"] if isinstance(tool, dict) else "function" for tool in p.echo.tools] == [t["type"] for t in CODEX_FIRST["tools"] if t["type"] != "web_search"]


def test_a_namespaced_call_answers_with_the_name_and_namespace_codex_expects() -> None:
    p = plan(CODEX_FIRST)
    b = builder_for(p)
    frames = [*b.opening(), *b.feed(m.ReasoningDelta(**RUN, text="Spawn a helper."))]
    call = m.ToolCall(id="call_7", name="multi_agent_v1__spawn_agent", arguments='{"message": "look around"}')
    frames += b.feed(m.ToolCallStarted(**RUN, call_id=call.id, name=call.name, arguments=call.arguments, category="client"))
    frames += b.finish(m.RunFinished(**RUN, text="", stop_reason="tool_calls", pending_tool_calls=(call,)), completed_at=2)
    events = checked(frames)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [item.type for item in done] == ["reasoning", "function_call"]
    assert (done[1].name, done[1].namespace, done[1].call_id, done[1].arguments) == ("spawn_agent", "multi_agent_v1", "call_7", '{"message": "look around"}')
    args_done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert args_done.name == "spawn_agent"
    final = Response.model_validate(json.loads(codec.encode(b.final)))  # type: ignore[arg-type]
    assert final.status == "completed" and final.output[1].namespace == "multi_agent_v1"  # type: ignore[union-attr]
    # A top-level function keeps its name and has no namespace.
    b2 = builder_for(p)
    frames2 = b2.feed(m.ToolCallStarted(**RUN, call_id="c2", name="exec_command", arguments='{"cmd": "ls"}', category="client"))
    item = checked(frames2)[-1].item
    assert (item.name, item.namespace) == ("exec_command", None)


def test_reasoning_is_sealed_and_opens_only_with_this_key() -> None:
    p = plan(CODEX_FIRST)
    b = builder_for(p)
    checked([*b.opening(), *b.feed(m.ReasoningDelta(**RUN, text="Think "))])
    events = checked([*b.feed(m.ReasoningDelta(**RUN, text="twice.")), *b.feed(m.TextDelta(**RUN, text="hi"))])
    item = next(e.item for e in events if e.type == "response.output_item.done")
    assert item.type == "reasoning" and item.summary[0].text == "Think twice."
    assert item.encrypted_content is not None and unseal(KEY, item.encrypted_content) == "Think twice."
    assert unseal(b"x" * 32, item.encrypted_content) is None  # another gateway's key
    body, _, tag = item.encrypted_content.rpartition(".")
    assert unseal(KEY, f"{body[:-2]}AA.{tag}") is None and unseal(KEY, "gw1.bm9wZQ") is None and unseal(KEY, "opaque-from-openai") is None
    assert unseal(KEY, seal(KEY, "ünïcode ✓")) == "ünïcode ✓"
    # Without include, no sealed copy.
    quiet = builder_for(plan({**CODEX_FIRST, "include": []}))
    quiet_events = checked([*quiet.feed(m.ReasoningDelta(**RUN, text="x")), *quiet.feed(m.TextDelta(**RUN, text="y"))])
    assert next(e.item for e in quiet_events if e.type == "response.output_item.done").encrypted_content is None


def _second_turn() -> dict[str, Any]:
    """Codex's next request after a tool round, ``store: false``: the whole conversation again."""
    sealed = seal(KEY, "I should list the files.")
    return {
        **CODEX_FIRST,
        "tools": [*CODEX_FIRST["tools"], APPLY_PATCH],
        "input": [
            *CODEX_FIRST["input"],
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I should list the files."}], "encrypted_content": sealed},
            {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"ls"}', "call_id": "call_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt\nb.txt"},
            {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAAB-openai-sealed"},  # not ours: ignored
            {"type": "function_call", "name": "wait_agent", "namespace": "multi_agent_v1", "arguments": "{}", "call_id": "call_2"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "agent done"}]},
            {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch", "call_id": "call_3", "status": "completed"},
            {"type": "custom_tool_call_output", "call_id": "call_3", "output": "Done!"},
        ],
    }


def test_a_replayed_conversation_continues_from_its_items() -> None:
    p = plan(_second_turn())
    assert p.continuation and p.prompt_parts == ()
    assert [message.role for message in p.history] == ["user", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    calls = [message.tool_calls[0] for message in p.history if message.role == "assistant"]
    assert [(c.id, c.name) for c in calls] == [("call_1", "exec_command"), ("call_2", "multi_agent_v1__wait_agent"), ("call_3", "apply_patch")]
    assert json.loads(calls[2].arguments) == {"input": "*** Begin Patch\n*** End Patch"}
    results = [(message.tool_call_id, message.name, message.content) for message in p.history if message.role == "tool"]
    assert results == [("call_1", "exec_command", "a.txt\nb.txt"), ("call_2", "multi_agent_v1__wait_agent", "agent done"), ("call_3", "apply_patch", "Done!")]
    assert all("should list" not in message.content for message in p.history)  # reasoning stays out of the context


def test_a_free_form_tool_takes_and_gives_raw_text() -> None:
    p = plan({"input": "patch it", "tools": [APPLY_PATCH, {"type": "namespace", "name": "ed", "description": "", "tools": [{**APPLY_PATCH, "name": "edit"}]}]})
    offered = {tool.name: tool for tool in p.options.client_tools}
    assert offered["apply_patch"].parameters == CUSTOM_PARAMETERS and PATCH_GRAMMAR in offered["apply_patch"].description
    assert p.tools.targets["ed__edit"] == ToolTarget(name="edit", namespace="ed", custom=True)
    b = builder_for(p)
    patch = "*** Begin Patch\n*** Add File: x\n+hi\n*** End Patch"
    frames = b.feed(m.ToolCallStarted(**RUN, call_id="c1", name="apply_patch", arguments=json.dumps({"input": patch}), category="client"))
    frames += b.feed(m.ToolCallStarted(**RUN, call_id="c2", name="ed__edit", arguments="bare text, not JSON", category="client"))
    events = checked(frames)
    assert [e.type for e in events[:4]] == [
        "response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", "response.output_item.done",
    ]
    first, second = events[3].item, events[7].item
    assert (first.type, first.name, first.input, first.namespace) == ("custom_tool_call", "apply_patch", patch, None)
    assert (second.name, second.input, second.namespace) == ("edit", "bare text, not JSON", "ed")


@pytest.mark.parametrize(
    "hosted",
    [
        {"type": "web_search", "external_web_access": False}, {"type": "web_search_preview"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "image_generation"}, {"type": "local_shell"}, {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "linux"},
        {"type": "mcp", "server_label": "x", "server_url": "https://example.invalid"}, {"type": "tool_search"},
    ],
)
def test_hosted_tools_are_left_out_never_refused(hosted: dict[str, Any]) -> None:
    p = plan({"input": "hi", "tools": [hosted, {"type": "function", "name": "f"}]})
    assert [tool.name for tool in p.options.client_tools] == ["f"] and p.tools.hosted == (hosted["type"],)


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ([{"type": "namespace", "name": "bad name", "tools": []}], "tools[0].name"),
        ([{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}], "tools[0].tools[0].type"),
        ([{"type": "namespace", "name": "ns", "tools": [{"type": "function"}]}], "tools[0].tools[0]"),
        ([{"type": "custom"}], "tools[0]"),
        ([{"type": "function", "name": "ns__f"}, {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]}], "tools[1].tools[0].name"),
    ],
)
def test_bad_tool_definitions_name_the_field(tools: list[dict[str, Any]], param: str) -> None:
    result = plan_or_error({"input": "hi", "tools": tools})
    assert isinstance(result, OpenAIError) and result.status == 400 and result.param == param, result


def test_long_namespaced_names_fit_and_stay_distinct() -> None:
    a, b = joined("n" * 40, "f" * 40 + "a"), joined("n" * 40, "f" * 40 + "b")
    assert len(a) == len(b) == 64 and a != b and joined("ns", "f") == "ns__f" and joined(None, "f") == "f"


def test_item_references_resolve_to_stored_items() -> None:
    p = plan(CODEX_FIRST)
    b = builder_for(p)
    b.feed(m.ReasoningDelta(**RUN, text="hmm"))
    b.feed(m.TextDelta(**RUN, text="Hello there"))
    call = m.ToolCall(id="call_9", name="multi_agent_v1__close_agent", arguments='{"target": "a1"}')
    b.finish(m.RunFinished(**RUN, text="Hello there", stop_reason="tool_calls", pending_tool_calls=(call,)), completed_at=2)
    assert b.final is not None
    body = codec.encode(b.final)
    ids = [item.id for item in b.final.output]
    store = ResponseStore(max_count=4, max_bytes=1 << 20)
    store.put(StoredResponse(response_id="resp_1", session_id="s1", body=body, done=True, item_ids=tuple(ids)))
    references = {}
    for item_id in ids:
        holder = store.holding(item_id)
        assert holder is not None and holder.response_id == "resp_1"
        references[item_id] = codec.stored_items(holder.body)[item_id]
    request = {**CODEX_FIRST, "input": [
        {"role": "user", "content": "hi"}, *({"type": "item_reference", "id": item_id} for item_id in ids),
        {"type": "function_call_output", "call_id": "call_9", "output": "closed"},
    ]}
    decoded = codec.decode_request(json.dumps(request).encode())
    assert isinstance(decoded, w.ResponsesRequest) and [i for _, i in codec.referenced_ids(decoded)] == ids
    continued = plan(request, references=references)
    assert continued.continuation
    assistant = continued.history[1]
    assert assistant.content == "Hello there" and assistant.tool_calls == (call,)  # the namespaced call under its model name
    assert continued.history[2].name == "multi_agent_v1__close_agent"
    missing = plan_or_error({"input": [{"role": "user", "content": "a"}, {"type": "item_reference", "id": "msg_gone"}, {"role": "user", "content": "b"}]})
    assert isinstance(missing, OpenAIError) and missing.param == "input[1].id" and "msg_gone" in missing.message
    # Dropping or deleting the response forgets its items.
    assert store.delete("resp_1") and store.holding(ids[0]) is None
    store.put(StoredResponse(response_id="resp_1", session_id="s1", body=body, done=True, item_ids=tuple(ids)))
    for i in range(4):
        store.put(StoredResponse(response_id=f"resp_x{i}", session_id="s1", body=b"{}", done=True))
    assert store.holding(ids[0]) is None and len(store) == 4


def test_a_free_form_tool_can_be_forced() -> None:
    p = plan({"input": "patch it", "tools": [APPLY_PATCH], "tool_choice": {"type": "custom", "name": "apply_patch"}})
    assert p.options.tool_choice == m.ToolChoice(mode="tool", name="apply_patch")


TARGETS = {"lookup": ToolTarget(name="lookup"), "ns__f": ToolTarget(name="f", namespace="ns"), "free": ToolTarget(name="free", custom=True)}
fuzz_events = st.one_of(
    st.builds(lambda t: m.TextDelta(**RUN, text=t), st.text(max_size=6)),
    st.builds(lambda t: m.ReasoningDelta(**RUN, text=t), st.text(max_size=6)),
    st.builds(
        lambda i, n, a: m.ToolCallStarted(**RUN, call_id=f"c{i}", name=n, arguments=a),
        st.integers(0, 3), st.sampled_from([*TARGETS, "agent_tool"]), st.sampled_from(["{}", '{"input": "x y"}', "raw", '{"input": 3}']),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fuzz_events, max_size=10), st.booleans())
def test_fuzz_client_calls_come_back_under_the_clients_names(events: list[m.Event], sealed: bool) -> None:
    echo = codec.Echo(sealed_reasoning=sealed)
    b = codec.ResponseBuilder(response_id="resp_1", created_at=1, model="Helper", echo=echo, client_tools=TARGETS, conversation_id=None, seal_key=KEY)
    frames = [*b.opening()]
    for event in events:
        frames += b.feed(event)
    frames += b.finish(m.RunFinished(**RUN, text=""), completed_at=2)
    checked(frames)
    final = Response.model_validate(json.loads(codec.encode(b.final)))  # type: ignore[arg-type]
    client_calls = [e for e in events if isinstance(e, m.ToolCallStarted) and e.name in TARGETS]
    first: dict[str, m.ToolCallStarted] = {}
    for call in client_calls:
        first.setdefault(call.call_id, call)  # a call id is answered once
    out = [item for item in final.output if item.type in ("function_call", "custom_tool_call")]
    assert [item.call_id for item in out] == list(first)
    for item in out:
        target = TARGETS[first[item.call_id].name]
        assert (item.name, item.namespace, item.type == "custom_tool_call") == (target.name, target.namespace, target.custom)
    for item in final.output:
        if item.type == "reasoning":
            assert (item.encrypted_content is not None) == sealed
            assert item.encrypted_content is None or unseal(KEY, item.encrypted_content) == item.summary[0].text


def test_the_fields_codex_and_newer_clients_add_are_accepted() -> None:
    extra = {
        "text": {"verbosity": "low"}, "reasoning": {"effort": "high", "summary": "detailed"}, "service_tier": "auto",
        "prompt_cache_key": "k", "safety_identifier": "u1", "stream_options": {"include_obfuscation": False},
        "client_metadata": {"x-codex-turn-metadata": "{}"}, "top_logprobs": 0, "max_tool_calls": 4,
    }
    p = plan({**CODEX_FIRST, **extra})
    assert p.options.output_format is None and p.echo.text == {"verbosity": "low"} and p.echo.reasoning == extra["reasoning"]


def test_images_in_tool_outputs_follow_the_round_as_a_user_turn() -> None:
    png = "data:image/png;base64,iVBORw0KGgo="
    p = plan({"input": [
        {"role": "user", "content": "look at both"},
        {"type": "function_call", "name": "view_image", "arguments": '{"path": "a.png"}', "call_id": "c1"},
        {"type": "function_call", "name": "view_image", "arguments": '{"path": "b.png"}', "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_image", "image_url": png}]},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "b:"}, {"type": "input_image", "image_url": png}]},
    ]})
    assert [message.role for message in p.history] == ["user", "assistant", "tool", "tool"]
    assert p.history[2].content == "(the output is 1 image, shown in the next message)" and p.history[3].content == "b:"
    # The images come after every result of the round (tool messages must follow their calls), as the prompt.
    assert not p.continuation and [type(part).__name__ for part in p.prompt_parts] == ["ImagePart", "ImagePart"]
    assert all(isinstance(part, m.ImagePart) and part.mime_type == "image/png" for part in p.prompt_parts)
    later = plan({"input": [
        {"role": "user", "content": "look"},
        {"type": "function_call", "name": "view_image", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_image", "image_url": png}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A cat."}]},
        {"role": "user", "content": "and now?"},
    ]})
    assert [message.role for message in later.history] == ["user", "assistant", "tool", "user", "assistant"]
    assert later.prompt_parts == (m.TextPart("and now?"),)


def test_records_of_hosted_tools_are_left_out_of_a_replayed_conversation() -> None:
    p = plan({"input": [
        {"role": "user", "content": "search it"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "gateway"}},
        {"type": "local_shell_call", "call_id": "ls_1", "status": "completed", "action": {"type": "exec", "command": ["ls"]}},
        {"type": "local_shell_call_output", "call_id": "ls_1", "output": "a.txt"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Found it."}]},
        {"role": "user", "content": "thanks"},
    ]})
    assert [(message.role, message.content) for message in p.history] == [("user", "search it"), ("assistant", "Found it.")]
    unknown = plan_or_error({"input": [{"type": "fancy_new_item"}, {"role": "user", "content": "x"}]})
    assert isinstance(unknown, OpenAIError) and unknown.param == "input[0].type"
