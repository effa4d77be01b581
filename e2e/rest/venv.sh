#!/usr/bin/env bash
# The venv with the real PyPI OpenWOP client the REST journey drives (created once, cached
# outside the repo like the cluster binaries). Prints the venv's python.
set -euo pipefail
VERSION="${OPENWOP_CLIENT_VERSION:-1.8.0}"
VENV="${OPENWOP_CLIENT_VENV:-$HOME/.cache/openwop/venv-openwop-client-$VERSION}"
if ! "$VENV/bin/python" -c "import openwop_client" 2>/dev/null; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet "openwop-client==$VERSION" >&2
fi
echo "$VENV/bin/python"
