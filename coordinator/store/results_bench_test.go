package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// BenchmarkCompleteRuns is the results a single worker commits per
// second, 64 results of 4 configs each per iteration: one transaction per
// result (CompleteRun, the path before batching) against one for all 64
// (CompleteRuns). The runs are created and claimed outside the timer.
func BenchmarkCompleteRuns(b *testing.B) {
	const n = 64
	ctx := context.Background()
	st := open(b)
	for i := range n {
		addDevice(b, st, fmt.Sprintf("bench-dev-%02d", i), nil)
	}
	grantAll := func(b *testing.B) []*protocol.Result {
		b.Helper()
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(b), Fanout: true})
		if err != nil || len(runs) != n {
			b.Fatalf("create: %v (%d runs)", err, len(runs))
		}
		pairs := make([]store.ClaimPair, n)
		for i, r := range runs {
			pairs[i] = store.ClaimPair{DeviceID: r.TargetDeviceID, RunID: r.ID}
		}
		gs, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: pairs, LeaseTTL: time.Minute, Coordinator: "bench"})
		if err != nil || len(gs) != n {
			b.Fatalf("claim: %v (%d grants)", err, len(gs))
		}
		out := make([]*protocol.Result, n)
		for i, g := range gs {
			res := &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID, Outcome: protocol.OutcomeSucceeded}
			for k := range 4 {
				res.Configs = append(res.Configs, protocol.ConfigResult{ConfigIndex: k, ConfigKey: fmt.Sprintf("c%d", k),
					DecodeTPS: protocol.Stat{N: 5, Mean: 20, Median: 20, Stddev: 1}, Valid: true, Repetitions: 5})
			}
			out[i] = res
		}
		return out
	}
	for _, bc := range []struct {
		name     string
		complete func([]*protocol.Result) error
	}{
		{"one_per_tx", func(rs []*protocol.Result) error {
			for _, r := range rs {
				if _, err := st.CompleteRun(ctx, r); err != nil {
					return err
				}
			}
			return nil
		}},
		{"batch_64", func(rs []*protocol.Result) error {
			outs, err := st.CompleteRuns(ctx, rs)
			for _, o := range outs {
				if err == nil {
					err = o.Err
				}
			}
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var timed time.Duration
			for b.Loop() {
				b.StopTimer()
				rs := grantAll(b)
				b.StartTimer()
				t0 := time.Now()
				if err := bc.complete(rs); err != nil {
					b.Fatal(err)
				}
				timed += time.Since(t0)
			}
			b.ReportMetric(float64(b.N*n)/timed.Seconds(), "results/s")
		})
	}
}
