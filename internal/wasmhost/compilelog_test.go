package wasmhost

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestCompileIsAnnounced: the first start on a machine (an empty cache)
// says that it compiles the module and how long that took; a later start,
// which loads it from the cache, says nothing about it.
func TestCompileIsAnnounced(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	start := func() string {
		var logs bytes.Buffer
		r, err := NewRuntime(ctx, Config{WasmPath: testWasm, CacheDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		r.Close(ctx)
		return logs.String()
	}
	defer forgetCache(dir)
	first := start()
	if !strings.Contains(first, "compiling the electcore module for this machine") || !strings.Contains(first, "compiled the electcore module") || !strings.Contains(first, "took=") {
		t.Fatalf("first start, empty cache:\n%s", first)
	}
	forgetCache(dir) // as a new process would
	if again := start(); strings.Contains(again, "compil") {
		t.Fatalf("a start that loads the module from the cache talks of compiling:\n%s", again)
	}
}
