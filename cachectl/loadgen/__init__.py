"""The load generator: workloads replayed open loop through ``Route`` to the chosen engines."""
