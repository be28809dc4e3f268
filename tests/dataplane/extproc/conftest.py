"""Fixtures of the Endpoint Picker's tests."""

from tests.support.openai_clients import close_openai_clients  # noqa: F401 - autouse
