"""A plan's life over the state: stored plans, the live plan loop, the rollout and verdict
gates, shadow replay, automatic mode, the live guard and the status view."""
