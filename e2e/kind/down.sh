#!/usr/bin/env bash
# Deletes the kind cluster made by up.sh and its state directory. Safe to run twice.
set -euo pipefail
# shellcheck source=e2e/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ -d "$STATE_DIR/bin" ] && export PATH="$STATE_DIR/bin:$PATH"
need kind
if cluster_exists; then
  log "deleting cluster $CLUSTER_NAME"
  kind delete cluster --name "$CLUSTER_NAME" --kubeconfig "$KIND_KUBECONFIG"
else
  log "no cluster $CLUSTER_NAME"
fi
rm -rf "$STATE_DIR"
