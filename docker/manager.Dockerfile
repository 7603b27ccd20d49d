# syntax=docker/dockerfile:1
# The workload manager (`python -m manager`), built from the repository root by the CDK at deploy time,
# for linux/arm64 (Graviton Fargate; stacks/manager_service.py). The base image is multi-arch and every
# dependency has a manylinux aarch64 wheel (grpcio, hiredis, numpy, gevent, python-rapidjson) or is
# pure Python (tritonclient), so the build needs no compiler and no emulation beyond `docker buildx`.

FROM python:3.11.13-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/synapse-venv
COPY pyproject.toml README.md ./
# The shared contract, the transport-free OpenAI layer (the Batch API runner builds and answers its lines
# with it: manager/batch_runner.py) and the manager; the image carries neither the front door nor a worker.
COPY contract/ contract/
COPY openai_api/ openai_api/
COPY manager/ manager/
RUN /opt/synapse-venv/bin/pip install --no-cache-dir --disable-pip-version-check .

FROM python:3.11.13-slim-bookworm
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/synapse synapse
COPY --from=build /opt/synapse-venv /opt/synapse-venv
ENV PATH=/opt/synapse-venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /home/synapse
USER synapse
EXPOSE 9100
# ECS runs its own health check (stacks/manager_service.py); this one serves `docker run`. /healthz
# answers 503 once the autoscaler loop stopped going round (manager/service.py).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SYNAPSE_METRICS_PORT', '9100'), timeout=3)"
CMD ["python", "-m", "manager"]
