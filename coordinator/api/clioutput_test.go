package api_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/internal/cli"
)

// cliOutput is the stdout and stderr of an in-process CLI command that a
// test goroutine can wait on: each write wakes the waiters, so a goroutine
// playing the agent reacts to what the CLI printed (its runs created, a
// state it has seen) instead of to the clock.
type cliOutput struct {
	mu       sync.Mutex
	out, err bytes.Buffer
	changed  chan struct{} // closed and replaced on each write
}

func newCLIOutput() *cliOutput { return &cliOutput{changed: make(chan struct{})} }

// stream writes into one of the buffers.
type stream struct {
	o *cliOutput
	b *bytes.Buffer
}

func (s stream) Write(p []byte) (int, error) {
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	close(s.o.changed)
	s.o.changed = make(chan struct{})
	return s.b.Write(p)
}

// waitFor waits until stdout or stderr contains text, for at most d.
func (o *cliOutput) waitFor(text string, d time.Duration) error {
	timeout := time.After(d)
	for {
		o.mu.Lock()
		found := strings.Contains(o.out.String(), text) || strings.Contains(o.err.String(), text)
		changed := o.changed
		o.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-changed:
		case <-timeout:
			o.mu.Lock()
			defer o.mu.Unlock()
			return fmt.Errorf("the CLI did not print %q within %s:\nstdout:\n%s\nstderr:\n%s", text, d, o.out.String(), o.err.String())
		}
	}
}

// lesfarmWatched runs the CLI in-process like lesfarm, writing into o.
func lesfarmWatched(o *cliOutput, args ...string) (int, string, string) {
	code := cli.Main(args, strings.NewReader(""), stream{o, &o.out}, stream{o, &o.err})
	o.mu.Lock()
	defer o.mu.Unlock()
	return code, o.out.String(), o.err.String()
}
