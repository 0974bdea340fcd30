package ingest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
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

// agentMsgs, agentPer and agentLayers are the load test's telemetry shape
// (internal/loadtest: 500 ms batches at 100 samples/s, a 48-layer MoE):
// 2,048 messages of 50 samples, the same 102,400 samples as benchBatches.
const agentMsgs, agentPer, agentLayers = 2048, 50, 48

// agentBatches are agentMsgs messages of the load test's shape. The cache
// (16 MiB) stays within the run's model, as ingest's value checks require
// (protocol.RunBounds.CheckTelemetry); a larger one is rejected as invalid.
func agentBatches(e *env) []*protocol.TelemetryBatch {
	base := seqBase.Add(agentMsgs) - agentMsgs
	out := make([]*protocol.TelemetryBatch, agentMsgs)
	for k := range out {
		b := &protocol.TelemetryBatch{RunID: e.run.Run.ID, Token: e.run.Token, DeviceID: "dev-1", Seq: base + uint64(k), SentAt: time.Now()}
		for i := range agentPer {
			lc := &protocol.LayerCounts{Hits: make([]int32, agentLayers), Misses: make([]int32, agentLayers),
				PrefetchUsed: make([]int32, agentLayers), PrefetchWasted: make([]int32, agentLayers)}
			for l := range agentLayers {
				lc.Hits[l], lc.Misses[l], lc.PrefetchUsed[l], lc.PrefetchWasted[l] = int32(3+(i+l)%6), int32((i*l)%4), int32((i+2*l)%3), int32((i+l)%2)
			}
			b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: 1, Step: int(b.Seq)*agentPer + i, Phase: protocol.PhaseDecode, Pos: 16 + i, Tokens: 1,
				DurationNS: 48e6, StallNS: 11e6, BytesRead: 9 << 20, CacheBytes: 16 << 20, Layers: lc})
		}
		out[k] = b
	}
	return out
}

// BenchmarkIngest compares, on the same samples:
//   - rows: raw pgx CopyFrom on two connections into a scratch table of
//     the per-sample row layout that samples had before migration 00030
//     (one row per sample, hash-partitioned, primary key (run, seq, idx)):
//     the database's cost of the old layout;
//   - store: store.InsertTelemetry (rows encoded, token check, then COPY of
//     one sample_batches row per message), 64 messages per transaction;
//   - store-dedup-path: the same through the staging table and INSERT ...
//     ON CONFLICT DO NOTHING (the path a redelivered batch takes);
//   - jetstream: the whole ingest path, messages already in the TELEMETRY
//     stream, consumed, decoded, committed and acked by the Ingester.
//
// cpu-ns/sample is this process's CPU time (user + system) per sample: the
// coordinator's share, which a loaded machine inflates far less than the
// wall-clock rate. For jetstream it includes the in-process NATS server.
// db-cpu-ns/sample is the CPU of this test database's backends (from
// /proc; 0 where unreadable) per sample: Postgres's share.
//
// go test -run=NONE -bench=Ingest -benchtime=3x ./coordinator/ingest/
func BenchmarkIngest(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	b.Run("rows", func(b *testing.B) {
		if _, err := e.st.Pool().Exec(ctx, benchRowsDDL); err != nil {
			b.Fatal(err)
		}
		var total, dbCPU time.Duration
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
			// Two connections, like two ingest workers.
			start, db0 := time.Now(), backendCPU(ctx, e.st)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			half := len(rows) / 2
			for k, part := range [][][]any{rows[:half], rows[half:]} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[k] = e.st.Pool().CopyFrom(ctx, pgx.Identifier{"bench_sample_rows"}, []string{"run_id", "seq", "idx", "config_index", "repetition",
						"step", "phase", "pos", "tokens", "duration_ns", "stall_ns", "bytes_read", "cache_bytes", "hits_total", "misses_total",
						"prefetch_used_total", "prefetch_wasted_total", "layers"}, pgx.CopyFromRows(part))
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
			dbCPU += backendCPU(ctx, e.st) - db0
		}
		b.ReportMetric(float64(b.N*benchMsgs*benchPer)/total.Seconds(), "samples/s")
		b.ReportMetric(float64(dbCPU.Nanoseconds())/float64(b.N*benchMsgs*benchPer), "db-cpu-ns/sample")
	})
	for _, dedup := range []bool{false, true} {
		name := "store"
		if dedup {
			name = "store-dedup-path"
		}
		b.Run(name, func(b *testing.B) {
			e.st.SetDedupOnly(dedup)
			defer e.st.SetDedupOnly(false)
			var total, cpu, dbCPU time.Duration
			for b.Loop() {
				bs := benchBatches(e)
				start, cpu0, db0 := time.Now(), processCPU(), backendCPU(ctx, e.st)
				for i := 0; i < len(bs); i += 64 {
					st, err := e.st.InsertTelemetry(ctx, bs[i:min(i+64, len(bs))])
					if err != nil || len(st.Stale) != 0 {
						b.Fatal(err, st)
					}
				}
				total += time.Since(start)
				cpu += processCPU() - cpu0
				dbCPU += backendCPU(ctx, e.st) - db0
			}
			b.ReportMetric(float64(b.N*benchMsgs*benchPer)/total.Seconds(), "samples/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*benchMsgs*benchPer), "cpu-ns/sample")
			b.ReportMetric(float64(dbCPU.Nanoseconds())/float64(b.N*benchMsgs*benchPer), "db-cpu-ns/sample")
		})
	}
	// The agent's shape with the default transactions (several fetches
	// per commit from a backlog), and with one fetch per commit.
	for _, shape := range []struct {
		name   string
		gen    func(*env) []*protocol.TelemetryBatch
		commit int
	}{{"jetstream", benchBatches, 0}, {"jetstream-agent", agentBatches, 0}, {"jetstream-agent-onefetch", agentBatches, 128}} {
		b.Run(shape.name, func(b *testing.B) { benchJetStream(b, e, shape.gen, shape.commit) })
	}
	b.Run("jetstream-agent-live", func(b *testing.B) { benchJetStreamLive(b, e) })
}

// benchJetStreamLive is jetstream-agent with the messages published while
// the Ingester consumes them, by 64 publishers each waiting for its
// acknowledgement like an agent: the stream's writes, deliveries and
// deletions then share its file store, as at 1,000 agents. samples/s is
// from the first publish to the last commit; fetch-share is the share of
// the workers' time spent waiting for fetches to fill.
func benchJetStreamLive(b *testing.B, e *env) {
	ctx := context.Background()
	var total, cpu, dbCPU, fetch, busy time.Duration
	var samples int
	for b.Loop() {
		bs := agentBatches(e)
		data := make([][]byte, len(bs))
		for k, bt := range bs {
			var err error
			if data[k], err = protocol.Encode(bt); err != nil {
				b.Fatal(err)
			}
		}
		samples += agentMsgs * agentPer
		ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st})
		if err != nil {
			b.Fatal(err)
		}
		if err := ing.Start(ctx); err != nil {
			b.Fatal(err)
		}
		start, cpu0, db0 := time.Now(), processCPU(), backendCPU(ctx, e.st)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for k := next.Add(1) - 1; k < int64(len(data)); k = next.Add(1) - 1 {
					if _, err := e.js.Publish(ctx, protocol.TelemetrySubject(bs[k].RunID), data[k]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		testenv.Eventually(b, 5*time.Minute, 2*time.Millisecond, func() error {
			if got := ing.Stats().SamplesInserted; got < uint64(agentMsgs*agentPer) {
				return fmt.Errorf("%d of %d samples inserted", got, agentMsgs*agentPer)
			}
			return nil
		})
		wg.Wait()
		total += time.Since(start)
		cpu += processCPU() - cpu0
		dbCPU += backendCPU(ctx, e.st) - db0
		if err := ing.Stop(); err != nil {
			b.Fatal(err)
		}
		st := ing.Stats()
		fetch += st.FetchTime
		busy += st.FetchTime + st.DecodeTime + st.CommitTime + st.AckTime
	}
	b.ReportMetric(float64(samples)/total.Seconds(), "samples/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(samples), "cpu-ns/sample")
	b.ReportMetric(float64(dbCPU.Nanoseconds())/float64(samples), "db-cpu-ns/sample")
	b.ReportMetric(fetch.Seconds()/busy.Seconds(), "fetch-share")
}

// benchJetStream is BenchmarkIngest's whole path: gen's messages published
// into the TELEMETRY stream, then consumed, decoded, committed and acked by
// an Ingester (CommitMessages commit, 0 for the default).
func benchJetStream(b *testing.B, e *env, gen func(*env) []*protocol.TelemetryBatch, commit int) {
	ctx := context.Background()
	var total, cpu, dbCPU, fetch, busy time.Duration
	var samples int
	for b.Loop() {
		bs := gen(e)
		n := 0
		for _, bt := range bs {
			n += len(bt.Samples)
		}
		samples += n
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
		ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, CommitMessages: commit})
		if err != nil {
			b.Fatal(err)
		}
		start, cpu0, db0 := time.Now(), processCPU(), backendCPU(ctx, e.st)
		if err := ing.Start(ctx); err != nil {
			b.Fatal(err)
		}
		want := before + int64(n)
		testenv.Eventually(b, 5*time.Minute, 2*time.Millisecond, func() error {
			if got := ing.Stats().SamplesInserted; got != uint64(n) {
				return fmt.Errorf("%d of %d samples inserted", got, n)
			}
			return nil
		})
		total += time.Since(start)
		cpu += processCPU() - cpu0
		dbCPU += backendCPU(ctx, e.st) - db0
		if err := ing.Stop(); err != nil {
			b.Fatal(err)
		}
		st := ing.Stats()
		fetch += st.FetchTime
		busy += st.FetchTime + st.DecodeTime + st.CommitTime + st.AckTime
		if n, _ := e.st.CountSamples(ctx, e.run.Run.ID); n != want {
			b.Fatalf("%d samples, want %d (loss or duplicates)", n, want)
		}
	}
	b.ReportMetric(float64(samples)/total.Seconds(), "samples/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(samples), "cpu-ns/sample")
	b.ReportMetric(float64(dbCPU.Nanoseconds())/float64(samples), "db-cpu-ns/sample")
	b.ReportMetric(fetch.Seconds()/busy.Seconds(), "fetch-share")
}

// benchRowsDDL is the per-sample row layout of samples before migration
// 00030 (00002 with 00004), as a scratch table.
const benchRowsDDL = `CREATE TABLE IF NOT EXISTS bench_sample_rows (
	run_id bigint NOT NULL, seq integer NOT NULL, idx smallint NOT NULL, config_index smallint NOT NULL, repetition smallint NOT NULL,
	step integer NOT NULL, phase smallint NOT NULL, pos integer NOT NULL, tokens integer NOT NULL, duration_ns bigint NOT NULL,
	stall_ns bigint NOT NULL, bytes_read bigint NOT NULL, cache_bytes bigint NOT NULL, hits_total integer NOT NULL DEFAULT 0,
	misses_total integer NOT NULL DEFAULT 0, prefetch_used_total integer NOT NULL DEFAULT 0, prefetch_wasted_total integer NOT NULL DEFAULT 0,
	layers bytea, PRIMARY KEY (run_id, seq, idx)) PARTITION BY HASH (run_id);
CREATE TABLE IF NOT EXISTS bench_sample_rows_p0 PARTITION OF bench_sample_rows FOR VALUES WITH (MODULUS 4, REMAINDER 0);
CREATE TABLE IF NOT EXISTS bench_sample_rows_p1 PARTITION OF bench_sample_rows FOR VALUES WITH (MODULUS 4, REMAINDER 1);
CREATE TABLE IF NOT EXISTS bench_sample_rows_p2 PARTITION OF bench_sample_rows FOR VALUES WITH (MODULUS 4, REMAINDER 2);
CREATE TABLE IF NOT EXISTS bench_sample_rows_p3 PARTITION OF bench_sample_rows FOR VALUES WITH (MODULUS 4, REMAINDER 3)`

// backendCPU is the CPU time (user + system) of the client backends of
// st's database so far, read from /proc (0 when not readable: the
// database on another host or user). The pool's backends outlive each
// measurement, so differences are the work done in between.
func backendCPU(ctx context.Context, st *store.Store) time.Duration {
	rows, err := st.Pool().Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: utime and stime are
		// the 12th and 13th.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ = 100
}

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
