"""Membership and telemetry: the node registry, agent sessions, load snapshots, the per-key
rate tracker and leader election."""
