#!/bin/bash
# Wait for the lead's go (rules: /tmp/meas3/helper_wants_quiet -> /tmp/meas3/go_helper), run "$@", release.
touch /tmp/meas3/helper_wants_quiet
until [ -e /tmp/meas3/go_helper ]; do sleep 30; done
echo "window start $(date -u +%FT%TZ) $(uptime)"
"$@"; rc=$?
echo "window end $(date -u +%FT%TZ) $(uptime) rc $rc"
rm -f /tmp/meas3/helper_wants_quiet
