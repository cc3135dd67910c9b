package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/electcore/electcore/host"
)

// Health-gated leadership (Consul's session health checks): with --check
// CMD or --check-http URL the agent leads only while healthy. An unhealthy
// agent is drained (core.CmdDrain: it neither campaigns nor accepts a
// hand-off, and a leader hands over at once to the best live member); it is
// undrained when the check passes again, unless the operator drained it.
// The agent starts unhealthy: it may lead only after a first pass.

type checkFlags struct {
	cmd      string
	url      string
	interval time.Duration
	timeout  time.Duration
	failures int
}

func (c *checkFlags) enabled() bool { return c.cmd != "" || c.url != "" }

func (c *checkFlags) validate(bully bool) error {
	if !c.enabled() {
		return nil
	}
	switch {
	case bully:
		return usageErrorf("--check and --check-http need quorum mode (bully mode has no hand-off to drain by)")
	case c.interval <= 0:
		return usageErrorf("--check-interval %v: want a positive duration", c.interval)
	case c.timeout <= 0:
		return usageErrorf("--check-timeout %v: want a positive duration", c.timeout)
	case c.failures < 1:
		return usageErrorf("--check-failures %d: want at least 1", c.failures)
	}
	if c.url != "" && !strings.HasPrefix(c.url, "http://") && !strings.HasPrefix(c.url, "https://") {
		return usageErrorf("--check-http %q: want an http:// or https:// URL", c.url)
	}
	return nil
}

// gate combines the operator's drain and the health check into the
// election's drain.
type gate struct {
	mu       sync.Mutex
	el       func() *host.Election
	operator bool   // electhost drain
	checked  bool   // a health check is configured
	healthy  bool   // the check's verdict (false until its first pass)
	why      string // the last failure, in the operator's words
	failures int    // consecutive failures
	applied  bool   // the drain the election has
}

// drained is the drain the election should have.
func (g *gate) drained() bool { return g.operator || g.checked && !g.healthy }

// apply brings the election's drain in line; call with g.mu held.
func (g *gate) apply(ctx context.Context) error {
	want := g.drained()
	el := g.el()
	if el == nil || want == g.applied {
		return nil
	}
	if err := el.Drain(ctx, want); err != nil {
		return err
	}
	g.applied = want
	return nil
}

// setOperator records the operator's drain and applies it.
func (g *gate) setOperator(ctx context.Context, on bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.operator
	g.operator = on
	if err := g.apply(ctx); err != nil {
		g.operator = prev
		return err
	}
	return nil
}

// state is what /status, /readyz and the metrics say: the operator's drain
// and the check's verdict.
func (g *gate) state() (operator, checked, healthy bool, why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.operator, g.checked, g.healthy, g.why
}

// words adds to a readiness reason why this agent does not lead, if so.
func (g *gate) words(why string) string {
	operator, checked, healthy, failure := g.state()
	if operator {
		why += "; " + drainedWords
	}
	if checked && !healthy {
		if failure == "" {
			failure = "no health check has passed yet"
		}
		why += "; unhealthy (" + failure + "): this agent does not lead"
	}
	return why
}

// runChecks runs the check every interval until ctx ends.
func (g *gate) runChecks(ctx context.Context, c checkFlags, logger *slog.Logger) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		err := runCheck(ctx, c)
		if ctx.Err() != nil {
			return
		}
		g.mu.Lock()
		switch {
		case err == nil:
			g.failures = 0
			if !g.healthy {
				logger.Info("health check passed: this agent may lead", "check", c.describe())
			}
			g.healthy, g.why = true, ""
		default:
			g.failures++
			g.why = fmt.Sprintf("health check failed %d time(s) in a row: %v", g.failures, err)
			if g.healthy && g.failures >= c.failures {
				g.healthy = false
				logger.Warn("health check failing: this agent hands over and does not lead until it passes", "check", c.describe(), "reason", g.why)
			}
		}
		if err := g.apply(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("health check: could not apply the drain; retrying at the next check", "err", err)
		}
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c checkFlags) describe() string {
	if c.cmd != "" {
		return "--check " + c.cmd
	}
	return "--check-http " + c.url
}

var checkClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// runCheck runs one check within the timeout: the command must exit 0, the
// URL must answer 2xx.
func runCheck(ctx context.Context, c checkFlags) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.cmd != "" {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.cmd)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, io.Discard, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		err := cmd.Run()
		if ctx.Err() != nil {
			return fmt.Errorf("no answer within --check-timeout %v", c.timeout)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("the command exited %d", ee.ExitCode())
		}
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	resp, err := checkClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer within --check-timeout %v", c.timeout)
		}
		return fmt.Errorf("GET %s: %v", c.url, errors.Unwrap(err))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s answered %s", c.url, resp.Status)
	}
	return nil
}
