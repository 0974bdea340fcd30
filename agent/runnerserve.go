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
	if err := w.line(runnerHello()); err != nil {
		return err
	}
	fail := func(err error) error {
		_ = w.line(&protocol.RunnerLine{T: protocol.RunnerError, Error: clipText(err.Error())})
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
	job.Position = func(cfg, rep int) { _ = w.line(&protocol.RunnerLine{T: protocol.RunnerPos, Config: cfg, Rep: rep}) }
	job.OnConfig = func(i int, _ jobs.Config) { _ = w.line(&protocol.RunnerLine{T: protocol.RunnerConfig, Index: i}) }
	job.OnResult = func(res protocol.ConfigResult) {
		_ = w.line(&protocol.RunnerLine{T: protocol.RunnerResult, Result: &res})
	}
	job.OnProgress = func(p protocol.Progress) { _ = w.line(&protocol.RunnerLine{T: protocol.RunnerProgress, Progress: &p}) }
	if _, err := r.Run(ctx, job); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		return fail(err)
	}
	if err := w.line(&protocol.RunnerLine{T: protocol.RunnerDone}); err != nil {
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

// runnerWriter writes runner lines to a buffered stdout, one write per
// line, and is the child's trace.Sink: a step's layer events are held
// until its token event and written with it on one step line. It is safe
// for concurrent use. The first write error goes to onErr and makes every
// later line fail.
type runnerWriter struct {
	mu    sync.Mutex
	bw    *bufio.Writer
	enc   *json.Encoder
	err   error
	onErr func(error)

	layers stepLayers
	line1  protocol.RunnerLine
	step   protocol.RunnerStepData
}

func newRunnerWriter(out io.Writer, onErr func(error)) *runnerWriter {
	w := &runnerWriter{bw: bufio.NewWriterSize(out, 64<<10), onErr: onErr}
	w.enc = json.NewEncoder(w.bw)
	w.enc.SetEscapeHTML(false)
	return w
}

// line writes l and flushes.
func (w *runnerWriter) line(l *protocol.RunnerLine) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(l)
}

func (w *runnerWriter) writeLocked(l *protocol.RunnerLine) error {
	if w.err != nil {
		return w.err
	}
	err := w.enc.Encode(l)
	if err == nil {
		err = w.bw.Flush()
	}
	if err != nil {
		var je *json.UnsupportedValueError
		if errors.As(err, &je) && l.T == protocol.RunnerResult {
			// A figure JSON cannot carry (NaN): the config fails, the
			// stream goes on.
			res := *l.Result
			res = protocol.ConfigResult{ConfigIndex: res.ConfigIndex, ConfigKey: res.ConfigKey, Warmup: res.Warmup,
				Error: clipText("runner: result not encodable: " + err.Error())}
			return w.writeLocked(&protocol.RunnerLine{T: protocol.RunnerResult, Result: &res})
		}
		w.err = err
		if w.onErr != nil {
			w.onErr(err)
		}
	}
	return err
}

// Layer implements trace.Sink.
func (w *runnerWriter) Layer(ev *trace.LayerEvent) {
	w.mu.Lock()
	w.layers.add(ev)
	w.mu.Unlock()
}

// Read implements trace.Sink; reads are summed up in the token event.
func (w *runnerWriter) Read(*trace.ReadEvent) {}

// Token implements trace.Sink: it writes the step line.
func (w *runnerWriter) Token(ev *trace.TokenEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.step = protocol.RunnerStepData{
		Step: ev.Step, Phase: phaseName(ev.Phase), Pos: ev.Pos, Tokens: ev.Tokens, DurationNS: int64(ev.Duration),
		StallNS: int64(ev.Stall), BytesRead: ev.BytesRead, CacheBytes: ev.CacheBytes, Layers: w.layers.wire(),
	}
	w.line1 = protocol.RunnerLine{T: protocol.RunnerStep, Step: &w.step}
	_ = w.writeLocked(&w.line1)
	w.layers.reset()
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

// stepLayers collects a step's layer events column-wise, reusing its
// buffers from step to step; any marks the columns that hold a non-zero
// entry (the others are left off the line).
type stepLayers struct {
	cols protocol.RunnerLayers
	any  [9]bool
}

func (s *stepLayers) add(ev *trace.LayerEvent) {
	c := &s.cols
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
	for i, nz := range [9]bool{ev.Hits != 0, ev.Misses != 0, ev.PrefetchUsed != 0, ev.PrefetchWasted != 0, ev.Stall != 0, ev.Compute != 0,
		len(ev.Selected) > 0, len(ev.Missed) > 0, len(ev.Predicted) > 0} {
		s.any[i] = s.any[i] || nz
	}
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

// wire returns the step's layers for its line (nil when it had none): a
// view of the buffers, valid until reset.
func (s *stepLayers) wire() *protocol.RunnerLayers {
	c := &s.cols
	if len(c.Layer) == 0 {
		return nil
	}
	w := &protocol.RunnerLayers{Layer: c.Layer}
	pick(&w.Hits, c.Hits, s.any[0])
	pick(&w.Misses, c.Misses, s.any[1])
	pick(&w.PrefetchUsed, c.PrefetchUsed, s.any[2])
	pick(&w.PrefetchWasted, c.PrefetchWasted, s.any[3])
	pick(&w.StallNS, c.StallNS, s.any[4])
	pick(&w.ComputeNS, c.ComputeNS, s.any[5])
	pick(&w.Selected, c.Selected, s.any[6])
	pick(&w.Missed, c.Missed, s.any[7])
	pick(&w.Predicted, c.Predicted, s.any[8])
	return w
}

func pick[T any](dst *[]T, col []T, used bool) {
	if used {
		*dst = col
	}
}

func (s *stepLayers) reset() {
	c := &s.cols
	c.Layer, c.Hits, c.Misses = c.Layer[:0], c.Hits[:0], c.Misses[:0]
	c.PrefetchUsed, c.PrefetchWasted = c.PrefetchUsed[:0], c.PrefetchWasted[:0]
	c.StallNS, c.ComputeNS = c.StallNS[:0], c.ComputeNS[:0]
	c.Selected, c.Missed, c.Predicted = c.Selected[:0], c.Missed[:0], c.Predicted[:0]
	s.any = [9]bool{}
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
