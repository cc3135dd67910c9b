package pilotstandin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// TB is what the helpers need of a *testing.T or *testing.B: an interface,
// so that this package (linked into the stand-in pilotctl binary) does not
// import "testing", which would register the test flags in it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Build compiles the stand-in pilotctl binary once per test process and
// returns its absolute path (the file is named "pilotctl"). It is written to
// a per-user cache directory, replaced atomically, so concurrent test
// processes can share it and nothing is left in temp directories.
func Build(t TB) string {
	t.Helper()
	buildOnce.Do(func() { buildPath, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("pilotstandin: building pilotctl: %v", buildErr)
	}
	return buildPath
}

func build() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "electcore-test", "pilotstandin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	name := "pilotctl"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	out := filepath.Join(tmp, name)
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/electcore/electcore/internal/pilotstandin/cmd/pilotctl")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, b)
	}
	// One slot per source checkout, replaced atomically (running copies
	// keep their old inode).
	_, src, _, _ := runtime.Caller(0)
	sum := sha256.Sum256([]byte(src))
	final := filepath.Join(dir, hex.EncodeToString(sum[:6])+"-"+name)
	if err := os.Rename(out, final); err != nil {
		return "", err
	}
	return final, nil
}
