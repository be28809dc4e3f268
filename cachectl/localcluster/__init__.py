"""The local cluster launcher: the docker-compose topology as processes, without Docker."""
