package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCoreIsPure fails if a non-test file of the core does I/O, reads the
// clock, sleeps, synchronises, starts a goroutine or draws global randomness:
// the core must stay a deterministic function of its inputs (DESIGN.md).
func TestCoreIsPure(t *testing.T) {
	forbiddenImports := map[string]bool{
		"os": true, "net": true, "syscall": true, "sync": true, "sync/atomic": true,
		"math/rand": true, "crypto/rand": true, "unsafe": true, "io/ioutil": true,
		"os/exec": true, "net/http": true, "log": true, "log/slog": true,
	}
	// From math/rand/v2 only the seeded generator's constructor is allowed.
	allowedRandV2 := map[string]bool{"NewPCG": true, "PCG": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		checked++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]string{} // local name → import path
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if forbiddenImports[p] {
				t.Errorf("%s imports %q", fset.Position(imp.Pos()), p)
			}
			name := p[strings.LastIndex(p, "/")+1:]
			if p == "math/rand/v2" {
				name = "rand"
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names[name] = p
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				id, ok := n.X.(*ast.Ident)
				if !ok {
					break
				}
				switch p := names[id.Name]; {
				case p == "time" && (n.Sel.Name == "Now" || n.Sel.Name == "Sleep" || n.Sel.Name == "Since" ||
					n.Sel.Name == "Until" || n.Sel.Name == "After" || n.Sel.Name == "Tick" ||
					n.Sel.Name == "NewTimer" || n.Sel.Name == "NewTicker" || n.Sel.Name == "AfterFunc"):
					t.Errorf("%s calls time.%s", fset.Position(n.Pos()), n.Sel.Name)
				case p == "math/rand/v2" && !allowedRandV2[n.Sel.Name]:
					t.Errorf("%s uses global randomness rand.%s", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked only %d files: is the test running in core/?", checked)
	}
}
