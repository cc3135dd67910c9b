package pilotstandin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cliError is a pilotctl failure: printed on stderr, exit 1.
type cliError struct{ code, message, hint string }

func (e *cliError) Error() string { return e.code + ": " + e.message }

func invalid(format string, args ...any) *cliError {
	return &cliError{code: CodeInvalidArgument, message: fmt.Sprintf(format, args...)}
}

type parsedArgs struct {
	getenv func(string) string
	json   bool
	pos    []string
	flags  map[string]string
	bools  map[string]bool
}

// boolFlags take no value.
var boolFlags = map[string]bool{"json": true, "clear": true}

// parseArgs reads --json anywhere, --k=v and --k v (a value starting with
// "--" is read as the next flag, as real pilotctl does).
func parseArgs(args []string) (*parsedArgs, *cliError) {
	p := &parsedArgs{flags: map[string]string{}, bools: map[string]bool{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") || a == "--" {
			p.pos = append(p.pos, a)
			continue
		}
		k, v, hasV := strings.Cut(a[2:], "=")
		if boolFlags[k] {
			if hasV {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return nil, invalid("flag --%s takes no value", k)
				}
				p.bools[k] = b
			} else {
				p.bools[k] = true
			}
			continue
		}
		if !hasV {
			if i+1 >= len(args) || strings.HasPrefix(args[i+1], "--") {
				return nil, invalid("flag --%s requires a value", k)
			}
			i++
			v = args[i]
		}
		p.flags[k] = v
	}
	p.json = p.bools["json"]
	return p, nil
}

func (p *parsedArgs) only(allowed ...string) *cliError {
	for k := range p.flags {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			return invalid("unknown flag --%s", k)
		}
	}
	return nil
}

// Main runs the pilotctl CLI with args (without the program name) and
// returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	return mainEnv(args, stdout, stderr, os.Getenv)
}

// mainEnv is Main reading its environment through getenv (tests run
// several simulated nodes' CLIs in one process).
func mainEnv(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	p, cerr := parseArgs(args)
	if p != nil {
		p.getenv = getenv
	}
	jsonOut := p != nil && p.json
	if cerr == nil {
		cerr = run(p, stdout)
	}
	if cerr == nil {
		return 0
	}
	if p == nil {
		for _, a := range args {
			jsonOut = jsonOut || a == "--json"
		}
	}
	if jsonOut {
		m := map[string]any{"status": "error", "code": cerr.code, "message": cerr.message}
		if cerr.hint != "" {
			m["hint"] = cerr.hint
		}
		b, _ := json.Marshal(m)
		fmt.Fprintf(stderr, "%s\n", b)
	} else {
		fmt.Fprintf(stderr, "error: %s\n", cerr.message)
		if cerr.hint != "" {
			fmt.Fprintf(stderr, "hint: %s\n", cerr.hint)
		}
	}
	return 1
}

func run(p *parsedArgs, stdout io.Writer) *cliError {
	if len(p.pos) == 0 {
		return invalid("usage: pilotctl [--json] <info|publish|subscribe|send-message|inbox|find|lookup> ...")
	}
	cmd, pos := p.pos[0], p.pos[1:]
	req := request{Op: cmd, Node: p.getenv(EnvNode)}
	switch cmd {
	case "info":
		if err := p.only(); err != nil {
			return err
		}
	case "publish":
		if err := p.only("data"); err != nil {
			return err
		}
		if len(pos) != 2 {
			return invalid("usage: pilotctl publish <host|address|node_id> <topic> --data <string>")
		}
		data, ok := p.flags["data"]
		if !ok {
			return invalid("--data is required")
		}
		req.Host, req.Topic, req.Data = pos[0], pos[1], data
	case "subscribe":
		return subscribe(p, pos, req, stdout)
	case "send-message":
		if err := p.only("data", "type"); err != nil {
			return err
		}
		if len(pos) != 1 {
			return invalid("usage: pilotctl send-message <host> --data <string> [--type text|json|binary]")
		}
		data, ok := p.flags["data"]
		if !ok {
			return invalid("--data is required")
		}
		req.Host, req.Data, req.Type = pos[0], data, p.flags["type"]
	case "inbox":
		if err := p.only(); err != nil {
			return err
		}
		req.Clear = p.bools["clear"]
	case "find", "lookup":
		if err := p.only(); err != nil {
			return err
		}
		if len(pos) != 1 {
			return invalid("usage: pilotctl %s <%s>", cmd, map[string]string{"find": "hostname", "lookup": "node_id"}[cmd])
		}
		req.Host = pos[0]
	case "standin-daemon":
		return runDaemon(p)
	default:
		return invalid("unknown command %q", cmd)
	}
	if cmd != "publish" && cmd != "send-message" && cmd != "find" && cmd != "lookup" && len(pos) != 0 {
		return invalid("unexpected argument %q", pos[0])
	}
	c, cerr := dial(p.getenv(EnvSocket), req)
	if cerr != nil {
		return cerr
	}
	defer c.Close()
	var resp response
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return &cliError{code: CodeConnectionFailed, message: "recv: " + eofText(err)}
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return &cliError{code: CodeInternal, message: "bad daemon reply: " + err.Error()}
	}
	if !resp.OK {
		return &cliError{code: resp.Code, message: resp.Message, hint: resp.Hint}
	}
	printOK(stdout, p.json, resp.Data)
	return nil
}

func eofText(err error) string {
	if err == io.EOF {
		return "EOF"
	}
	return err.Error()
}

func dial(sock string, req request) (net.Conn, *cliError) {
	if sock == "" {
		sock = DefaultSock
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, &cliError{code: CodeNotRunning, message: "daemon is not running (" + sock + ")", hint: "start the daemon: pilotctl daemon start"}
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		c.Close()
		return nil, &cliError{code: CodeConnectionFailed, message: "send: " + err.Error()}
	}
	return c, nil
}

func printOK(w io.Writer, jsonOut bool, data map[string]any) {
	if jsonOut {
		if data == nil {
			data = map[string]any{}
		}
		b, _ := json.Marshal(map[string]any{"status": "ok", "data": data})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s: %v\n", k, data[k])
	}
}

func subscribe(p *parsedArgs, pos []string, req request, stdout io.Writer) *cliError {
	if err := p.only("count", "timeout"); err != nil {
		return err
	}
	if len(pos) != 2 {
		return invalid("usage: pilotctl subscribe <host> <topic> [--count N] [--timeout DURATION]")
	}
	req.Host, req.Topic = pos[0], pos[1]
	count := 0
	if v, ok := p.flags["count"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return invalid("--count must be a positive integer, got %q", v)
		}
		count = n
	}
	var deadline <-chan time.Time
	if v, ok := p.flags["timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return invalid("--timeout must be a duration like 30s, got %q", v)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		deadline = t.C
	}
	if v := p.getenv(EnvIdleDrop); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			req.IdleDropMs = d.Milliseconds()
		}
	}
	c, cerr := dial(p.getenv(EnvSocket), req)
	if cerr != nil {
		return cerr
	}
	defer c.Close()

	type item struct {
		line streamLine
		resp *response
		err  error
	}
	lines := make(chan item)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		r := bufio.NewReaderSize(c, 64<<10)
		for {
			b, err := r.ReadBytes('\n')
			var it item
			if err != nil {
				it.err = err
			} else {
				// Either a stream line or an error reply.
				var probe map[string]json.RawMessage
				json.Unmarshal(b, &probe)
				if _, isResp := probe["ok"]; isResp {
					var resp response
					json.Unmarshal(b, &resp)
					it.resp = &resp
				} else if err := json.Unmarshal(b, &it.line); err != nil {
					it.err = err
				}
			}
			select {
			case lines <- it:
			case <-stop:
				return
			}
			if it.err != nil || it.resp != nil {
				return
			}
		}
	}()
	var events []any
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	for {
		select {
		case <-deadline:
			if count > 0 {
				printOK(w, p.json, map[string]any{"events": eventsOrNull(events), "timeout": true})
			}
			return nil
		case it := <-lines:
			switch {
			case it.resp != nil:
				return &cliError{code: it.resp.Code, message: it.resp.Message, hint: it.resp.Hint}
			case it.err != nil:
				w.Flush()
				return &cliError{code: CodeConnectionFailed, message: "recv: " + eofText(it.err)}
			case it.line.Raw != nil:
				if count == 0 {
					fmt.Fprintf(w, "%s\n", *it.line.Raw)
					w.Flush()
				}
			case it.line.Event != nil:
				ev := map[string]any{"topic": it.line.Event.Topic, "data": it.line.Event.Data, "bytes": it.line.Event.Bytes}
				if count == 0 {
					if p.json {
						b, _ := json.Marshal(ev)
						fmt.Fprintf(w, "%s\n", b)
					} else {
						fmt.Fprintf(w, "[%s] %s\n", it.line.Event.Topic, it.line.Event.Data)
					}
					w.Flush()
					continue
				}
				events = append(events, ev)
				if len(events) >= count {
					printOK(w, p.json, map[string]any{"events": events, "timeout": false})
					return nil
				}
			}
		}
	}
}

func eventsOrNull(ev []any) any {
	if len(ev) == 0 {
		return nil
	}
	return ev
}

// runDaemon runs a stand-in daemon in the foreground (not a real pilotctl
// command): pilotctl standin-daemon [--hosts a,b] [--idle-drop 120s].
// The socket is PILOT_SOCKET (default /tmp/pilot.sock).
func runDaemon(p *parsedArgs) *cliError {
	if err := p.only("hosts", "idle-drop"); err != nil {
		return err
	}
	opts := Options{Socket: p.getenv(EnvSocket)}
	if opts.Socket == "" {
		opts.Socket = DefaultSock
	}
	if v := p.flags["hosts"]; v != "" {
		opts.Hosts = strings.Split(v, ",")
	}
	if v := p.flags["idle-drop"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return invalid("--idle-drop: %v", err)
		}
		opts.IdleDrop = d
	}
	os.Remove(opts.Socket)
	d, err := NewDaemon(opts)
	if err != nil {
		return &cliError{code: CodeInternal, message: err.Error()}
	}
	defer d.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}
