# Sourced by scripts/setup.sh. `skills.py eval grade` runs graded answers in a bubblewrap sandbox
# (scripts/skillcheck/evals/sandbox.py). CI (CI=true, run as root) installs it with apt-get so the eval and
# sandbox tests never skip there; elsewhere a missing bwrap only means grading stops, saying why.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ] || [ "${PACK_INSTALL_BUBBLEWRAP:-0}" = "1" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      say "installing bubblewrap for the eval sandbox (apt-get)"
      { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap; }; } >&2 \
        || die "apt-get install bubblewrap failed; see the messages above"
    else
      die "CI grades eval answers in a bubblewrap sandbox; install it (Debian/Ubuntu: apt-get install bubblewrap) or run the set-up as root"
    fi
  else
    say "bubblewrap not found: eval grading of code answers stops and the sandbox tests skip (Debian/Ubuntu: apt-get install bubblewrap)"
  fi
fi
