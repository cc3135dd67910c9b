package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documents a newcomer reads first, relative to the repository root.
var guides = []string{
	"README.md", "DESIGN.md", "RATIONALE.md", "host/BENCHMARKS.md",
	"cmd/electhost/README.md", "docs/pilotctl.md", "docs/wire.md", "docs/go-wasm.md",
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// TestGuideLinks: every link from one of the guides to a file of the
// repository names a file that exists and, with #anchor, a heading it has.
func TestGuideLinks(t *testing.T) {
	for _, doc := range guides {
		b, err := os.ReadFile(filepath.Join("..", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := filepath.Join("..", filepath.Dir(doc), file)
			if file == "" {
				path = filepath.Join("..", doc)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
				continue
			}
			if frag != "" && !hasAnchor(t, path, frag) {
				t.Errorf("%s links to %s: no heading with that anchor", doc, target)
			}
		}
	}
}

func hasAnchor(t *testing.T, path, frag string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
		if anchor(strings.ReplaceAll(h[1], "`", "")) == frag {
			return true
		}
	}
	return false
}

// TestReadmeFindsItsWay: from the README, one click reaches where a
// message enters (DESIGN.md's message path, which names each file), why a
// rule is what it is (RATIONALE.md) and where a figure is measured
// (host/BENCHMARKS.md); the README's own "Measured" is a summary of at most
// three lines that links to BENCHMARKS.md, the one home of figures.
func TestReadmeFindsItsWay(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, want := range []string{"(DESIGN.md#a-messages-path-file-by-file)", "(RATIONALE.md)", "(host/BENCHMARKS.md)"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not link %s", want)
		}
	}
	_, measured, ok := strings.Cut(readme, "\n## Measured\n")
	if !ok {
		t.Fatal("README.md has no Measured section")
	}
	measured, _, _ = strings.Cut(measured, "\n## ")
	lines := strings.Split(strings.TrimSpace(measured), "\n")
	if len(lines) > 3 || !strings.Contains(measured, "(host/BENCHMARKS.md)") {
		t.Errorf("README.md's Measured section has %d lines (at most 3) or no link to host/BENCHMARKS.md:\n%s", len(lines), measured)
	}
}
