# segment-webhook container image.
#   docker build -t ghcr.io/segment-webhook/segment-webhook:0.1.0 .
# Runs as a non-root numeric user and works with a read-only root filesystem: the only paths
# written at run time are /tmp (gunicorn worker heartbeat files; an emptyDir in deploy/base),
# /dev/shm, and $PROMETHEUS_MULTIPROC_DIR (an emptyDir in deploy/base).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PROMETHEUS_MULTIPROC_DIR=/var/run/segment-webhook/metrics

WORKDIR /src

# 1. Dependencies only, from setup.cfg's install_requires: this layer is rebuilt only when the
#    packaging metadata changes, not on every source edit.
COPY setup.cfg pyproject.toml README.md* ./
RUN python -c "import configparser; c = configparser.ConfigParser(); c.read('setup.cfg'); open('/tmp/requirements.txt', 'w').write(c['options']['install_requires'])" \
 && pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# 2. The package itself (no dependency resolution: they are all installed above).
COPY webhook ./webhook
RUN pip install --no-cache-dir --no-deps . \
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
