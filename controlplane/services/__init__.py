"""The gRPC adapters: thin servicers that parse, check identity, call a lifecycle or cluster
function and map domain errors to status codes (:mod:`controlplane.services.rpc`)."""
