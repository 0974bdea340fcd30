// The processes of TestE2EAgentProcessSIGKILL (e2e_kill_process_test.go):
// the lesfarm binary, agent processes, a NATS proxy that can cut them off.

package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/testenv"
)

// lesfarmBuild is the lesfarm binary being built in the background.
type lesfarmBuild struct {
	path string
	done chan struct{}
	err  error
	took time.Duration
}

func (b *lesfarmBuild) wait() error { <-b.done; return b.err }

// sharedBuild is the one lesfarm binary of this test process: the
// process-level tests (agent kill, agent restart, serve kill) share it
// instead of linking it once each (tens of seconds on a loaded machine).
// TestMain removes its directory.
var sharedBuild struct {
	sync.Mutex
	b   *lesfarmBuild
	dir string
}

// removeSharedBuild deletes the shared binary, after every test ran.
func removeSharedBuild() {
	sharedBuild.Lock()
	defer sharedBuild.Unlock()
	if sharedBuild.b != nil {
		<-sharedBuild.b.done
		os.RemoveAll(sharedBuild.dir)
	}
}

// buildLesfarm returns the build of ./cmd/lesfarm of this module, started
// in the background by the first caller (the Go build cache makes it quick
// after the first time).
func buildLesfarm(t *testing.T, goBin string) *lesfarmBuild {
	t.Helper()
	sharedBuild.Lock()
	defer sharedBuild.Unlock()
	if b := sharedBuild.b; b != nil {
		return b
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := wd
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatalf("no go.mod above %s", wd)
		}
		root = parent
	}
	dir, err := os.MkdirTemp("", "lesfarm-agent-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	b := &lesfarmBuild{path: filepath.Join(dir, "lesfarm"), done: make(chan struct{})}
	sharedBuild.b, sharedBuild.dir = b, dir
	go func() {
		defer close(b.done)
		start := time.Now()
		cmd := exec.Command(goBin, "build", "-o", b.path, "./cmd/lesfarm")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build ./cmd/lesfarm in %s: %v\n%s", root, err, out)
			return
		}
		b.took = time.Since(start)
	}()
	return b
}

// agentProcess is a `lesfarm agent` child process.
type agentProcess struct {
	label string
	cmd   *exec.Cmd
	out   *lockedBuffer
	done  chan struct{}
	err   error
}

func startAgentProcess(t *testing.T, bin, label string, args ...string) *agentProcess {
	t.Helper()
	p := &agentProcess{label: label, out: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s agent: %v", label, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s agent (pid %d, %s) output (tail):\n%s", p.label, p.cmd.Process.Pid, p.cmd.ProcessState, tail(p.out.String(), 150))
		}
	})
	return p
}

func (p *agentProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// status is a line for poll diagnostics.
func (p *agentProcess) status() string {
	if p.exited() {
		return fmt.Sprintf("%s agent EXITED (%v)", p.label, p.err)
	}
	return p.label + " agent alive"
}

// kill sends SIGKILL and checks the process died of it.
func (p *agentProcess) kill(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s agent exited before the kill: %v", p.label, p.err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s agent did not die of SIGKILL", p.label)
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%s agent ended with %v, want killed by SIGKILL", p.label, p.cmd.ProcessState)
	}
}

// stop sends SIGTERM and expects a clean exit.
func (p *agentProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s agent did not stop within 20s of SIGTERM", p.label)
	}
	if p.err != nil {
		t.Fatalf("%s agent exited with %v after SIGTERM", p.label, p.err)
	}
}

// logLines returns the output lines containing any of the needles.
func (p *agentProcess) logLines(needles ...string) []string {
	var out []string
	for _, l := range strings.Split(p.out.String(), "\n") {
		for _, n := range needles {
			if strings.Contains(l, n) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// pollUntil polls ok every 25 ms until it holds or within passes; the
// failure shows ok's last diagnostic.
func pollUntil(t *testing.T, within time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, within, 25*time.Millisecond, func() error {
		if done, diag := ok(); !done {
			return fmt.Errorf("waiting for %s: %s", what, diag)
		}
		return nil
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = append([]string{fmt.Sprintf("... (%d earlier lines)", len(ls)-lines)}, ls[len(ls)-lines:]...)
	}
	return strings.Join(ls, "\n")
}
