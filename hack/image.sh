#!/usr/bin/env bash
# The container image, built and run without Docker: two bases from Debian packages (mmdebstrap),
# the Dockerfile built on them (podman build), then run as deploy/base runs it.
# See docs/tasks/image-and-helm.md. Subcommands: build | smoke | contents | controller-once DUMP | base-tag | builder-tag.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec python3 "$here/image.py" "$@"
