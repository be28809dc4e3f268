"""A conversation's identity: the same on every turn, different between conversations (issue 30)."""

from __future__ import annotations

from typing import Any

from dataplane.openai_api.conversation import MAX_SESSION_ID, conversation_id, opens_conversation
from dataplane.openai_api.request_keys import KeyRules, front_request

SYSTEM = {"role": "system", "content": "You are the billing assistant of ACME. " * 50}


def chat(*turns: str) -> dict[str, Any]:
    """A chat body as an SDK caller re-sends it: system, then user/assistant turns."""
    messages: list[dict[str, Any]] = [SYSTEM]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": "m", "messages": messages}


def test_every_turn_of_a_multi_turn_chat_has_the_first_turns_identity() -> None:
    first = conversation_id(chat("Why was I charged twice?"), {}, "chat")
    second = conversation_id(
        chat("Why was I charged twice?", "Let me check.", "It was on May 3."), {}, "chat"
    )
    third = conversation_id(
        chat("Why was I charged twice?", "Let me check.", "It was on May 3.", "Found it.", "Ok"),
        {},
        "chat",
    )
    assert first.startswith("m:")
    assert first == second == third


def test_conversations_with_one_system_prompt_differ_by_their_first_user_message() -> None:
    a = conversation_id(chat("Why was I charged twice?"), {}, "chat")
    b = conversation_id(chat("How do I change my plan?"), {}, "chat")
    assert a != b


def test_content_parts_count_as_their_text() -> None:
    parts = {"messages": [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "hello"}]}]}
    plain = {"messages": [SYSTEM, {"role": "user", "content": "hello"}]}
    assert conversation_id(parts, {}, "chat") == conversation_id(plain, {}, "chat")


def test_a_session_header_wins_over_the_body_and_is_bounded() -> None:
    body = chat("Why was I charged twice?")
    assert conversation_id(body, {"x-session-id": "s-1"}, "chat") == "h:s-1"
    claude = {"x-claude-code-session-id": "cc-9"}
    assert conversation_id(body, claude, "chat") == "h:cc-9"
    assert conversation_id(body, {"x-dynamo-session-id": "d"}, "completions") == "h:d"
    long = conversation_id(body, {"x-session-id": "x" * 10_000}, "chat")
    assert len(long) == MAX_SESSION_ID


def test_a_header_that_is_not_utf8_is_ignored_not_an_error() -> None:
    body = chat("hi")
    assert conversation_id(body, {"x-session-id": "bad\udcff"}, "chat").startswith("m:")


def test_responses_conversation_and_first_turn() -> None:
    assert conversation_id({"conversation": "conv_1"}, {}, "responses") == "c:conv_1"
    assert conversation_id({"conversation": {"id": "conv_2"}}, {}, "responses") == "c:conv_2"
    turn1 = conversation_id({"instructions": "Be brief.", "input": "Hi there"}, {}, "responses")
    items = [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "More"},
    ]
    turn2 = conversation_id({"instructions": "Be brief.", "input": items}, {}, "responses")
    assert turn1.startswith("m:")
    assert turn1 == turn2
    # a continuation by previous_response_id does not carry its first turn
    assert conversation_id({"previous_response_id": "r1", "input": "More"}, {}, "responses") == ""


def test_requests_without_turns_have_no_identity() -> None:
    assert conversation_id({"prompt": "def f():"}, {}, "completions") == ""
    assert conversation_id({"input": "text"}, {}, "embeddings") == ""
    assert conversation_id({"messages": [SYSTEM]}, {}, "chat") == ""  # no user turn yet
    assert conversation_id({"messages": "not a list"}, {}, "chat") == ""
    assert conversation_id({"messages": [SYSTEM, "junk"]}, {}, "chat") == ""


def test_the_doors_derive_it_only_for_a_policy_that_reads_it() -> None:
    body = chat("Why was I charged twice?")
    rules = KeyRules()
    named = front_request(body, {}, endpoint="chat", rules=rules, request_id="r")
    assert named.route.message.session_id.startswith("m:")
    rules = KeyRules(conversations=False)  # the paper's policy never reads it: not computed
    plain = front_request(body, {}, endpoint="chat", rules=rules, request_id="r")
    assert plain.route.message.session_id == ""


def test_a_chat_opens_its_conversation_until_an_assistant_turn_is_in_it() -> None:
    assert opens_conversation(chat("Why was I charged twice?"), "chat")
    assert not opens_conversation(chat("Why?", "Let me check.", "It was on May 3."), "chat")
    tool_result = {"role": "tool", "tool_call_id": "t1", "content": "{}"}
    assert not opens_conversation({"messages": [SYSTEM, tool_result]}, "chat")


def test_responses_open_a_conversation_only_without_earlier_items() -> None:
    assert opens_conversation({"input": "Hello"}, "responses")
    assert opens_conversation({"input": [{"role": "user", "content": "Hi"}]}, "responses")
    called = [{"role": "user", "content": "Hi"}, {"type": "function_call_output", "output": "1"}]
    assert not opens_conversation({"input": called}, "responses")
    assert not opens_conversation({"input": "Go on", "previous_response_id": "r1"}, "responses")


def test_without_turn_structure_opening_is_not_known() -> None:
    assert not opens_conversation({"prompt": "def f():"}, "completions")
    assert not opens_conversation({"messages": []}, "chat")
    assert not opens_conversation({"messages": "not a list"}, "chat")
    assert not opens_conversation({"messages": [SYSTEM, "junk"]}, "chat")


def test_the_doors_send_the_opening_flag_to_the_router() -> None:
    rules = KeyRules()
    first = front_request(chat("Hi"), {}, endpoint="chat", rules=rules, request_id="r")
    later = front_request(
        chat("Hi", "Hello!", "More"), {}, endpoint="chat", rules=rules, request_id="r"
    )
    assert first.route.message.opening_turn and not later.route.message.opening_turn
    plain = front_request(
        chat("Hi"), {}, endpoint="chat", rules=KeyRules(conversations=False), request_id="r"
    )
    assert not plain.route.message.opening_turn
