package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// BenchmarkTelemetryOverhead measures what streaming telemetry costs the
// decode loop: each iteration decodes the same greedy generation twice on
// the trained fixture model, once with no sink and once through the full
// telemetry path (aggregator, protocol encoding, outbox, JetStream publish
// to an in-process server), alternating so machine noise hits both alike.
// It reports the median decode time per token of each and the overhead.
//
//	go test -run '^$' -bench TelemetryOverhead -benchtime 20x ./agent/
func BenchmarkTelemetryOverhead(b *testing.B) {
	path := trainedModel(b)
	m, err := model.Load(path, model.Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		b.Fatal(err)
	}
	prompt := tok.Tokenize("In the beginning God created the heaven and the earth.", true, false)
	const n = 64
	st, err := m.NewState(len(prompt) + n)
	if err != nil {
		b.Fatal(err)
	}

	ns := testenv.NATS(b)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: protocol.StreamTelemetry, Subjects: []string{protocol.TelemetrySubjectPattern}}); err != nil {
		b.Fatal(err)
	}
	pub, _ := telemetry.NewJetStreamPublisher(nc)
	buf, _ := telemetry.OpenBuffer(b.TempDir(), 0)
	ob, _ := telemetry.NewOutbox(telemetry.OutboxConfig{Buffer: buf, Publisher: pub, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ob.Run(ctx)

	var seq int
	run := func(sink trace.Sink) time.Duration {
		res, err := generate.Run(ctx, m, generate.Params{PromptIDs: prompt, MaxTokens: n, Sink: sink, State: st})
		if err != nil {
			b.Fatal(err)
		}
		return res.Decode / time.Duration(res.DecodeSteps)
	}
	newSink := func() *telemetry.Aggregator {
		seq++
		runID := int64(seq)
		return telemetry.NewAggregator(telemetry.AggregatorConfig{RunID: runID, Token: 1, DeviceID: "bench", FlushEvery: 500 * time.Millisecond, MaxEvents: 256,
			Emit: func(tb *protocol.TelemetryBatch) {
				data, err := protocol.Encode(tb)
				if err != nil {
					b.Error(err)
					return
				}
				ob.Send(telemetry.Record{Subject: protocol.TelemetrySubject(runID), MsgID: fmt.Sprintf("t/%d/1/%d", runID, tb.Seq), Data: data})
			}})
	}
	run(nil) // warm up
	var plain, noop, withTel []float64
	b.ReportAllocs()
	for b.Loop() {
		plain = append(plain, float64(run(nil)))
		noop = append(noop, float64(run(noopSink{})))
		agg := newSink()
		withTel = append(withTel, float64(run(agg)))
		agg.Close()
	}
	if err := ob.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	// Paired ratios: each iteration's runs saw the same machine load.
	ratio := func(xs, base []float64) float64 {
		r := make([]float64, len(xs))
		for i := range xs {
			r[i] = xs[i] / base[i]
		}
		return 100 * (median(r) - 1)
	}
	b.ReportMetric(median(plain), "ns/token-plain")
	b.ReportMetric(median(noop), "ns/token-noop-sink")
	b.ReportMetric(median(withTel), "ns/token-telemetry")
	b.ReportMetric(ratio(noop, plain), "runtime-emit-%")
	b.ReportMetric(ratio(withTel, plain), "overhead-%")
	b.ReportMetric(ratio(withTel, noop), "agent-path-%")
	published, _ := ob.Stats()
	b.ReportMetric(float64(published), "batches")
}

// noopSink isolates the runtime's own cost of emitting events.
type noopSink struct{}

func (noopSink) Token(*trace.TokenEvent) {}
func (noopSink) Layer(*trace.LayerEvent) {}
func (noopSink) Read(*trace.ReadEvent)   {}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
