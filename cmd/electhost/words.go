package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Errors in the operator's words: the libraries' messages name Go packages
// and core.Config fields; electhost's name flags and say what to do. The core
// keeps its own field names (other hosts use them); the mapping lives here.

// userWords drops the Go package prefixes ("host: ", "transport: ", ...)
// that library errors carry, where they start a word: a file name such as
// MANIFEST.electcore: stays whole.
func userWords(msg string) string {
	msg = packagePrefix.ReplaceAllString(msg, "$1")
	return strings.ReplaceAll(msg, "RuntimeConfig.WasmPath (--wasm)", "--wasm")
}

var packagePrefix = regexp.MustCompile(`(^|[\s(;])(?:transport|statestore|host|supervise|core): `)

// configRules says, for every rule core.Config's validation has (a
// *core.ConfigError, keyed "field rule"), which flag gave the value and what
// to do, in flags and durations. It is the only place where core's field
// names meet electhost's flags: TestConfigRulesAllMapped fails when core has
// a rule without an entry here, and runs each through the CLI. flag "" marks
// a rule electhost cannot break (unreachable says why).
var configRules = map[string]configRule{
	"heartbeat_ms heartbeat-range": {flag: "--heartbeat", say: func(e *core.ConfigError) string {
		return "--heartbeat " + msDur(e.Value) + ": want " + ms(e.Min) + ".." + ms(e.Max)
	}},
	"election_timeout_ms election-timeout-range": {flag: "--election-timeout", say: func(e *core.ConfigError) string {
		return "--election-timeout " + msDur(e.Value) + ": want 3×--heartbeat (" + ms(e.Min) + ").." + ms(e.Max)
	}},
	"lease_ms lease-range": {flag: "--lease", say: func(e *core.ConfigError) string {
		if e.Max < e.Min {
			return "--lease " + msDur(e.Value) + ": no lease fits: two heartbeats (" + ms(e.Min) + ") exceed the election timeout less the clock drift bound and --grace + 50ms; lower --grace or --heartbeat, or raise --election-timeout"
		}
		return "--lease " + msDur(e.Value) + ": want 2×--heartbeat (" + ms(e.Min) + ").." + ms(e.Max) + " (the election timeout less the clock drift bound and --grace + 50ms); change --lease, --grace or --election-timeout"
	}},
	"handoff_hold_ms handoff-hold-range": {flag: "--grace", say: func(e *core.ConfigError) string {
		// electhost holds a hand-off for --grace + killSlack.
		grace := msDur(strconv.FormatInt(atoi(e.Value)-killSlack.Milliseconds(), 10))
		if most := e.Max - killSlack.Milliseconds(); most >= 0 {
			return "--grace " + grace + ": want at most " + ms(most) + " (--grace + 50ms must leave two heartbeats of the safe lease); lower --grace or raise --election-timeout"
		}
		return "--grace " + grace + ": no grace fits in the safe lease less two heartbeats (" + ms(e.Max) + "); raise --election-timeout or lower --heartbeat"
	}},
	"max_drift_ppm drift-range":      {unreachable: "electhost runs the default drift bound"},
	"collect_ms collect-range":       {unreachable: "electhost runs the default, a quarter of the election timeout"},
	"mode mode-unknown":              {unreachable: "run checks --mode first"},
	"await_config await-quorum-only": {unreachable: "run refuses --join in bully mode first"},
	"members members-count": {flag: "--members", say: func(e *core.ConfigError) string {
		return "--members: " + e.Value + " members, at most " + i64(e.Max)
	}},
	"members members-twice": {flag: "--members", say: func(e *core.ConfigError) string {
		return "--members: " + strconv.Quote(e.Value) + " listed twice"
	}},
	"members members-self": {flag: "--members", say: func(e *core.ConfigError) string {
		return "--members must include this agent's --id " + strconv.Quote(e.Value) + " (add it, or give the --id of a member; --join starts an agent outside them)"
	}},
	"members members-required": {flag: "--members", say: func(e *core.ConfigError) string {
		return "quorum mode needs --members a,b,c (every member, this one included), or --members-file; or use --mode bully"
	}},
	"id name-empty":                {unreachable: "an empty --id means the host name"},
	"id name-length":               {flag: "--id", say: nameSay("--id")},
	"id name-byte":                 {flag: "--id", say: nameSay("--id")},
	"group name-empty":             {unreachable: "run checks that --group is given first"},
	"group name-length":            {flag: "--group", say: nameSay("--group")},
	"group name-byte":              {flag: "--group", say: nameSay("--group")},
	"member name-empty":            {unreachable: "run drops empty entries of --members"},
	"member name-length":           {flag: "--members", say: nameSay("--members")},
	"member name-byte":             {flag: "--members", say: nameSay("--members")},
	"member_keys id name-empty":    {flag: "--members-file", say: nameSay("--members-file")},
	"member_keys id name-length":   {flag: "--members-file", say: nameSay("--members-file")},
	"member_keys id name-byte":     {flag: "--members-file", say: nameSay("--members-file")},
	"auth auth-off-with-keys":      {unreachable: "run refuses --auth off with --key or --members-file first"},
	"auth auth-unknown":            {unreachable: "run checks --auth first"},
	"key hmac-key-length":          {unreachable: "run checks the length of the --key file's HMAC key first"},
	"member_keys hmac-member-keys": {unreachable: "run refuses --members-file with --auth hmac first"},
	"key ed25519-key-corrupt":      {unreachable: "a PEM key file holds the seed alone, from which the key is derived"},
	"key ed25519-key-length":       {unreachable: "a PEM key file holds an ed25519 seed of the right size"},
	"member_keys member-keys-count": {flag: "--members-file", say: func(e *core.ConfigError) string {
		return "--members-file: " + e.Value + " members, at most " + i64(e.Max)
	}},
	"member_keys member-key-length": {unreachable: "run checks each key of --members-file first"},
	"member_keys member-key-not-own": {flag: "--members-file", say: func(e *core.ConfigError) string {
		return "--members-file's key for " + strconv.Quote(e.Value) + " does not match --key: give this agent's own key file, or fix its line in --members-file"
	}},
	"value value-length": {flag: "--value", say: func(e *core.ConfigError) string {
		return "--value: " + e.Value + " bytes, at most " + i64(e.Max) + " (a value is an address or a name: put more in a store it points to)"
	}},
	"value value-byte": {flag: "--value", say: func(e *core.ConfigError) string {
		return "--value: " + strings.TrimPrefix(e.Error(), "value: ")
	}},
	"member_keys member-key-missing": {flag: "--members-file", say: func(e *core.ConfigError) string {
		return "--members-file has no public key for member " + strconv.Quote(e.Value) + ": add its line (electhost keygen --id " + e.Value + " prints it)"
	}},
}

type configRule struct {
	flag        string
	say         func(*core.ConfigError) string
	unreachable string // why electhost never breaks this rule (then flag is "")
}

// nameSay words a refused id or group name given by flag.
func nameSay(flag string) func(*core.ConfigError) string {
	return func(e *core.ConfigError) string {
		switch e.Rule {
		case "name-empty":
			return flag + ": an empty id"
		case "name-length":
			return flag + ": a name of " + e.Value + " bytes, at most " + i64(e.Max)
		}
		return flag + " " + strconv.Quote(e.Value) + ": byte " + i64(e.Min) + " (" + strconv.QuoteRune(rune(e.Value[e.Min])) + ") is not allowed: use A-Z a-z 0-9 and . _ : @ / + -"
	}
}

// inFlags returns err as a usage error in flags: a *core.ConfigError through
// configRules, anything else as it is. A ConfigError without an entry (a
// rule newer than this table) keeps core's words rather than guess.
func inFlags(err error) error {
	var ce *core.ConfigError
	if !errors.As(err, &ce) {
		return &exitError{code: exitUsage, err: err}
	}
	if r, ok := configRules[ce.Field+" "+ce.Rule]; ok && r.say != nil {
		return &exitError{code: exitUsage, err: &flagConfigError{msg: r.say(ce), cause: ce}}
	}
	return &exitError{code: exitUsage, err: err}
}

// flagConfigError is a core.ConfigError in electhost's words; it unwraps to
// the core's error.
type flagConfigError struct {
	msg   string
	cause *core.ConfigError
}

func (e *flagConfigError) Error() string { return e.msg }
func (e *flagConfigError) Unwrap() error { return e.cause }

// nameInWords words the refusal of a name that is not a flag of its own
// (members add's ID, keygen's --id): what says whose name it is.
func nameInWords(err error, what string) error {
	var ce *core.ConfigError
	if errors.As(err, &ce) && strings.HasPrefix(ce.Rule, "name-") {
		return &exitError{code: exitUsage, err: &flagConfigError{msg: nameSay(what)(ce), cause: ce}}
	}
	return inFlags(err)
}

func atoi(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
func i64(n int64) string  { return strconv.FormatInt(n, 10) }
func ms(n int64) string   { return durationOf(n).String() }

// msDur prints a millisecond count from the core as a duration flag value.
func msDur(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s + "ms"
	}
	return ms(n)
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
