"""Session tokens: valid ones are honoured; stale, foreign, forged and malformed ones are ignored
and counted, never an error (the router with a real table and snapshot)."""

from __future__ import annotations

import base64

import pytest

from dataplane.core.policies import Reason
from dataplane.core.router import Router
from dataplane.core.session_token import Ignored, SessionTokens, decode, encode
from tests.support.router_core import NOW_S, inp, snapshot, table_for

IDS = ["a", "b", "c", "d"]


class Counting:
    def __init__(self) -> None:
        self.ignored: list[Ignored] = []

    def decided(self, reason: Reason, seconds: float) -> None:
        pass

    def token_ignored(self, why: Ignored) -> None:
        self.ignored.append(why)


def router(generation: int = 3) -> tuple[Router, Counting]:
    counting = Counting()
    r = Router(policy="cacheroute_online", pool_metrics=lambda pool: counting)
    r.apply_load(snapshot([(n, 1.0) for n in IDS]))
    r.install_table("default", table_for({"k": ["a", "b"]}, IDS), generation)
    return r, counting


def test_encode_and_decode_round_trip_and_the_check_catches_changes() -> None:
    token = encode("default", "node-é", 42)
    assert decode(token) == ("default", "node-é", 42)
    body, _, check = token.removeprefix("s1.").rpartition(".")
    forged_payload = base64.urlsafe_b64encode(b"default\x1fd\x1f42").rstrip(b"=").decode()
    assert decode(f"s1.{forged_payload}.{check}") is None  # other node, old check
    for bad in ("", "s1.", "s1..", "x1." + body + "." + check, token[:-1] + "0" * 1,
                "s1.!!!." + check, "s1." + body + ".zz", "s1." + "A" * 600):  # fmt: skip
        if bad != token:
            assert decode(bad) is None


def test_every_decision_carries_the_token_of_its_node_and_generation() -> None:
    r, _ = router()
    outcome = r.route(inp("k"), NOW_S)
    assert decode(outcome.session_token) == ("default", outcome.node_id, 3)


def test_a_valid_token_sends_the_conversation_back_to_its_node() -> None:
    r, counting = router()
    token = encode("default", "d", 3)  # not a member of k's set
    outcome = r.route(inp("k", session_token=token), NOW_S)
    assert (outcome.node_id, outcome.reason) == ("d", Reason.SESSION)
    assert counting.ignored == []


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (encode("default", "d", 2), Ignored.STALE),  # an older table generation
        (encode("blue", "d", 3), Ignored.FOREIGN),  # another pool
        (encode("default", "gone", 3), Ignored.FOREIGN),  # a node that is not a member
        (encode("default", "d", 3)[:-2] + "00", Ignored.MALFORMED),  # forged: the check fails
        ("s1.not-base64!.00000000", Ignored.MALFORMED),
        ("hello", Ignored.MALFORMED),
    ],
)
def test_stale_foreign_forged_and_malformed_tokens_are_ignored_and_counted(
    token: str, why: Ignored
) -> None:
    r, counting = router()
    outcome = r.route(inp("k", session_token=token), NOW_S)
    assert outcome.reason is Reason.WARM and outcome.node_id in ("a", "b")
    assert counting.ignored == [why]


def test_a_new_generation_makes_old_tokens_stale() -> None:
    r, counting = router(generation=3)
    old = r.route(inp("k"), NOW_S).session_token
    r.install_table("default", table_for({"k": ["c"]}, IDS), 4)
    assert r.route(inp("k", session_token=old), NOW_S).node_id == "c"
    assert counting.ignored == [Ignored.STALE]


def test_policies_without_sessions_return_tokens_and_never_read_them() -> None:
    r = Router(policy="cacheroute")
    r.apply_load(snapshot([(n, 1.0) for n in IDS]))
    r.install_table("default", table_for({"k": ["a"]}, IDS), 1)
    outcome = r.route(inp("k", session_token=encode("default", "d", 1)), NOW_S)
    assert outcome.node_id == "a"
    assert decode(outcome.session_token) == ("default", "a", 1)


def test_the_token_map_is_one_dict_lookup_for_valid_tokens() -> None:
    tokens = SessionTokens("default", ("a", "b"), 7)
    assert tokens.node(encode("default", "b", 7)) == 1
    assert tokens.node(tokens.by_node[0]) == 0
