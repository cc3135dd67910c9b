package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Errors in the operator's words: the libraries' messages name Go packages
// and core.Config fields; electhost's name flags and say what to do. The core
// keeps its own field names (other hosts use them); the mapping lives here.

// userWords drops the Go package prefixes ("host: ", "transport: ", ...)
// that library errors carry.
func userWords(msg string) string {
	for _, p := range []string{"transport: ", "statestore: ", "host: ", "supervise: ", "core: "} {
		msg = strings.ReplaceAll(msg, p, "")
	}
	return strings.ReplaceAll(msg, "RuntimeConfig.WasmPath (--wasm)", "--wasm")
}

// msDur prints a millisecond count from the core as a duration flag value.
func msDur(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s + "ms"
	}
	return fmt.Sprint(durationOf(n))
}

var configRewrites = []struct {
	re  *regexp.Regexp
	fix func(m []string) string
}{
	{regexp.MustCompile(`heartbeat_ms (-?\d+): want 10\.\.600000`), func(m []string) string {
		return fmt.Sprintf("--heartbeat %s: want 10ms..10m", msDur(m[1]))
	}},
	{regexp.MustCompile(`election_timeout_ms (-?\d+): want 3×heartbeat \((\d+)\)\.\.(\d+)`), func(m []string) string {
		return fmt.Sprintf("--election-timeout %s: want 3×--heartbeat (%s)..%s", msDur(m[1]), msDur(m[2]), msDur(m[3]))
	}},
	{regexp.MustCompile(`lease_ms (-?\d+): want 2×heartbeat \((\d+)\)\.\.(\d+) \(election timeout shrunk by the drift bound\)`), func(m []string) string {
		return fmt.Sprintf("--lease %s: want 2×--heartbeat (%s)..%s (the election timeout less the clock drift bound); change --lease, --grace or --election-timeout", msDur(m[1]), msDur(m[2]), msDur(m[3]))
	}},
	{regexp.MustCompile(`handoff_hold_ms (-?\d+): want 0\.\.election timeout \((\d+)\)`), func(m []string) string {
		return fmt.Sprintf("--grace + 50ms = %s exceeds --election-timeout %s: lower --grace", msDur(m[1]), msDur(m[2]))
	}},
	{regexp.MustCompile(`member_keys: no public key for member "([^"]*)"`), func(m []string) string {
		return fmt.Sprintf(`--members-file has no public key for member "%s": add its line (electhost keygen --id %s prints it)`, m[1], m[1])
	}},
	{regexp.MustCompile(`member_keys "([^"]*)": does not match this agent's private key`), func(m []string) string {
		return fmt.Sprintf(`--members-file's key for "%s" does not match --key: give this agent's own key file, or fix its line in --members-file`, m[1])
	}},
	{regexp.MustCompile(`member_keys "([^"]*)": public key of (\d+) bytes, want (\d+)`), func(m []string) string {
		return fmt.Sprintf(`--members-file: "%s" has a public key of %s bytes, want %s (a base64 ed25519 public key)`, m[1], m[2], m[3])
	}},
	{regexp.MustCompile(`member_keys: (\d+) listed, at most (\d+)`), func(m []string) string {
		return fmt.Sprintf("--members-file: %s members, at most %s", m[1], m[2])
	}},
	{regexp.MustCompile(`^members: must include this agent's id "([^"]*)"`), func(m []string) string {
		return fmt.Sprintf(`--members must include this agent's --id "%s" (add it, or give the --id of a member)`, m[1])
	}},
	{regexp.MustCompile(`^members: quorum mode needs the full member list \(or use bully mode\)`), func(m []string) string {
		return "quorum mode needs --members a,b,c (every member, this one included), or --members-file; or use --mode bully"
	}},
	{regexp.MustCompile(`^members: `), func(m []string) string { return "--members: " }},
	{regexp.MustCompile(`^(id|group) `), func(m []string) string { return "--" + m[1] + " " }},
	{regexp.MustCompile(`^(id|group): `), func(m []string) string { return "--" + m[1] + ": " }},
	{regexp.MustCompile(`^auth `), func(m []string) string { return "--auth " }},
}

// configInFlags rewrites a core.Config validation message in flag names.
func configInFlags(msg string) string {
	for _, r := range configRewrites {
		if loc := r.re.FindStringSubmatchIndex(msg); loc != nil {
			var groups []string
			for i := 0; i < len(loc); i += 2 {
				if loc[i] < 0 {
					groups = append(groups, "")
					continue
				}
				groups = append(groups, msg[loc[i]:loc[i+1]])
			}
			return msg[:loc[0]] + r.fix(groups) + msg[loc[1]:]
		}
	}
	return msg
}

var invalidFlagValue = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([\w-]+)" flag: `)

// flagError rewrites pflag's parse errors ("invalid argument "-1" for
// "--priority" flag: strconv.ParseUint: parsing "-1": invalid syntax") as
// what the flag wants.
func flagError(c *cobra.Command, err error) error {
	m := invalidFlagValue.FindStringSubmatch(err.Error())
	if m == nil {
		return &exitError{code: exitUsage, err: err}
	}
	want := "a valid value"
	if f := c.Flags().Lookup(m[2]); f != nil {
		want = wantOf(f)
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("--%s %q: want %s", m[2], m[1], want)}
}

func wantOf(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "duration":
		return "a duration such as 500ms, 2s or 1m"
	case "uint32":
		return "a whole number 0..4294967295"
	case "uint64", "uint":
		return "a whole number ≥ 0"
	case "int", "int64", "int32":
		return "a whole number"
	case "bool":
		return "true or false"
	}
	return "a valid " + f.Value.Type()
}

func durationOf(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
