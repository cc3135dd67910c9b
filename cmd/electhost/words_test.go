package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/electcore/electcore/core"
)

// coreConfigRules lists every "field rule" core's Config validation can
// return, read from core's source: each configErr call names its field and
// rule as literals, or (checkName) its field through checkName's callers. A
// validation function that returns a plain errors.New is a failure too: its
// message could not be mapped to a flag.
func coreConfigRules(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../../core", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	lit := func(e ast.Expr) (string, bool) {
		if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
			s, err := strconv.Unquote(b.Value)
			return s, err == nil
		}
		return "", false
	}
	validators := map[string]bool{"normalize": true, "WithTimingDefaults": true, "checkName": true, "normalizeAuth": true}
	var nameFields, nameRules []string
	rules := map[string]bool{}
	for _, f := range pkgs["core"].Files {
		var inValidator string // the validation function n is in ("": none)
		ast.Inspect(f, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok {
				inValidator = ""
				if validators[fd.Name.Name] {
					inValidator = fd.Name.Name
				}
			}
			if se, ok := n.(*ast.SelectorExpr); ok && inValidator != "" && se.Sel.Name == "New" {
				if x, ok := se.X.(*ast.Ident); ok && x.Name == "errors" {
					t.Errorf("%s: %s returns an errors.New: give it a configErr (field, rule, bounds) and electhost a configRules entry", fset.Position(se.Pos()), inValidator)
				}
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			id, ok := call.Fun.(*ast.Ident)
			if !ok {
				return true
			}
			switch id.Name {
			case "checkName":
				if inValidator == "" {
					return true // a name in a message, not in a Config
				}
				field, ok := lit(call.Args[0])
				if !ok {
					t.Errorf("%s: checkName's field is not a literal", fset.Position(call.Pos()))
				}
				nameFields = append(nameFields, field)
			case "configErr":
				rule, ok := lit(call.Args[1])
				if !ok {
					t.Errorf("%s: configErr's rule is not a literal", fset.Position(call.Pos()))
					return true
				}
				if field, ok := lit(call.Args[0]); ok {
					rules[field+" "+rule] = true
				} else {
					nameRules = append(nameRules, rule) // checkName's: its callers name the field
				}
			}
			return true
		})
	}
	for _, f := range nameFields {
		for _, r := range nameRules {
			rules[f+" "+r] = true
		}
	}
	var out []string
	for r := range rules {
		out = append(out, r)
	}
	sort.Strings(out)
	if len(out) < 20 {
		t.Fatalf("found only %d rules in core: the parser missed them: %v", len(out), out)
	}
	return out
}

// TestConfigRulesAllMapped: every rule of core's Config validation has a
// configRules entry, and every one electhost can break is broken here,
// through the CLI, and said in flags: core cannot add or change a rule
// without this test noticing.
func TestConfigRulesAllMapped(t *testing.T) {
	tmp := t.TempDir()
	keyFile, pubA := writeEd25519Key(t, tmp, "a.pem")
	_, pubB := writeEd25519Key(t, tmp, "b.pem")
	membersJSON := func(name string, m map[string]string) string {
		b, _ := json.Marshal(m)
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	many := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = "m" + strconv.Itoa(i)
		}
		return ids
	}
	manyKeys := map[string]string{"a": pubA}
	for _, id := range many(core.MaxMembers) {
		manyKeys[id] = pubB
	}
	long := strings.Repeat("x", core.MaxIDLen+1)
	quorum := []string{"run", "--group", "g", "--id", "a"}
	withCmd := func(args ...string) []string { return append(append(quorum, args...), "--", "true") }
	ed := func(file string, members string) []string {
		return append(quorum, "--members", members, "--key", keyFile, "--members-file", file)
	}
	cases := map[string][]string{
		"heartbeat_ms heartbeat-range":               append(quorum, "--members", "a", "--heartbeat", "5ms"),
		"election_timeout_ms election-timeout-range": {"run", "--group", "g", "--mode", "bully", "--heartbeat", "1s", "--election-timeout", "2s"},
		"lease_ms lease-range":                       append(quorum, "--members", "a", "--lease", "50ms"),
		"handoff_hold_ms handoff-hold-range":         withCmd("--members", "a", "--heartbeat", "100ms", "--election-timeout", "600ms", "--grace", "550ms"),
		"members members-count":                      append(quorum, "--members", "a,"+strings.Join(many(core.MaxMembers), ",")),
		"members members-twice":                      append(quorum, "--members", "a,b,b"),
		"members members-self":                       append(quorum, "--members", "b,c,d"),
		"members members-required":                   quorum,
		"id name-length":                             {"run", "--group", "g", "--mode", "bully", "--id", long},
		"id name-byte":                               {"run", "--group", "g", "--mode", "bully", "--id", "a b"},
		"group name-length":                          {"run", "--group", long, "--mode", "bully"},
		"group name-byte":                            {"run", "--group", "g!", "--mode", "bully"},
		"member name-length":                         append(quorum, "--members", "a,"+long),
		"member name-byte":                           append(quorum, "--members", "a,b c"),
		"member_keys id name-empty":                  ed(membersJSON("empty.json", map[string]string{"a": pubA, "": pubB}), "a"),
		"member_keys id name-length":                 ed(membersJSON("long.json", map[string]string{"a": pubA, long: pubB}), "a"),
		"member_keys id name-byte":                   ed(membersJSON("byte.json", map[string]string{"a": pubA, "b c": pubB}), "a"),
		"member_keys member-keys-count":              ed(membersJSON("many.json", manyKeys), "a"),
		"member_keys member-key-not-own":             ed(membersJSON("notown.json", map[string]string{"a": pubB}), "a"),
		"member_keys member-key-missing":             ed(membersJSON("missing.json", map[string]string{"a": pubA}), "a,b"),
		"value value-length":                         append(quorum, "--members", "a", "--value", strings.Repeat("x", core.MaxValueLen+1)),
		"value value-byte":                           append(quorum, "--members", "a", "--value", "a\tb"),
	}
	rules := coreConfigRules(t)
	seen := map[string]bool{}
	for _, key := range rules {
		seen[key] = true
		r, ok := configRules[key]
		switch {
		case !ok:
			t.Errorf("core rule %q has no configRules entry: say which flag breaks it (or why none can)", key)
		case r.unreachable != "":
			if r.flag != "" || r.say != nil || cases[key] != nil {
				t.Errorf("%q: marked unreachable (%s) but has a flag, words or a case", key, r.unreachable)
			}
		case r.flag == "" || r.say == nil:
			t.Errorf("%q: no flag or words", key)
		case cases[key] == nil:
			t.Errorf("%q: no case breaks it through the CLI", key)
		}
	}
	for key := range configRules {
		if !seen[key] {
			t.Errorf("configRules has %q, which core no longer has", key)
		}
	}
	for key, args := range cases {
		t.Run(key, func(t *testing.T) {
			// A cancelled context: were validation to pass, run stops at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stdout, stderr bytes.Buffer
			root := newRootCmd(&stdout, &stderr)
			root.SetArgs(args)
			err := root.ExecuteContext(ctx)
			var ce *core.ConfigError
			if !errors.As(err, &ce) || ce.Field+" "+ce.Rule != key {
				t.Fatalf("electhost %s: %v, want core's %q", strings.Join(args, " "), err, key)
			}
			stderr.Reset()
			if code := execute(ctx, args, &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d: %s", code, exitUsage, stderr.String())
			}
			oneErrorLine(t, stderr.String(), configRules[key].flag)
			for _, leak := range []string{"_ms", "member_keys", "await_config", "×heartbeat"} {
				if strings.Contains(stderr.String(), leak) {
					t.Fatalf("names core's field (%q): %s", leak, stderr.String())
				}
			}
		})
	}
}

// writeEd25519Key writes a fresh ed25519 private key as electhost keygen
// does (PKCS #8 PEM, mode 0600) and returns its path and public key.
func writeEd25519Key(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, base64.StdEncoding.EncodeToString(pub)
}

// TestUserWordsKeepsFileNames: package prefixes go, file names that end in
// one stay whole (a corrupt manifest was named "MANIFEST.electstate").
func TestUserWordsKeepsFileNames(t *testing.T) {
	for in, want := range map[string]string{
		"state manifest /s/MANIFEST.electcore: statestore: state corrupt: bad magic": "state manifest /s/MANIFEST.electcore: state corrupt: bad magic",
		"host: compiling x: core: y":                     "compiling x: y",
		"join g: transport: down; statestore: disk full": "join g: down; disk full",
		"(host: x)": "(x)",
	} {
		if got := userWords(in); got != want {
			t.Errorf("userWords(%q) = %q, want %q", in, got, want)
		}
	}
}
