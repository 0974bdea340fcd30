package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// ServeRunner is the child side of the runner protocol, `EXE runner`
// (protocol/runner.go): it writes its hello on out, reads one RunnerJob
// from in, runs it with Runner.Run, the function the embedded runtime
// runs, and writes the run's config, pos, step, result and done lines on
// out. It returns why the job could not run or finish, after writing an
// error line when out still takes one; the caller then exits with
// protocol.RunnerExitFailed. log receives the Runner's logs (nil: slog's
// default).
func ServeRunner(ctx context.Context, in io.Reader, out io.Writer, log *slog.Logger) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newRunnerWriter(out, func(err error) { cancel(fmt.Errorf("writing runner output: %w", err)) })
	stop := w.flushStale(stepFlushEvery)
	defer stop()
	if err := w.write(runnerHello()); err != nil {
		return err
	}
	fail := func(err error) error {
		_ = w.write(&protocol.RunnerLine{T: protocol.RunnerError, Error: clipText(err.Error())})
		return err
	}
	data, err := io.ReadAll(io.LimitReader(in, protocol.MaxRunnerJobBytes+1))
	if err != nil {
		return fail(fmt.Errorf("reading the job: %w", err))
	}
	rj, err := protocol.DecodeRunnerJob(data)
	if err != nil {
		return fail(err)
	}
	r, job, err := RunnerFromJob(rj, log)
	if err != nil {
		return fail(err)
	}
	job.Sink = w
	job.Position = func(cfg, rep int) { _ = w.write(&protocol.RunnerLine{T: protocol.RunnerPos, Config: cfg, Rep: rep}) }
	job.OnConfig = func(i int, _ jobs.Config) { _ = w.write(&protocol.RunnerLine{T: protocol.RunnerConfig, Index: i}) }
	job.OnResult = func(res protocol.ConfigResult) {
		_ = w.write(&protocol.RunnerLine{T: protocol.RunnerResult, Result: &res})
	}
	job.OnProgress = func(p protocol.Progress) { _ = w.write(&protocol.RunnerLine{T: protocol.RunnerProgress, Progress: &p}) }
	if _, err := r.Run(ctx, job); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		return fail(err)
	}
	if err := w.write(&protocol.RunnerLine{T: protocol.RunnerDone}); err != nil {
		return err
	}
	return context.Cause(ctx) // a write that failed on the way
}

// runnerHello is this build's hello: the protocol it speaks and the code
// it was built from, as the Go toolchain stamped it.
func runnerHello() *protocol.RunnerLine {
	h := &protocol.RunnerLine{T: protocol.RunnerHello, Protocol: protocol.RunnerProtocolVersion, GoVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		h.Module = info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				h.Revision = s.Value
			case "vcs.modified":
				h.Modified = s.Value == "true"
			}
		}
	}
	return h
}

// stepFlushEvery is how long step lines may wait in the runner's buffer:
// a step line is flushed when the last flush is this old (or the buffer
// holds stepFlushBytes), every other line at once. A write, and a wake-up
// of the agent, per step of a small model cost the agent about 100 us a
// step in syscalls and scheduling, three times its parsing; on a phone a
// step takes longer than this and each is flushed.
const (
	stepFlushEvery = 10 * time.Millisecond
	stepFlushBytes = 32 << 10
)

// runnerWriter writes runner lines to a buffered stdout and is the child's
// trace.Sink: a step's layer events are held until its token event and
// written with it on one step line. Step lines are flushed at step
// boundaries at most every stepFlushEvery, every other line at once. It is
// safe for concurrent use. The first write error goes to onErr and makes
// every later line fail.
type runnerWriter struct {
	mu    sync.Mutex
	bw    *bufio.Writer
	enc   *json.Encoder
	err   error
	onErr func(error)

	layers protocol.RunnerLayers // the step in progress, buffers reused
	step   protocol.RunnerStepData
	line   []byte

	lastFlush time.Time
}

func newRunnerWriter(out io.Writer, onErr func(error)) *runnerWriter {
	w := &runnerWriter{bw: bufio.NewWriterSize(out, 64<<10), onErr: onErr}
	w.enc = json.NewEncoder(w.bw)
	w.enc.SetEscapeHTML(false)
	return w
}

// write writes l and flushes.
func (w *runnerWriter) write(l *protocol.RunnerLine) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(l)
}

func (w *runnerWriter) writeLocked(l *protocol.RunnerLine) error {
	if w.err != nil {
		return w.err
	}
	err := w.enc.Encode(l)
	var je *json.UnsupportedValueError
	if errors.As(err, &je) && l.T == protocol.RunnerResult {
		// A figure JSON cannot carry (NaN): the config fails, the stream
		// goes on.
		res := protocol.ConfigResult{ConfigIndex: l.Result.ConfigIndex, ConfigKey: l.Result.ConfigKey, Warmup: l.Result.Warmup,
			Error: clipText("runner: result not encodable: " + err.Error())}
		err = w.enc.Encode(&protocol.RunnerLine{T: protocol.RunnerResult, Result: &res})
	}
	return w.flushLocked(err)
}

// flushLocked flushes the line written (when err is nil) and records the
// first error.
func (w *runnerWriter) flushLocked(err error) error {
	if err == nil {
		err = w.bw.Flush()
		w.lastFlush = time.Now()
	}
	if err != nil && w.err == nil {
		w.err = err
		if w.onErr != nil {
			w.onErr(err)
		}
	}
	return err
}

// flush flushes what is buffered.
func (w *runnerWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	return w.flushLocked(nil)
}

// flushStale flushes step lines left in the buffer for every (a step
// that ends a repetition waits for no next step) until stop is called.
func (w *runnerWriter) flushStale(every time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				w.mu.Lock()
				if w.err == nil && w.bw.Buffered() > 0 && time.Since(w.lastFlush) >= every {
					_ = w.flushLocked(nil)
				}
				w.mu.Unlock()
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// Layer implements trace.Sink.
func (w *runnerWriter) Layer(ev *trace.LayerEvent) {
	w.mu.Lock()
	c := &w.layers
	n := len(c.Layer)
	c.Layer = append(c.Layer, ev.Layer)
	c.Hits = append(c.Hits, ev.Hits)
	c.Misses = append(c.Misses, ev.Misses)
	c.PrefetchUsed = append(c.PrefetchUsed, ev.PrefetchUsed)
	c.PrefetchWasted = append(c.PrefetchWasted, ev.PrefetchWasted)
	c.StallNS = append(c.StallNS, int64(ev.Stall))
	c.ComputeNS = append(c.ComputeNS, int64(ev.Compute))
	c.Selected = appendIDs(c.Selected, n, ev.Selected)
	c.Missed = appendIDs(c.Missed, n, ev.Missed)
	c.Predicted = appendIDs(c.Predicted, n, ev.Predicted)
	w.mu.Unlock()
}

// Read implements trace.Sink; reads are summed up in the token event.
func (w *runnerWriter) Read(*trace.ReadEvent) {}

// Token implements trace.Sink: it writes the step line
// (protocol.AppendRunnerStepLine, no reflection) and flushes it.
func (w *runnerWriter) Token(ev *trace.TokenEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.step = protocol.RunnerStepData{
		Step: ev.Step, Phase: phaseName(ev.Phase), Pos: ev.Pos, Tokens: ev.Tokens, DurationNS: int64(ev.Duration),
		StallNS: int64(ev.Stall), BytesRead: ev.BytesRead, CacheBytes: ev.CacheBytes,
	}
	if len(w.layers.Layer) > 0 {
		w.step.Layers = &w.layers
	}
	if w.err == nil {
		w.line = append(protocol.AppendRunnerStepLine(w.line[:0], &w.step), '\n')
		_, err := w.bw.Write(w.line)
		if err != nil || time.Since(w.lastFlush) >= stepFlushEvery || w.bw.Buffered() >= stepFlushBytes {
			_ = w.flushLocked(err)
		}
	}
	c := &w.layers
	c.Layer, c.Hits, c.Misses = c.Layer[:0], c.Hits[:0], c.Misses[:0]
	c.PrefetchUsed, c.PrefetchWasted = c.PrefetchUsed[:0], c.PrefetchWasted[:0]
	c.StallNS, c.ComputeNS = c.StallNS[:0], c.ComputeNS[:0]
	c.Selected, c.Missed, c.Predicted = c.Selected[:0], c.Missed[:0], c.Predicted[:0]
}

// phaseName is a trace.Phase as the protocol names it.
func phaseName(p trace.Phase) string {
	switch p {
	case trace.Prefill:
		return protocol.PhasePrefill
	case trace.Verify:
		return protocol.PhaseVerify
	}
	return protocol.PhaseDecode
}

// appendIDs sets entry n of col to a copy of ids, reusing the entry's
// buffer from an earlier step (trace events' slices are only valid
// during the call).
func appendIDs(col [][]int, n int, ids []int) [][]int {
	if n < cap(col) {
		col = col[:n+1]
		col[n] = append(col[n][:0], ids...)
		return col
	}
	return append(col, append([]int(nil), ids...))
}

// relayStep hands a step line to sink as the events the runner's runtime
// emitted: each layer event, then the token event. Sinks do not keep the
// events or their slices, so one LayerEvent is reused.
func relayStep(sink trace.Sink, st *protocol.RunnerStepData) {
	if sink == nil {
		return
	}
	if l := st.Layers; l != nil {
		var ev trace.LayerEvent
		for i, layer := range l.Layer {
			ev = trace.LayerEvent{Step: st.Step, Layer: layer,
				Hits: at(l.Hits, i), Misses: at(l.Misses, i), PrefetchUsed: at(l.PrefetchUsed, i), PrefetchWasted: at(l.PrefetchWasted, i),
				Stall: time.Duration(at(l.StallNS, i)), Compute: time.Duration(at(l.ComputeNS, i)),
				Selected: at(l.Selected, i), Missed: at(l.Missed, i), Predicted: at(l.Predicted, i)}
			sink.Layer(&ev)
		}
	}
	ev := trace.TokenEvent{Step: st.Step, Pos: st.Pos, Tokens: st.Tokens, Duration: time.Duration(st.DurationNS),
		Stall: time.Duration(st.StallNS), BytesRead: st.BytesRead, CacheBytes: st.CacheBytes}
	switch st.Phase {
	case protocol.PhasePrefill:
		ev.Phase = trace.Prefill
	case protocol.PhaseVerify:
		ev.Phase = trace.Verify
	default:
		ev.Phase = trace.Decode
	}
	sink.Token(&ev)
}

// at is col[i], or the zero value for an absent column.
func at[T any](col []T, i int) T {
	var zero T
	if i < len(col) {
		return col[i]
	}
	return zero
}
