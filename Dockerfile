# The one image compose.yaml runs as the API (`majordomus serve`) and as workers
# (`majordomus worker`): majordomus and its dependencies, nothing else. Redis is its own
# service; the embedded Redis of `majordomus dev` is not used in a container.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# The dependencies first, at the versions the lock file pins (a layer that changes only
# with the lock), then majordomus itself on them, adding nothing (--no-deps); `pip check`
# stops the build should the lock no longer satisfy what majordomus requires.
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY majordomus ./majordomus
COPY workers ./workers
COPY api ./api
RUN pip install --no-deps ".[server,fast]" \
    && pip check \
    && useradd --create-home --uid 10001 majordomus

# Your own capabilities: copy or install their package here (or in an image built FROM
# this one) and name their modules in MAJORDOMUS_CAPABILITIES, for the API and workers alike.

USER majordomus
EXPOSE 8000
# On every interface, so it needs MAJORDOMUS_API_TOKEN: `serve` refuses to start beyond
# loopback without one (or without --insecure-no-token, for an API meant to be open).
CMD ["majordomus", "serve", "--host", "0.0.0.0", "--port", "8000"]
