package statestore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStateSaveLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := openStore(t, dir)
	if _, err := s.Load("election:g1"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrMissing) {
		t.Fatalf("fresh: %v", err)
	}
	for _, v := range [][]byte{[]byte("term=1"), {}, bytes.Repeat([]byte{0xff, 0}, 5000), []byte("term=2")} {
		if err := s.Save("election:g1", v); err != nil {
			t.Fatal(err)
		}
		got, err := s.Load("election:g1")
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("load = %q, %v", got, err)
		}
	}
	// Survives reopening; no temp files left behind.
	s.Close()
	if _, err := s.Load("election:g1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	s2 := openStore(t, dir)
	if got, err := s2.Load("election:g1"); err != nil || string(got) != "term=2" {
		t.Fatalf("reopened: %q %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "LOCK.electcore MANIFEST.electcore election%3Ag1.state" {
		t.Fatalf("directory holds %v", names)
	}
	// A crash between write and rename leaves a temp file: ignored.
	os.WriteFile(filepath.Join(dir, ".election%3Ag1.state.tmp-123"), []byte("partial"), 0o600)
	if got, err := s2.Load("election:g1"); err != nil || string(got) != "term=2" {
		t.Fatalf("with a stray temp file: %q %v", got, err)
	}
	// Delete is an explicit reset.
	if err := s2.Delete("election:g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Load("election:g1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

func TestStateCorruptionDetected(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if err := s.Save("g", []byte(`{"term":41,"vote":"n2"}`)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "g.state")
	good, _ := os.ReadFile(path)
	mutations := map[string]func([]byte) []byte{
		"payload bit":  func(b []byte) []byte { b[len(b)-3] ^= 0x01; return b },
		"header magic": func(b []byte) []byte { b[0] ^= 0xff; return b },
		"version":      func(b []byte) []byte { b[4] = 9; return b },
		"length":       func(b []byte) []byte { b[8]++; return b },
		"crc":          func(b []byte) []byte { b[17] ^= 0x10; return b },
		"truncated":    func(b []byte) []byte { return b[:len(b)-1] },
		"trailing":     func(b []byte) []byte { return append(b, 0) },
		"short":        func(b []byte) []byte { return b[:7] },
		"empty":        func(b []byte) []byte { return nil },
	}
	for name, mut := range mutations {
		os.WriteFile(path, mut(bytes.Clone(good)), 0o600)
		if _, err := s.Load("g"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A corrupt manifest refuses to open.
	s.Close()
	mpath := filepath.Join(dir, manifestName)
	m, _ := os.ReadFile(mpath)
	m[len(m)-2] ^= 1
	os.WriteFile(mpath, m, 0o600)
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt manifest: %v", err)
	}
}

func TestStateMissingAfterItExisted(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	s.Save("g1", []byte("x"))
	s.Save("g2", []byte("y"))
	os.Remove(filepath.Join(dir, "g1.state"))
	if _, err := s.Load("g1"); !errors.Is(err, ErrMissing) || errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := s.Load("never"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("never saved: %v", err)
	}
	s.Close()
	// Still ErrMissing after a restart...
	s = openStore(t, dir)
	if _, err := s.Load("g1"); !errors.Is(err, ErrMissing) {
		t.Fatalf("missing after reopen: %v", err)
	}
	s.Close()
	// ...and if the manifest is lost too, the state files present rebuild it.
	os.Remove(filepath.Join(dir, manifestName))
	s = openStore(t, dir)
	os.Remove(filepath.Join(dir, "g2.state"))
	if _, err := s.Load("g2"); !errors.Is(err, ErrMissing) {
		t.Fatalf("missing after manifest rebuild: %v", err)
	}
}

func TestStateOpenErrors(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	s.Close()
	openStore(t, dir) // lock released

	file := filepath.Join(t.TempDir(), "afile")
	os.WriteFile(file, nil, 0o600)
	if _, err := Open(filepath.Join(file, "sub")); err == nil || !strings.Contains(err.Error(), "state directory") {
		t.Fatalf("dir under a file: %v", err)
	}
	if os.Geteuid() != 0 { // root ignores permissions
		ro := filepath.Join(t.TempDir(), "ro")
		os.Mkdir(ro, 0o500)
		if _, err := Open(ro); err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Fatalf("read-only dir: %v", err)
		}
	}
}

func TestStateNames(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, bad := range []string{"", ".", "..", "a/b", `a\b`, "../x", "a\x00"} {
		if err := s.Save(bad, nil); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Save(%q): %v", bad, err)
		}
		if _, err := s.Load(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Load(%q): %v", bad, err)
		}
	}
	for name, want := range map[string]string{
		"election:g1": "election%3Ag1.state",
		".hidden":     "%2Ehidden.state",
		"a.b c":       "a.b%20c.state",
	} {
		if got, _ := FileName(name); got != want {
			t.Errorf("FileName(%q) = %q, want %q", name, got, want)
		}
		if d, err := decodeFileName(strings.TrimSuffix(want, stateSuffix)); err != nil || d != name {
			t.Errorf("decode %q = %q %v", want, d, err)
		}
	}
	long := strings.Repeat("é", 200)
	f, _ := FileName(long)
	if len(f) > 255 {
		t.Fatalf("long name gives %d bytes", len(f))
	}
	if err := s.Save(long, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(long); err != nil || string(got) != "v" {
		t.Fatalf("long: %q %v", got, err)
	}
}
