package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholders until host/, core/sim and the NATS transport land.

func newRunCmd() *cobra.Command {
	return &cobra.Command{Use: "run", Short: "Join a group (not yet wired)", RunE: func(*cobra.Command, []string) error { return errors.New("run: not implemented yet") }}
}

func newDemoCmd() *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Guided demo (not yet wired)", RunE: func(*cobra.Command, []string) error { return errors.New("demo: not implemented yet") }}
}

func newSimCmd() *cobra.Command {
	return &cobra.Command{Use: "sim", Short: "Simulator (not yet wired)", RunE: func(*cobra.Command, []string) error { return errors.New("sim: not implemented yet") }}
}

func newStatusCmd() *cobra.Command {
	return &cobra.Command{Use: "status", Short: "Group status (not yet wired)", RunE: func(*cobra.Command, []string) error { return errors.New("status: not implemented yet") }}
}
