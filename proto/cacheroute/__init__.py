"""CacheRoute's wire protocol. The generated code lives in :mod:`cacheroute.v1`."""
