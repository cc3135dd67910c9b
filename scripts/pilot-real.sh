#!/usr/bin/env bash
# pilot-real.sh: electhost agents over a real Pilot Protocol network on
# loopback, with faults, measured. Not run by make test or CI: it needs
# Pilot's binaries, which it does not build (docs/pilotctl.md, "Measuring
# on a real Pilot network", says how to get them).
#
#   scripts/pilot-real.sh [flags] PILOT_BIN_DIR
#
# PILOT_BIN_DIR holds registry, beacon, daemon and pilotctl. Everything
# listens on 127.0.0.1 only: registry, beacon and daemons get explicit
# loopback addresses (their built-in defaults are public hosts), and every
# pilotctl run gets PILOT_REGISTRY and PILOT_SOCKET. Every process started is
# killed on exit, whatever happens.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/pilot-real.sh [flags] PILOT_BIN_DIR

  -l LAYOUT   broker layout: own (every member's node; the default),
              one (one dedicated broker node), three (three dedicated nodes)
  -n N        agents (default 3), each on its own daemon
  -s STEPS    comma-separated steps, run in order (default
              "idle:30,agentkill,daemonkill:5,handoff"):
                idle:S        S seconds without faults (term growth)
                agentkill     kill -9 the leader's agent, restart it
                daemonkill:D  kill -9 the leader's daemon, restart it D s later
                majoritykill:D  kill -9 the daemons of the leader and of another
                              agent (a majority of three), restart both D s later;
                              time from the restart to the next command
                brokerkill:D  kill -9 the first broker's daemon, restart it D s
                              later; time until another node reaches it
                handoff       SIGTERM the leader's agent (it resigns), restart it
                wait:S        sleep S seconds
  -r          instead of agents: the minimal flood reproduction (two daemons,
              one publish from one to the other, no subscriber)
  -e FILE     electhost binary (default: go build ./cmd/electhost)
  -w DIR      work directory (default: a new /tmp/pilot-real.XXXXXX; kept)
  -p PORT     registry port (beacon PORT+1; default 19200)
  -t DUR      pass -time-wait DUR to every daemon
  -I          do not persist the daemons' identities (a restarted daemon
              then comes back as a new node)
  -B          start the daemons without a beacon (-beacon=): no relay, which
              on loopback or a LAN without NAT is not needed, and whose use
              after a hard restart makes peers refuse the restarted node's
              key (docs/pilotctl.md)
  -H DUR      --heartbeat (default 500ms); -E DUR --election-timeout (2s)
  -x SECS     give up waiting for a leader/recovery after SECS (default 90)
  -N NICE     niceness of every process started (default 10: the machine
              may be shared, and a flooding daemon takes all it can get)
EOF
}

LAYOUT=own N=3 STEPS="idle:30,agentkill,daemonkill:5,handoff" REPRO=0
ELECTHOST="" WORK="" PORT=19200 TIMEWAIT="" NOIDENT=0 HB=500ms ET=2s LIMIT=90 NICE=10 NOBEACON=0
while getopts "l:n:s:re:w:p:t:IBH:E:x:N:h" o; do
	case $o in
	l) LAYOUT=$OPTARG ;; n) N=$OPTARG ;; s) STEPS=$OPTARG ;; r) REPRO=1 ;;
	e) ELECTHOST=$OPTARG ;; w) WORK=$OPTARG ;; p) PORT=$OPTARG ;;
	t) TIMEWAIT=$OPTARG ;; I) NOIDENT=1 ;; B) NOBEACON=1 ;; H) HB=$OPTARG ;; E) ET=$OPTARG ;;
	x) LIMIT=$OPTARG ;; N) NICE=$OPTARG ;; h) usage; exit 0 ;; *) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { usage >&2; exit 2; }
BIN=$(cd "$1" && pwd)
for b in registry beacon daemon pilotctl; do
	[ -x "$BIN/$b" ] || { echo "pilot-real: $BIN/$b missing or not executable" >&2; exit 2; }
done
for tool in jq curl awk; do
	command -v $tool >/dev/null || { echo "pilot-real: needs $tool" >&2; exit 2; }
done
case $LAYOUT in own | one | three) ;; *) echo "pilot-real: -l own, one or three" >&2; exit 2 ;; esac

WORK=${WORK:-$(mktemp -d /tmp/pilot-real.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
REG=127.0.0.1:$PORT
BEA=127.0.0.1:$((PORT + 1))
export PILOT_REGISTRY=$REG
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# One wazero compilation cache for every agent and run: compiling the module
# takes seconds to tens of seconds on a loaded machine.
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/electcore/wazero
HZ=$(getconf CLK_TCK)

log() { printf '%s %s\n' "$(date +%T.%3N)" "$*" >&2; }
now() { date +%s.%3N; }
result() { printf 'RESULT %s\n' "$*" | tee -a "$WORK/results.txt"; }

# Every process this script starts is in $WORK/pids; all are killed on exit.
: >"$WORK/pids"
cleanup() {
	local p
	# Agents first, politely, so that their commands log their stop.
	for p in $(cat "$WORK"/*.agent.pid 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
	sleep 1
	for p in $(cat "$WORK/pids"); do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
track() { echo "$1" >>"$WORK/pids"; }

pilotctl() { # pilotctl NODE ARGS...
	local n=$1
	shift
	HOME=$WORK/$n PILOT_SOCKET=$WORK/$n.sock "$BIN/pilotctl" --json "$@"
}

start_infra() {
	nice -n "$NICE" "$BIN/registry" -addr "$REG" -beacon "$BEA" >>"$WORK/registry.log" 2>&1 &
	track $!
	nice -n "$NICE" "$BIN/beacon" -addr "$BEA" >>"$WORK/beacon.log" 2>&1 &
	track $!
	local i
	for i in $(seq 50); do
		(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "pilot-real: the registry did not listen on $REG" >&2
	exit 1
}

start_daemon() { # start_daemon NODE
	local n=$1 id=()
	mkdir -p "$WORK/$n"
	rm -f "$WORK/$n.sock"
	[ "$NOIDENT" = 1 ] || id=(-identity "$WORK/$n/identity.json")
	local tw=()
	[ -z "$TIMEWAIT" ] || tw=(-time-wait "$TIMEWAIT")
	local bea=(-beacon "$BEA")
	[ "$NOBEACON" = 0 ] || bea=(-beacon=)
	HOME=$WORK/$n nice -n "$NICE" "$BIN/daemon" -registry "$REG" "${bea[@]}" \
		-listen 127.0.0.1:0 -socket "$WORK/$n.sock" -public -hostname "$n" \
		"${id[@]}" "${tw[@]}" >>"$WORK/$n.daemon.log" 2>&1 &
	echo $! >"$WORK/$n.daemon.pid"
	track $!
	local i
	for i in $(seq 100); do
		pilotctl "$n" info >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "pilot-real: daemon $n did not answer pilotctl info" >&2
	exit 1
}

# Packet and CPU samples of every daemon: "node pid packets cputicks".
sample() {
	local n pid pk cpu
	for n in $DAEMONS; do
		pid=$(cat "$WORK/$n.daemon.pid")
		pk=$(pilotctl "$n" info 2>/dev/null | jq -r '.data.pkts_sent + .data.pkts_recv' 2>/dev/null || echo -)
		cpu=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo -)
		echo "$n $pid ${pk:--} $cpu"
	done
}

# rates STEP T0 T1 BEFORE AFTER: per daemon packets/s and CPU % between
# two samples (a daemon restarted in between is measured from its restart).
rates() {
	local step=$1 t0=$2 t1=$3 before=$4 after=$5 n pid pk cpu pid0 pk0 cpu0 line
	while read -r n pid pk cpu; do
		line=$(grep "^$n " <<<"$before" || true)
		read -r _ pid0 pk0 cpu0 <<<"$line"
		if [ "$pid" != "$pid0" ]; then pk0=0 cpu0=0; fi
		if [ "$pk" = - ] || [ "$cpu" = - ]; then
			result "$step daemon=$n packets_per_s=? cpu_pct=? (not running)"
			continue
		fi
		awk -v s="$step" -v n="$n" -v a="$pk0" -v b="$pk" -v c0="$cpu0" -v c1="$cpu" -v t0="$t0" -v t1="$t1" -v hz="$HZ" \
			'BEGIN { d = t1 - t0; printf "%s daemon=%s packets_per_s=%.0f cpu_pct=%.0f\n", s, n, (b - a) / d, 100 * (c1 - c0) / hz / d }' |
			while read -r l; do result "$l"; done
	done <<<"$after"
}

# --- the minimal reproduction -------------------------------------------
if [ "$REPRO" = 1 ]; then
	DAEMONS="r1 r2"
	start_infra
	start_daemon r1
	start_daemon r2
	log "two daemons up; 3 s quiet"
	t0=$(now) s0=$(sample)
	sleep 3
	t1=$(now) s1=$(sample)
	rates "repro-before" "$t0" "$t1" "$s0" "$s1"
	pilotctl r1 publish r2 flood-test --data=one >/dev/null
	log "one publish r1 -> r2 (no subscriber); 5 s"
	sleep 1
	t0=$(now) s0=$(sample)
	sleep 5
	t1=$(now) s1=$(sample)
	rates "repro-after-one-publish" "$t0" "$t1" "$s0" "$s1"
	grep -c 'nonce replay' "$WORK"/r*.daemon.log | sed 's/^/nonce replay lines: /' >&2 || true
	log "work directory: $WORK"
	exit 0
fi

# --- agents --------------------------------------------------------------
AGENTS=$(seq -f 'a%g' 1 "$N" | tr '\n' ' ')
MEMBERS=$(tr ' ' ',' <<<"$AGENTS" | sed 's/,$//')
case $LAYOUT in
own) BROKERS=$MEMBERS DAEMONS=$AGENTS ;;
one) BROKERS=b1 DAEMONS="$AGENTS b1" ;;
three) BROKERS=b1,b2,b3 DAEMONS="$AGENTS b1 b2 b3" ;;
esac

if [ -z "$ELECTHOST" ]; then
	log "building electhost"
	(cd "$ROOT" && go build -o "$WORK/electhost" ./cmd/electhost)
	ELECTHOST=$WORK/electhost
fi

# The leader-only command logs its start and stop with the agent's id and
# term; overlaps between agents are read from this log at the end.
CMDLOG=$WORK/commands.log
: >"$CMDLOG"
cat >"$WORK/leader-cmd.sh" <<'EOF'
#!/usr/bin/env bash
echo "start $ELECT_ID $ELECT_TERM $EPOCHREALTIME $$" >>"$1"
trap 'echo "stop $ELECT_ID $ELECT_TERM $EPOCHREALTIME $$" >>"$1"; exit 0' TERM INT
sleep 1000000 &
wait $!
EOF
chmod +x "$WORK/leader-cmd.sh"

start_agent() { # start_agent ID
	local id=$1
	mkdir -p "$WORK/$id"
	HOME=$WORK/$id PILOT_SOCKET=$WORK/$id.sock nice -n "$NICE" "$ELECTHOST" run --group pilotreal --id "$id" \
		--members "$MEMBERS" --transport pilot --broker "$BROKERS" --pilotctl "$BIN/pilotctl" \
		--state-dir "$WORK/$id/state" --cache-dir "$CACHE" --http 127.0.0.1:0 --json \
		--heartbeat "$HB" --election-timeout "$ET" \
		-- "$WORK/leader-cmd.sh" "$CMDLOG" >>"$WORK/$id.agent.log" 2>&1 &
	echo $! >"$WORK/$id.agent.pid"
	track $!
}

status() { # status ID: the agent's /status JSON ("" when it does not answer)
	local addr
	addr=$(grep -h '"msg":"http listening"' "$WORK/$1.agent.log" 2>/dev/null | tail -1 | jq -r .addr 2>/dev/null || true)
	[ -n "$addr" ] || return 0
	curl -s --max-time 2 "http://$addr/status" || true
}

maxterm() {
	local id t m=0
	for id in $AGENTS; do
		t=$(status "$id" | jq -r '.term // 0' 2>/dev/null || echo 0)
		[ "${t:-0}" -gt "$m" ] && m=$t
	done
	echo "$m"
}

# The agent whose command runs now (a start without a stop), if any.
current_leader() {
	awk '$1 == "start" { run[$2 " " $3] = $2 }
	     $1 == "stop"  { delete run[$2 " " $3] }
	     END { for (k in run) { print run[k]; exit } }' "$CMDLOG"
}

# wait_leader: current_leader, waiting up to LIMIT seconds for one.
wait_leader() {
	local deadline l
	deadline=$(($(date +%s) + LIMIT))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		l=$(current_leader)
		[ -z "$l" ] || { echo "$l"; return 0; }
		sleep 0.2
	done
}

# wait_start NOT AFTER: the first command start by another agent than NOT
# after time AFTER, as "id term ts"; empty after LIMIT seconds.
wait_start() {
	local not=$1 after=$2 deadline line
	deadline=$(($(date +%s) + LIMIT))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		line=$(awk -v not="$not" -v after="$after" '$1 == "start" && $2 != not && $4 > after { print $2, $3, $4; exit }' "$CMDLOG")
		if [ -n "$line" ]; then
			echo "$line"
			return 0
		fi
		sleep 0.1
	done
}

# wait_hears ID LEADER AFTER: seconds after AFTER until agent ID's /status
# is ready with LEADER; empty after LIMIT seconds.
wait_hears() {
	local id=$1 leader=$2 after=$3 deadline s
	deadline=$(($(date +%s) + LIMIT))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		s=$(status "$id")
		if [ -n "$s" ] && [ "$(jq -r "(.ready == true) and (.leader == \"$leader\")" <<<"$s" 2>/dev/null)" = true ]; then
			awk -v a="$after" -v b="$(now)" 'BEGIN { printf "%.2f\n", b - a }'
			return 0
		fi
		sleep 0.2
	done
}

sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }

# led_pct T0 T1: the share of [T0, T1] during which some agent's
# leader-only command ran (a group without one has no working leader).
led_pct() {
	awk -v t0="$1" -v t1="$2" '
		$1 == "start" { s[$2 " " $3] = $4 }
		$1 == "stop"  { e[$2 " " $3] = $4 }
		END {
			n = 0
			for (k in s) { a = s[k]; b = (k in e) ? e[k] : t1
				if (a < t0) a = t0; if (b > t1) b = t1
				if (b > a) { n++; lo[n] = a; hi[n] = b } }
			# union of the intervals: sort by start (n is small)
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (lo[j] < lo[i]) {
				x = lo[i]; lo[i] = lo[j]; lo[j] = x; x = hi[i]; hi[i] = hi[j]; hi[j] = x }
			tot = 0; end = t0
			for (i = 1; i <= n; i++) { a = lo[i] > end ? lo[i] : end
				if (hi[i] > a) { tot += hi[i] - a; end = hi[i] } }
			printf "%.0f", 100 * tot / (t1 - t0)
		}' "$CMDLOG"
}

# lease_losses T0: leaderships ended "lease expired" since T0, all agents.
lease_losses() {
	jq -r --argjson t0 "$1" 'select(.msg == "stopped leading" and ((.reason // "") | test("lease expired")))
		| .time | sub("\\.[0-9]+Z$"; "Z") | fromdate | select(. >= ($t0 | floor))' "$WORK"/a*.agent.log 2>/dev/null | wc -l
}

count_logs() { # count_logs SINCE_LINE_FILE: daemon log lines of interest since the marks
	local n what c
	for what in "nonce replay" "pubkey mismatch" "but no key" "max retransmits"; do
		c=0
		for n in $DAEMONS; do
			c=$((c + $(tail -n +"$(($(grep -h "^$n " "$1" | cut -d' ' -f2) + 1))" "$WORK/$n.daemon.log" | grep -c "$what" || true)))
		done
		printf '%s=%s ' "${what// /_}" "$c"
	done
}
mark_logs() { # mark_logs FILE: remember every daemon log's length
	local n
	for n in $DAEMONS; do echo "$n $(wc -l <"$WORK/$n.daemon.log")"; done >"$1"
}

log "work directory $WORK; layout $LAYOUT (brokers $BROKERS); daemons: $DAEMONS"
result "setup layout=$LAYOUT brokers=$BROKERS agents=$N heartbeat=$HB election_timeout=$ET nice=$NICE load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /) pilot_bin=$BIN"
start_infra
for n in $DAEMONS; do start_daemon "$n"; done
t0=$(now) s0=$(sample)
for id in $AGENTS; do start_agent "$id"; done
# The first election is timed from when the last agent is up (listening).
for id in $AGENTS; do
	for i in $(seq 1200); do
		grep -q '"msg":"http listening"' "$WORK/$id.agent.log" 2>/dev/null && break
		kill -0 "$(cat "$WORK/$id.agent.pid")" 2>/dev/null || { echo "pilot-real: agent $id exited:" >&2; tail -3 "$WORK/$id.agent.log" >&2; exit 1; }
		sleep 0.1
	done
done
tup=$(now)
first=$(wait_start "" "$t0")
if [ -n "$first" ]; then
	result "first-election leader=$(cut -d' ' -f1 <<<"$first") seconds_after_agents_up=$(sub "$(cut -d' ' -f3 <<<"$first")" "$tup")"
	sleep 2
else
	result "first-election none within ${LIMIT}s"
fi
t1=$(now) s1=$(sample)
rates "start" "$t0" "$t1" "$s0" "$s1"

IFS=, read -r -a steps <<<"$STEPS"
for step in "${steps[@]}"; do
	kind=${step%%:*} arg=${step#*:}
	[ "$arg" = "$step" ] && arg=""
	case $kind in idle | wait | brokerkill) leader=$(current_leader) ;; *) leader=$(wait_leader) ;; esac
	log "step $step (leader ${leader:-none}; load $(cut -d' ' -f1-3 /proc/loadavg))"
	mark_logs "$WORK/marks"
	t0=$(now) s0=$(sample) term0=$(maxterm)
	case $kind in
	idle | wait)
		sleep "${arg:-30}"
		;;
	agentkill)
		[ -n "$leader" ] || { result "agentkill no leader to kill"; continue; }
		tk=$(now)
		kill -9 "$(cat "$WORK/$leader.agent.pid")"
		next=$(wait_start "$leader" "$tk")
		if [ -n "$next" ]; then
			result "agentkill killed=$leader new=$(cut -d' ' -f1 <<<"$next") failover_s=$(sub "$(cut -d' ' -f3 <<<"$next")" "$tk")"
		else
			result "agentkill killed=$leader new=none within ${LIMIT}s"
		fi
		start_agent "$leader"
		sleep 3
		;;
	daemonkill)
		[ -n "$leader" ] || { result "daemonkill no leader"; continue; }
		tk=$(now)
		kill -9 "$(cat "$WORK/$leader.daemon.pid")"
		sleep "${arg:-5}"
		tr=$(now)
		start_daemon "$leader"
		log "daemon $leader restarted $(sub "$tr" "$tk") s after the kill"
		next=$(wait_start "$leader" "$tk")
		if [ -n "$next" ]; then
			nl=$(cut -d' ' -f1 <<<"$next")
			result "daemonkill killed=$leader new=$nl failover_s=$(sub "$(cut -d' ' -f3 <<<"$next")" "$tk") down_s=${arg:-5}"
			cur=$(current_leader)
			back=$(wait_hears "$leader" "${cur:-$nl}" "$tr")
			result "daemonkill restarted=$leader hears_leader_after_restart_s=${back:-none within ${LIMIT}s}"
		else
			result "daemonkill killed=$leader new=none within ${LIMIT}s down_s=${arg:-5}"
		fi
		;;
	majoritykill)
		[ -n "$leader" ] || { result "majoritykill no leader"; continue; }
		other=$(for a in $AGENTS; do [ "$a" != "$leader" ] && echo "$a" && break; done)
		tk=$(now)
		kill -9 "$(cat "$WORK/$leader.daemon.pid")" "$(cat "$WORK/$other.daemon.pid")"
		sleep "${arg:-5}"
		tr=$(now)
		start_daemon "$leader"
		start_daemon "$other"
		log "daemons $leader and $other restarted $(sub "$tr" "$tk") s after the kill"
		next=$(wait_start "" "$tr")
		if [ -n "$next" ]; then
			result "majoritykill killed=$leader,$other down_s=${arg:-5} new=$(cut -d' ' -f1 <<<"$next") leaderless_s=$(sub "$(cut -d' ' -f3 <<<"$next")" "$tk") command_after_restart_s=$(sub "$(cut -d' ' -f3 <<<"$next")" "$tr")"
		else
			result "majoritykill killed=$leader,$other down_s=${arg:-5} new=none within ${LIMIT}s of the restart"
		fi
		sleep 3
		;;
	brokerkill)
		# kill -9 the first broker node's daemon (b1; a1 in the own layout),
		# restart it, and time until another node's publish reaches it again.
		bn=${BROKERS%%,*}
		from=$(for a in $AGENTS; do [ "$a" != "$bn" ] && echo "$a" && break; done)
		tk=$(now)
		kill -9 "$(cat "$WORK/$bn.daemon.pid")"
		sleep "${arg:-5}"
		tr=$(now)
		start_daemon "$bn"
		back=""
		deadline=$(($(date +%s) + LIMIT))
		while [ "$(date +%s)" -lt "$deadline" ]; do
			if timeout 3 env HOME="$WORK/$from" PILOT_SOCKET="$WORK/$from.sock" "$BIN/pilotctl" --json publish "$bn" probe --data=probe >/dev/null 2>&1; then
				back=$(sub "$(now)" "$tr")
				break
			fi
			sleep 1
		done
		result "brokerkill broker=$bn down_s=${arg:-5} publish_from=$from reaches_it_after_restart_s=${back:-none within ${LIMIT}s}"
		;;
	handoff)
		[ -n "$leader" ] || { result "handoff no leader"; continue; }
		tk=$(now)
		kill -TERM "$(cat "$WORK/$leader.agent.pid")"
		next=$(wait_start "$leader" "$tk")
		if [ -n "$next" ]; then
			nl=$(cut -d' ' -f1 <<<"$next")
			ts=$(cut -d' ' -f3 <<<"$next")
			stop=$(awk -v id="$leader" -v after="$tk" '$1 == "stop" && $2 == id && $4 >= after { print $4; exit }' "$CMDLOG")
			# When the successor first logged itself leader.
			known=$(jq -r --arg l "$nl" 'select(.msg == "leader" and .leader == $l) | .time' "$WORK/$nl.agent.log" 2>/dev/null | tail -1)
			kts=""
			[ -z "$known" ] || kts=$(date -d "$known" +%s.%3N)
			result "handoff from=$leader to=$nl stop_to_start_s=$(sub "$ts" "${stop:-$tk}") sigterm_to_successor_known_s=$(sub "${kts:-$ts}" "$tk") successor_known_to_start_s=$(sub "$ts" "${kts:-$ts}")"
		else
			result "handoff from=$leader new=none within ${LIMIT}s"
		fi
		# The resigned agent exits; bring it back.
		for i in $(seq 50); do kill -0 "$(cat "$WORK/$leader.agent.pid")" 2>/dev/null || break; sleep 0.1; done
		start_agent "$leader"
		sleep 3
		;;
	*)
		echo "pilot-real: unknown step $step" >&2
		exit 2
		;;
	esac
	t1=$(now) s1=$(sample) term1=$(maxterm)
	starts=$(awk -v a="$t0" '$1 == "start" && $4 > a' "$CMDLOG" | wc -l)
	result "$step seconds=$(sub "$t1" "$t0") load=$(cut -d' ' -f1 /proc/loadavg) term=$term0->$term1 command_starts=$starts led_pct=$(led_pct "$t0" "$t1") lease_losses=$(lease_losses "$t0") $(count_logs "$WORK/marks")"
	rates "$step" "$t0" "$t1" "$s0" "$s1"
done

# Stop the agents (their commands log their stop), then check overlaps: two
# agents' commands running at the same time.
for id in $AGENTS; do kill -TERM "$(cat "$WORK/$id.agent.pid")" 2>/dev/null || true; done
for id in $AGENTS; do
	for i in $(seq 100); do kill -0 "$(cat "$WORK/$id.agent.pid")" 2>/dev/null || break; sleep 0.1; done
done
end=$(now)
# A command killed after the grace period logs no stop of its own; its
# agent's "leader-only command stopped" (the process reaped) ends it then.
jq -r 'select(.msg == "leader-only command stopped") | "\(.pid) \(.time)"' "$WORK"/a*.agent.log 2>/dev/null |
	while read -r pid t; do echo "reaped $pid $(date -d "$t" +%s.%6N)"; done >"$WORK/reaped.txt"
echo "reaped - 0" >>"$WORK/reaped.txt" # never empty: awk tells the files apart by it
awk -v end="$end" '
	FNR == NR { if (!($2 in r) || $3 < r[$2]) r[$2] = $3; next }
	$1 == "start" { k = $2 " " $3; s[k] = $4; id[k] = $2; pid[k] = $5; order[++n] = k }
	$1 == "stop"  { e[$2 " " $3] = $4 }
	END {
		over = 0
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
			a = order[i]; b = order[j]
			if (id[a] == id[b]) continue
			ea = (a in e) ? e[a] : end; eb = (b in e) ? e[b] : end
			if (pid[a] in r && r[pid[a]] < ea) ea = r[pid[a]]
			if (pid[b] in r && r[pid[b]] < eb) eb = r[pid[b]]
			if (s[a] < eb && s[b] < ea) { over++; printf "OVERLAP %s [%s,%s] and %s [%s,%s]\n", a, s[a], ea, b, s[b], eb }
		}
		printf "RESULT overlaps=%d commands=%d\n", over, n
	}' "$WORK/reaped.txt" "$CMDLOG" | tee -a "$WORK/results.txt"
log "work directory: $WORK (logs, commands.log, results.txt)"
