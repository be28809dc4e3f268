"""Generated protocol code for ``cacheroute.v1`` (regenerate with ``python scripts/gen_proto.py``)."""
