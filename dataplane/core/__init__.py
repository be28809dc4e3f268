"""The pure routing core: keys, names, tables, load view, policies, the decision.

Nothing here imports gRPC, Redis or aiohttp (the import contracts check it); the live router,
the HTTP front, the simulator, the planner and the CLI all decide with this code.
"""
