package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestLineFrames: carriage-return frames become at most one plain line per
// interval, the last frame is printed whole at the final newline, and
// escape codes are dropped.
func TestLineFrames(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	l := newLineFrames(&out, 10*time.Second, func() time.Time { return now })
	frames := []struct {
		at    time.Duration
		frame string
	}{
		{0, "\rpack 10% |\x1b[32m###\x1b[0m      | (1 MB/s)"},
		{time.Second, "\rpack 20% |##        |"},
		{11 * time.Second, "\rpack 60% |######    |"}, // prints the 20% frame: 11 s since the start
		{12 * time.Second, "\rpack 80% |########  |"},
		{13 * time.Second, "\rpack 100% |##########|\n"},
	}
	for _, f := range frames {
		now = time.Unix(0, 0).Add(f.at)
		if _, err := l.Write([]byte(f.frame)); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{"pack 20% |##        |", "pack 100% |##########|"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}
	if strings.ContainsAny(out.String(), "\r\x1b") {
		t.Errorf("output keeps control characters: %q", out.String())
	}
}

// TestBytesBarNotATerminal: a bar writing to a buffer (as in CI) prints
// plain lines only, ending with the finished bar.
func TestBytesBarNotATerminal(t *testing.T) {
	var errOut bytes.Buffer
	bar := newBytesBar(&Env{Stderr: &errOut}, 1000, "pack m.gguf", false)
	for range 10 {
		_ = bar.Add(100)
	}
	_ = bar.Finish()
	s := errOut.String()
	if strings.ContainsAny(s, "\r\x1b") || !strings.Contains(s, "pack m.gguf") || !strings.Contains(s, "100%") {
		t.Errorf("non-terminal progress %q: want plain lines ending at 100%%", s)
	}
	if n := strings.Count(s, "\n"); n > 3 {
		t.Errorf("%d lines for a bar that finished within a second", n)
	}
}
