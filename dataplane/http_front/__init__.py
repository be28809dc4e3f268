"""The router's OpenAI-compatible HTTP front (``python -m dataplane --http-listen HOST:PORT``)."""
