package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// Defaults of ChildLimits.
const (
	// DefaultHelloTimeout is how long a runner child has to say hello.
	DefaultHelloTimeout = 30 * time.Second
	// rssPollEvery is how often the process group's resident memory is
	// read (Linux); its membership is rescanned every rssScanEvery polls.
	rssPollEvery = 100 * time.Millisecond
	rssScanEvery = 10
	// drainTimeout bounds reading what a runner wrote once its process
	// group is gone (a process that left the group may hold the pipes).
	drainTimeout = 5 * time.Second
)

// ChildLimits bounds a runner child. The zero value sets no timeout and no
// RAM budget, and waits DefaultHelloTimeout for the hello.
type ChildLimits struct {
	// Timeout bounds the child's whole run; 0 means none (ctx still
	// bounds it).
	Timeout time.Duration
	// RAMBudget is the most resident memory, in bytes, the child's process
	// group may hold; 0 means none. It is enforced where the group's
	// memory can be read (Linux /proc).
	RAMBudget int64
	// HelloTimeout bounds the wait for the hello line; 0 means
	// DefaultHelloTimeout.
	HelloTimeout time.Duration
}

// ChildInfo is what the supervisor learned about a runner child: its hello
// (zero when it never said one), its peak resident memory (the largest of
// the process group's polled RSS sum and the child's own maximum RSS) and
// the end of its standard error (at most protocol.MaxStderrTail bytes,
// valid UTF-8).
type ChildInfo struct {
	Protocol            int
	Revision, GoVersion string
	// Module is the runner's module version ("(devel)" for a build from a
	// source tree); Modified says its tree had uncommitted changes.
	Module       string
	Modified     bool
	PeakRSSBytes int64
	StderrTail   string
}

// BuildError is a failure of the build's code: its runner crashed, was
// killed by a signal, printed malformed protocol output, spoke a runner
// protocol the agent does not, never said hello, hung past its timeout,
// overran the RAM budget or left results out. It is the build's failure,
// not the farm's, and is not retried as infrastructure.
type BuildError struct {
	// Reason says what the runner did, in one line.
	Reason string
	// StderrTail is the end of the runner's standard error.
	StderrTail string
}

// Error implements error.
func (e *BuildError) Error() string { return "build failed: " + e.Reason }

// RunChild runs job with a build's executable instead of the embedded
// runtime: it starts `exe runner` in its own process group, speaks the
// runner protocol with it (protocol/runner.go) and relays what it reports
// to job's Sink, Position, OnConfig, OnResult and OnProgress as Run would.
// The child gets r's settings (runnerJob).
//
// It returns the results the child reported (in full when err is nil) and,
// once the child started, its ChildInfo. The error is ctx's cause when ctx
// ended (the child is killed), a *BuildError when the build failed, and
// any other error when the agent could not start or feed the child (an
// infrastructure failure). Every process of the child's group is killed
// before RunChild returns, whatever happened.
func (r *Runner) RunChild(ctx context.Context, exe string, job *Job, lim ChildLimits) ([]protocol.ConfigResult, *ChildInfo, error) {
	return r.RunCommand(ctx, ChildCommand{Path: exe, Args: []string{"runner"}}, job, lim)
}

// ChildCommand is how RunCommand starts a runner: a local process (Path
// with Args), which either is the runner (`EXE runner`) or carries its
// protocol from elsewhere, such as `adb -s SERIAL shell ... EXE runner`
// on a phone. The zero value is invalid.
type ChildCommand struct {
	// Path and Args are the local process; Env, if set, is added to its
	// environment.
	Path string
	Args []string
	Env  []string
	// Remote says the runner is not the local process (nor in its group):
	// the local group's memory is not the runner's, so neither the RAM
	// budget nor the peak RSS is taken from it.
	Remote bool
	// Kill, if set, kills the runner where it runs; it is called when
	// RunCommand kills the local process group on a failure (cancel,
	// timeout, a protocol violation) and when the child exited without its
	// done line, so that a remote runner whose transport died or that
	// outlived its session is gone too.
	Kill func()
	// Transport, if set, is asked after a runner ended as a build failure
	// whether its transport was lost meanwhile (the phone was unplugged):
	// a non-nil error replaces the *BuildError and the run is the farm's
	// failure, not the build's.
	Transport func() error
}

// RunCommand is RunChild for a runner started by cc (see ChildCommand).
func (r *Runner) RunCommand(ctx context.Context, cc ChildCommand, job *Job, lim ChildLimits) ([]protocol.ConfigResult, *ChildInfo, error) {
	lim.HelloTimeout = cmp.Or(lim.HelloTimeout, DefaultHelloTimeout)
	if cc.Remote {
		lim.RAMBudget = 0
	}
	c := &childRun{r: r, job: job, lim: lim, cc: cc, log: cmp.Or(r.Logger, slog.Default()),
		hello: make(chan int, 1), failed: make(chan error, 1), over: make(chan int64, 1),
		readDone: make(chan struct{}), errDone: make(chan struct{}), exited: make(chan struct{}), polled: make(chan struct{})}
	if err := c.start(); err != nil {
		return nil, nil, err
	}
	err := c.supervise(ctx)
	if be := (*BuildError)(nil); errors.As(err, &be) && cc.Transport != nil {
		if terr := cc.Transport(); terr != nil {
			c.log.Warn("agent: runner transport lost", "err", terr, "runner_said", be.Reason)
			err = terr
		}
	}
	c.info.StderrTail = c.tail.String()
	if be := (*BuildError)(nil); errors.As(err, &be) {
		be.StderrTail = c.info.StderrTail
	}
	return c.results, &c.info, err
}

// childRun is one runner child and the goroutines that watch it: read
// (stdout), readErr (stderr), the exit waiter and the RSS poller, all
// owned and waited for by supervise.
type childRun struct {
	r   *Runner
	job *Job
	lim ChildLimits
	cc  ChildCommand
	log *slog.Logger

	cmd                   *exec.Cmd
	pgid                  int
	stdin, stdout, stderr *os.File
	exit                  exitWaiter

	hello    chan int   // the hello's version, once valid
	failed   chan error // the first protocol violation (a *BuildError)
	over     chan int64 // the group's RSS when it passed the budget
	readDone chan struct{}
	errDone  chan struct{}
	exited   chan struct{}
	polled   chan struct{}
	stopPoll chan struct{}
	peak     atomic.Int64

	tail stderrTail

	// Written by read, read by supervise after readDone.
	info      ChildInfo
	results   []protocol.ConfigResult
	gotHello  bool
	done      bool
	runnerErr string
}

// start starts the child with its three pipes and its goroutines.
func (c *childRun) start() error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		return err
	}
	c.cmd = exec.Command(c.cc.Path, c.cc.Args...)
	if len(c.cc.Env) > 0 {
		c.cmd.Env = append(c.cmd.Environ(), c.cc.Env...)
	}
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = inR, outW, errW
	c.cmd.SysProcAttr = childProcAttr()
	err = c.cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return fmt.Errorf("runner: start %s: %w", c.cc.Path, err)
	}
	c.pgid = c.cmd.Process.Pid // Setpgid: the child leads its own group
	c.stdin, c.stdout, c.stderr = inW, outR, errR
	c.exit.cmd = c.cmd
	go c.read()
	go c.readErr()
	go func() { c.exit.await(); close(c.exited) }()
	c.stopPoll = make(chan struct{})
	if c.cc.Remote {
		close(c.polled)
	} else {
		go c.poll()
	}
	return nil
}

// supervise runs the protocol to its end and returns the run's error; the
// child's process group is gone and every goroutine done when it returns.
func (c *childRun) supervise(ctx context.Context) error {
	start := time.Now()
	helloTimer := time.NewTimer(c.lim.HelloTimeout)
	defer helloTimer.Stop()
	var timeout <-chan time.Time
	if c.lim.Timeout > 0 {
		t := time.NewTimer(c.lim.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	wrote := make(chan struct{})
	writing := false
	var fail error
loop:
	for {
		select {
		case <-ctx.Done():
			fail = context.Cause(ctx)
			break loop
		case <-timeout:
			fail = &BuildError{Reason: fmt.Sprintf("runner timed out after %s", c.lim.Timeout)}
			break loop
		case <-helloTimer.C:
			fail = &BuildError{Reason: fmt.Sprintf("runner said no hello within %s", c.lim.HelloTimeout)}
			break loop
		case rss := <-c.over:
			fail = &BuildError{Reason: fmt.Sprintf("runner exceeded the RAM budget: its process group held %s resident, budget %s",
				units.HumanSize(rss), units.HumanSize(c.lim.RAMBudget))}
			break loop
		case err := <-c.failed:
			fail = err
			break loop
		case v := <-c.hello:
			helloTimer.Stop()
			data, err := json.Marshal(c.r.runnerJob(c.job, v))
			if err != nil {
				fail = fmt.Errorf("runner: encoding the job: %w", err)
				break loop
			}
			writing = true
			go func() {
				defer close(wrote)
				// An error here is the child's to report: it exited or
				// stopped reading, and its exit says why.
				_, _ = c.stdin.Write(append(data, '\n'))
				c.stdin.Close()
			}()
		case <-c.exited:
			break loop
		}
	}
	// Kill whatever is left of the group: the child on failure, and any
	// process it left behind in every case.
	killGroup(c.pgid)
	if c.cc.Kill != nil && fail != nil {
		c.cc.Kill()
	}
	<-c.exited
	killGroup(c.pgid) // the leader is reaped only now: its id is not reused yet
	waitErr := c.exit.reap()
	close(c.stopPoll)
	<-c.polled
	c.stdin.Close() // unblocks a write the child never read
	if writing {
		<-wrote
	}
	deadline := time.Now().Add(drainTimeout)
	_ = c.stdout.SetReadDeadline(deadline)
	_ = c.stderr.SetReadDeadline(deadline)
	<-c.readDone
	<-c.errDone
	c.stdout.Close()
	c.stderr.Close()
	if c.cc.Kill != nil && fail == nil && !c.done {
		c.cc.Kill() // it ended without done: whatever it left runs no more
	}
	if !c.cc.Remote {
		c.info.PeakRSSBytes = max(c.peak.Load(), maxRSS(c.cmd.ProcessState))
	}
	c.log.Debug("agent: runner child finished", "pid", c.pgid, "elapsed", time.Since(start).Round(time.Millisecond).String(),
		"state", fmt.Sprint(c.cmd.ProcessState), "peak_rss_bytes", c.info.PeakRSSBytes)
	if fail != nil {
		return fail
	}
	select {
	case err := <-c.failed: // read the last lines after the exit
		return err
	default:
	}
	return c.verdict(waitErr)
}

// verdict judges a child that exited on its own, from its exit status and
// what it wrote.
func (c *childRun) verdict(waitErr error) error {
	st := c.cmd.ProcessState
	var why string
	switch {
	case st == nil:
		return fmt.Errorf("runner: waiting for the child: %w", waitErr)
	case st.ExitCode() == -1:
		why = fmt.Sprintf("runner was killed (%s)", st)
	case st.ExitCode() != 0:
		why = fmt.Sprintf("runner exited with status %d", st.ExitCode())
	case !c.gotHello:
		why = "runner exited without a hello"
	case !c.done:
		why = "runner exited without its done line"
	case len(c.results) != len(c.job.Configs):
		why = fmt.Sprintf("runner reported %d results for %d configs", len(c.results), len(c.job.Configs))
	default:
		return nil
	}
	switch {
	case c.runnerErr != "":
		why += ": " + c.runnerErr
	case st.ExitCode() != 0:
		if l := c.tail.lastLine(); l != "" {
			why += "; stderr ends: " + l
		}
	}
	return &BuildError{Reason: clipText(why)}
}

// protocolFail records the first protocol violation: err as it is when it
// is a *BuildError, else as malformed output.
func (c *childRun) protocolFail(err error) {
	be := (*BuildError)(nil)
	if !errors.As(err, &be) {
		be = &BuildError{Reason: clipText("runner broke the protocol: " + err.Error())}
	}
	select {
	case c.failed <- be:
	default:
	}
}

// read reads and relays the child's stdout until EOF or the first
// protocol violation.
func (c *childRun) read() {
	defer close(c.readDone)
	sc := bufio.NewScanner(c.stdout)
	sc.Buffer(make([]byte, 0, 64<<10), protocol.MaxRunnerLineBytes+1)
	var l protocol.RunnerLine
	for sc.Scan() {
		if err := c.handle(sc.Bytes(), &l); err != nil {
			c.protocolFail(err)
			return
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		c.protocolFail(fmt.Errorf("a line longer than %d bytes", protocol.MaxRunnerLineBytes))
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Warn("agent: reading the runner's output", "err", err)
	}
}

// handle checks one line against the protocol and relays it.
func (c *childRun) handle(data []byte, l *protocol.RunnerLine) error {
	if err := protocol.ParseRunnerLine(data, l); err != nil {
		if !c.gotHello {
			return fmt.Errorf("first line is not a hello: %w (%q)", err, clipBytes(data, 80))
		}
		return err
	}
	job := c.job
	switch {
	case !c.gotHello && l.T != protocol.RunnerHello:
		return fmt.Errorf("first line is a %s line, not a hello", l.T)
	case c.gotHello && l.T == protocol.RunnerHello:
		return errors.New("a second hello")
	case c.done:
		return fmt.Errorf("a %s line after done", l.T)
	}
	switch l.T {
	case protocol.RunnerHello:
		c.gotHello = true
		c.info.Protocol, c.info.Revision, c.info.GoVersion, c.info.Module, c.info.Modified = l.Protocol, l.Revision, l.GoVersion, l.Module, l.Modified
		if err := protocol.CheckRunnerProtocol(l.Protocol); err != nil {
			return &BuildError{Reason: err.Error()}
		}
		c.hello <- l.Protocol
	case protocol.RunnerConfig:
		if l.Index >= len(job.Configs) {
			return fmt.Errorf("config %d of a job of %d configs", l.Index, len(job.Configs))
		}
		if job.OnConfig != nil {
			job.OnConfig(l.Index, job.Configs[l.Index])
		}
	case protocol.RunnerPos:
		if job.Position != nil {
			job.Position(l.Config, l.Rep)
		}
	case protocol.RunnerStep:
		relayStep(job.Sink, l.Step)
	case protocol.RunnerResult:
		i := len(c.results)
		if i >= len(job.Configs) {
			return fmt.Errorf("more results than the job's %d configs", len(job.Configs))
		}
		if want := job.Configs[i]; l.Result.ConfigIndex != want.Index || l.Result.ConfigKey != want.Key {
			return fmt.Errorf("result %d is for config %d %q, want %d %q", i, l.Result.ConfigIndex, clipBytes([]byte(l.Result.ConfigKey), 80), want.Index, want.Key)
		}
		c.results = append(c.results, *l.Result)
		if job.OnResult != nil {
			job.OnResult(*l.Result)
		}
	case protocol.RunnerProgress:
		if job.OnProgress != nil {
			job.OnProgress(*l.Progress)
		}
	case protocol.RunnerDone:
		c.done = true
	case protocol.RunnerError:
		c.runnerErr = l.Error
	}
	return nil
}

func clipBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return strings.ToValidUTF8(string(b), "?")
}

// readErr keeps the end of the child's stderr and logs its lines at debug
// level.
func (c *childRun) readErr() {
	defer close(c.errDone)
	br := bufio.NewReaderSize(c.stderr, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			c.tail.Write(line)
			if c.log.Enabled(context.Background(), slog.LevelDebug) {
				c.log.Debug("agent: runner stderr", "pid", c.pgid, "line", string(bytes.TrimRight(line, "\n")))
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// poll samples the resident memory of the child's process group until
// stopPoll, keeps the peak and reports a budget overrun once.
func (c *childRun) poll() {
	defer close(c.polled)
	m := newGroupMeter(c.pgid)
	if m == nil {
		return // not readable on this platform
	}
	t := time.NewTicker(rssPollEvery)
	defer t.Stop()
	for {
		rss := m.rss()
		if rss > c.peak.Load() {
			c.peak.Store(rss)
		}
		if c.lim.RAMBudget > 0 && rss > c.lim.RAMBudget {
			c.over <- rss
			return
		}
		select {
		case <-c.stopPoll:
			return
		case <-t.C:
		}
	}
}

// stderrTail keeps the last protocol.MaxStderrTail bytes written to it. It
// is safe for concurrent use.
type stderrTail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *stderrTail) Write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > 2*protocol.MaxStderrTail {
		t.buf = append(t.buf[:0], t.buf[n-protocol.MaxStderrTail:]...)
	}
}

// String returns the tail as valid UTF-8 of at most MaxStderrTail bytes
// (a rune cut at its start and invalid bytes become '?', never longer).
func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > protocol.MaxStderrTail {
		b = b[len(b)-protocol.MaxStderrTail:]
	}
	return strings.ToValidUTF8(string(b), "?")
}

// lastLine is the tail's last non-empty line, clipped to 200 bytes.
func (t *stderrTail) lastLine() string {
	s := strings.TrimRight(t.String(), "\n\r\t ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
