# syntax=docker/dockerfile:1.7
# One image for every gpuledger service: `gpuledger allocator | admission | discovery | autoscaler | migrate`
# (or `python -m services.<service>`). Build: docker build -t gpuledger:dev .
# Stage 1 builds a virtual environment; stage 2 copies it onto a clean slim base and runs as a non-root user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/gpuledger
# Dependencies first, from pyproject.toml alone, so that a source change does not reinstall them.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && /opt/gpuledger/bin/pip install -r /tmp/requirements.txt
COPY events ./events
COPY services ./services
COPY migrations ./migrations
RUN /opt/gpuledger/bin/pip install --no-deps . \
    && /opt/gpuledger/bin/gpuledger --help > /dev/null

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="gpuledger" \
      org.opencontainers.image.description="Event-sourced GPU allocation service for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 gpuledger \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin gpuledger
COPY --from=build /opt/gpuledger /opt/gpuledger
WORKDIR /app
# The Alibaba openb inventory (static discovery source and demo data): /app/data/openb/*.csv
COPY --chown=10001:10001 data/openb ./data/openb
ENV PATH=/opt/gpuledger/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GPULEDGER_HEALTHCHECK_URL=http://127.0.0.1:8480/healthz
USER 10001:10001
# 8480: allocator HTTP (/healthz, /readyz, /metrics, /api/v1/...); 9443: admission webhook (HTTPS).
EXPOSE 8480 9443
# Probes GPULEDGER_HEALTHCHECK_URL (the allocator's /healthz by default; the webhook sets its https URL;
# compose and Kubernetes override per service). Certificates are not verified: this is a liveness check.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, ssl, urllib.request; urllib.request.urlopen(os.environ['GPULEDGER_HEALTHCHECK_URL'], timeout=2, context=ssl._create_unverified_context())"]
ENTRYPOINT ["gpuledger"]
CMD ["--help"]
