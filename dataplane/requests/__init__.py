"""Per-request and per-caller bookkeeping the doors share: holds until release, caller names,
which calls count for planning."""
