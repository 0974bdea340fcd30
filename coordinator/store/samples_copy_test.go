package store_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestInsertTelemetryRoundTrip stores samples with extreme values, with and
// without per-layer counts, through both COPY paths (straight into samples,
// and through the staging table after a redelivery) and reads every column
// back: the binary COPY encoding must store exactly what pgx's encoding
// stored.
func TestInsertTelemetryRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
		t.Fatal(err)
	}
	g := claim(t, st, "dev-a")
	layers := &protocol.LayerCounts{Hits: []int32{0, 1, 65535, 70000}, Misses: []int32{5, 0, 2, 3}, PrefetchUsed: []int32{1, 1, 1, 1}, PrefetchWasted: []int32{0, 0, 0, 9}}
	samples := []protocol.Sample{
		{ConfigIndex: 0, Repetition: -2, Step: 0, Phase: protocol.PhasePrefill, Pos: 0, Tokens: 512, DurationNS: 1, StallNS: 0, BytesRead: 0, CacheBytes: 0},
		{ConfigIndex: 32767, Repetition: 32767, Step: 1<<31 - 1, Phase: protocol.PhaseDecode, Pos: 1<<31 - 1, Tokens: 1,
			DurationNS: 1<<63 - 1, StallNS: 123456789, BytesRead: 1 << 40, CacheBytes: 1<<62 + 7, Layers: layers},
		{ConfigIndex: 3, Repetition: 0, Step: 9, Phase: protocol.PhaseVerify, Pos: 77, Tokens: 4, DurationNS: 5e6, StallNS: 1e5, BytesRead: 42, CacheBytes: 43,
			Layers: &protocol.LayerCounts{Hits: []int32{}, Misses: []int32{}, PrefetchUsed: []int32{}, PrefetchWasted: []int32{}}},
	}
	b1 := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a", Seq: 1<<31 - 1, Samples: samples}
	b2 := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a", Seq: 2, Samples: samples[1:2]}
	if ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b1}); err != nil || ts.Inserted != 3 || ts.Duplicates {
		t.Fatalf("fast path: %+v %v", ts, err)
	}
	// A redelivery of b1, a stale attempt's batch (left out of the COPY
	// stream) and the new b2: the staging path stores b2 only.
	stale := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token + 1000, DeviceID: "dev-a", Seq: 7, Samples: samples}
	if ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b1, stale, b2}); err != nil || ts.Inserted != 1 || !ts.Duplicates ||
		len(ts.Stale) != 1 || ts.Stale[0] != 1 {
		t.Fatalf("dedup path: %+v %v", ts, err)
	}
	// A stale batch first, then a new one, on the fast path.
	b3 := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a", Seq: 3, Samples: samples[:1]}
	if ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{stale, b3}); err != nil || ts.Inserted != 1 || ts.Duplicates ||
		len(ts.Stale) != 1 || ts.Stale[0] != 0 {
		t.Fatalf("fast path with a stale batch: %+v %v", ts, err)
	}
	if n, err := st.CountSamples(ctx, g.Run.ID); err != nil || n != 5 {
		t.Fatalf("CountSamples = %d, %v; want 5", n, err)
	}
	if keys, err := st.SampleKeys(ctx, g.Run.ID); err != nil || len(keys) != 5 || keys[0] != [2]int{2, 0} || keys[1] != [2]int{3, 0} ||
		keys[4] != [2]int{1<<31 - 1, 2} {
		t.Fatalf("SampleKeys = %v, %v", keys, err)
	}
	rows, err := st.Pool().Query(ctx, `SELECT seq, idx, config_index, repetition, step, phase, pos, tokens, duration_ns, stall_ns, bytes_read, cache_bytes,
		hits_total, misses_total, prefetch_used_total, prefetch_wasted_total, layers FROM samples WHERE run_id = $1 ORDER BY seq, idx`, g.Run.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type key struct{ seq, idx int }
	want := map[key]*protocol.Sample{{2, 0}: &samples[1], {3, 0}: &samples[0]}
	for i := range samples {
		want[key{1<<31 - 1, i}] = &samples[i]
	}
	phases := map[int16]string{1: protocol.PhasePrefill, 2: protocol.PhaseDecode, 3: protocol.PhaseVerify}
	n := 0
	for rows.Next() {
		var seq int32
		var idx, cfg, rep, phase int16
		var step, pos, tokens, ht, mt, pu, pw int32
		var dur, stall, br, cb int64
		var packed []byte
		if err := rows.Scan(&seq, &idx, &cfg, &rep, &step, &phase, &pos, &tokens, &dur, &stall, &br, &cb, &ht, &mt, &pu, &pw, &packed); err != nil {
			t.Fatal(err)
		}
		n++
		s := want[key{int(seq), int(idx)}]
		if s == nil {
			t.Fatalf("unexpected row seq %d idx %d", seq, idx)
		}
		if int(cfg) != s.ConfigIndex || int(rep) != s.Repetition || int(step) != s.Step || phases[phase] != s.Phase || int(pos) != s.Pos ||
			int(tokens) != s.Tokens || dur != s.DurationNS || stall != s.StallNS || br != s.BytesRead || cb != s.CacheBytes {
			t.Errorf("seq %d idx %d: stored (%d %d %d %d %d %d %d %d %d %d), want %+v", seq, idx, cfg, rep, step, phase, pos, tokens, dur, stall, br, cb, *s)
		}
		if s.Layers == nil {
			if packed != nil || ht != 0 || mt != 0 || pu != 0 || pw != 0 {
				t.Errorf("seq %d idx %d: layers %v totals %d %d %d %d, want NULL and zeros", seq, idx, packed, ht, mt, pu, pw)
			}
			continue
		}
		wantPacked, _ := store.PackLayers(nil, s.Layers)
		if !bytes.Equal(packed, wantPacked) || packed == nil {
			t.Errorf("seq %d idx %d: layers %x, want %x", seq, idx, packed, wantPacked)
		}
		sum := func(v []int32) (n int32) {
			for _, x := range v {
				n += x
			}
			return n
		}
		if ht != sum(s.Layers.Hits) || mt != sum(s.Layers.Misses) || pu != sum(s.Layers.PrefetchUsed) || pw != sum(s.Layers.PrefetchWasted) {
			t.Errorf("seq %d idx %d: totals %d %d %d %d", seq, idx, ht, mt, pu, pw)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("%d rows, want %d", n, len(want))
	}
}
