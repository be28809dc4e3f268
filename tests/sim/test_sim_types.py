"""The request record: ``SimRequest.at`` is ``dataclasses.replace`` of the arrival time."""

from __future__ import annotations

from dataclasses import fields, replace

from sim.types import SimRequest


def test_at_keeps_every_other_field_as_replace_does() -> None:
    """Every field gets a non-default value, so a field added to the record and missed by
    ``at`` fails here."""
    values = {
        "arrival_s": 1.5, "key": "acme", "key_hash": 7, "blocks": (1, 2), "prompt_tokens": 20,
        "output_tokens": 3, "thread": 4, "output_blocks": (9,), "turn": 2,
    }  # fmt: skip
    assert [f.name for f in fields(SimRequest)] == list(values)
    request = SimRequest(**values)  # type: ignore[arg-type]
    assert request.at(0.25) == replace(request, arrival_s=0.25)
    assert request.at(0.25) != request
