package pilot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/electcore/electcore/transport"
)

// Error is a failure reported by pilotctl on stderr as
// {"status":"error","code":C,"message":M,"hint":H} with exit status 1.
type Error struct {
	Op      string // pilotctl command: "publish", "subscribe", ...
	Host    string // target host, if any
	Code    string // e.g. "connection_failed", "not_found", "timeout"
	Message string
	Hint    string
}

func (e *Error) Error() string {
	s := "pilotctl"
	if e.Op != "" {
		s += " " + e.Op
	}
	if e.Host != "" {
		s += " " + e.Host
	}
	s = fmt.Sprintf("%s: %s: %s", s, e.Code, e.Message)
	if e.Hint != "" {
		s += " (hint: " + e.Hint + ")"
	}
	return s
}

// Is maps the pilot error code to this package's sentinel errors.
func (e *Error) Is(target error) bool {
	return target != nil && codeSentinel(e.Code) == target
}

func codeSentinel(code string) error {
	switch code {
	case "connection_failed":
		return transport.ErrConnectionFailed
	case "not_found":
		return transport.ErrNotFound
	case "timeout":
		return transport.ErrTimeout
	case "invalid_argument":
		return transport.ErrInvalidArgument
	case "not_running":
		return transport.ErrNotRunning
	case "already_exists":
		return transport.ErrAlreadyExists
	case "internal":
		return transport.ErrInternal
	}
	return nil
}

// ctxError explains why ctx (a child of the transport's, with a deadline) ended.
func (t *Transport) ctxError(ctx context.Context, op, host string) error {
	if t.ctx.Err() != nil {
		return transport.ErrClosed
	}
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return fmt.Errorf("pilotctl %s %s: no answer in time: %w (%w)", op, host, transport.ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("pilotctl %s %s: %w", op, host, ctx.Err())
}

// parsePilotError maps pilotctl's stderr JSON to a *Error.
func parsePilotError(op, host string, stderr []byte, runErr error) error {
	// The error JSON is the last JSON line on stderr.
	lines := bytes.Split(bytes.TrimSpace(stderr), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var e struct {
			Status  string `json:"status"`
			Code    string `json:"code"`
			Message string `json:"message"`
			Hint    string `json:"hint"`
		}
		if json.Unmarshal(lines[i], &e) == nil && e.Code != "" {
			return &Error{Op: op, Host: host, Code: e.Code, Message: e.Message, Hint: e.Hint}
		}
	}
	msg := strings.TrimSpace(string(truncate(stderr, 500)))
	if msg == "" {
		msg = runErr.Error()
	}
	return &Error{Op: op, Host: host, Code: "internal", Message: msg}
}
