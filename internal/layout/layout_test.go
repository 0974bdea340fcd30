package layout

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md's layout table from the package doc comments")

// TestREADMELayout fails when README.md's layout table is not what the
// package doc comments generate (run `go generate ./internal/layout`).
func TestREADMELayout(t *testing.T) {
	root := filepath.Join("..", "..")
	rows, err := Rows(root)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Replace(string(readme), Table(rows))
	if err != nil {
		t.Fatal(err)
	}
	if want == string(readme) {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("README.md's layout table differs from the package doc comments: run `go generate ./internal/layout`\n%s", firstDiff(string(readme), want))
}

// firstDiff returns the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return "README:    " + g[i] + "\ngenerated: " + w[i]
		}
	}
	return "lengths differ"
}

func TestSynopsis(t *testing.T) {
	t.Parallel()
	tests := []struct{ doc, name, want string }{
		{"Package store is the coordinator's only SQL speaker: every query lives here.", "store", "is the coordinator's only SQL speaker"},
		{"Command lesfarm is the single binary of the farm.", "lesfarm", "is the single binary of the farm"},
		{"Package ingest moves telemetry and results from JetStream into Postgres.", "ingest", "moves telemetry and results from JetStream into Postgres"},
		{"Package x splits a | b; then more.", "x", `splits a \| b`},
		{"", "empty", ""},
	}
	for _, tc := range tests {
		if got := synopsis(tc.doc, tc.name, tc.name); got != tc.want {
			t.Errorf("synopsis(%q) = %q, want %q", tc.doc, got, tc.want)
		}
	}
}

func TestRowsNeedDocComments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for path, src := range map[string]string{
		"a/a.go":          "// Package a is documented.\npackage a\n",
		"b/b.go":          "package b\n",
		"c/ctest/c.go":    "package ctest\n",        // a test harness: left out
		"d/testdata/d.go": "package d\n",            // testdata: left out
		"e/e_test.go":     "package e\n",            // tests only: no package
		"go.mod":          "module example.com/m\n", // the module root
		"f/f.go":          "// Command f runs.\npackage main\n",
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := Rows(dir)
	if err == nil || !strings.Contains(err.Error(), "no package doc comment in b") {
		t.Fatalf("Rows = %v, want an error naming b", err)
	}
	got := Table(rows)
	want := "| folder | what it is |\n|---|---|\n| `a` | is documented |\n| `b` |  |\n| `f` | runs |\n"
	if got != want {
		t.Fatalf("table\n%s\nwant\n%s", got, want)
	}
	if _, err := Replace("no markers", got); err == nil {
		t.Fatal("Replace without markers succeeded")
	}
	if out, err := Replace("x\n"+Begin+"\nold\n"+End+"\ny", "new\n"); err != nil || out != "x\n"+Begin+"\nnew\n"+End+"\ny" {
		t.Fatalf("Replace = %q, %v", out, err)
	}
}
