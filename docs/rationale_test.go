// Package docs_test checks that the repository's reference documents keep
// their indexes true.
package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const (
	tocStart = "<!-- contents: TestRationaleContents writes the expected list when it differs -->"
	tocEnd   = "<!-- end of contents -->"
)

// TestRationaleContents: RATIONALE.md's table of contents lists every
// section and, under it, every decision (the bold lead of an entry), in
// order. On a difference it prints the list to paste.
func TestRationaleContents(t *testing.T) {
	b, err := os.ReadFile("../RATIONALE.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i, j := strings.Index(text, tocStart), strings.Index(text, tocEnd)
	if i < 0 || j < i {
		t.Fatalf("RATIONALE.md has no contents between %q and %q", tocStart, tocEnd)
	}
	got := strings.TrimSpace(text[i+len(tocStart) : j])
	want := contents(text[j+len(tocEnd):])
	if got != want {
		t.Errorf("RATIONALE.md's contents are stale; replace them with:\n%s", want)
	}
}

var (
	nonAnchor = regexp.MustCompile("[^a-z0-9 _-]")
	boldLead  = regexp.MustCompile(`(?s)^\*\*(.+?)\*\*`)
)

// contents lists the ## and ### headings of body (linked as GitHub anchors
// them) and, indented under each, the bold leads of its paragraphs.
func contents(body string) string {
	var out []string
	indent := ""
	for _, para := range strings.Split(body, "\n\n") {
		para = strings.TrimSpace(para)
		switch {
		case strings.HasPrefix(para, "## "), strings.HasPrefix(para, "### "):
			level, title, _ := strings.Cut(para, " ")
			title = strings.TrimSpace(strings.SplitN(title, "\n", 2)[0])
			indent = strings.Repeat("  ", len(level)-2)
			out = append(out, indent+"- ["+title+"](#"+anchor(title)+")")
			indent += "  "
		case boldLead.MatchString(para):
			lead := boldLead.FindStringSubmatch(para)[1]
			lead = strings.TrimSuffix(strings.Join(strings.Fields(lead), " "), ".")
			out = append(out, indent+"- "+lead)
		}
	}
	return strings.Join(out, "\n")
}

// anchor is GitHub's id for a heading: lower case, punctuation dropped,
// spaces as hyphens.
func anchor(title string) string {
	return strings.ReplaceAll(nonAnchor.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
}
