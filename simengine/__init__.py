"""The simulated engine server: an OpenAI-compatible HTTP front over the simulator's engine model.

``python -m simengine`` hosts one or more engines (one per ``--listen``), each a
:class:`sim.node.Node` (continuous batching, chunked prefill, prefix KV cache) advanced in real
time with a speed-up factor, behind ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``,
``/health`` and ``/metrics`` with vLLM v1 metric names. See docs/components/localcluster.md.
"""
