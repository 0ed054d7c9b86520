#!/usr/bin/env bash
# Checks braid-run against real processes: one case per call, so Meson runs
# the cases in parallel and reports each on its own.
#   usage: check_launcher.sh CASE BRAID_RUN RANK_PROBE SETTINGS_DOC
# rank_probe.cpp describes the little scripts the ranks run.
set -u
name=$1 BR=$2 PROBE=$3 SETTINGS_DOC=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/out" "$tmp/err"
# Put on the command line of every rank of this case, to find ranks that
# outlive braid-run in the process table.
token="launcher-test-$name-$$-$RANDOM"

fail() {
  echo "FAIL [$name]: $*" >&2
  echo "--- braid-run stdout:" >&2; cat "$tmp/out" >&2
  echo "--- braid-run stderr:" >&2; cat "$tmp/err" >&2
  exit 1
}
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

# run ARGS...: braid-run ARGS with its output in $tmp/out and $tmp/err; sets
# rc and elapsed (ms). The outer timeout only keeps a broken launcher from
# hanging the suite.
run() {
  local t0; t0=$(now_ms)
  timeout -s KILL 30 "$BR" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  elapsed=$(( $(now_ms) - t0 ))
}
expect_rc() { [[ $rc == "$1" ]] || fail "exit status $rc, expected $1"; }
expect_out() { grep -qxF -- "$1" "$tmp/out" || fail "stdout lacks the line '$1'"; }
expect_err() { grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1'"; }
expect_within() { (( elapsed < $1 )) || fail "took $elapsed ms, expected under $1 ms"; }
expect_lines() { [[ $(wc -l <"$tmp/$1") == "$2" ]] || fail "$1 has $(wc -l <"$tmp/$1") lines, expected $2"; }
no_leftovers() {
  sleep 0.3
  local pids; pids=$(pgrep -f -- "$token")
  if [[ -n $pids ]]; then
    ps -o pid,pgid,args -p $pids >&2
    kill -KILL $pids 2>/dev/null
    fail "ranks outlived braid-run"
  fi
}
# start_background ARGS...: braid-run in the background; waits until its ranks
# have printed $1 lines.
start_background() {
  local want=$1; shift
  "$BR" "$@" >"$tmp/out" 2>"$tmp/err" &
  bg=$!
  for _ in $(seq 100); do
    [[ $(wc -l <"$tmp/out") -ge $want ]] && return
    sleep 0.05
  done
  kill -KILL $bg; fail "ranks did not start"
}

case $name in
env)
  run -n 3 "$PROBE" env out "$token"
  expect_rc 0
  for r in 0 1 2; do
    grep -qE "^\[$r\] rank=$r world=3 local_rank=$r local_size=3 store=127\.0\.0\.1:[0-9]+$" "$tmp/out" ||
      fail "rank $r's environment is wrong"
  done
  [[ $(grep -o 'store=.*' "$tmp/out" | sort -u | wc -l) == 1 ]] || fail "ranks saw different store addresses"
  grep -q 'store=127.0.0.1:0$' "$tmp/out" && fail "store port is 0"
  # Values from braid-run's own environment are replaced, others pass through.
  BRAID_RANK=7 BRAID_STORE_ADDR=stale:1 BRAID_DEBUG=INFO run -n 2 --host localhost --port 23456 "$PROBE" env
  expect_rc 0
  expect_out "[0] rank=0 world=2 local_rank=0 local_size=2 store=localhost:23456"
  expect_out "[1] rank=1 world=2 local_rank=1 local_size=2 store=localhost:23456"
  run -n 2 --host ::1 --port 23456 "$PROBE" env
  expect_out "[1] rank=1 world=2 local_rank=1 local_size=2 store=[::1]:23456"
  # execvp: the program is looked up in PATH.
  BRAID_DEBUG=INFO run -n 2 printenv BRAID_RANK BRAID_DEBUG
  expect_rc 0
  expect_out "[0] 0"; expect_out "[1] 1"; expect_out "[1] INFO"
  ;;
prefix)
  run -n 2 "$PROBE" out "hello $token" err oops partial "abc" sleep 0.2 partial "def" sleep 0.1 out "" out "" partial tail
  expect_rc 0
  for r in 0 1; do
    expect_out "[$r] hello $token"; expect_out "[$r] abcdef"; expect_out "[$r] "; expect_out "[$r] tail"
    grep -qxF "[$r] oops" "$tmp/err" || fail "stderr lacks '[$r] oops'"
  done
  expect_lines out 8
  expect_lines err 2
  grep -q oops "$tmp/out" && fail "stderr leaked into stdout"
  run --no-prefix -n 2 "$PROBE" out plain err "on stderr" partial last
  expect_rc 0
  [[ $(sort -u "$tmp/out") == $'last\nplain' ]] || fail "--no-prefix output is not the bare lines"
  expect_lines out 4
  [[ $(sort -u "$tmp/err") == "on stderr" ]] || fail "--no-prefix stderr is not the bare lines"
  ;;
volume)
  # Many lines from several ranks at once: none lost, cut or reordered within
  # a rank. A line longer than 64 KiB comes out in prefixed pieces.
  run -n 4 "$PROBE" lines 20000 long 150000
  expect_rc 0
  for r in 0 1 2 3; do
    got=$(grep "^\[$r\] line " "$tmp/out" | awk -v r="[$r]" '$1 != r || $3 != NR - 1 { bad = 1 } END { print NR, bad + 0 }')
    [[ $got == "20000 0" ]] || fail "rank $r: lines/out-of-order = $got"
    xs=$(grep "^\[$r\] x" "$tmp/out" | awk '{ n += length($2) } END { print n, NR }')
    [[ $xs == "150000 3" ]] || fail "rank $r: long line came out as (chars pieces) $xs"
  done
  ;;
status)
  run -n 3 "$PROBE" exit 0
  expect_rc 0
  [[ -s $tmp/err ]] && fail "a successful job wrote to stderr"
  run -n 3 "$PROBE" @1 exit 3
  expect_rc 3
  expect_err "braid-run: rank 1 exited with status 3"
  run -n 2 "$PROBE" @0 sleep 0.3 @0 exit 5 @1 exit 6
  expect_rc 6
  ;;
fail-fast)
  run -n 3 "$PROBE" out "$token" @2 sleep 0.3 @2 err "rank 2 failing" @2 exit 3 sleep 60
  expect_rc 3
  expect_within 3000
  expect_err "braid-run: rank 2 exited with status 3"
  expect_err "braid-run: sending SIGTERM to 2 remaining ranks"
  # The rank's own last words come before braid-run's report.
  [[ $(head -n 1 "$tmp/err") == "[2] rank 2 failing" ]] || fail "the rank's output does not come first"
  no_leftovers
  ;;
signal)
  run -n 3 "$PROBE" out "$token" @0 sleep 0.3 @0 signal 9 sleep 60
  expect_rc 137
  expect_within 3000
  expect_err "braid-run: rank 0 killed by signal 9 (SIGKILL)"
  no_leftovers
  ;;
grace)
  # Ranks that ignore SIGTERM are SIGKILLed once the grace period is over.
  run -n 3 --grace 500ms "$PROBE" ignore-term out "$token" @1 sleep 0.3 @1 exit 4 sleep 60
  expect_rc 4
  expect_within 3000
  (( elapsed >= 750 )) || fail "took $elapsed ms: no grace period between SIGTERM and SIGKILL"
  expect_err "SIGKILL after 500ms"
  no_leftovers
  ;;
group)
  # Stopping a rank reaches the processes it started (its process group).
  run -n 2 bash -c 'if [ "$BRAID_RANK" = 1 ]; then sleep 0.3; exit 3; fi; "$0" out "$1" sleep 60 & wait' "$PROBE" "$token"
  expect_rc 3
  expect_within 3000
  no_leftovers
  ;;
exec-failure)
  run -n 3 "no-such-program-$token" arg
  expect_rc 127
  expect_err "braid-run: cannot run 'no-such-program-$token': No such file or directory"
  [[ $(grep -c "cannot run" "$tmp/err") == 1 ]] || fail "the exec failure was reported more than once"
  run -n 2 /dev/null
  expect_rc 127
  expect_err "braid-run: cannot run '/dev/null': Permission denied"
  ;;
timeout)
  run -n 2 --timeout 1 "$PROBE" out "$token" sleep 60
  expect_rc 124
  (( elapsed >= 900 )) || fail "stopped after $elapsed ms, before the 1 s timeout"
  expect_within 3500
  expect_err "braid-run: the job ran past --timeout 1s"
  no_leftovers
  # The timeout holds even when the ranks ignore SIGTERM.
  run -n 2 --timeout 300ms --grace 300ms "$PROBE" ignore-term out "$token" sleep 60
  expect_rc 124
  expect_within 3000
  no_leftovers
  run -n 2 --timeout 5 "$PROBE" exit 0
  expect_rc 0
  expect_within 3000
  ;;
usage)
  run "$PROBE"; expect_rc 2; expect_err "missing -n N"
  run -n 0 "$PROBE"; expect_rc 2; expect_err "-n '0' is not a whole number in [1, 4096]"
  run -n two "$PROBE"; expect_rc 2
  run -n 2; expect_rc 2; expect_err "missing the program to run"
  run -n 2 --bogus "$PROBE"; expect_rc 2; expect_err "unknown option '--bogus'"
  run -n 2 --grace soon "$PROBE"; expect_rc 2; expect_err "--grace='soon' is not a duration"
  run -n 2 --port 70000 "$PROBE"; expect_rc 2
  run -n; expect_rc 2; expect_err "-n needs a value"
  run --help; expect_rc 0; grep -q "^usage: braid-run -n N" "$tmp/out" || fail "--help prints no usage"
  run --env-help; expect_rc 0
  [[ $(head -n 2 "$tmp/out") == $'| Variable | Default | Meaning |\n| --- | --- | --- |' ]] || fail "--env-help has no table header"
  for v in BRAID_RANK BRAID_WORLD_SIZE BRAID_STORE_ADDR BRAID_TIMEOUT; do
    grep -qF "| \`$v\` | " "$tmp/out" || fail "--env-help lacks $v"
  done
  # docs/settings.md says its settings table is what --env-help prints.
  sed -n '/<!-- settings-table:begin -->/,/<!-- settings-table:end -->/p' "$SETTINGS_DOC" | sed '1d;$d' >"$tmp/doc"
  diff "$tmp/doc" "$tmp/out" >&2 || fail "--env-help differs from docs/settings.md's table (ninja -C BUILD settings-doc writes it)"
  # Options stop at the program; what follows is the program's.
  run -n2 -- "$PROBE" out --help; expect_rc 0; expect_out "[1] --help"
  run --ranks=1 "$PROBE" out -n; expect_rc 0; expect_out "[0] -n"
  ;;
forward-term | forward-int)
  sig=${name#forward-}; sig=${sig^^}
  # braid-run leaves a signal alone that it was started with ignored, as does
  # a script started in the background by a non-interactive shell.
  sigign=$(awk '/^SigIgn:/ { print $2 }' /proc/$$/status)
  if [[ $sig == INT ]] && (( 0x$sigign & 2 )); then
    echo "skipped: this script was started with SIGINT ignored"
    exit 77
  fi
  set -m  # so the background braid-run does not start with SIGINT ignored
  start_background 3 -n 3 "$PROBE" out "$token" sleep 60
  t0=$(now_ms)
  kill -"$sig" $bg
  wait $bg
  rc=$?
  elapsed=$(( $(now_ms) - t0 ))
  [[ $sig == TERM ]] && expect_rc 143 || expect_rc 130
  expect_within 3000
  expect_err "braid-run: received SIG$sig; forwarding it to the ranks"
  no_leftovers
  ;;
launcher-killed)
  # Ranks die with braid-run even when it gets no chance to stop them.
  start_background 3 -n 3 "$PROBE" out "$token" sleep 60
  kill -KILL $bg
  wait $bg 2>/dev/null
  no_leftovers
  ;;
cpu-claims)
  # Two braid-runs on one machine bind their ranks to different CPUs while
  # there are free ones (tools/cpu_claims.hpp); the claims of one that exited
  # are gone. A claims file of this case's own keeps other tests' out.
  mapfile -t cpus < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
                      awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }')
  if (( ${#cpus[@]} < 2 )); then
    echo "skipped: needs 2 CPUs, this test may use ${#cpus[@]}"
    exit 77
  fi
  export BRAID_CPU_CLAIMS=$tmp/claims
  show='grep Cpus_allowed_list /proc/self/status | sed "s/.*:\s*//"'
  # hold N ARGS...: a braid-run (ARGS) in the background whose N ranks print
  # their CPUs into $tmp/held and hold their claims for 4 s; waits for the N lines.
  hold() {
    local lines=$1; shift
    "$BR" "$@" --bind-to core -- sh -c "$show; sleep 4" "$token" >"$tmp/held" 2>>"$tmp/err" &
    held=$!
    for _ in $(seq 100); do [[ $(wc -l <"$tmp/held") -ge $lines ]] && break; sleep 0.05; done
  }
  hold 1 -n 1
  [[ $(cat "$tmp/held") == "[0] ${cpus[0]}" ]] || fail "the first braid-run bound to '$(cat "$tmp/held")', not CPU ${cpus[0]}"
  run -n 1 --bind-to core -- sh -c "$show" "$token"
  expect_rc 0
  expect_out "[0] ${cpus[1]}"
  # Without claims, the second binds from the first CPU as well.
  BRAID_CPU_CLAIMS=none run -n 1 --bind-to core -- sh -c "$show" "$token"
  expect_out "[0] ${cpus[0]}"
  # Nodes of one job on one machine: the second to start finds every CPU
  # claimed and puts its ranks where the first has a rank of another local
  # position, whichever node starts first.
  kill $held; wait $held 2>/dev/null
  n=${#cpus[@]}
  hold "$n" -n "$n" --nnodes 2 --node-rank 0 --master 127.0.0.1:1
  grep -qxF "[0] ${cpus[0]}" "$tmp/held" || fail "node 0's rank 0 is not on CPU ${cpus[0]}: $(cat "$tmp/held")"
  run -n "$n" --nnodes 2 --node-rank 1 --master 127.0.0.1:1 --bind-to core -- sh -c "$show" "$token"
  expect_out "[$n] ${cpus[1]}"
  expect_out "[$(( 2 * n - 1 ))] ${cpus[0]}"
  kill $held; wait $held 2>/dev/null
  hold "$n" -n "$n" --nnodes 2 --node-rank 1 --master 127.0.0.1:1
  grep -qxF "[$n] ${cpus[0]}" "$tmp/held" || fail "node 1's rank $n is not on CPU ${cpus[0]}: $(cat "$tmp/held")"
  run -n "$n" --nnodes 2 --node-rank 0 --master 127.0.0.1:1 --bind-to core -- sh -c "$show" "$token"
  expect_out "[0] ${cpus[1]}"
  kill $held; wait $held 2>/dev/null
  # Its claims went with it, and the last braid-run removed the file.
  run -n 1 --bind-to core -- sh -c "$show" "$token"
  expect_out "[0] ${cpus[0]}"
  [[ ! -e $BRAID_CPU_CLAIMS ]] || fail "the claims file outlived every braid-run"
  no_leftovers
  ;;
bind-busy)
  # More ranks than CPUs are bound round robin only on a machine nothing
  # else keeps busy at launch (tools/braid_run.cpp): with a busy loop per
  # CPU beside it, braid-run leaves them to the kernel, every rank allowed
  # every CPU; told --bind-to core, it still binds them.
  allowed=$(grep Cpus_allowed_list /proc/self/status | sed 's/.*:\s*//')
  n=$(( $(nproc) + 1 ))
  export BRAID_CPU_CLAIMS=$tmp/claims
  show='grep Cpus_allowed_list /proc/self/status | sed "s/.*:\s*//"'
  busy=()
  for _ in $(seq "$(nproc)"); do timeout 25 sh -c 'while :; do :; done' & busy+=($!); done
  trap 'kill "${busy[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
  run -n "$n" -- sh -c "$show" "$token"
  expect_rc 0
  expect_lines out "$n"
  for (( i = 0; i < n; i++ )); do expect_out "[$i] $allowed"; done
  if (( $(nproc) > 1 )); then
    run -n "$n" --bind-to core -- sh -c "$show" "$token"
    grep -qxF -- "[0] $allowed" "$tmp/out" && fail "--bind-to core left rank 0 on every CPU"
  fi
  kill "${busy[@]}" 2>/dev/null; wait "${busy[@]}" 2>/dev/null
  no_leftovers
  ;;
*)
  echo "unknown case '$name'" >&2
  exit 2
  ;;
esac
echo "ok [$name]"
