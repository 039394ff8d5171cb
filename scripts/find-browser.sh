#!/bin/sh
# The browser the browser tests drive (tests/browser): says which Chromium and chromedriver
# were found on PATH; where there are none, and this is root on a system with apt-get, installs
# chromium and chromium-driver quietly, in at most STRATAMEM_BROWSER_INSTALL_TIMEOUT seconds
# (default 180: a slow mirror costs the suite at most three minutes). It never fails: without
# a browser the browser tests are skipped, and say so.
# `make test-all` (and so CI) runs it before the suite.
set -u

TIMEOUT="${STRATAMEM_BROWSER_INSTALL_TIMEOUT:-180}"
INSTALL="apt-get install chromium chromium-driver"

first() {
    for name in "$@"; do
        found=$(command -v "$name" 2>/dev/null) && { echo "$found"; return 0; }
    done
    return 1
}

found() {
    browser=$(first chromium chromium-browser google-chrome) || return 1
    driver=$(first chromedriver) || return 1
    echo "browser tests: $browser with $driver"
}

found && exit 0

if command -v apt-get >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1 \
    && [ "$(id -u 2>/dev/null)" = 0 ]; then
    echo "browser tests: no chromium and chromedriver on PATH; $INSTALL (at most ${TIMEOUT} s)"
    # timeout signals the whole group (apt-get and its fetchers); -k: then kills what stays.
    timeout -k 10 "$TIMEOUT" sh -c '
        export DEBIAN_FRONTEND=noninteractive
        apt-get -qq -o Acquire::Retries=0 update &&
        apt-get -qq -y --no-install-recommends install chromium chromium-driver
    ' >/dev/null 2>&1
    found && exit 0
fi

echo "browser tests will be skipped: no chromium and chromedriver on PATH (install them: $INSTALL)"
exit 0
