"""The gRPC door: the ``Route``/``Release`` servicer, a thin adapter over the routing core."""
