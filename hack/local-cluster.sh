#!/usr/bin/env bash
# Local control plane for the cluster suite, built from published Go modules (DESIGN.md §11).
# See README.md, "The local control plane". Subcommands: build | up DIR [--webhook] [--gate-pods] [--controller] [--with lws] [--kubelet] | nodes DIR FILE | stop-apiserver DIR | start-apiserver DIR | down DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec python3 "$here/local_cluster.py" "$@"
