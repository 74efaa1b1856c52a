#!/usr/bin/env bash
# The container image, built and run without Docker: a base from Debian packages (mmdebstrap),
# the Dockerfile built on it (podman build), then run as deploy/base runs it.
# See docs/image-and-helm.md. Subcommands: build | smoke | contents.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec python3 "$here/image.py" "$@"
