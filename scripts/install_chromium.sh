# Sourced by scripts/setup.sh. The site's browser test (tests/test_site.py) drives Debian's
# chromium headless. CI (CI=true, run as root by .ci/run) installs it with apt-get so the test
# never skips there; elsewhere a missing chromium only means that test skips, saying why.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ] || [ "${PACK_INSTALL_CHROMIUM:-0}" = "1" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      say "installing chromium for the site's browser test (apt-get, a few minutes)"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } >&2 \
        || die "apt-get install chromium failed; see the messages above"
    else
      die "CI runs the site's browser test and needs chromium; install it (Debian/Ubuntu: apt-get install chromium) or run the set-up as root"
    fi
  else
    say "chromium not found: tests/test_site.py will be skipped (Debian/Ubuntu: apt-get install chromium)"
  fi
fi
