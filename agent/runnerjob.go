package agent

import (
	"log/slog"
	"time"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/profile/spec"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// runnerJob is what a runner child is told to run: job, with r's settings,
// in runner protocol version v. ReadState and Logger do not travel: the
// child reads the device's thermal state itself and logs to its stderr.
// NoLookahead does not travel either: a build's lookahead is its code's.
func (r *Runner) runnerJob(job *Job, v int) *protocol.RunnerJob {
	return &protocol.RunnerJob{
		Protocol: v, Spec: *job.Spec, Configs: job.Configs, ModelPath: job.ModelPath, WorkDir: r.WorkDir,
		Threads: r.Threads, Profile: wireProfile(r.Profile), Direct: r.Direct, Pin: r.Pin, DiscardOutliers: r.DiscardOutliers, EvictModel: r.EvictModel,
		Gate: protocol.RunnerGate{MaxTempC: r.Gate.MaxTempC, TimeoutNS: int64(r.Gate.Timeout), PollNS: int64(r.Gate.Poll), Disabled: r.Gate.Disabled},
	}
}

// RunnerFromJob returns the Runner and Job a runner child runs for j: the
// agent's settings as the agent holds them, and the job without its
// callbacks (the caller sets Sink, Position, OnConfig, OnResult and
// OnProgress). log may be nil.
func RunnerFromJob(j *protocol.RunnerJob, log *slog.Logger) (*Runner, *Job, error) {
	prof, err := runtimeProfile(j.Profile)
	if err != nil {
		return nil, nil, err
	}
	r := &Runner{
		Threads: j.Threads, Profile: prof, Direct: j.Direct, WorkDir: j.WorkDir, Logger: log,
		Pin: j.Pin, DiscardOutliers: j.DiscardOutliers, EvictModel: j.EvictModel,
		Gate: ThermalGate{MaxTempC: j.Gate.MaxTempC, Timeout: time.Duration(j.Gate.TimeoutNS), Poll: time.Duration(j.Gate.PollNS), Disabled: j.Gate.Disabled},
	}
	spec := j.Spec
	return r, &Job{Spec: &spec, Configs: j.Configs, ModelPath: j.ModelPath}, nil
}

// wireProfile is p in the runner protocol's plain numbers (nil for nil).
func wireProfile(p *expert.Profile) *protocol.RunnerProfile {
	if p == nil {
		return nil
	}
	w := &protocol.RunnerProfile{
		Name: p.Name, Description: p.Description, Bandwidth: p.Bandwidth, LatencyNS: int64(p.Latency), MaxInFlight: p.MaxInFlight,
		RAMBudget: p.RAMBudget, PageSize: p.PageSize, ReadAhead: p.ReadAhead,
	}
	if c := p.Compute; c != nil {
		w.Compute = &protocol.RunnerCompute{WeightBandwidth: c.WeightBandwidth, Throughput: c.Throughput, PageCostNS: int64(c.PageCost)}
	}
	if s := p.Service; s != nil {
		ws := &protocol.RunnerServiceTimes{Sizes: s.Sizes, QueueDepths: s.QueueDepths, Patterns: s.Patterns, TimesNS: make([][]int64, len(s.Times))}
		for i, row := range s.Times {
			ws.TimesNS[i] = make([]int64, len(row))
			for j, d := range row {
				ws.TimesNS[i][j] = int64(d)
			}
		}
		w.Service = ws
	}
	return w
}

// runtimeProfile is the expert.Profile of w (nil for nil), converted as a
// parsed profile file is (profile.Expert): the service times are checked
// and made monotone by expert.NewServiceTimes.
func runtimeProfile(w *protocol.RunnerProfile) (*expert.Profile, error) {
	if w == nil {
		return nil, nil
	}
	p := &spec.Profile{
		Name: w.Name, Description: w.Description, Bandwidth: w.Bandwidth, Latency: time.Duration(w.LatencyNS), MaxInFlight: w.MaxInFlight,
		RAMBudget: w.RAMBudget, PageSize: w.PageSize, ReadAhead: w.ReadAhead,
	}
	if c := w.Compute; c != nil {
		p.Compute = &spec.Compute{WeightBandwidth: c.WeightBandwidth, Throughput: c.Throughput, PageCost: time.Duration(c.PageCostNS)}
	}
	if s := w.Service; s != nil {
		t := &spec.ServiceTable{Sizes: s.Sizes, QueueDepths: s.QueueDepths, Patterns: s.Patterns, Times: make([][]time.Duration, len(s.TimesNS))}
		for i, row := range s.TimesNS {
			t.Times[i] = make([]time.Duration, len(row))
			for j, ns := range row {
				t.Times[i][j] = time.Duration(ns)
			}
		}
		p.Service = t
	}
	return profile.Expert(p)
}
