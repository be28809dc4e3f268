"""The prompt head of an OpenAI request body, per endpoint: what a key is derived from.

Every door (the HTTP front, the Envoy Endpoint Picker) reads the same text, so a request routes
to the same key whichever door it came through:

* ``chat``: the messages rendered ``"<role>: <content>\\n"`` each (the simulated engine's
  rendering, so its prefix blocks and the router's agree); content parts: their text. A derived
  key reads this up to the first ``"user: "`` line (:func:`dataplane.core.keys.key_head`).
* ``completions``: ``prompt`` (a string, the first of a list of strings, or token ids).
* ``embeddings``: ``input``, read like a completion prompt.
* ``responses``: ``instructions`` as a system message, then ``input`` (a string, or items
  rendered like chat messages).

Only the first :data:`~dataplane.core.keys.MAX_PROMPT_BYTES` UTF-8 bytes are kept. A body without
the field its endpoint needs is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from dataplane.core.keys import MAX_PROMPT_BYTES
from dataplane.openai_api.errors import bad_request

ENDPOINTS = ("chat", "completions", "embeddings", "responses")


def endpoint_of(path: str) -> str | None:
    """The endpoint kind of a request path (``/v1/chat/completions`` → ``chat``), or None."""
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    for kind in ("completions", "embeddings", "responses"):
        if path.endswith(f"/{kind}"):
            return kind
    return None


def prompt_head(body: dict[str, Any], endpoint: str) -> str:
    """The prompt's first MAX_PROMPT_BYTES bytes as text (module docstring)."""
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty list", param="messages")
        prompt = _messages(messages, "messages")
    elif endpoint == "responses":
        prompt = _responses_prompt(body)
    elif endpoint == "embeddings":
        prompt = _completion_prompt(body.get("input"), "input")
    else:
        prompt = _completion_prompt(body.get("prompt"), "prompt")
    data = prompt.encode("utf-8")
    if len(data) <= MAX_PROMPT_BYTES:
        return prompt
    return data[:MAX_PROMPT_BYTES].decode("utf-8", errors="ignore")


def _messages(messages: list[Any], param: str, size: int = 0) -> str:
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            raise bad_request("each message must be an object", param=param)
        text = f"{message.get('role', '')}: {content_text(message.get('content'))}\n"
        parts.append(text)
        size += len(text)
        if size >= MAX_PROMPT_BYTES:  # characters ≥ bytes / 4: enough, cut by the caller
            break
    return "".join(parts)


def _responses_prompt(body: dict[str, Any]) -> str:
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad_request("'instructions' must be a string", param="instructions")
    head = f"system: {instructions}\n" if instructions else ""
    given = body.get("input")
    if isinstance(given, str):
        return head + given
    if isinstance(given, list) and given:
        return head + _messages(given, "input", len(head))
    if given is None and head:
        return head
    raise bad_request("'input' must be a string or a non-empty list", param="input")


def content_text(content: object) -> str:
    """A message's text: a string, or the text of its content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _completion_prompt(prompt: object, param: str) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, str):
            return first
        if isinstance(first, int):  # token ids
            return " ".join(str(t) for t in prompt[:MAX_PROMPT_BYTES])
        if isinstance(first, list):  # a batch of token-id prompts
            return " ".join(str(t) for t in first[:MAX_PROMPT_BYTES])
    if prompt is None:
        raise bad_request(f"'{param}' is required", param=param)
    raise bad_request(f"'{param}' must be a string or a list", param=param)
