package pilot

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/electcore/electcore/transport"
)

// pilotNodeID reads a node id given as a number or an address
// ("0:0000.0000.0005": the node is the last 8 hex digits).
func pilotNodeID(host string) (uint32, bool) {
	if id, err := strconv.ParseUint(host, 10, 32); err == nil {
		return uint32(id), true
	}
	net, rest, ok := strings.Cut(host, ":")
	if !ok || net == "" || len(rest) != 14 || rest[4] != '.' || rest[9] != '.' {
		return 0, false
	}
	id, err := strconv.ParseUint(rest[5:9]+rest[10:14], 16, 32)
	if err != nil {
		return 0, false
	}
	return uint32(id), true
}

// Info runs `pilotctl --json info` and returns its data object (node_id,
// address, hostname, ...). Handy to check the daemon is up at start-up.
func (t *Transport) Info(ctx context.Context) (map[string]any, error) {
	if t.isClosed() {
		return nil, transport.ErrClosed
	}
	return pilotInfo(ctx, t.bin, t.opts.Binary, t.opts.Env, t.opts.PublishTimeout)
}

func pilotInfo(ctx context.Context, bin, name string, env []string, timeout time.Duration) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := pilotCommand(ctx, bin, env, "--json", "info")
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 1<<20, 64<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, missingBinary(name, err)
		}
		if ctx.Err() != nil {
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return nil, fmt.Errorf("pilotctl info: no answer in time: %w (%w)", transport.ErrTimeout, context.DeadlineExceeded)
			}
			return nil, fmt.Errorf("pilotctl info: %w", ctx.Err())
		}
		return nil, parsePilotError("info", "", stderr.Bytes(), err)
	}
	var envl struct {
		Status string         `json:"status"`
		Data   map[string]any `json:"data"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &envl); err != nil || envl.Status != "ok" {
		return nil, fmt.Errorf("pilotctl info: unexpected output %q: %w", truncate(stdout.Bytes(), 200), transport.ErrInternal)
	}
	return envl.Data, nil
}

// Node is the local pilot node, as `pilotctl --json info` reports it.
type Node struct {
	NodeID   int64
	Address  string // "0:0000.0000.0005"
	Hostname string
}

// LocalNode asks the local daemon (through opts.Binary and opts.Env)
// which node it is.
func LocalNode(ctx context.Context, opts Options) (Node, error) {
	name := cmp.Or(opts.Binary, "pilotctl")
	bin, err := exec.LookPath(name)
	if err != nil {
		return Node{}, missingBinary(name, err)
	}
	info, err := pilotInfo(ctx, bin, name, opts.Env, cmp.Or(opts.PublishTimeout, 5*time.Second))
	if err != nil {
		return Node{}, err
	}
	return ParseNode(info)
}

// ParseNode reads the node from info's data object: node_id (a
// number), address and hostname (strings; hostname may be empty).
func ParseNode(info map[string]any) (Node, error) {
	id, ok := info["node_id"].(float64)
	addr, _ := info["address"].(string)
	if !ok || id < 0 || id != float64(int64(id)) || addr == "" {
		return Node{}, fmt.Errorf("pilotctl info: no numeric node_id and address in %v: %w", info, transport.ErrInternal)
	}
	host, _ := info["hostname"].(string)
	return Node{NodeID: int64(id), Address: addr, Hostname: host}, nil
}

// Is reports whether ref (a broker as given on the command line: host
// name, address or node id) names this node.
func (n Node) Is(ref string) bool {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		return id == n.NodeID
	}
	return strings.EqualFold(ref, n.Address) || (n.Hostname != "" && strings.EqualFold(ref, n.Hostname))
}

// Layout decides, for the node self, which of brokers it publishes to
// and subscribes on (docs/pilotctl.md explains the layouts):
//
//   - self is not among brokers (dedicated broker nodes): publish to and
//     subscribe on every broker.
//   - self is among them (brokers are the members' own nodes): subscribe on
//     its own broker only and publish to every other one, never to its own
//     (a node publishing to its own broker while subscribed floods its
//     daemon); its own messages are looped back locally. A node that dies
//     then takes only its own broker with it.
//
// It fails if self is the only broker, or if the list names self twice.
func Layout(self Node, brokers []string) (publish, subscribe []string, loopback bool, err error) {
	var own []string
	for _, b := range brokers {
		if self.Is(b) {
			own = append(own, b)
		} else {
			publish = append(publish, b)
		}
	}
	switch {
	case len(own) == 0:
		return publish, publish, false, nil
	case len(own) > 1:
		return nil, nil, false, fmt.Errorf("transport: brokers %s all name this node (%s): list it once: %w", strings.Join(own, ", "), self.Address, transport.ErrInvalidArgument)
	case len(publish) == 0:
		return nil, nil, false, fmt.Errorf("transport: the only broker, %s, is this node (%s): publishing to your own broker floods the pilot daemon; list the other members' nodes (or dedicated broker nodes) too: %w", own[0], self.Address, transport.ErrInvalidArgument)
	}
	return publish, own, true, nil
}
