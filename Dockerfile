# One image for every Conduit service: `conduit serve NAME` with NAME in
# gateway | orchestrator | retriever | web | sandbox (docker-compose.yml, k8s/base).
#
#   docker build -t conduit:local .
#   docker run --rm -p 8000:8000 conduit:local                  # gateway (needs Kafka and Redis)
#   docker run --rm conduit:local serve retriever
#
# Dependencies come from uv.lock exactly (`uv sync --frozen`), without the dev group.
FROM python:3.11-slim

# bubblewrap: the sandbox runs untrusted code in it (user namespaces, no network)
# libjemalloc2: `conduit serve gateway` runs on it (gateway_allocator=auto; conduit/runtime/allocator.py), so its
# memory returns to baseline after a burst of SSE streams
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libjemalloc2 \
    && rm -rf /var/lib/apt/lists/*

RUN pip install --no-cache-dir uv==0.13.8

ENV UV_PROJECT_ENVIRONMENT=/app/.venv \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_NO_CACHE=1

WORKDIR /app

# 1) third-party dependencies only: this layer is reused until uv.lock changes
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --no-install-project

# 2) the project itself (the packages of [tool.hatch.build.targets.wheel])
COPY conduit ./conduit
COPY ops ./ops
COPY contracts ./contracts
COPY services ./services
RUN uv sync --frozen --no-dev \
    && python -m compileall -q conduit contracts ops services

# an unprivileged user; /var/lib/conduit is CONDUIT_DATA_DIR (a volume or emptyDir in deployments)
RUN groupadd --system --gid 10001 conduit \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/conduit --create-home \
       --shell /usr/sbin/nologin conduit \
    && mkdir -p /var/lib/conduit \
    && chown conduit:conduit /var/lib/conduit

ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CONDUIT_DATA_DIR=/var/lib/conduit \
    CONDUIT_GATEWAY_HOST=0.0.0.0 \
    CONDUIT_GATEWAY_PORT=8000

USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["conduit"]
CMD ["serve", "gateway"]
