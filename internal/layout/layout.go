// Package layout writes the layout table of the README from the package
// doc comments, so the map of the tree and the tree cannot drift apart:
// one row per package, its folder and the synopsis (first sentence) of
// its doc comment. TestREADMELayout fails when README.md's table differs
// from what Table generates; `go generate ./internal/layout` rewrites it.
package layout

//go:generate go test . -run TestREADMELayout -update

import (
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
)

// Begin and End mark the generated table in the README; what lies between
// them is Table's output and nothing else.
const (
	Begin = "<!-- layout:begin (go generate ./internal/layout writes this table from the package doc comments) -->"
	End   = "<!-- layout:end -->"
)

// Row is one package of the tree: its folder relative to the module root
// and its doc comment's synopsis, without the leading "Package name" or
// "Command name".
type Row struct {
	Dir, Doc string
}

// Rows lists the packages under root in folder order, leaving out test
// harnesses (folders named *test, which production code never imports),
// testdata and hidden folders. A package without a doc comment is an
// error naming it: every room says what it is.
func Rows(root string) ([]Row, error) {
	var rows []Row
	var missing []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || strings.HasSuffix(name, "test")) {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, build.ImportComment)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) || (err == nil && len(pkg.GoFiles)+len(pkg.CgoFiles) == 0) {
			return nil // no package here, or tests only
		}
		if err != nil {
			return fmt.Errorf("layout: %s: %w", path, err)
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		doc := synopsis(pkg.Doc, pkg.Name, name)
		if doc == "" {
			missing = append(missing, rel)
		}
		rows = append(rows, Row{Dir: rel, Doc: doc})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return rows, fmt.Errorf("layout: no package doc comment in %s (add a doc.go saying what the package is)", strings.Join(missing, ", "))
	}
	slices.SortFunc(rows, func(a, b Row) int { return strings.Compare(a.Dir, b.Dir) })
	return rows, nil
}

// synopsis trims a doc synopsis ("Package store is the coordinator's
// only SQL speaker: every query ...") to what follows the package's name
// (a command's is its folder's, dir), up to the
// first colon or semicolon, which ends the one-line answer to "what is
// this room".
func synopsis(doc, name, dir string) string {
	for _, p := range []string{"Package " + name + " ", "Command " + dir + " "} {
		if rest, ok := strings.CutPrefix(doc, p); ok {
			doc = rest
			break
		}
	}
	if i := strings.IndexAny(doc, ":;"); i > 0 {
		doc = doc[:i]
	}
	doc = strings.TrimSuffix(strings.TrimSpace(doc), ".")
	return strings.ReplaceAll(doc, "|", `\|`)
}

// Table renders rows as the README's Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| folder | what it is |\n|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s |\n", r.Dir, r.Doc)
	}
	return b.String()
}

// Replace returns readme with the text between Begin and End replaced by
// table, or an error when the markers are missing or out of order.
func Replace(readme, table string) (string, error) {
	i := strings.Index(readme, Begin)
	j := strings.Index(readme, End)
	if i < 0 || j < i {
		return "", fmt.Errorf("layout: README lacks the markers %q and %q around its layout table", Begin, End)
	}
	return readme[:i+len(Begin)] + "\n" + table + readme[j:], nil
}
