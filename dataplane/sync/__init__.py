"""What the router learns from the store: routing tables (versioned, swapped whole) and load
snapshots, each applied by one watcher."""
