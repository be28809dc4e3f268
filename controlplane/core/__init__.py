"""The control plane's pure core: the planner and everything it computes from plain values.

Nothing here imports gRPC, Redis, aiohttp, the state layer or another room of the control plane;
the simulator, ``cachectl`` and the agents may import this room and no other."""
