package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"
)

func newBrokerCmd() *cobra.Command {
	var listen string
	var jsonLogs bool
	c := &cobra.Command{
		Use:   "broker",
		Short: "Run an embedded NATS server for local multi-process use",
		Long: `broker runs an in-process NATS server (nats-server/v2) on --listen, logs the
URL to give to 'electhost run --transport nats --broker URL', and stops on
SIGINT/SIGTERM (exit 0). A port in use fails at once (exit 3).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			logger := newLogger(cmd.ErrOrStderr(), jsonLogs, slog.LevelInfo)
			ns, url, err := startNATS(listen)
			if err != nil {
				return err
			}
			logger.Info("broker listening", "url", url)
			fmt.Fprintln(cmd.OutOrStdout(), url)
			<-cmd.Context().Done()
			logger.Info("broker stopping")
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", defaultListen(), "host:port to listen on (port 0 picks a free one; default: the host:port of $NATS_URL, else 127.0.0.1:4222)")
	c.Flags().BoolVar(&jsonLogs, "json", false, "log JSON lines (slog JSONHandler)")
	return c
}

// startNATS starts an embedded NATS server on addr ("host:port"; port 0 picks
// a free port) and returns it with its client URL.
func startNATS(addr string) (*server.Server, string, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", usageErrorf("--listen %q: want host:port", addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, "", usageErrorf("--listen %q: bad port", addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// nats-server retries a busy port for seconds; find out at once.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", withCode(exitConfig, fmt.Errorf("--listen %s: %v (another broker running? pick a free port with --listen 127.0.0.1:0)", addr, err))
		}
		ln.Close()
	}
	opts := &server.Options{
		Host:           host,
		Port:           port,
		NoLog:          true,
		NoSigs:         true,
		MaxControlLine: 4096,
		HTTPPort:       0,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, "", withCode(exitConfig, fmt.Errorf("broker: %v", err))
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, "", withCode(exitConfig, fmt.Errorf("--listen %s: the broker did not start listening within 10s (pick a free port with --listen 127.0.0.1:0)", addr))
	}
	return ns, ns.ClientURL(), nil
}

// defaultListen is where broker listens by default: the host:port of
// $NATS_URL when it names one nats:// server (so that run and status, which
// default to it, find this broker), else 127.0.0.1:4222.
func defaultListen() string {
	if u, err := url.Parse(strings.TrimSpace(os.Getenv("NATS_URL"))); err == nil && u.Scheme == "nats" && u.Hostname() != "" && u.Port() != "" {
		return u.Host
	}
	return "127.0.0.1:4222"
}
