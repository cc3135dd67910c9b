// Command benchscale measures electcore with many groups per agent: N agent
// processes (the Go host, on the wasm module or the native core) joining G
// quorum groups at the default timings over `electhost broker`'s embedded
// NATS server, all on this machine. `make bench-scale` runs it; it is not
// part of `make test`.
//
//	go run ./internal/cmd/benchscale [-agents 3] [-groups 100,1000] [-cores wasm,native]
//	        [-priority balanced|cksum] [-burn N] [-json]
//
// The agents join with core.Config.BalancedPriority (-priority cksum: the
// single-group default, under which one agent leads every group). -burn N
// runs N busy loops beside them: a CPU saturated by someone else.
//
// For each (G, core) it starts a broker and the agents, and reports:
//
//   - led: time from starting the agents until every group has a leader
//     known by every agent (the last leader each agent's OnNewLeader named
//     is the same, and its probe of the group's Status, every 250 ms, has
//     not found it lost since);
//   - steady CPU of each agent and of the broker (% of one core) over a
//     window after a settling pause (the probes paused), the agents' RSS,
//     their publishes per second (an envelope counts once) and the
//     payloads they handed their cores, the batches each core stepped per
//     second (a step costs the host far more than a payload), and the new
//     leaders reported in
//     the window (0 when the groups are settled), and the campaigns the
//     agents started and the new terms led, per minute, in the window (an
//     election storm shows here);
//   - leaders per agent;
//   - after kill -9 of the agent leading the most groups, for each group it
//     led, the time until the survivors agree on a new leader (p50, p99,
//     max), the campaigns the survivors started meanwhile, and the leaders
//     per agent afterwards.
//
// Results go to stdout (a text table, or JSON with -json); progress to
// stderr. The machine's load average is part of the result: the figures
// mean little without it. Run it niced on a shared machine.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "burn" {
		burn()
	}
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		if err := runAgent(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "benchscale agent:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchscale:", err)
		os.Exit(1)
	}
}

type options struct {
	agents          int
	groups          []int
	cores           []string
	electhost       string
	settle, window  time.Duration
	convergeTimeout time.Duration
	failoverTimeout time.Duration
	disk            bool
	json            bool
	verbose         bool
	cpuProfile      string
	balanced        bool
	burn            int
	callTimeout     time.Duration
	memoryPages     uint
}

func run(args []string) error {
	fs := flag.NewFlagSet("benchscale", flag.ContinueOnError)
	var o options
	var groups, cores string
	fs.IntVar(&o.agents, "agents", 3, "agent processes (each a member of every group)")
	fs.StringVar(&groups, "groups", "100,1000", "comma-separated group counts, one run each")
	fs.StringVar(&cores, "cores", "wasm,native", "comma-separated: wasm (the module under wazero) and/or native (host.NewNativeAgent)")
	fs.StringVar(&o.electhost, "electhost", "bin/electhost", "the electhost binary whose broker subcommand serves NATS")
	fs.DurationVar(&o.settle, "settle", 30*time.Second, "pause after every group is led before measuring (the agents' first heap growth and collections fall in it)")
	fs.DurationVar(&o.window, "window", 10*time.Second, "steady-state measuring window")
	fs.DurationVar(&o.convergeTimeout, "converge-timeout", 120*time.Second, "give up waiting for every group to be led")
	fs.DurationVar(&o.failoverTimeout, "failover-timeout", 60*time.Second, "give up waiting for the killed agent's groups to be led again")
	fs.BoolVar(&o.disk, "disk", false, "persist the agents' state in files (statestore) instead of memory")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON")
	fs.DurationVar(&o.callTimeout, "call-timeout", 0, "wasm agents: the deadline of one call into the module (0: the library's, 1 s)")
	fs.UintVar(&o.memoryPages, "memory-pages", 0, "wasm agents: the least bound of the module's linear memory in 64 KiB pages; with more groups it is 16 MiB + 16 KiB a group (0: the library's, 1024)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "directory: each agent writes a CPU profile of the steady window to <dir>/<groups>-<core>-<id>.pprof")
	var prio string
	fs.StringVar(&prio, "priority", "balanced", "default priority of the agents: balanced (core.Config.BalancedPriority, the multi-group default) or cksum (the single-group default: one agent leads every group)")
	fs.IntVar(&o.burn, "burn", 0, "busy-loop processes to run, at the benchmark's own niceness, from before the agents start until the run ends: a CPU saturated by someone else (two per core saturate it)")
	fs.BoolVar(&o.verbose, "v", false, "agents describe their groups on stderr every 5 s; say which leaders each agent knows if the groups do not settle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch prio {
	case "balanced", "cksum":
		o.balanced = prio == "balanced"
	default:
		return fmt.Errorf("-priority %q: want balanced or cksum", prio)
	}
	if o.burn < 0 || o.burn > 64 {
		return fmt.Errorf("-burn %d: want 0..64", o.burn)
	}
	for _, g := range strings.Split(groups, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(g))
		if err != nil || n < 1 {
			return fmt.Errorf("-groups %q: want positive integers", groups)
		}
		o.groups = append(o.groups, n)
	}
	for _, c := range strings.Split(cores, ",") {
		if c = strings.TrimSpace(c); c != "wasm" && c != "native" {
			return fmt.Errorf("-cores %q: want wasm and/or native", cores)
		}
		o.cores = append(o.cores, c)
	}
	if o.agents < 2 {
		return errors.New("-agents: at least 2 (one is killed)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	rep := report{CPUs: runtime.NumCPU(), Agents: o.agents, SettleS: o.settle.Seconds(), WindowS: o.window.Seconds(), Priority: prio, Burn: o.burn}
	rep.LoadBefore = loadavg()
	for _, g := range o.groups {
		for _, c := range o.cores {
			logf("== %d groups, %s, %d agents (load %s)", g, c, o.agents, loadavg())
			r, err := runOne(self, o, g, c)
			if err != nil {
				return fmt.Errorf("%d groups, %s: %w", g, c, err)
			}
			rep.Runs = append(rep.Runs, r)
		}
	}
	rep.LoadAfter = loadavg()
	if o.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.table(os.Stdout)
	return nil
}

type report struct {
	CPUs       int      `json:"cpus"`
	Agents     int      `json:"agents"`
	LoadBefore string   `json:"load_before"` // /proc/loadavg: 1, 5, 15 minutes
	LoadAfter  string   `json:"load_after"`
	Priority   string   `json:"priority"` // balanced or cksum
	Burn       int      `json:"burn"`     // busy-loop processes beside the agents
	SettleS    float64  `json:"settle_s"`
	WindowS    float64  `json:"window_s"`
	Runs       []result `json:"runs"`
}

type result struct {
	Groups int    `json:"groups"`
	Core   string `json:"core"`
	Load   string `json:"load"` // at the start of the run
	// JoinedS: start of the agents → every agent joined every group.
	JoinedS float64 `json:"joined_s"`
	// LedS: start of the agents → every group has a leader every agent
	// knows (-1: not within the timeout).
	LedS float64 `json:"led_s"`
	// Steady state, over the window.
	AgentCPU    []float64 `json:"agent_cpu_pct"` // % of one core, per agent
	BrokerCPU   float64   `json:"broker_cpu_pct"`
	AgentRSSMiB []float64 `json:"agent_rss_mib"`
	BrokerRSS   float64   `json:"broker_rss_mib"`
	MsgsInPerS  float64   `json:"broker_msgs_in_per_s"`  // the agents' publishes (an envelope counts once)
	MsgsOutPerS float64   `json:"broker_msgs_out_per_s"` // payloads the agents handed their cores
	Dropped     uint64    `json:"dropped"`               // received messages the agents dropped (queue full)
	StepsPerS   float64   `json:"steps_per_s"`           // batches each agent's core stepped, per second (mean)
	Leaders     []int     `json:"leaders_per_agent"`
	// LeaderReports counts the agents' OnNewLeader calls in the window: 0
	// when every group is settled; churning groups report new leaders.
	LeaderReports int `json:"leader_reports_in_window"`
	// CampaignsPerMin: campaigns (pre-votes included) the agents' groups
	// started in the window, per minute: 0 when settled, high in a storm.
	// ElectedPerMin: new terms with a leader reported in the window (each
	// group's term counted once however many agents report it), per minute.
	CampaignsPerMin float64 `json:"campaigns_per_min"`
	ElectedPerMin   float64 `json:"elected_per_min"`
	// StartCampaigns: campaigns from the start until the window (the cost
	// of the first elections).
	StartCampaigns uint64 `json:"start_campaigns"`
	// Failover after kill -9 of Killed (the agent leading the most groups).
	Killed       string  `json:"killed"`
	FailoverN    int     `json:"failover_groups"` // groups it led
	FailoverDone int     `json:"failover_releds"` // of those, led again within the timeout
	FailoverP50S float64 `json:"failover_p50_s"`  // kill → survivors agree on a new leader
	FailoverP99S float64 `json:"failover_p99_s"`  //
	FailoverMaxS float64 `json:"failover_max_s"`  // -1 if some group was not led again
	LeadersAfter []int   `json:"leaders_after"`   // per agent (the killed one 0)
	// FailoverCampaigns: campaigns the survivors started from the end of
	// the window until every group the killed agent led was led again.
	FailoverCampaigns uint64    `json:"failover_campaigns"`
	failoverTimes     []float64 // seconds
}

// agentProc is one agent process and what it reported.
type agentProc struct {
	id      string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	leader  []string // by group: the leader it last reported
	ready   int64    // ms, 0 until every group is joined
	in, out uint64   // its counters at ctrAt
	dropped uint64
	steps   uint64 // batches its core stepped
	ctrAt   int64
	dead    bool
	// campaigns: the last E line's count, and when.
	campaigns   uint64
	campaignsAt int64
}

// event is one line from an agent.
type event struct {
	agent int
	kind  string
	ms    int64
	group int
	who   string
	a, b  uint64
	c, d  uint64
	term  uint64
	err   error
}

func runOne(self string, o options, groups int, coreName string) (res result, err error) {
	res = result{Groups: groups, Core: coreName, Load: loadavg()}
	tmp, err := os.MkdirTemp("", "benchscale-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)

	// The broker: electhost's own, in its own process, so its CPU is its own.
	broker := exec.Command(o.electhost, "broker", "--listen", "127.0.0.1:0")
	bout, err := broker.StdoutPipe()
	if err != nil {
		return res, err
	}
	broker.Stderr = io.Discard
	if err := broker.Start(); err != nil {
		return res, fmt.Errorf("%s broker: %w (make build)", o.electhost, err)
	}
	defer func() { broker.Process.Signal(syscall.SIGTERM); broker.Wait() }()
	url, err := bufio.NewReader(bout).ReadString('\n')
	if err != nil {
		return res, fmt.Errorf("broker: no URL: %w", err)
	}
	url = strings.TrimSpace(url)

	for range o.burn {
		b := exec.Command(self, "burn")
		if err := b.Start(); err != nil {
			return res, err
		}
		defer func() { b.Process.Kill(); b.Wait() }()
	}

	ids := make([]string, o.agents)
	for i := range ids {
		ids[i] = "a" + strconv.Itoa(i+1)
	}
	events := make(chan event, 4096)
	quit := make(chan struct{}) // closed when done: readers discard the rest
	agents := make([]*agentProc, o.agents)
	defer func() {
		for _, a := range agents {
			if a != nil && !a.dead {
				a.stdin.Close()
				done := make(chan struct{})
				go func() { a.cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					a.cmd.Process.Kill()
					<-done
				}
			}
		}
	}()
	defer close(quit) // (runs first: the agents' last lines are discarded)
	t0 := time.Now().UnixMilli()
	for i, id := range ids {
		args := []string{"agent", "-broker", url, "-id", id, "-members", strings.Join(ids, ","), "-groups", strconv.Itoa(groups)}
		if coreName == "native" {
			args = append(args, "-native")
		}
		if o.verbose {
			args = append(args, "-v")
		}
		if o.callTimeout > 0 && coreName == "wasm" {
			args = append(args, "-call-timeout", o.callTimeout.String())
		}
		if o.memoryPages > 0 && coreName == "wasm" {
			args = append(args, "-memory-pages", strconv.FormatUint(uint64(o.memoryPages), 10))
		}
		if o.cpuProfile != "" {
			args = append(args, "-cpuprofile", filepath.Join(o.cpuProfile, fmt.Sprintf("%d-%s-%s.pprof", groups, coreName, id)))
		}
		if o.balanced {
			args = append(args, "-balanced")
		}
		if o.disk {
			args = append(args, "-state-dir", filepath.Join(tmp, id))
		}
		cmd := exec.Command(self, args...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, err
		}
		a := &agentProc{id: id, cmd: cmd, stdin: stdin, leader: make([]string, groups)}
		agents[i] = a
		go readAgent(i, stdout, events, quit)
	}

	leaderReports := 0 // OnNewLeader calls seen
	// terms[g]: the highest term reported with a leader in group g;
	// elected counts the raises.
	terms := make([]uint64, groups)
	elected := 0
	// agreed[g]: the leader every live agent reports for g, or "".
	agreed := make([]string, groups)
	nAgreed := 0
	update := func(g int) {
		l := ""
		for _, a := range agents {
			if a.dead {
				continue
			}
			if a.leader[g] == "" || (l != "" && a.leader[g] != l) {
				l = ""
				break
			}
			l = a.leader[g]
		}
		if (agreed[g] != "") != (l != "") {
			if l != "" {
				nAgreed++
			} else {
				nAgreed--
			}
		}
		agreed[g] = l
	}
	apply := func(ev event) error {
		if ev.err != nil {
			return fmt.Errorf("agent %s: %w", ids[ev.agent], ev.err)
		}
		a := agents[ev.agent]
		switch ev.kind {
		case "ready":
			a.ready = ev.ms
		case "L":
			a.leader[ev.group] = ev.who
			update(ev.group)
			leaderReports++
			if ev.term > terms[ev.group] {
				terms[ev.group] = ev.term
				elected++
			}
		case "E":
			a.campaigns, a.campaignsAt = ev.a, ev.ms
		case "U":
			a.leader[ev.group] = ""
			update(ev.group)
		case "C":
			a.in, a.out, a.dropped, a.steps, a.ctrAt = ev.a, ev.b, ev.c, ev.d, ev.ms
		case "eof":
			if !a.dead {
				return fmt.Errorf("agent %s exited (its stderr above says why)", a.id)
			}
		}
		return nil
	}
	// wait applies events until cond holds (then returns the time of the
	// event that made it hold) or d passes.
	wait := func(d time.Duration, cond func() bool) (int64, bool, error) {
		deadline := time.After(d)
		for !cond() {
			select {
			case ev := <-events:
				if err := apply(ev); err != nil {
					return 0, false, err
				}
				if cond() {
					return ev.ms, true, nil
				}
			case <-deadline:
				return 0, false, nil
			}
		}
		return time.Now().UnixMilli(), true, nil
	}
	drain := func(d time.Duration) error {
		_, _, err := wait(d, func() bool { return false })
		return err
	}

	allReady := func() bool {
		for _, a := range agents {
			if a.ready == 0 {
				return false
			}
		}
		return true
	}
	at, ok, err := wait(o.convergeTimeout, func() bool { return allReady() && nAgreed == groups })
	if err != nil {
		return res, err
	}
	for _, a := range agents {
		res.JoinedS = max(res.JoinedS, float64(a.ready-t0)/1000)
	}
	if !ok {
		res.LedS = -1
		logf("   not every group led within %v (%d of %d)", o.convergeTimeout, nAgreed, groups)
		if o.verbose {
			for _, a := range agents {
				hist := map[string]int{}
				for _, l := range a.leader {
					hist[l]++
				}
				logf("   %s reports as leaders (\"\": none yet): %v", a.id, hist)
			}
		}
	} else {
		res.LedS = float64(at-t0) / 1000
		logf("   every group led and known after %.1f s", res.LedS)
	}

	// Steady state.
	if err := drain(o.settle); err != nil {
		return res, err
	}
	pids := make([]int, 0, len(agents)+1)
	for _, a := range agents {
		pids = append(pids, a.cmd.Process.Pid)
	}
	pids = append(pids, broker.Process.Pid)
	tell := func(cmd string) {
		for _, a := range agents {
			if !a.dead {
				io.WriteString(a.stdin, cmd+"\n")
			}
		}
	}
	// campaignCount waits for every live agent's count of campaigns
	// reported after the time given (tell makes them report) and sums
	// them.
	campaignCount := func(after int64) (uint64, error) {
		_, ok, err := wait(30*time.Second, func() bool {
			for _, a := range agents {
				if !a.dead && a.campaignsAt < after {
					return false
				}
			}
			return true
		})
		if !ok && err == nil {
			err = errors.New("agents did not report their campaigns within 30 s")
		}
		var n uint64
		for _, a := range agents {
			if !a.dead {
				n += a.campaigns
			}
		}
		return n, err
	}
	asked := time.Now().UnixMilli()
	tell("quiet") // the probes' Status calls are not part of the steady cost
	campaigns0, err := campaignCount(asked)
	if err != nil {
		return res, err
	}
	res.StartCampaigns = campaigns0
	cpu0 := cpuTicks(pids)
	w0 := time.Now()
	ctr0 := counters(agents)
	reports0, elected0 := leaderReports, elected
	if err := drain(o.window); err != nil {
		return res, err
	}
	cpu1 := cpuTicks(pids)
	asked = time.Now().UnixMilli()
	tell("probe")
	campaigns1, err := campaignCount(asked)
	if err != nil {
		return res, err
	}
	elapsed := time.Since(w0).Seconds()
	ctr1 := counters(agents)
	for i, p := range pids {
		pct := float64(cpu1[i]-cpu0[i]) / clockTicks / elapsed * 100
		rss := rssMiB(p)
		if i < len(agents) {
			res.AgentCPU = append(res.AgentCPU, round1(pct))
			res.AgentRSSMiB = append(res.AgentRSSMiB, round1(rss))
		} else {
			res.BrokerCPU, res.BrokerRSS = round1(pct), round1(rss)
		}
	}
	if dt := float64(ctr1.at-ctr0.at) / 1000; dt > 0 {
		res.MsgsInPerS = math.Round(float64(ctr1.out-ctr0.out) / dt)
		res.MsgsOutPerS = math.Round(float64(ctr1.in-ctr0.in) / dt)
		res.StepsPerS = math.Round(float64(ctr1.steps-ctr0.steps) / dt / float64(len(agents)))
	}
	res.Dropped = ctr1.dropped
	res.LeaderReports = leaderReports - reports0
	res.CampaignsPerMin = round1(float64(campaigns1-campaigns0) / elapsed * 60)
	res.ElectedPerMin = round1(float64(elected-elected0) / elapsed * 60)
	// Leaders lost during the window show at the next probe.
	if err := drain(time.Second); err != nil {
		return res, err
	}
	res.Leaders = leadersPerAgent(ids, agreed)
	logf("   steady: agents %v %% CPU, broker %.1f %%, %.0f steps/s per agent; leaders %v; %d new leaders reported in the window; %.1f campaigns and %.1f new terms led per minute (%d campaigns before)",
		res.AgentCPU, res.BrokerCPU, res.StepsPerS, res.Leaders, res.LeaderReports, res.CampaignsPerMin, res.ElectedPerMin, res.StartCampaigns)
	if res.LedS < 0 {
		// Unsettled groups cannot fail over in any measurable way.
		return res, nil
	}

	// Failover: kill -9 the agent leading the most groups.
	victim := 0
	for i, n := range res.Leaders {
		if n > res.Leaders[victim] {
			victim = i
		}
	}
	res.Killed = ids[victim]
	var led []int // the groups it led
	for g, l := range agreed {
		if l == ids[victim] {
			led = append(led, g)
		}
	}
	res.FailoverN = len(led)
	tk := time.Now().UnixMilli()
	if err := agents[victim].cmd.Process.Kill(); err != nil {
		return res, err
	}
	agents[victim].dead = true
	agents[victim].cmd.Wait()
	for g := range agreed {
		update(g) // without the victim; its groups still name it
	}
	reLed := make(map[int]float64, len(led))
	check := func(g int, ms int64) {
		if _, done := reLed[g]; !done && agreed[g] != "" && agreed[g] != ids[victim] {
			reLed[g] = float64(ms-tk) / 1000
		}
	}
	deadline := time.After(o.failoverTimeout)
	for len(reLed) < len(led) {
		select {
		case ev := <-events:
			if ev.agent == victim {
				continue
			}
			if err := apply(ev); err != nil {
				return res, err
			}
			if ev.kind == "L" && slices.Contains(led, ev.group) {
				check(ev.group, ev.ms)
			}
		case <-deadline:
			goto done
		}
	}
done:
	res.FailoverDone = len(reLed)
	for _, s := range reLed {
		res.failoverTimes = append(res.failoverTimes, s)
	}
	slices.Sort(res.failoverTimes)
	res.FailoverP50S, res.FailoverP99S, res.FailoverMaxS = -1, -1, -1
	if n := len(res.failoverTimes); n > 0 {
		res.FailoverP50S = round2(quantile(res.failoverTimes, 0.50))
		res.FailoverP99S = round2(quantile(res.failoverTimes, 0.99))
		if n == len(led) {
			res.FailoverMaxS = round2(res.failoverTimes[n-1])
		}
	}
	res.LeadersAfter = leadersPerAgent(ids, agreed)
	// The survivors' campaigns from the end of the window (their counts
	// then) until every group was led again: one per re-led group when
	// every first campaign wins.
	var before uint64
	for i, a := range agents {
		if i != victim {
			before += a.campaigns
		}
	}
	asked = time.Now().UnixMilli()
	tell("probe")
	after, err := campaignCount(asked)
	if err != nil {
		return res, err
	}
	res.FailoverCampaigns = after - before
	logf("   kill -9 %s (leading %d): re-led %d, p50 %.2f s, p99 %.2f s, max %.2f s; leaders after %v; %d campaigns",
		res.Killed, len(led), len(reLed), res.FailoverP50S, res.FailoverP99S, res.FailoverMaxS, res.LeadersAfter, res.FailoverCampaigns)
	return res, nil
}

// burn is a busy loop, until killed: a CPU taken by someone else.
func burn() {
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
	}
}

func readAgent(i int, r io.Reader, events chan<- event, quit <-chan struct{}) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		ev := event{agent: i, kind: f[0]}
		ev.ms, _ = strconv.ParseInt(f[1], 10, 64)
		switch {
		case f[0] == "L" && len(f) == 5:
			ev.group, _ = strconv.Atoi(f[2])
			ev.who = f[3]
			ev.term, _ = strconv.ParseUint(f[4], 10, 64)
		case f[0] == "E" && len(f) == 3:
			ev.a, _ = strconv.ParseUint(f[2], 10, 64)
		case f[0] == "C" && len(f) == 6:
			ev.a, _ = strconv.ParseUint(f[2], 10, 64)
			ev.b, _ = strconv.ParseUint(f[3], 10, 64)
			ev.c, _ = strconv.ParseUint(f[4], 10, 64)
			ev.d, _ = strconv.ParseUint(f[5], 10, 64)
		case f[0] == "U" && len(f) == 3:
			ev.group, _ = strconv.Atoi(f[2])
		case f[0] == "ready":
		default:
			continue
		}
		select {
		case events <- ev:
		case <-quit:
		}
	}
	select {
	case events <- event{agent: i, kind: "eof"}:
	case <-quit:
	}
}

type ctrSum struct {
	in, out, dropped, steps uint64
	at                      int64 // the latest counter line's time
}

func counters(agents []*agentProc) ctrSum {
	var s ctrSum
	for _, a := range agents {
		s.in += a.in
		s.out += a.out
		s.dropped += a.dropped
		s.steps += a.steps
		s.at = max(s.at, a.ctrAt)
	}
	return s
}

func leadersPerAgent(ids, agreed []string) []int {
	n := make([]int, len(ids))
	for _, l := range agreed {
		if i := slices.Index(ids, l); i >= 0 {
			n[i]++
		}
	}
	return n
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// cpuTicks returns utime+stime of each process (Linux /proc; 0 elsewhere).
func cpuTicks(pids []int) []uint64 {
	t := make([]uint64, len(pids))
	for i, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces), from state
		// (field 3): utime and stime are fields 14 and 15.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 12 {
			u, _ := strconv.ParseUint(f[11], 10, 64)
			k, _ := strconv.ParseUint(f[12], 10, 64)
			t[i] = u + k
		}
	}
	return t
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round2(v float64) float64 { return math.Round(v*100) / 100 }

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+format+"\n", a...)
}

// table prints the results in the layout of the scale issue's table.
func (r report) table(w io.Writer) {
	fmt.Fprintf(w, "%d agents on %d CPUs, %s priorities, %d busy loops; load average (1, 5, 15 min) %s before, %s after; settle %.0f s, window %.0f s\n\n",
		r.Agents, r.CPUs, r.Priority, r.Burn, r.LoadBefore, r.LoadAfter, r.SettleS, r.WindowS)
	fmt.Fprintln(w, "| G groups | load at start | all groups led, known by all | steady CPU per agent (one core = 100 %) | broker CPU | RSS per agent | publishes / payloads to the cores per s (all agents) | steps/s per agent | leaders per agent | new leaders reported in the window | campaigns / new terms led per minute in the window (before it) | kill -9 of the busiest agent → re-led p50 / p99 / max | leaders after |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, x := range r.Runs {
		led := fmt.Sprintf("not within the timeout (joined %.1f s)", x.JoinedS)
		if x.LedS >= 0 {
			led = fmt.Sprintf("%.1f s (joined %.1f s)", x.LedS, x.JoinedS)
		}
		fo := fmt.Sprintf("%.2f / %.2f / %.2f s (%d groups, %d campaigns)", x.FailoverP50S, x.FailoverP99S, x.FailoverMaxS, x.FailoverN, x.FailoverCampaigns)
		if x.LedS < 0 {
			fo = "not measured (unsettled)"
		} else if x.FailoverDone < x.FailoverN {
			fo = fmt.Sprintf("%d of %d groups re-led within the timeout", x.FailoverDone, x.FailoverN)
		}
		fmt.Fprintf(w, "| %d, %s | %s | %s | %s | %.1f %% | %s MiB | %.0f / %.0f | %.0f | %v | %d | %.1f / %.1f (%d) | %s | %v |\n",
			x.Groups, x.Core, x.Load, led, spread(x.AgentCPU, " %"), x.BrokerCPU, spread(x.AgentRSSMiB, ""),
			x.MsgsInPerS, x.MsgsOutPerS, x.StepsPerS, x.Leaders, x.LeaderReports, x.CampaignsPerMin, x.ElectedPerMin, x.StartCampaigns, fo, x.LeadersAfter)
	}
}

// spread prints the range of vs ("4.6–6.0").
func spread(vs []float64, unit string) string {
	if len(vs) == 0 {
		return "–"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if lo == hi {
		return fmt.Sprintf("%.1f%s", lo, unit)
	}
	return fmt.Sprintf("%.1f–%.1f%s", lo, hi, unit)
}
