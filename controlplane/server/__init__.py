"""The control-plane process, one room (``controlplane.server``): the wiring of one instance
(:mod:`.process`) and the leader's fixed-rate loops (:mod:`.leader_loops`)."""

from controlplane.server.process import ControlPlane

__all__ = ["ControlPlane"]
