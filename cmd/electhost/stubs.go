//go:build !electhost_host

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholders until host.Agent lands (build with -tags electhost_host).

func newRunCmd() *cobra.Command {
	return &cobra.Command{Use: "run", Short: "Join a group (waiting for host.Agent)", RunE: func(*cobra.Command, []string) error { return errors.New("run: not wired yet") }}
}

func newDemoCmd() *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Guided demo (waiting for host.Agent)", RunE: func(*cobra.Command, []string) error { return errors.New("demo: not wired yet") }}
}
