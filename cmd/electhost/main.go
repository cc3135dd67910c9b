// Command electhost runs electcore leader elections from the command line: it
// joins a group as an agent (optionally supervising a leader-only command),
// demonstrates an election on an embedded broker, runs the simulator, reports
// a group's status from the bus, and serves an embedded NATS broker.
//
// See README.md in this directory for the full reference.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/electcore/electcore/cmd/electhost/internal/supervise"
	"github.com/spf13/cobra"
)

// Exit codes. They are part of the CLI's contract (README.md).
const (
	exitOK        = 0 // success, including a graceful stop on SIGTERM/SIGINT
	exitFailure   = 1 // any other failure (a demo step, a simulator violation, ...)
	exitUsage     = 2 // bad flags or arguments
	exitConfig    = 3 // bad configuration or unusable state directory / wasm module
	exitTransport = 4 // the transport or broker cannot be reached (pilotctl missing, NATS down)
	// exitDuplicateID: while this agent started, another process was heard
	// running with its --id for an election timeout (dupGuard); an agent
	// running first never exits with it. Distinct so that a supervisor
	// can tell it from a crash; restarting is harmless (a restart stops
	// again while the other runs).
	exitDuplicateID = 5
	// exitTimeout: electhost members add/remove did not see the change
	// committed in time; it may still commit.
	exitTimeout = 6
	// exitOnceTimeout: run --once --timeout D: this agent did not lead
	// within D, so the command never ran.
	exitOnceTimeout = 7
	// exitOnceNotRun: run --once stopped (SIGINT/SIGTERM) before this agent
	// led: the command never ran.
	exitOnceNotRun = 8
)

// exitError carries an exit code with the error that caused it.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: code, err: err}
}

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func configErrorf(format string, args ...any) error {
	return &exitError{code: exitConfig, err: fmt.Errorf(format, args...)}
}

// errQuiet is returned by commands that already printed their failure (for
// instance the demo's failing step or the simulator's violations) and only
// need a non-zero exit.
type quietError struct{ code int }

func (e quietError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	// Re-executed as the leader-only command's supervising process.
	supervise.RunShim(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs the CLI with args and returns the process exit code. Every
// failure is reported as exactly one line on stderr: "electhost: <message>".
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "electhost: internal error: %v\n", r)
			code = exitFailure
		}
	}()
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var q quietError
	if errors.As(err, &q) {
		return q.code
	}
	code = exitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	} else if isCobraUsageError(err) {
		code = exitUsage
	}
	msg := userWords(strings.TrimSpace(err.Error()))
	msg = strings.ReplaceAll(msg, "\n", "; ")
	if code == exitUsage {
		msg += fmt.Sprintf(" (see 'electhost %s--help')", subcommandOf(root, args))
	}
	fmt.Fprintf(stderr, "electhost: %s\n", msg)
	return code
}

// isCobraUsageError recognises the errors cobra returns for unknown commands
// and arguments (flag errors are wrapped by SetFlagErrorFunc already).
func isCobraUsageError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "accepts ") ||
		strings.HasPrefix(s, "requires at least") || strings.HasPrefix(s, "unknown flag") ||
		strings.HasPrefix(s, "unknown shorthand flag") || strings.HasPrefix(s, "invalid argument")
}

func subcommandOf(root *cobra.Command, args []string) string {
	c, _, err := root.Find(args)
	if err != nil || c == nil || c == root {
		return ""
	}
	return c.Name() + " "
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "electhost",
		Short: "Leader election for agent swarms (electcore on wazero)",
		Long: `electhost runs electcore's leader election from the command line: "electhost
run" joins a group and keeps a command running on the leader only. Every
command, flag, default and exit code: cmd/electhost/README.md.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Flags after "--" belong to the leader-only command.
		TraverseChildren: false,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.SetVersionTemplate("electhost {{.Version}}\n")
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(
		newRunCmd(),
		newDemoCmd(),
		newSimCmd(),
		newStatusCmd(),
		newBrokerCmd(),
		newVersionCmd(),
		newKeygenCmd(),
		newResignCmd(),
		newTransferCmd(),
		newProclaimCmd(),
		newDrainCmd(true),
		newDrainCmd(false),
		newMembersCmd(),
		newResetStateCmd(),
	)
	for _, c := range root.Commands() {
		c.SetFlagErrorFunc(root.FlagErrorFunc())
	}
	return root
}

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "electhost", version)
			return nil
		},
	}
}
