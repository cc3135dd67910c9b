// Command pilotctl is the test stand-in for Pilot Protocol's pilotctl; see
// package github.com/electcore/electcore/internal/pilotstandin.
package main

import (
	"os"

	"github.com/electcore/electcore/internal/pilotstandin"
)

func main() {
	os.Exit(pilotstandin.Main(os.Args[1:], os.Stdout, os.Stderr))
}
