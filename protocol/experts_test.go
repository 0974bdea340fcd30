package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestExpertsRoundTrip checks that per-expert counts survive the wire
// exactly, and that a 40-layer, 256-expert model's full matrix fits a
// batch with room to spare.
func TestExpertsRoundTrip(t *testing.T) {
	b := sampleTelemetry(4)
	for l := range 40 {
		row := ExpertLoad{ConfigIndex: 2, Layer: l, Steps: 1024}
		for e := range 256 {
			row.Experts = append(row.Experts, int32(e))
			row.Demand = append(row.Demand, int32(1+(e*37+l)%1024))
			row.Miss = append(row.Miss, int32((e*37+l)%1024/3))
		}
		b.Experts = append(b.Experts, row)
	}
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTelemetry(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Experts) != len(b.Experts) {
		t.Fatalf("%d rows, want %d", len(got.Experts), len(b.Experts))
	}
	for i := range b.Experts {
		w, g := &b.Experts[i], &got.Experts[i]
		if w.ConfigIndex != g.ConfigIndex || w.Layer != g.Layer || w.Steps != g.Steps ||
			!slices.Equal(w.Experts, g.Experts) || !slices.Equal(w.Demand, g.Demand) || !slices.Equal(w.Miss, g.Miss) {
			t.Fatalf("row %d differs: %+v, want %+v", i, g, w)
		}
	}
	// 42 rows, 10,248 entries: about 45 KB, under a tenth of the limit.
	if len(data) > MaxTelemetryBytes/10 {
		t.Fatalf("a 40 × 256 matrix takes %d bytes, over a tenth of the %d-byte limit", len(data), MaxTelemetryBytes)
	}
	t.Logf("40 layers × 256 experts + 4 samples: %d bytes", len(data))
}

// TestExpertsRejected checks that bad per-expert counts are rejected with
// a one-line error of the right kind, and counted.
func TestExpertsRejected(t *testing.T) {
	var rc RejectCounter
	mutate := func(f func(b *TelemetryBatch)) []byte {
		b := sampleTelemetry(2)
		b.V = Version
		f(b)
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	good := mutate(func(*TelemetryBatch) {})
	var w telemetryWire
	if err := json.Unmarshal(good, &w); err != nil {
		t.Fatal(err)
	}
	rewire := func(f func(w *expertsWire)) []byte {
		w2 := w
		e := *w.Experts
		f(&e)
		w2.Experts = &e
		data, err := json.Marshal(&w2)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tests := []struct {
		name string
		data []byte
		kind string
		msg  string
	}{
		{"miss above demand", mutate(func(b *TelemetryBatch) { b.Experts[0].Miss[0] = 3 }), RejectInvalid, "miss 3 out of range [0, demand 2]"},
		{"demand above steps", mutate(func(b *TelemetryBatch) { b.Experts[0].Demand[1] = 3 }), RejectInvalid, "demand 3 out of range [1, steps 2]"},
		{"zero demand", mutate(func(b *TelemetryBatch) { b.Experts[0].Demand[1], b.Experts[0].Miss[1] = 0, 0 }), RejectInvalid, "demand 0 out of range"},
		{"layer twice", mutate(func(b *TelemetryBatch) { b.Experts[1].Layer = 0 }), RejectInvalid, "cfg 1 layer 0 listed twice"},
		{"layer too high", mutate(func(b *TelemetryBatch) { b.Experts[1].Layer = MaxLayers }), RejectInvalid, "layer 512 out of range"},
		{"no steps", mutate(func(b *TelemetryBatch) { b.Experts[1].Steps = 0 }), RejectInvalid, "steps 0 out of range"},
		{"empty row", mutate(func(b *TelemetryBatch) {
			b.Experts[1].Experts, b.Experts[1].Demand, b.Experts[1].Miss = nil, nil, nil
		}), RejectInvalid, "no experts"},
		{"bad encoding", rewire(func(e *expertsWire) { e.Enc = "dense" }), RejectMalformed, `experts.enc "dense" unsupported`},
		{"row count past data", rewire(func(e *expertsWire) { e.N = 3 }), RejectMalformed, "experts.data: truncated"},
		{"truncated", rewire(func(e *expertsWire) { e.Data = e.Data[:len(e.Data)-2] }), RejectMalformed, "truncated"},
		{"trailing bytes", rewire(func(e *expertsWire) { e.Data = append(slices.Clip(e.Data), 0, 0, 0, 0) }), RejectMalformed, "bytes after row 2"},
		{"ids not ascending", rewire(func(e *expertsWire) {
			// Row 0's second id delta (7-2=5) becomes 0: id 2 twice.
			e.Data = bytes.Replace(e.Data, []byte{3, 2, 2, 0, 5}, []byte{3, 2, 2, 0, 0}, 1)
		}), RejectMalformed, "ascend strictly"},
		{"id too large", rewire(func(e *expertsWire) {
			e.Data = bytes.Replace(e.Data, []byte{5, 1, 1, 0xa5, 0x02}, []byte{5, 1, 1, 0xff, 0x7f}, 1)
		}), RejectMalformed, "expert id out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, derr := DecodeTelemetry(tt.data)
			err := rc.Observe(derr)
			if err == nil {
				t.Fatal("accepted")
			}
			if RejectKind(err) != tt.kind || !strings.Contains(err.Error(), tt.msg) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got kind %q: %v; want one line of kind %q containing %q", RejectKind(err), err, tt.kind, tt.msg)
			}
		})
	}
	if rc.Total() != uint64(len(tests)) {
		t.Fatalf("counted %d rejections, want %d", rc.Total(), len(tests))
	}
	// An oversized matrix is refused by the sender and rejected (and
	// counted) by the receiver.
	big := sampleTelemetry(1)
	big.Experts = nil
	for l := range 20 {
		row := ExpertLoad{ConfigIndex: 0, Layer: l, Steps: 1}
		for e := range MaxExpertsPerLayer {
			row.Experts, row.Demand, row.Miss = append(row.Experts, int32(e)), append(row.Demand, 1), append(row.Miss, 0)
		}
		big.Experts = append(big.Experts, row)
	}
	if _, err := Encode(big); err == nil || !strings.Contains(err.Error(), "more than 65536 entries") {
		t.Fatalf("encode of 20 × 4096 entries: %v", err)
	}
}

// FuzzExpertsData feeds arbitrary bytes to the experts blob decoder: it
// must never panic, and rows it accepts and validates must re-encode to
// bytes that decode to the same rows and re-encode to themselves (the
// encoder is canonical; the decoder also takes overlong varints).
func FuzzExpertsData(f *testing.F) {
	w, err := marshalExperts(sampleTelemetry(3).Experts)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(w.N, w.Data)
	f.Add(1, []byte{0, 0, 1, 1, 0, 1, 0})
	f.Add(1, []byte{0, 0, 1, 2, 5, 1, 0, 0, 1, 0})
	f.Add(1, []byte{0, 0, 1, 1, 0x80, 0x00, 1, 0})
	f.Fuzz(func(t *testing.T, n int, data []byte) {
		rows, err := unmarshalExperts(&expertsWire{N: n, Enc: ExpertsEncoding, Data: data})
		if err != nil || validateExperts(rows) != nil {
			return
		}
		w1, err := marshalExperts(rows)
		if err != nil {
			t.Fatalf("accepted rows do not encode: %v", err)
		}
		if w1 == nil {
			if len(rows) != 0 {
				t.Fatalf("%d rows encode to nothing", len(rows))
			}
			return
		}
		again, err := unmarshalExperts(w1)
		if err != nil {
			t.Fatalf("re-encoded rows rejected: %v", err)
		}
		if !reflect.DeepEqual(again, rows) {
			t.Fatalf("rows changed on a round trip: %+v, then %+v", rows, again)
		}
		w2, err := marshalExperts(again)
		if err != nil || !bytes.Equal(w1.Data, w2.Data) {
			t.Fatalf("encoding is not a fixed point: %x, then %x (%v)", w1.Data, w2.Data, err)
		}
	})
}
