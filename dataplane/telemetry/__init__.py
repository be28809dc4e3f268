"""What the router measures and reports: decision and served-request metrics, sampled requests,
traffic reports, spans."""
