"""What every CacheRoute server shares: logging, metrics endpoint, gRPC bootstrap, options.

Kept apart from the pure cores so that policies, planner and simulator never import gRPC.
"""
