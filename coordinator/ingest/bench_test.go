package ingest_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// Workload of one benchmark iteration: 400 telemetry messages of 256
// samples (6 layers each), 102,400 samples.
const benchMsgs, benchPer = 400, 256

var seqBase atomic.Uint64

func benchBatches(e *env) []*protocol.TelemetryBatch {
	base := seqBase.Add(benchMsgs) - benchMsgs
	out := make([]*protocol.TelemetryBatch, benchMsgs)
	for i := range out {
		out[i] = batch(e.run, base+uint64(i), benchPer)
	}
	return out
}

// BenchmarkIngest compares, on the same rows:
//   - copy: raw pgx CopyFrom into samples on two connections (the limit:
//     no decode, no token check, no conflict handling, no JetStream);
//   - store: store.InsertTelemetry (token check, then COPY into samples),
//     64 messages per transaction;
//   - store-dedup-path: the same through the staging table and INSERT ...
//     ON CONFLICT DO NOTHING (the path a redelivered batch takes);
//   - jetstream: the whole ingest path, messages already in the TELEMETRY
//     stream, consumed, decoded, committed and acked by the Ingester.
//
// cpu-ns/sample is this process's CPU time (user + system) per sample: the
// coordinator's share, which a loaded machine inflates far less than the
// wall-clock rate. For jetstream it includes the in-process NATS server.
//
// go test -run=NONE -bench=Ingest -benchtime=3x ./coordinator/ingest/
func BenchmarkIngest(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	b.Run("copy", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			bs := benchBatches(e)
			var rows [][]any
			for _, bt := range bs {
				for i, s := range bt.Samples {
					packed, _ := store.PackLayers(nil, s.Layers)
					rows = append(rows, []any{bt.RunID, int32(bt.Seq), int16(i), int16(s.ConfigIndex), int16(s.Repetition), int32(s.Step),
						int16(2), int32(s.Pos), int32(s.Tokens), s.DurationNS, s.StallNS, s.BytesRead, s.CacheBytes,
						int32(21), int32(21), int32(21), int32(21), packed})
				}
			}
			// Two connections, like the Ingester's two workers.
			start := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, 2)
			half := len(rows) / 2
			for k, part := range [][][]any{rows[:half], rows[half:]} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[k] = e.st.Pool().CopyFrom(ctx, pgx.Identifier{"samples"}, []string{"run_id", "seq", "idx", "config_index", "repetition",
						"step", "phase", "pos", "tokens", "duration_ns", "stall_ns", "bytes_read", "cache_bytes", "hits_total", "misses_total",
						"prefetch_used_total", "prefetch_wasted_total", "layers"}, pgx.CopyFromRows(part))
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(b.N*benchMsgs*benchPer)/total.Seconds(), "samples/s")
	})
	for _, dedup := range []bool{false, true} {
		name := "store"
		if dedup {
			name = "store-dedup-path"
		}
		b.Run(name, func(b *testing.B) {
			e.st.SetDedupOnly(dedup)
			defer e.st.SetDedupOnly(false)
			var total, cpu time.Duration
			for b.Loop() {
				bs := benchBatches(e)
				start, cpu0 := time.Now(), processCPU()
				for i := 0; i < len(bs); i += 64 {
					st, err := e.st.InsertTelemetry(ctx, bs[i:min(i+64, len(bs))])
					if err != nil || len(st.Stale) != 0 {
						b.Fatal(err, st)
					}
				}
				total += time.Since(start)
				cpu += processCPU() - cpu0
			}
			b.ReportMetric(float64(b.N*benchMsgs*benchPer)/total.Seconds(), "samples/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*benchMsgs*benchPer), "cpu-ns/sample")
		})
	}
	b.Run("jetstream", func(b *testing.B) {
		var total, cpu time.Duration
		for b.Loop() {
			bs := benchBatches(e)
			before, _ := e.st.CountSamples(ctx, e.run.Run.ID)
			for _, bt := range bs {
				data, err := protocol.Encode(bt)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.js.PublishAsync(protocol.TelemetrySubject(bt.RunID), data); err != nil {
					b.Fatal(err)
				}
			}
			<-e.js.PublishAsyncComplete()
			ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st})
			if err != nil {
				b.Fatal(err)
			}
			start, cpu0 := time.Now(), processCPU()
			if err := ing.Start(ctx); err != nil {
				b.Fatal(err)
			}
			want := before + benchMsgs*benchPer
			for {
				if st := ing.Stats(); st.SamplesInserted == benchMsgs*benchPer {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			total += time.Since(start)
			cpu += processCPU() - cpu0
			if err := ing.Stop(); err != nil {
				b.Fatal(err)
			}
			if n, _ := e.st.CountSamples(ctx, e.run.Run.ID); n != want {
				b.Fatalf("%d samples, want %d (loss or duplicates)", n, want)
			}
		}
		b.ReportMetric(float64(b.N*benchMsgs*benchPer)/total.Seconds(), "samples/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*benchMsgs*benchPer), "cpu-ns/sample")
	})
}

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
