package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/transport/natstest"
)

// cluster is a set of `electhost run` processes in one group.
type cluster struct {
	t         *testing.T
	group     string
	ids       []string
	transport []string // --transport/--broker/... flags
	env       []string
	envOf     func(id string) []string // per agent, after env (nil: none)
	hb, et    time.Duration
	latency   time.Duration // the bus's one-way latency bound
	root      string        // state dirs and logs
	shared    string        // the leader-only command's lock, log and overlaps
	command   []string      // the leader-only command (nil: leaderCmdMain)

	mu    sync.Mutex
	procs map[string]*agentProc
}

type agentProc struct {
	id       string
	cmd      *exec.Cmd
	logPath  string
	logFrom  int64 // the log's size when this process started: its lines follow
	done     chan struct{}
	exitCode int

	mu       sync.Mutex
	httpAddr string // from the log, once the agent listens (addr)
}

func newCluster(t *testing.T, n int, transport, env []string, hb, et, latency time.Duration) *cluster {
	needBinary(t)
	c := &cluster{t: t, group: "e2e", transport: transport, env: env, hb: hb, et: et, latency: latency,
		root: t.TempDir(), procs: map[string]*agentProc{}}
	c.shared = filepath.Join(c.root, "shared")
	os.Mkdir(c.shared, 0o755)
	for i := range n {
		c.ids = append(c.ids, fmt.Sprintf("a%d", i+1))
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.procs {
			select {
			case <-p.done:
			default:
				p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.done
			}
		}
		if t.Failed() {
			for _, id := range c.ids {
				b, _ := os.ReadFile(filepath.Join(c.root, id+".log"))
				t.Logf("---- %s stderr (last 6000 bytes):\n%s", id, tail(b, 6000))
			}
			t.Logf("---- leader-only command log:\n%s", strings.Join(readLines(filepath.Join(c.shared, "log")), "\n"))
		}
	})
	return c
}

// newNATSCluster is the usual end-to-end setup: an embedded NATS server
// and three agents over it at heartbeat hb and election timeout et (one-way
// latency bound 20 ms). It returns the cluster and the server's URL.
func newNATSCluster(t *testing.T, hb, et time.Duration) (*cluster, string) {
	t.Helper()
	url, _ := natstest.Start(t)
	return newCluster(t, 3, []string{"--transport", "nats", "--broker", url}, nil, hb, et, 20*time.Millisecond), url
}

// startAll starts every agent of the cluster.
func (c *cluster) startAll() {
	for _, id := range c.ids {
		c.start(id)
	}
}

// stateDir is agent id's --state-dir.
func (c *cluster) stateDir(id string) string { return filepath.Join(c.root, "state-"+id) }

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// addr is the agent's HTTP address, from its "http listening" log line. The
// agents listen on port 0: a port the test found free could be taken by
// another test's process before the agent bound it (CI once lost an agent
// to "address already in use").
func (p *agentProc) addr() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.httpAddr != "" {
		return p.httpAddr, nil
	}
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b[min(p.logFrom, int64(len(b))):]), "\n") {
		var l struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "http listening" && l.Addr != "" {
			p.httpAddr = l.Addr
			return l.Addr, nil
		}
	}
	return "", fmt.Errorf("%s: not listening yet", p.id)
}

// start launches agent id (again, after a kill: same state directory).
func (c *cluster) start(id string) *agentProc {
	c.t.Helper()
	return c.startWith(id, c.ids)
}

// startWith launches agent id with --members members and extra run flags.
func (c *cluster) startWith(id string, members []string, extra ...string) *agentProc {
	c.t.Helper()
	p := &agentProc{id: id, logPath: filepath.Join(c.root, id+".log"), done: make(chan struct{})}
	args := []string{"run", "--group", c.group, "--id", id, "--members", strings.Join(members, ","),
		"--heartbeat", c.hb.String(), "--election-timeout", c.et.String(),
		"--state-dir", c.stateDir(id), "--http", "127.0.0.1:0", "--json", "--log-level", "debug"}
	args = append(args, c.transport...)
	args = append(args, extra...)
	if c.command != nil {
		args = append(append(args, "--"), c.command...)
	} else {
		args = append(args, "--", os.Args[0])
	}
	p.cmd = exec.Command(binPath, args...)
	p.cmd.Env = append(append(os.Environ(), c.env...), c.agentEnv(id)...)
	p.cmd.Env = append(p.cmd.Env,
		"ELECTCORE_WASM="+wasmPath,
		"ELECTHOST_TEST_HELPER=leadercmd",
		"ELECTHOST_TEST_DIR="+c.shared)
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	fmt.Fprintf(logf, "==== start %s\n", time.Now().Format(time.RFC3339Nano))
	if st, err := logf.Stat(); err == nil {
		p.logFrom = st.Size()
	}
	p.cmd.Stderr, p.cmd.Stdout = logf, logf
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go p.watch(logf)
	c.mu.Lock()
	c.procs[id] = p
	c.mu.Unlock()
	return p
}

// watch waits for p to exit, records its exit code (-N: killed by signal N)
// and closes its log.
func (p *agentProc) watch(logf *os.File) {
	err := p.cmd.Wait()
	logf.Close()
	if ee, ok := err.(*exec.ExitError); ok {
		p.exitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.exitCode = -int(ws.Signal())
		}
	}
	close(p.done)
}

func (c *cluster) agentEnv(id string) []string {
	if c.envOf == nil {
		return nil
	}
	return c.envOf(id)
}

func (c *cluster) proc(id string) *agentProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[id]
}

func (p *agentProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func (p *agentProc) get(path string) (int, string, error) {
	addr, err := p.addr()
	if err != nil {
		return 0, "", err
	}
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func (p *agentProc) status() (statusJSON, error) {
	var s statusJSON
	return s, p.getJSON("/status", &s)
}

// getJSON decodes the JSON answer to GET path into v; an answer other than
// 200 is an error.
func (p *agentProc) getJSON(path string, v any) error {
	code, body, err := p.get(path)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("%s: %d %s", path, code, body)
	}
	return json.Unmarshal([]byte(body), v)
}

// agreed reports the leader and term every live agent but except agrees
// on, with that leader (not except) reporting itself leading (ok false if
// they do not agree), and a view of what each agent said.
func (c *cluster) agreed(except string) (leader string, term uint64, ok bool, view string) {
	var views []string
	ok = true
	roles := map[string]string{}
	for _, id := range c.ids {
		p := c.proc(id)
		if p == nil || !p.alive() || id == except {
			continue
		}
		s, err := p.status()
		if err != nil {
			views = append(views, id+": "+err.Error())
			ok = false
			continue
		}
		roles[id] = s.Role
		views = append(views, fmt.Sprintf("%s: %s leader=%q term=%d", id, s.Role, s.Leader, s.Term))
		switch {
		case s.Leader == "" || s.Leader == except:
			ok = false
		case leader == "":
			leader, term = s.Leader, s.Term
		case s.Leader != leader || s.Term != term:
			ok = false
		}
	}
	return leader, term, ok && roles[leader] == "leader", strings.Join(views, "; ")
}

// waitAgreement waits until every live agent but except reports the same
// leader (not except) and term >= minTerm, and that leader reports itself
// leading. It returns the leader, the term and the time it took.
func (c *cluster) waitAgreement(except string, minTerm uint64, within time.Duration) (string, uint64, time.Duration) {
	c.t.Helper()
	t0 := time.Now()
	var leader string
	var term uint64
	waitFor(c.t, within, fmt.Sprintf("an agreed leader (not %q, term >= %d)", except, minTerm), func() (bool, string) {
		l, tm, ok, view := c.agreed(except)
		leader, term = l, tm
		return ok && tm >= minTerm, view
	})
	return leader, term, time.Since(t0)
}

// waitCommand waits until the leader-only command of term, or of a later
// term, runs on leader.
func (c *cluster) waitCommand(leader string, term uint64, within time.Duration) {
	c.t.Helper()
	c.waitCommandIn(c.shared, leader, term, within)
}

// waitBestLeaderCommand waits until the best-priority member leads and the
// leader-only command of its term runs. A leadership that ends before its
// command starts (a lease lost to a loaded machine) is waited out: the
// command of the next best-priority leadership counts.
func (c *cluster) waitBestLeaderCommand(within time.Duration) (string, uint64) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		leader, term := c.waitBestLeader(time.Until(deadline))
		want := fmt.Sprintf("%d %s", term, leader)
		for {
			if b, err := os.ReadFile(filepath.Join(c.shared, "lock")); err == nil && string(b) == want {
				return leader, term
			}
			if s, err := c.proc(leader).status(); err == nil && (s.Leader != leader || s.Term != term) {
				c.t.Logf("%s's leadership of term %d ended before its command ran (%s leads term %d now)", leader, term, s.Leader, s.Term)
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(c.shared, "lock"))
				c.t.Fatalf("the leader-only command of term %d on %s is not running within %v (lock: %q)", term, leader, within, b)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// waitCommandIn is waitCommand for the commands whose lock and log are in
// dir (one group's, with several groups). A later term's command on the
// same leader counts too: a leadership that lost its lease to load before
// its command started is followed by the same member's next one when it
// is the best (a CI run at load ~30: a3 led terms 1 and 2, and its command
// of term 1 never ran).
func (c *cluster) waitCommandIn(dir, leader string, term uint64, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var lt uint64
		var l string
		if b, err := os.ReadFile(filepath.Join(dir, "lock")); err == nil {
			if _, err := fmt.Sscanf(string(b), "%d %s", &lt, &l); err == nil && l == leader && lt >= term {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "lock"))
	c.t.Fatalf("the leader-only command of term %d on %s is not running within %v (lock in %s: %q)", term, leader, within, dir, b)
}

// waitCommandFrom waits until the leader-only command runs for term or a
// later one, on a member other than exclude whose own status says it leads
// that term, and returns that member and term.
func (c *cluster) waitCommandFrom(exclude string, term uint64, within time.Duration) (string, uint64) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	var b []byte
	for time.Now().Before(deadline) {
		b, _ = os.ReadFile(filepath.Join(c.shared, "lock"))
		var lt uint64
		var l string
		if _, err := fmt.Sscanf(string(b), "%d %s", &lt, &l); err == nil && lt >= term && l != exclude && slices.Contains(c.ids, l) {
			if s, err := c.proc(l).status(); err == nil && s.Leader == l && s.Term == lt {
				return l, lt
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no leader-only command of term %d or later runs on its leader within %v (lock: %q)", term, within, b)
	return "", 0
}

// commandRunning says whether a leader-only command whose lock is in dir
// is alive: it holds lock.flock (leaderCmdMain).
func commandRunning(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "lock.flock"), os.O_RDWR, 0)
	if err != nil {
		return false // none ever ran
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// checkCommandLog verifies from the commands' own log that no two ever ran
// at once (every start is followed by its stop before the next start) and
// that terms only grew.
func (c *cluster) checkCommandLog() {
	c.t.Helper()
	c.checkCommandLogIn(c.shared)
}

// checkCommandLogIn is checkCommandLog for the commands whose lock and log
// are in dir.
func (c *cluster) checkCommandLogIn(dir string) {
	c.t.Helper()
	if o := readLines(filepath.Join(dir, "overlaps")); len(o) > 0 {
		c.t.Fatalf("two leader-only commands ran at once:\n%s", strings.Join(o, "\n"))
	}
	lines := readLines(filepath.Join(dir, "log"))
	running := ""
	var lastTerm uint64
	starts := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 {
			c.t.Fatalf("bad log line %q", l)
		}
		term, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "start":
			if running != "" {
				c.t.Fatalf("command %s started while %s was running:\n%s", l, running, strings.Join(lines, "\n"))
			}
			if term < lastTerm {
				c.t.Fatalf("term went back from %d to %d:\n%s", lastTerm, term, strings.Join(lines, "\n"))
			}
			running, lastTerm = l, term
			starts++
		case "stop", "killed":
			running = ""
		default:
			c.t.Fatalf("unexpected log line %q:\n%s", l, strings.Join(lines, "\n"))
		}
	}
	if starts == 0 {
		c.t.Fatal("the leader-only command never ran")
	}
}

func (c *cluster) signal(id string, sig syscall.Signal) {
	c.t.Helper()
	if err := c.proc(id).cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %s: %v", id, err)
	}
}

// waitExit waits for id's process to exit and returns its exit code; it
// fails the test if it has not within. The tests give a minute: a give-up,
// not a bound (a SIGTERMed agent stops its command, hands off and, over
// Pilot, starts a pilotctl process per publish on what may be a loaded
// runner).
func (c *cluster) waitExit(id string, within time.Duration) int {
	c.t.Helper()
	p := c.proc(id)
	select {
	case <-p.done:
		return p.exitCode
	case <-time.After(within):
		c.t.Fatalf("%s did not exit within %v", id, within)
		return 0
	}
}

// scenario: election, leader SIGKILLed, failover within the bound, rejoin with
// a higher term, SIGTERM hand-off, clean shutdown; the leader-only command
// never runs twice at once.
func (c *cluster) scenario() {
	t := c.t
	c.startAll()
	// 1. First election (process start-up and module loading included),
	// and the hand-off to the best-priority member if another won: no
	// planned change may come while status listens below.
	t0 := time.Now()
	leader, term := c.waitBestLeader(time.Minute)
	took := time.Since(t0)
	t.Logf("first election: %s leads term %d after %v", leader, term, took.Round(time.Millisecond))
	// The command starts once the leader holds its lease (over Pilot at
	// 500 ms / 2 s, seconds on a loaded runner): the waits for a command
	// give up, bounds on the cause, not timing claims: two minutes for all
	// of it, as over Pilot at load ~20 (CI run s12-7) the best member's
	// leaderships of terms 5, 7, 10 and 14 each ended before its command
	// could start, and one minute ran out.
	leader, term = c.waitBestLeaderCommand(2 * time.Minute)
	// The agents' view of that leadership, read once. A lease lost to load
	// since the command started ends the leadership, and the view with
	// it: the checks then run again under the next best leader's command
	// (at most stepTries times); a view wrong while the leadership held
	// fails the test.
	view := func(leader string) string {
		lp := c.proc(leader)
		if code, body, err := lp.get("/metrics"); err != nil || code != 200 || !strings.Contains(body, `electcore_is_leader{group="e2e",id="`+leader+`"} 1`) {
			return fmt.Sprintf("/metrics of the leader: %d %v\n%s", code, err, body)
		}
		for _, id := range c.ids {
			if code, _, err := c.proc(id).get("/readyz"); err != nil || code != 200 {
				return fmt.Sprintf("/readyz of %s: %d %v", id, code, err)
			}
			if code, _, err := c.proc(id).get("/healthz"); err != nil || code != 200 {
				return fmt.Sprintf("/healthz of %s: %d %v", id, code, err)
			}
		}
		if st, _ := lp.status(); st.LeaseRemainingMs <= 0 || len(st.Members) != len(c.ids) || st.LeaderCommand == nil || !st.LeaderCommand.Running {
			return fmt.Sprintf("leader /status: %+v", st)
		}
		return ""
	}
	for try := 1; ; try++ {
		problem := view(leader)
		if problem == "" {
			break
		}
		if c.leads(leader, term) && c.stoppedLeading(leader, term) == "" || try == stepTries {
			t.Fatalf("%s led term %d: %s", leader, term, problem)
		}
		t.Logf("%s's leadership of term %d ended (%q), checked again under the next: %s", leader, term, c.stoppedLeading(leader, term), problem)
		leader, term = c.waitBestLeaderCommand(time.Minute)
	}

	// 2. `electhost status` sees the same leader. It listens for two
	// election timeouts rather than its default 2×heartbeat + 300 ms, which
	// leaves a pilotctl subscription 300 ms to start and go live: on a loaded
	// runner that was not enough ("no leader heard ... within 700ms"). What is
	// checked is what it hears.
	code, out, errOut := runCLI(t, 30*time.Second, c.env, append([]string{"status", "--group", c.group, "--heartbeat", c.hb.String(),
		"--wait", (2 * c.et).String(), "--json"}, c.transport...)...)
	var sr statusReport
	if code != 0 || json.Unmarshal([]byte(out), &sr) != nil || sr.Leader == "" || sr.Term < term || len(sr.Members) != len(c.ids) {
		t.Fatalf("electhost status: exit %d, %+v\nstdout: %s\nstderr: %s", code, sr, out, errOut)
	}
	if sr.Leader != leader || sr.Term != term {
		// The leadership moved while status listened (over Pilot a loaded
		// runner can cost a lease): status must then report the new
		// leadership, the one the agents agree on, or, if it moved on again
		// since (a CI run at load ~20: status said a1 at 7, the agents then
		// agreed on a3 at 9), one that an agent logged as its leader.
		l, lt, _ := c.waitAgreement("", sr.Term, time.Minute)
		logged := func() bool {
			for _, id := range c.ids {
				for _, rec := range c.proc(id).logLines("leader") {
					who, _ := rec["leader"].(string)
					tm, _ := rec["term"].(float64)
					if rec["msg"] == "leader" && who == sr.Leader && uint64(tm) == sr.Term {
						return true
					}
				}
			}
			return false
		}
		if lt == sr.Term && l != sr.Leader || lt > sr.Term && !logged() {
			t.Fatalf("electhost status reports %s at term %d; the agents agree on %s at %d (was %s at %d)", sr.Leader, sr.Term, l, lt, leader, term)
		}
		t.Logf("the leadership moved during status: %s at term %d, then %s at %d", leader, term, l, lt)
		leader, term = l, lt
		c.waitCommandFrom("", term, time.Minute)
	}

	// 3. SIGKILL the leader: a new leader within 2×ET + 5×latency + slack.
	c.signal(leader, syscall.SIGKILL)
	c.waitExit(leader, time.Minute)
	killed, oldTerm := leader, term
	// The design bound is logged, not asserted: a loaded runner misses it
	// (5.1 s against 3.9 s over Pilot at load 15; over Pilot in a CI pair at
	// load 30, no agreement in 15.5 s, terms 9 to 12); how fast failover
	// is, is measured by make bench-scale. Only the agent is killed here,
	// not its node's broker: no publish can hang on it. The wait gives up
	// after a minute.
	bound := 2*c.et + 5*c.latency + time.Second
	leader, term, took = c.waitAgreement(killed, oldTerm+1, time.Minute)
	t.Logf("failover: %s leads term %d, %v after the SIGKILL of %s (design bound %v)", leader, term, took.Round(time.Millisecond), killed, bound)
	// The new leader may hand over to a better-priority survivor before its
	// command started: then the command of that later term runs.
	c.waitCommandFrom(killed, term, time.Minute)

	// 4. Rejoin from the persisted state: a higher term than before the crash.
	// (The new leader may meanwhile hand over to a better-priority member.)
	// The restart gives up after two minutes, a bound on the agent's start:
	// a -race run of a CI pair (load 33) took 15-17 s from exec to joining.
	c.start(killed)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := c.proc(killed).status()
		if err == nil && s.Leader != "" && s.Term >= term {
			leader, term, _ = c.waitAgreement("", s.Term, time.Minute)
			if s.Term <= oldTerm {
				t.Fatalf("%s rejoined at term %d, not above its term %d before the crash", killed, s.Term, oldTerm)
			}
			t.Logf("rejoin: %s follows %s at term %d (was %d)", killed, leader, s.Term, oldTerm)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not rejoin: %+v %v", killed, s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// 5. SIGTERM the leader: it stops its command, resigns, exits 0; the
	//    others elect its successor by the hand-off, with no election
	//    timeout: no member starts a campaign of its own (a pre-vote, which
	//    /status counts in elections). How fast the hand-off is, is logged
	//    against its design bound, not asserted (a loaded runner misses it).
	resigner, prevTerm := leader, term
	campaigns := map[string]uint64{}
	for _, id := range c.ids {
		if id == resigner {
			continue
		}
		s, err := c.proc(id).status()
		if err != nil {
			t.Fatalf("%s /status: %v", id, err)
		}
		campaigns[id] = s.Elections
	}
	t0 = time.Now()
	c.signal(resigner, syscall.SIGTERM)
	bound = c.et + 5*c.latency + time.Second
	leader, term, took = c.waitAgreement(resigner, prevTerm+1, time.Minute)
	t.Logf("hand-off: %s → %s, term %d, %v after SIGTERM (design bound %v)", resigner, leader, term, took.Round(time.Millisecond), bound)
	if code := c.waitExit(resigner, time.Minute); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM, want 0", resigner, code)
	}
	for id, before := range campaigns {
		if s, err := c.proc(id).status(); err != nil || s.Elections != before {
			t.Errorf("%s started %d campaigns during the hand-off (%v): the leadership moved by an election timeout, not by the resign", id, s.Elections-before, err)
		}
	}
	// The successor may hand over at once to a better-priority member (the
	// priority hand-off), before its own command started: then the command
	// of that later term must run, on the member leading it.
	c.waitCommandFrom(resigner, term, time.Minute)

	// 6. Everyone stops cleanly.
	for _, id := range c.ids {
		if p := c.proc(id); p.alive() {
			c.signal(id, syscall.SIGTERM)
		}
	}
	for _, id := range c.ids {
		if code := c.waitExit(id, time.Minute); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", id, code)
		}
	}
	if commandRunning(c.shared) {
		t.Errorf("a leader-only command still runs after every agent exited")
	}
	c.checkCommandLog()
}

func TestE2ENATS(t *testing.T) {
	t.Parallel()
	// 200 ms / 1.2 s: at 100 ms / 600 ms, at load 20, the two members left
	// after the SIGKILL lost every lease before the command could start.
	c, _ := newNATSCluster(t, 200*time.Millisecond, 1200*time.Millisecond)
	c.scenario()
}

func TestDemoCommand(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, 3*time.Minute, nil, "demo", "--json")
	var sum demoSummary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("demo --json: exit %d, %v\nstdout: %s\nstderr: %s", code, err, stdout, stderr)
	}
	if code != 0 || !sum.OK {
		t.Fatalf("demo failed (exit %d): %+v\nstderr: %s", code, sum, stderr)
	}
	t.Logf("demo: first election %d ms, failover %d ms, rejoin %d ms, hand-off %d ms", sum.FirstElectionMs, sum.FailoverMs, sum.RejoinMs, sum.HandoffMs)
	// The first election is timed from the end of the start step, whose
	// agents join one by one: on a loaded runner (9 s to start at load 10)
	// they agree before it ends, and it takes 0 ms.
	if sum.Agents != 5 || sum.FirstElectionMs < 0 || sum.FailoverMs <= 0 || sum.HandoffMs <= 0 {
		t.Fatalf("implausible summary %+v", sum)
	}
	// The timeline version, on the in-memory bus.
	code, stdout, stderr = runCLI(t, 3*time.Minute, nil, "demo", "--transport", "mem", "--agents", "3")
	if code != 0 || !strings.Contains(stdout, "STEP") || !strings.Contains(stdout, "hand-off") {
		t.Fatalf("demo --transport mem: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
