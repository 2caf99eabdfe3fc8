#!/usr/bin/env bash
# Runs a test binary with /dev/shm limited to 64 MiB (edge case F2), using a private mount
# namespace so the machine's /dev/shm is untouched. Falls back, with a visible message, to the
# ordinary /dev/shm where that is not permitted (not root, or no unshare).
set -euo pipefail
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
   unshare --mount --propagation private true 2>/dev/null; then
  exec unshare --mount --propagation private sh -c \
    'mount -t tmpfs -o size=64m tmpfs /dev/shm && echo "/dev/shm: $(df -h /dev/shm | tail -1)" && exec "$@"' sh "$@"
fi
echo "SKIPPED the 64 MiB /dev/shm limit (needs root and unshare); running on the ordinary /dev/shm"
exec "$@"
