# What the shell tests share (cli.sh, dp.sh, test_install.sh source it): counters, the
# outcome lines, expect/check on a command's output, INI files and the summary. The caller
# sets $tmp first, a scratch directory it owns: every command's output goes to $tmp/out.
# Optional: $expect_timeout (seconds a command may run; exit 124 is then a timeout) and
# $expect_signal_ok (set: a failure by a signal, exit >= 128, counts as the failure wanted);
# $expect_stderr (a file: the command's stderr goes there, and $tmp/out holds its stdout
# alone; under mpirun the two streams come through separate pipes read in chunks, so a
# line of one may be cut by a line of the other).
# The jax backend's compile cache goes into $tmp, not into the user's ~/.cache.
export XDG_CACHE_HOME=$tmp/cache
passed=0 failed=0
ok()  { passed=$((passed + 1)); echo "ok   $1"; }
bad() {
  failed=$((failed + 1)); echo "FAIL $1"
  if [ -f "$tmp/out" ]; then # its head, and its tail where the verdicts are
    if [ "$(wc -l < "$tmp/out")" -le 50 ]; then sed 's/^/     | /' "$tmp/out"
    else sed 's/^/     | /' "$tmp/out" | head -n 30; echo "     | ..."; sed 's/^/     | /' "$tmp/out" | tail -n 20; fi
  fi
  [ -n "${expect_stderr:-}" ] && [ -s "$expect_stderr" ] && sed 's/^/     ! /' "$expect_stderr" | tail -n 20
}

# check NAME REGEX: the last command's output matches REGEX.
check() { if grep -Eq -- "$2" "$tmp/out"; then ok "$1"; else bad "$1"; fi; }

# expect NAME EXIT_WANTED REGEX -- command...: EXIT_WANTED 0, success; 1, a failure the
# command reports; and output matching REGEX (empty: any). Returns 1 after a FAIL.
expect() {
  local name=$1 want=$2 re=$3; shift 4
  if [ -n "${expect_stderr:-}" ]; then ${expect_timeout:+timeout "$expect_timeout"} "$@" >"$tmp/out" 2>"$expect_stderr"
  else ${expect_timeout:+timeout "$expect_timeout"} "$@" >"$tmp/out" 2>&1; fi
  local got=$?
  if [ "$want" = 0 ] && [ "$got" != 0 ]; then bad "$name (exit $got, wanted 0)"; return 1; fi
  if [ "$want" != 0 ] && [ "$got" = 0 ]; then bad "$name (exit 0, wanted a failure)"; return 1; fi
  if [ -n "${expect_timeout:-}" ] && [ "$got" = 124 ]; then bad "$name (timed out)"; return 1; fi
  if [ "$want" != 0 ] && [ -z "${expect_signal_ok:-}" ] && [ "$got" -ge 128 ]; then
    bad "$name (exit $got, wanted a clean failure)"; return 1
  fi
  if [ -n "$re" ] && ! grep -Eq -- "$re" "$tmp/out"; then bad "$name (output lacks /$re/)"; return 1; fi
  ok "$name"
}

# ini FILE TEXT: $tmp/FILE holds TEXT.
ini() { printf '%s\n' "$2" > "$tmp/$1"; }

# The summary line; the script's exit status is whether anything failed.
finish() { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; exit $?; }
