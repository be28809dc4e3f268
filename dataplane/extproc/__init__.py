"""The Envoy ext_proc Endpoint Picker (Gateway API Inference Extension) in the router."""
