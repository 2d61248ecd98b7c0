#!/usr/bin/env bash
# Debian's chromium for the Studio browser test (tests/e2e/test_studio.py, Playwright drives it
# with executable_path; Playwright's own browser download cannot work offline).
#
#   deploy/native/chromium.sh install     apt-get install chromium when missing (root + apt-get)
#   deploy/native/chromium.sh path        print the browser's path (exit 1 when there is none)
#
# `make install` runs `install`; when the browser cannot be installed it says why and exits 0:
# the browser test then skips, naming the reason.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

find_browser() {
  local b
  for b in "${THREADLINE_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
  done
  return 1
}

install() {
  find_browser >/dev/null && return 0
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    log "chromium not found and not installable here (needs root and apt-get): the Studio browser test will skip"
    return 0
  fi
  log "installing chromium with apt-get (the Studio browser test)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
    log "apt-get could not install chromium: the Studio browser test will skip"
  fi
  return 0
}

case "${1:-}" in
  install) install ;;
  path) find_browser ;;
  *) echo "usage: $0 install|path" >&2; exit 2 ;;
esac
