"""One router process: its options (:mod:`.config`), the wiring, start and stop (:mod:`.process`),
the hint subscription (:mod:`.hints`) and the first sync with the store (:mod:`.first_sync`)."""

from dataplane.server.config import RouterConfig, default_router_id
from dataplane.server.process import SERVICE_NAME, RouterServer

__all__ = ["SERVICE_NAME", "RouterConfig", "RouterServer", "default_router_id"]
