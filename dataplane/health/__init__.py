"""Engine health in the router: passive outcomes, active probes, and whose feedback may eject."""
