# segment-webhook container image.
#   docker build -t ghcr.io/segment-webhook/segment-webhook:0.1.0 .
# Reproducible inputs (README "Image: refreshing the pins"): the base image by exact version, every
# Python package from requirements.lock (uv pip compile, exact versions + sha256 hashes), nothing
# resolved or downloaded unpinned at build time. The base image's digest is not pinned: it could not
# be looked up from the machine this was written on (no access to the image registry, so the tag
# was not checked there either); append
# @sha256:<digest> from `docker buildx imagetools inspect python:3.11.14-slim-bookworm` to pin it.
# Runs as a non-root numeric user and works with a read-only root filesystem: the only paths
# written at run time are /tmp (gunicorn worker heartbeat files; an emptyDir in deploy/base),
# /dev/shm, and $PROMETHEUS_MULTIPROC_DIR (an emptyDir in deploy/base). The Debian base provides
# /bin/sleep for the Deployment's preStop pause.
# BASE_IMAGE: what users pull by default; hack/image.sh passes a base made from Debian's packages
# (bookworm's Python 3.11, pip under /usr/local) where no image registry is reachable.
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PROMETHEUS_MULTIPROC_DIR=/var/run/segment-webhook/metrics

WORKDIR /src

# 1. Dependencies only, exactly as locked: pip checks every file against its hash and refuses a
#    requirement that is not pinned in the lock (so a lock missing a dependency fails the build).
#    This layer is rebuilt only when requirements.lock changes, not on every source edit.
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock

# 2. The package itself, built with the locked setuptools/wheel (no build isolation: nothing is
#    downloaded) and without dependency resolution (they are all installed above).
COPY setup.cfg pyproject.toml README.md* ./
COPY webhook ./webhook
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
 && rm -rf /src/*

# 3. Non-root numeric user (UID/GID 65532) and the writable directories it needs.
RUN groupadd --system --gid 65532 webhook \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin webhook \
 && mkdir -p /var/run/segment-webhook/metrics /etc/segment-webhook/certs \
 && chown -R 65532:65532 /var/run/segment-webhook

WORKDIR /
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["segment-webhook", "serve"]
CMD ["--bind", "0.0.0.0:8443", "--cert-dir", "/etc/segment-webhook/certs"]
