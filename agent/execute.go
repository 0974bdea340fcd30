package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/agent/artifact"
	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

func (a *Agent) setRun(r *activeRun, state string, progress float64, msg string) {
	a.mu.Lock()
	r.state = state
	if progress >= 0 {
		r.progress = progress
	}
	r.message = msg
	a.mu.Unlock()
}

// execute runs one assignment and reports its result, unless the lease is
// gone (cut off, or the coordinator said so).
func (a *Agent) execute(ctx context.Context, r *activeRun) {
	defer a.wg.Done()
	defer close(r.done)
	asg := r.asg
	log := a.log.With("run_id", asg.RunID, "token", asg.Token)
	a.settleState()
	started := time.Now().UTC()
	subject := protocol.DeviceTelemetrySubject(a.cfg.Name, asg.RunID)
	nonce := protocol.NewMsgNonce() // message ids no other device can predict (protocol/msgid.go)
	_, dropped0 := a.buf.Dropped()
	lastDropped := dropped0[subject]
	var dropMu sync.Mutex
	agg := telemetry.NewAggregator(telemetry.AggregatorConfig{
		RunID: asg.RunID, Token: asg.Token, DeviceID: a.cfg.Name,
		FlushEvery: a.cfg.BatchInterval, MaxEvents: a.cfg.BatchEvents,
		Emit: func(b *protocol.TelemetryBatch) {
			dropMu.Lock()
			if _, by := a.buf.Dropped(); by[subject] > lastDropped {
				b.Dropped += by[subject] - lastDropped
				lastDropped = by[subject]
			}
			dropMu.Unlock()
			data, err := protocol.Encode(b)
			if err != nil {
				log.Error("agent: telemetry batch not encodable, dropped", "seq", b.Seq, "err", err)
				return
			}
			a.outbox.Send(telemetry.Record{Subject: subject, MsgID: protocol.TelemetryMsgID(a.cfg.Name, asg.RunID, asg.Token, b.Seq, nonce), Data: data})
		},
	})

	res := &protocol.Result{RunID: asg.RunID, Token: asg.Token, DeviceID: a.cfg.Name, StartedAt: started}
	runErr := func() error {
		a.setRun(r, protocol.RunStateDownloading, 0, "downloading "+asg.Artifact.Name)
		lastPct := -1.0
		h, err := a.cache.Get(ctx, artifact.Spec{URL: asg.Artifact.URL, SHA256: asg.Artifact.SHA256, Size: asg.Artifact.Size}, func(done, total int64) {
			agg.Progress(protocol.Progress{Phase: "download", Done: done, Total: total})
			if pct := float64(done) / float64(total); pct-lastPct >= 0.01 {
				lastPct = pct
				a.setRun(r, protocol.RunStateDownloading, 0.1*pct, "downloading "+asg.Artifact.Name)
			}
		})
		if err != nil {
			return fmt.Errorf("artifact: %w", err)
		}
		defer h.Release()
		a.setRun(r, protocol.RunStateRunning, 0.1, "")
		if isCalibration(&asg.Spec) {
			res.Configs, err = a.calibrate(ctx, asg, h.Path, func(line string) {
				agg.Progress(protocol.Progress{Phase: "calibrate", Message: clipText(line)})
				a.setRun(r, protocol.RunStateRunning, -1, line)
			})
			return err
		}
		skip := skippedConfigs(asg, a.limits())
		configs := slices.DeleteFunc(slices.Clone(asg.Configs), func(c jobs.Config) bool { return skip[c.Index] != "" })
		for _, c := range asg.Configs {
			if why := skip[c.Index]; why != "" {
				log.Info("agent: config skipped", "config", c.Key, "reason", why)
			}
		}
		n := len(configs)
		cr, prov, err := a.runBuild(ctx, r, &Job{
			Spec: &asg.Spec, Configs: configs, ModelPath: h.Path, Sink: agg, Position: agg.SetPosition,
			OnConfig: func(i int, c jobs.Config) {
				agg.Progress(protocol.Progress{Phase: "config", Done: int64(i), Total: int64(n), Message: c.Key})
				a.setRun(r, protocol.RunStateRunning, 0.1+0.9*float64(i)/float64(n), c.Key)
			},
		}, func(done, total int64) {
			agg.Progress(protocol.Progress{Phase: "download", Done: done, Total: total, Message: "build " + asg.Build})
		})
		res.Configs, res.Provenance = withSkipped(asg.Configs, cr, skip), prov
		return err
	}()
	agg.Close()
	a.setRun(r, protocol.RunStateFinishing, 1, "")
	cause := context.Cause(ctx)
	if runErr != nil && cause != nil {
		runErr = cause
	}
	if errors.Is(runErr, artifact.ErrNoSpace) {
		a.short.note(asg.Artifact.Size) // report the room until it is back
	}
	switch {
	case errors.Is(runErr, errCutOff) || errors.Is(runErr, errLeaseLost):
		log.Warn("agent: run abandoned without a report", "reason", runErr)
		a.finish(r, runErr)
		return
	case runErr == nil:
		res.Outcome = protocol.OutcomeSucceeded
	case errors.Is(runErr, errCancelled):
		res.Outcome = protocol.OutcomeCancelled
		res.Error = clipText(runErr.Error())
	case errors.As(runErr, new(*BuildError)):
		// The build's own code failed: not retried as infrastructure.
		res.Outcome = protocol.OutcomeBuildFailed
		res.Error = clipText(runErr.Error())
	case errors.Is(runErr, errShutdown) || errors.Is(runErr, errPhoneLost) || errors.Is(runErr, artifact.ErrNoSpace):
		// A full disk is this device's condition, not the build's.
		// Not the run's fault: the coordinator requeues it elsewhere.
		res.Outcome = protocol.OutcomeAborted
		res.Error = clipText(runErr.Error())
	default:
		res.Outcome = protocol.OutcomeFailed
		res.Error = clipText(runErr.Error())
	}
	res.TelemetryBatches, res.TelemetrySamples = agg.Counts()
	_, dropped := a.buf.Dropped()
	res.TelemetryDropped = dropped[subject] - dropped0[subject]
	res.FinishedAt = time.Now().UTC()
	data, err := protocol.Encode(res)
	if err != nil {
		// Never lose the report: fall back to a failed result without configs.
		log.Error("agent: result not encodable", "err", err)
		res.Configs, res.Outcome, res.Error = nil, protocol.OutcomeFailed, clipText("agent could not encode the result: "+err.Error())
		data, err = protocol.Encode(res)
		if err != nil {
			a.finish(r, err)
			return
		}
	}
	rec := telemetry.Record{Subject: protocol.DeviceResultSubject(a.cfg.Name, asg.RunID), MsgID: protocol.ResultMsgID(a.cfg.Name, asg.RunID, asg.Token, nonce), Data: data, Summary: true}
	a.noteUnreported(r, rec)
	a.outbox.Send(rec)
	log.Info("agent: run reported", "outcome", res.Outcome, "configs", len(res.Configs), "telemetry_batches", res.TelemetryBatches, "telemetry_samples", res.TelemetrySamples, "err", res.Error)
	a.finish(r, runErr)
}

func (a *Agent) finish(r *activeRun, err error) {
	if err != nil {
		a.setError(err)
	}
	r.cancel(nil)
	a.mu.Lock()
	if a.current == r {
		a.current = nil
	}
	a.runsDone++
	stopping, registered := a.stopping, a.registered
	a.mu.Unlock()
	switch {
	case stopping:
	case registered:
		a.settleState()
	default:
		a.setState(StateConnecting)
	}
}
