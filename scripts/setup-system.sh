#!/usr/bin/env bash
# The Debian packages the test suite starts for real, installed when missing (as root, from the package
# registry): PostgreSQL's server binaries (the ledger's tests start a throwaway cluster,
# tests/ledger/conftest.py) and Chromium (the dashboard's browser tests drive /usr/bin/chromium with
# Playwright, tests/web/browser/conftest.py; never `playwright install`: no browser is downloaded).
# .ci/run calls it; on a developer machine: `sudo bash scripts/setup-system.sh`.
set -euo pipefail
missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null; then
        echo "setup-system: no apt-get here; install ${missing[*]} by hand (their tests are skipped meanwhile)" >&2
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
