// Command testsum reads `go test -json` on stdin and prints what plain
// `go test` prints (one result line per package, the output of failed
// tests), followed by one line that counts the skipped tests and names their
// packages, so skips cannot hide behind "ok". It exits non-zero when any
// test or package failed or the stream was malformed.
//
// Usage: go test -json ./... | go run ./internal/testsum
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one test2json record (cmd/test2json documents the fields).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// summarize copies the essential lines of a go test -json stream from r to w
// and reports whether anything failed.
func summarize(r io.Reader, w io.Writer) (failed bool, err error) {
	type key struct{ pkg, test string }
	output := map[key][]string{}
	skipped := map[string][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			// Build errors and other non-JSON lines go through unchanged.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "output":
			output[k] = append(output[k], ev.Output)
		case "skip":
			if ev.Test != "" {
				skipped[ev.Package] = append(skipped[ev.Package], ev.Test)
			}
			delete(output, k)
		case "pass":
			if ev.Test == "" {
				printResult(w, output[k])
			}
			delete(output, k)
		case "fail":
			failed = true
			if ev.Test != "" {
				fmt.Fprint(w, strings.Join(output[k], ""))
			} else {
				printResult(w, output[k])
			}
			delete(output, k)
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	fmt.Fprintln(w, skipLine(skipped))
	return failed, nil
}

// printResult prints the package-level lines (the "ok"/"FAIL" summary and any
// output outside a test, such as a panic or TestMain's messages), without
// the verbose-mode PASS/RUN chatter.
func printResult(w io.Writer, lines []string) {
	for _, l := range lines {
		if l == "PASS\n" || strings.HasPrefix(l, "=== ") {
			continue
		}
		fmt.Fprint(w, l)
	}
}

// skipLine is the closing line: the number of skipped tests and, per
// package, how many.
func skipLine(skipped map[string][]string) string {
	total := 0
	pkgs := make([]string, 0, len(skipped))
	for p, ts := range skipped {
		total += len(ts)
		pkgs = append(pkgs, fmt.Sprintf("%s (%d)", p, len(ts)))
	}
	sort.Strings(pkgs)
	if total == 0 {
		return "testsum: 0 tests skipped"
	}
	return fmt.Sprintf("testsum: %d tests skipped in %s (go test -v -run NAME shows why)", total, strings.Join(pkgs, ", "))
}
