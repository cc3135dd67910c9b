// Command build builds electcore.wasm, the module of package ../ (wasm):
//
//	go run ./wasm/build [-hd] [-o electcore.wasm] [go build flags...]
//
// (`make wasm` runs it.) It is the plain
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -ldflags="-s -w" -o electcore.wasm ./wasm
//
// with two differences in msgp's runtime package, which keep code the module
// never runs out of it (the plain build works too; it is just bigger than
// the module's 4 MB budget allows):
//
//   - its msgp→JSON converter tables are filled on first use instead of in
//     init(). Upstream fills them in init(), which links encoding/json's
//     encoder, reflection-based marshalling and ~115 KB of msgp's converters
//     into every program that imports msgp — ~580 KB of this module, which
//     never converts msgp to JSON.
//   - ctxString, which joins the path of a decoding error ("Join/0/Config"),
//     formats its values with strconv instead of fmt's %v. The core and the
//     module build their messages without fmt, so this was its last use in
//     the module: fmt's printf and the reflection it needs are ~280 KB.
//     The generated code passes field names and indices (strings and ints),
//     which it formats exactly as %v does (internal/wasmhost checks the
//     module's decoding errors against the native ones).
//
// The patches are applied to a copy of the msgp version in go.mod, outside
// the repository, and used through a temporary go.work: native builds and
// tests use msgp unchanged. If a new msgp version no longer matches the
// patches, the build fails and says so.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const msgpModule = "github.com/tinylib/msgp"

// patchVersion names the patch below: bump it when the patch changes, so a
// stale patched copy is never reused.
const patchVersion = "lazyjson1-ctxstring1"

// patches: file → (exact text, replacement); each text must occur once.
var patches = map[string][][2]string{
	"json.go": {
		{"\nfunc init() {\n", "\nfunc initDefuns() {\n"},
		{"\treturn defuns[t](w, src)\n", "\treturn lazyDefuns()[t](w, src)\n"},
	},
	"errors_default.go": {
		{"import (\n\t\"fmt\"\n\t\"strconv\"\n)\n", "import \"strconv\"\n"},
		{"\t\tout += fmt.Sprintf(\"%v\", cv)\n", "\t\tout += ctxValue(cv)\n"},
	},
	"json_bytes.go": {
		{"\nfunc init() {\n", "\nfunc initUnfuns() {\n"},
		{"\treturn unfuns[t](w, msg, scratch, depth)\n", "\treturn lazyUnfuns()[t](w, msg, scratch, depth)\n"},
	},
}

const lazyFile = `// Added by electcore's wasm/build: the converter tables are filled on first
// use instead of in init(), so programs that never convert msgp to JSON do
// not link encoding/json.

package msgp

import "sync"

var defunsOnce, unfunsOnce sync.Once

func lazyDefuns() *[_maxtype]func(jsWriter, *Reader) (int, error) {
	defunsOnce.Do(initDefuns)
	return &defuns
}

func lazyUnfuns() *[_maxtype]func(jsWriter, []byte, []byte, int) ([]byte, []byte, error) {
	unfunsOnce.Do(initUnfuns)
	return &unfuns
}
`

// ctxFile is added with the errors_default.go patch.
const ctxFile = `// Added by electcore's wasm/build: ctxString formats the parts of an
// error's path without fmt, as fmt's %v would for the types the generated
// code passes (field names and indices); anything else, which it never
// passes, is written "?".

package msgp

import "strconv"

func ctxValue(v any) string {
	switch v := v.(type) {
	case error:
		return v.Error()
	case interface{ String() string }:
		return v.String()
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case uint:
		return strconv.FormatUint(uint64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case bool:
		return strconv.FormatBool(v)
	}
	return "?"
}
`

func main() {
	out := flag.String("o", "", "output file (default electcore.wasm, or electcore-hd.wasm with -hd, at the repository root)")
	hd := flag.Bool("hd", false, "build the host-driven variant (-tags electcore_hostdriven)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./wasm/build [-hd] [-o file] [go build flags...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *hd, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "wasm/build:", err)
		os.Exit(1)
	}
}

func run(out string, hd bool, extra []string) error {
	root, err := goList("-m", "-f", "{{.Dir}}")
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(root, "electcore.wasm")
		if hd {
			out = filepath.Join(root, "electcore-hd.wasm")
		}
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	goVersion, err := goList("-m", "-f", "{{.GoVersion}}")
	if err != nil {
		return err
	}
	info, err := goList("-m", "-f", "{{.Version}} {{.Dir}}", msgpModule)
	if err != nil {
		return err
	}
	version, src, ok := strings.Cut(info, " ")
	if !ok || src == "" {
		return fmt.Errorf("%s is not in the module cache (run go mod download)", msgpModule)
	}
	msgpDir, err := patchedMsgp(version, src)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "electcore-wasm-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "go.work")
	ws := fmt.Sprintf("go %s\n\nuse %q\n\nreplace %s %s => %q\n", goVersion, root, msgpModule, version, msgpDir)
	if err := os.WriteFile(work, []byte(ws), 0o644); err != nil {
		return err
	}
	// -trimpath and -buildvcs=false make the build reproducible: the same
	// sources give the same bytes in any checkout, at any commit, which is
	// what lets the module be committed and checked (internal/module).
	args := []string{"build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-s -w"}
	if hd {
		args = append(args, "-tags=electcore_hostdriven")
	}
	args = append(args, extra...)
	args = append(args, "-o", out, "./wasm")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK="+work, "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v", strings.Join(args, " "), err)
	}
	return nil
}

func goList(args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(string(b)), nil
}

// patchedMsgp returns a directory holding msgp's module at version with the
// runtime package patched, creating it (atomically, so concurrent builds
// may share it) under the user cache directory if needed.
func patchedMsgp(version, src string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	base = filepath.Join(base, "electcore", "msgp")
	dir := filepath.Join(base, version+"-"+patchVersion)
	if _, err := os.Stat(filepath.Join(dir, "msgp", "lazy_json.go")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(base, "tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Mkdir(filepath.Join(tmp, "msgp"), 0o755); err != nil {
		return "", err
	}
	for _, f := range []string{"go.mod", "LICENSE"} {
		if err := copyFile(filepath.Join(src, f), filepath.Join(tmp, f), nil); err != nil {
			return "", err
		}
	}
	files, err := filepath.Glob(filepath.Join(src, "msgp", "*.go"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if err := copyFile(f, filepath.Join(tmp, "msgp", name), patches[name]); err != nil {
			return "", fmt.Errorf("%s %s: %v (update wasm/build for this msgp version)", msgpModule, version, err)
		}
	}
	for name, text := range map[string]string{"lazy_json.go": lazyFile, "ctx_string.go": ctxFile} {
		if err := os.WriteFile(filepath.Join(tmp, "msgp", name), []byte(text), 0o644); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another build got there first.
		if _, err2 := os.Stat(filepath.Join(dir, "msgp", "lazy_json.go")); err2 != nil {
			return "", err
		}
	}
	return dir, nil
}

func copyFile(from, to string, patch [][2]string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	for _, p := range patch {
		if n := bytes.Count(b, []byte(p[0])); n != 1 {
			return fmt.Errorf("%s: %q occurs %d times, want once", filepath.Base(from), p[0], n)
		}
		b = bytes.Replace(b, []byte(p[0]), []byte(p[1]), 1)
	}
	return os.WriteFile(to, b, 0o644)
}
