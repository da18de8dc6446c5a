#!/usr/bin/env bash
# JupyterLab on notebooks/, bound to localhost only, token on (Jupyter's default). Containers and cluster
# images often run as root, which Jupyter refuses without --allow-root: pass it only then.
# Used by `make lab`; extra arguments go to jupyter lab (tests/test_lab.py passes a port and a token).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-.venv/bin}"
ROOT_FLAG=()
if [ "$(id -u)" = 0 ]; then ROOT_FLAG=(--allow-root); fi
exec "$BIN/jupyter" lab notebooks --ip=127.0.0.1 --no-browser "${ROOT_FLAG[@]}" "$@"
