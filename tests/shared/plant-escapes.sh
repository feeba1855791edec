# Sourced by a command under test (`. tests/shared/plant-escapes.sh DIR`):
# plants one descendant per escape route out of the command's tree, each
# writing its pid to DIR/<route>, and writes the leader's own pid to
# DIR/leader. The host-death tests of every face source it (Rust, C,
# Python, Node) and the host-death benchmark too.
#
#   setsid     a new session
#   double     a double fork (orphaned at once)
#   nohup      nohup, SIGHUP ignored
#   trapper    a new session that ignores SIGTERM
#   envorphan  env -i (no DSH_EXEC_TAG) and orphaned
#   envsetsid  env -i, a new session and orphaned: nothing names its command
#   forkloop   a new session that ignores SIGTERM and forks forever
d=$1
setsid bash -c 'echo $$ > "$1"/setsid; exec sleep 300' _ "$d" </dev/null >/dev/null 2>&1 &
( bash -c 'echo $$ > "$1"/double; exec sleep 300' _ "$d" </dev/null >/dev/null 2>&1 & ) &
nohup bash -c 'echo $$ > "$1"/nohup; exec sleep 300' _ "$d" </dev/null >/dev/null 2>&1 &
setsid bash -c 'trap "" TERM; echo $$ > "$1"/trapper; while :; do sleep 0.1; done' _ "$d" </dev/null >/dev/null 2>&1 &
( env -i /bin/bash -c 'echo $$ > "$1"/envorphan; exec sleep 300' _ "$d" </dev/null >/dev/null 2>&1 & )
( setsid env -i /bin/bash -c 'echo $$ > "$1"/envsetsid; exec sleep 300' _ "$d" </dev/null >/dev/null 2>&1 & )
setsid bash -c 'trap "" TERM; while :; do (sleep 300 &); echo $$ > "$1"/forkloop; sleep 0.05; done' _ "$d" </dev/null >/dev/null 2>&1 &
echo $$ > "$d"/leader
