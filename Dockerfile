# segment-webhook container image.
#   docker build -t ghcr.io/segment-webhook/segment-webhook:0.1.0 .
# Reproducible inputs (README "Image: refreshing the pins"): the base images by exact version, every
# Python package from requirements.lock (uv pip compile, exact versions + sha256 hashes), nothing
# resolved or downloaded unpinned at build time. The base image's digest is not pinned: it could not
# be looked up from the machine this was written on (no access to the image registry, so the tag
# was not checked there either); append
# @sha256:<digest> from `docker buildx imagetools inspect python:3.11.14-slim-bookworm` to pin it.
# Two stages (docs/tasks/image-and-helm.md, docs/decisions/image-size.md): the builder installs the
# lock into a virtual environment with pip and cuts it (hack/image_prune.py); the image holds that
# environment and the base's Python, and no pip, setuptools, compiler, test suite or package cache.
# Runs as a non-root numeric user and works with a read-only root filesystem: the only paths
# written at run time are /tmp (gunicorn worker heartbeat files; an emptyDir in deploy/base),
# /dev/shm, and $PROMETHEUS_MULTIPROC_DIR (an emptyDir in deploy/base); every module is compiled
# at build time. The base provides /bin/sleep for the Deployment's preStop pause.
# BUILDER_IMAGE: a Python with pip. BASE_IMAGE: what the image is made of; it must have the
# builder's Python at the same path (the environment links to it). What users pull by default is
# python:3.11.14-slim-bookworm for both; hack/image.sh passes two bases made from Debian's packages
# (bookworm's Python 3.11 in /usr/bin; the builder's with pip) where no image registry is reachable.
ARG BUILDER_IMAGE=python:3.11.14-slim-bookworm
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

FROM ${BUILDER_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python3 -m venv --without-pip /opt/segment-webhook

# 1. Dependencies only, exactly as locked: pip checks every file against its hash and refuses a
#    requirement that is not pinned in the lock (so a lock missing a dependency fails the build).
#    This layer is rebuilt only when requirements.lock changes, not on every source edit.
COPY requirements.lock ./
RUN pip --python /opt/segment-webhook/bin/python install --no-cache-dir --require-hashes -r requirements.lock

# 2. The package itself, built with the locked setuptools/wheel (no build isolation: nothing is
#    downloaded) and without dependency resolution (they are all installed above).
COPY setup.cfg pyproject.toml README.md* ./
COPY webhook ./webhook
RUN pip --python /opt/segment-webhook/bin/python install --no-cache-dir --no-deps --no-build-isolation .

# 3. Cut the environment to what serve and controller run and compile it (hack/image_prune.py).
COPY hack/image_prune.py ./
RUN /opt/segment-webhook/bin/python image_prune.py

FROM ${BASE_IMAGE}

ENV PATH=/opt/segment-webhook/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PROMETHEUS_MULTIPROC_DIR=/var/run/segment-webhook/metrics

COPY --from=builder /opt/segment-webhook /opt/segment-webhook

# 4. Non-root numeric user (UID/GID 65532, no home, no login shell) and the writable directories
#    it needs. Written directly: the base need not have useradd.
RUN echo 'webhook:x:65532:' >> /etc/group \
 && echo 'webhook:x:65532:65532::/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && mkdir -p /var/run/segment-webhook/metrics /etc/segment-webhook/certs \
 && chown -R 65532:65532 /var/run/segment-webhook

WORKDIR /
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["segment-webhook", "serve"]
CMD ["--bind", "0.0.0.0:8443", "--cert-dir", "/etc/segment-webhook/certs"]
