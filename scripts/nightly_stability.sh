#!/usr/bin/env bash
# Nightly stability check, for cron or a CI schedule.
#
# Runs `judge nightly CONFIG`: judges the configured dataset K times (verdict cache
# bypassed), writes the night's report into a new dated directory, appends the result to
# the history JSONL, redraws the trend plot, and exits 1 with a BREACH line on stderr when
# the relative spread of mAP (or the configured metric) is over the threshold.
#
# Usage:  scripts/nightly_stability.sh [CONFIG]
#         CONFIG defaults to $JUDGE_NIGHTLY_CONFIG, else scripts/nightly.example.json.
# Env:    JUDGE_PYTHON      the python with judge installed (default: .venv/bin/python if
#                           present, else python3)
#         JUDGE_GIT_COMMIT  recorded in the history (default: git rev-parse HEAD here)
# Exit:   0 pass, 1 breach, 2 bad config or input (or a crash), 3 backend failure,
#         130 interrupted.
set -uo pipefail

config="${1:-${JUDGE_NIGHTLY_CONFIG:-}}"
if [ -n "$config" ] && [ "${config#/}" = "$config" ]; then
  config="$PWD/$config"  # a relative CONFIG is relative to where the script was called from
fi
cd "$(dirname "$0")/.." || exit 2
config="${config:-scripts/nightly.example.json}"
python="${JUDGE_PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
if [ -z "${JUDGE_GIT_COMMIT:-}" ]; then
  JUDGE_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)"
  export JUDGE_GIT_COMMIT
fi

echo "nightly stability: $(date -u +%Y-%m-%dT%H:%M:%SZ) config $config" >&2
errlog="$(mktemp)"
trap 'rm -f "$errlog"' EXIT
# stdout goes through untouched; stderr is shown and kept, to tell a breach from a crash
# (an uncaught Python exception also exits 1, but prints no BREACH line).
{ "$python" -m judge nightly "$config" 2>&1 1>&3 3>&- | tee "$errlog" >&2; } 3>&1
status="${PIPESTATUS[0]}"
if [ "$status" -eq 0 ]; then
  echo "nightly stability: PASS" >&2
elif [ "$status" -eq 1 ] && grep -q '^BREACH' "$errlog"; then
  echo "BREACH: nightly stability check failed for $config (see the history JSONL and the latest report)" >&2
else
  echo "nightly stability: ERROR (exit $status) for $config: the check did not complete" >&2
  [ "$status" -eq 1 ] && status=2
fi
exit "$status"
