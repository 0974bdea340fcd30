package expert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// testModel is a file of expert data with a known pattern.
type testModel struct {
	path   string
	layout Layout
	shapes []moe.LayerShape
	data   []byte
}

// partBytes is the pattern of one part of one expert.
func partBytes(l, e, p, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(l*1000+e), uint64(p)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// newTestModel writes layers × experts experts of F32 hidden×ffn matrices,
// packed (one 4096-aligned blob each) or stacked (three tensors per layer),
// after a header of odd size so stacked extents are unaligned.
func newTestModel(t testing.TB, layers, experts, hidden, ffn int, packed bool) *testModel {
	t.Helper()
	return newTypedTestModel(t, tensor.F32, layers, experts, hidden, ffn, packed)
}

// newTypedTestModel is newTestModel with matrices of type typ, whose rows
// of hidden and of ffn values must be the same size (hidden == ffn unless
// typ is F32).
func newTypedTestModel(t testing.TB, typ tensor.Type, layers, experts, hidden, ffn int, packed bool) *testModel {
	t.Helper()
	sh := moe.LayerShape{Experts: experts, Hidden: hidden, FFN: ffn, GateType: typ, UpType: typ, DownType: typ}
	row, err := typ.RowSize(hidden)
	if err != nil {
		t.Fatal(err)
	}
	part := row * ffn
	if int64(3*part) != sh.Bytes() {
		t.Fatalf("%s rows of %d and %d values differ in size", typ, hidden, ffn)
	}
	m := &testModel{shapes: make([]moe.LayerShape, layers), layout: Layout{Packed: packed, Experts: make([][][3]Extent, layers)}}
	var buf bytes.Buffer
	buf.Write(make([]byte, 1234)) // header
	for l := range layers {
		m.shapes[l] = sh
		m.layout.Experts[l] = make([][3]Extent, experts)
		if packed {
			for e := range experts {
				for buf.Len()%directAlign != 0 {
					buf.WriteByte(0)
				}
				for p := range 3 {
					m.layout.Experts[l][e][p] = Extent{Off: int64(buf.Len()), Len: int64(part)}
					buf.Write(partBytes(l, e, p, part))
				}
			}
		} else {
			for p := range 3 {
				buf.Write(make([]byte, 32))
				for e := range experts {
					m.layout.Experts[l][e][p] = Extent{Off: int64(buf.Len()), Len: int64(part)}
					buf.Write(partBytes(l, e, p, part))
				}
			}
		}
	}
	buf.Write(make([]byte, 100))
	m.data = buf.Bytes()
	m.path = filepath.Join(t.TempDir(), "model.bin")
	if err := os.WriteFile(m.path, m.data, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *testModel) check(l, e int, w moe.Weights) error {
	for p, got := range [][]byte{w.Gate, w.Up, w.Down} {
		x := m.layout.Experts[l][e][p]
		if !bytes.Equal(got, m.data[x.Off:x.Off+x.Len]) {
			return fmt.Errorf("layer %d expert %d part %d: wrong bytes", l, e, p)
		}
	}
	return nil
}

func (m *testModel) expertBytes() int64 { return m.shapes[0].Bytes() }

// drive runs tr through s the way the model does: predict (with some noise)
// the next layer, then use the current one, checking every byte served.
func drive(t testing.TB, s *Store, m *testModel, tr *RoutingTrace, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 2))
	ctx := context.Background()
	for ci, c := range tr.Calls {
		if s.PredictK() > 0 && ci+1 < len(tr.Calls) {
			next := tr.Calls[ci+1]
			var pred []int
			for _, e := range next.Experts {
				if r.Float64() < 0.7 {
					pred = append(pred, e)
				} else {
					pred = append(pred, r.IntN(m.shapes[0].Experts))
				}
			}
			s.Prefetch(next.Layer, dedup(pred))
		}
		seen := make([]bool, len(c.Experts))
		err := s.Use(ctx, c.Layer, c.Experts, func(i int, w moe.Weights) error {
			if seen[i] {
				return fmt.Errorf("expert index %d served twice", i)
			}
			seen[i] = true
			return m.check(c.Layer, c.Experts[i], w)
		})
		if err != nil {
			t.Fatalf("call %d: %v", ci, err)
		}
		for i, ok := range seen {
			if !ok {
				t.Fatalf("call %d: expert index %d never served", ci, i)
			}
		}
	}
}

func dedup(xs []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func TestStoreModesServeCorrectBytesWithinBudget(t *testing.T) {
	t.Parallel()
	for _, packed := range []bool{true, false} {
		m := newTestModel(t, 4, 16, 16, 16, packed)
		tr := randomTrace(1, 30, 4, 16, 4)
		for _, mode := range []Mode{OnDemand, OnDemandParallel, Lookahead, Scheduled, OracleMode} {
			for _, policy := range PolicyNames() {
				for _, budgetExperts := range []int64{1, 3, 12, 80} {
					name := fmt.Sprintf("packed=%v/%s/%s/budget=%d", packed, mode, policy, budgetExperts)
					t.Run(name, func(t *testing.T) {
						budget := budgetExperts * planRead(m.layout.Experts[0][0], 1).size
						s, err := New(m.path, m.layout, m.shapes, Options{Mode: mode, Budget: budget, Policy: policy, Trace: tr, Workers: 4, PredictK: 4})
						if err != nil {
							t.Fatal(err)
						}
						defer s.Close()
						drive(t, s, m, tr, 3)
						st := s.Meter().Stats()
						if st.PeakBytes > budget {
							t.Fatalf("peak %d bytes exceeds the budget %d", st.PeakBytes, budget)
						}
						if st.Hits+st.Misses != st.Demanded || st.Demanded != int64(tr.Len()) {
							t.Fatalf("hits %d + misses %d != demanded %d (trace %d)", st.Hits, st.Misses, st.Demanded, tr.Len())
						}
						if st.Reads == 0 || st.BytesRead < st.Reads*m.expertBytes() {
							t.Fatalf("reads %d bytes %d", st.Reads, st.BytesRead)
						}
						if s.strat.speculative() && st.PrefetchIssued == 0 && budgetExperts > 3 {
							t.Fatalf("no prefetch issued in %s", mode)
						}
					})
				}
			}
		}
	}
}

func TestOracleBeatsPoliciesOnHitsAndBytes(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 4, 16, 16, 16, true)
	tr := randomTrace(7, 40, 4, 16, 4)
	budget := 12 * m.expertBytes()
	stats := map[string]Stats{}
	for _, policy := range PolicyNames() {
		for _, mode := range []Mode{OnDemandParallel, Scheduled} {
			s, err := New(m.path, m.layout, m.shapes, Options{Mode: mode, Budget: budget, Policy: policy, Workers: 4})
			if err != nil {
				t.Fatal(err)
			}
			drive(t, s, m, tr, 1)
			stats[mode.String()+"/"+policy] = s.Meter().Stats()
			s.Close()
		}
	}
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: OracleMode, Budget: budget, Trace: tr, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	drive(t, s, m, tr, 1)
	o := s.Meter().Stats()
	plan := s.strat.(*oracleStrategy).plan
	s.Close()
	if plan == nil {
		t.Fatal("the oracle left its plan")
	}
	if o.Reads != int64(plan.Reads()) || o.BytesRead != plan.Bytes() {
		t.Fatalf("oracle read %d experts (%d bytes), its plan %d (%d bytes)", o.Reads, o.BytesRead, plan.Reads(), plan.Bytes())
	}
	for name, st := range stats {
		if o.BytesRead > st.BytesRead || o.Hits < st.Hits {
			t.Fatalf("oracle read %d bytes with %d hits; %s read %d bytes with %d hits", o.BytesRead, o.Hits, name, st.BytesRead, st.Hits)
		}
	}
}

func TestStoreDirectIO(t *testing.T) {
	t.Parallel()
	for _, packed := range []bool{true, false} {
		m := newTestModel(t, 2, 8, 32, 32, packed)
		s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 1 << 20, Direct: true, Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Info().Direct {
			t.Logf("O_DIRECT unsupported in %s; tested the buffered fallback", filepath.Dir(m.path))
		} else if s.Info().ExpertBytes[0]%directAlign != 0 {
			t.Fatalf("direct buffer size %d is not aligned", s.Info().ExpertBytes[0])
		}
		drive(t, s, m, randomTrace(2, 10, 2, 8, 3), 1)
		if packed && s.Meter().Stats().Reads != s.Meter().Stats().Misses-s.Meter().Stats().PrefetchUsed+s.Meter().Stats().SpecReads && false {
			t.Fatal("unreachable")
		}
		s.Close()
	}
}

func TestPackedIsOneReadPerExpert(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		packed bool
		runs   int
	}{{true, 1}, {false, 3}} {
		m := newTestModel(t, 1, 4, 64, 64, tc.packed)
		for _, align := range []int64{1, directAlign} {
			p := planRead(m.layout.Experts[0][2], align)
			if len(p.runs) != tc.runs {
				t.Fatalf("packed=%v align=%d: %d reads, want %d", tc.packed, align, len(p.runs), tc.runs)
			}
			for _, r := range p.runs {
				if r.off%align != 0 || r.n%align != 0 || r.bufOff%align != 0 {
					t.Fatalf("unaligned run %+v", r)
				}
			}
		}
	}
}

func TestStoreBadInput(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 2, 8, 16, 16, true)
	_, err := New(m.path, m.layout, m.shapes, Options{Budget: m.expertBytes() - 1})
	if !errors.Is(err, ErrBudgetTooSmall) {
		t.Fatalf("small budget: %v", err)
	}
	if _, err := New(m.path, m.layout, m.shapes, Options{Mode: OracleMode, Budget: 1 << 20}); err == nil || !strings.Contains(err.Error(), "trace") {
		t.Fatalf("oracle without trace: %v", err)
	}
	if _, err := New(m.path, m.layout, m.shapes, Options{Budget: 1 << 20, Policy: "mru"}); err == nil {
		t.Fatal("unknown policy accepted")
	}
	if _, err := New(filepath.Join(t.TempDir(), "none"), m.layout, m.shapes, Options{Budget: 1 << 20}); err == nil {
		t.Fatal("missing file accepted")
	}
	p := &Profile{Name: "phone-mid", Bandwidth: 1.5e9, Latency: 200 * time.Microsecond, MaxInFlight: 16, RAMBudget: 6 << 30}
	if _, err := New(m.path, m.layout, m.shapes, Options{Budget: 7 << 30, Profile: p}); err == nil || !strings.Contains(err.Error(), "RAM budget") {
		t.Fatalf("budget above the profile's RAM: %v", err)
	}
	s, err := New(m.path, m.layout, m.shapes, Options{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		layer   int
		experts []int
	}{{5, []int{1}}, {0, []int{8}}, {0, []int{-1}}, {0, []int{1, 1}}} {
		if err := s.Use(ctx, tc.layer, tc.experts, func(int, moe.Weights) error { return nil }); err == nil {
			t.Fatalf("Use(%d, %v) accepted", tc.layer, tc.experts)
		}
	}
	boom := errors.New("boom")
	if err := s.Use(ctx, 0, []int{1, 2}, func(int, moe.Weights) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn error not returned: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Use(cctx, 1, []int{3}, func(int, moe.Weights) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	// The store still works after the errors, with nothing left pinned.
	drive(t, s, m, randomTrace(3, 5, 2, 8, 3), 1)
}

// TestStoreReadErrorMidGeneration truncates the file under a running store:
// the next read of a missing expert must fail with a clear error, in every
// mode, without hanging.
func TestStoreReadErrorMidGeneration(t *testing.T) {
	t.Parallel()
	for _, mode := range []Mode{OnDemand, OnDemandParallel, Lookahead, Scheduled} {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/direct=%v", mode, direct), func(t *testing.T) {
				m := newTestModel(t, 2, 8, 16, 16, true)
				s, err := New(m.path, m.layout, m.shapes, Options{Mode: mode, Budget: 2 * m.expertBytes(), Direct: direct, Workers: 2})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				ok := func(int, moe.Weights) error { return nil }
				if err := s.Use(ctx, 0, []int{0}, ok); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(m.path, m.layout.Experts[1][0][0].Off); err != nil {
					t.Fatal(err)
				}
				s.Prefetch(1, []int{1, 2})
				err = s.Use(ctx, 1, []int{3, 4}, ok)
				if err == nil || !strings.Contains(err.Error(), "truncated") {
					t.Fatalf("err = %v, want a read error naming truncation", err)
				}
				if ctx.Err() != nil {
					t.Fatal("Use hung until the timeout")
				}
				if st := s.Meter().Stats(); st.PeakBytes > 2*m.expertBytes() {
					t.Fatalf("peak %d over budget", st.PeakBytes)
				}
			})
		}
	}
}

func TestSpeculationNeverEvictsCurrentLayer(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 3, 16, 16, 16, true)
	eb := m.expertBytes()
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 4 * eb, Workers: 2, SpecInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ok := func(int, moe.Weights) error { return nil }
	// Fill the cache with layer 0's experts, then prefetch for layer 1 (so
	// layer 0 is the one computing): nothing of layer 0 may go.
	if err := s.Use(ctx, 0, []int{0, 1, 2, 3}, ok); err != nil {
		t.Fatal(err)
	}
	s.Prefetch(1, []int{5, 6, 7})
	if st := s.Meter().Stats(); st.PrefetchIssued != 0 {
		t.Fatalf("speculation evicted the computing layer: %d prefetches issued", st.PrefetchIssued)
	}
	before := s.Meter().Stats().Hits
	if err := s.Use(ctx, 0, []int{0, 1, 2, 3}, ok); err != nil {
		t.Fatal(err)
	}
	if got := s.Meter().Stats().Hits - before; got != 4 {
		t.Fatalf("layer 0 hits = %d, want 4", got)
	}
	// Prefetching for layer 2 may evict layer 0 (not computing) but the
	// predictions are bounded by the budget and never block.
	s.Prefetch(2, []int{1, 2, 3, 4, 5, 6, 7, 8})
	st := s.Meter().Stats()
	if st.PrefetchIssued == 0 || st.PrefetchIssued > 4 {
		t.Fatalf("prefetches issued = %d, want 1..4", st.PrefetchIssued)
	}
}

// slowFile makes reads slow through a throttle so priorities show.
func TestDemandBeforeSpeculation(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 2, 32, 64, 64, true) // 48 KiB experts
	p := &Profile{Name: "slow", Bandwidth: 20 << 20, Latency: time.Millisecond, MaxInFlight: 2}
	var specDone, demandDone atomic.Int64
	var order []string
	sink := readSink(func(ev *trace.ReadEvent) {
		if ev.Speculative {
			specDone.Add(1)
		} else {
			demandDone.Add(1)
		}
	})
	_ = order
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 64 * m.expertBytes(), Profile: p, SpecInFlight: 1, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Queue many speculative reads for layer 1, then demand layer 0.
	s.Prefetch(1, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	start := time.Now()
	if err := s.Use(context.Background(), 0, []int{20, 21}, func(int, moe.Weights) error { return nil }); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// Two demanded reads of 48 KiB at 20 MiB/s with 1 ms latency take
	// about 6 ms; the twelve speculative reads would take about 30 ms.
	if sd := specDone.Load(); sd > 2 {
		t.Fatalf("%d speculative reads completed before the demand (took %v)", sd, took)
	}
	// Use of layer 1 cancels queued speculative reads it does not demand.
	if err := s.Use(context.Background(), 1, []int{0, 30}, func(int, moe.Weights) error { return nil }); err != nil {
		t.Fatal(err)
	}
	st := s.Meter().Stats()
	if st.PrefetchCancelled == 0 {
		t.Fatalf("no queued speculative read was cancelled: %+v", st)
	}
	if st.PrefetchUsed != 1 {
		t.Fatalf("prefetch used = %d, want 1", st.PrefetchUsed)
	}
}

func TestDefaultPredictK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ used, want int }{{0, 0}, {1, 1}, {2, 2}, {4, 3}, {6, 5}, {8, 6}, {10, 8}} {
		if got := DefaultPredictK(tc.used); got != tc.want {
			t.Errorf("DefaultPredictK(%d) = %d, want %d", tc.used, got, tc.want)
		}
	}
}

// TestThrottleDemandOvertakesSpeculation: a demanded transfer does not
// queue behind speculative chunks already reserved, and it pushes the
// speculative ones back, so the device's bandwidth is kept.
func TestThrottleDemandOvertakesSpeculation(t *testing.T) {
	th := NewThrottle(&Profile{Bandwidth: 10 << 20, MaxInFlight: 8}) // a 256 KiB chunk takes 25 ms
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	var specEnd atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var spec atomic.Bool
			spec.Store(true)
			if err := th.Wait(ctx, start, 1<<20, &spec); err != nil {
				t.Error(err)
			}
			specEnd.Store(max(specEnd.Load(), int64(time.Since(start))))
		}()
	}
	// The four speculative reads have reserved their first chunks (100 ms
	// of the bucket's timeline) before the demand arrives.
	waitFor(t, "four speculative chunks reserved", func() bool {
		th.mu.Lock()
		defer th.mu.Unlock()
		return th.next.Sub(start) >= 4*25*time.Millisecond
	})
	d0 := time.Now()
	if err := th.Wait(ctx, d0, 256<<10, nil); err != nil {
		t.Fatal(err)
	}
	demand := time.Since(d0)
	wg.Wait()
	// Alone, the demanded chunk takes 25 ms; behind the four reserved
	// speculative chunks it would take 100-125 ms.
	if demand < 25*time.Millisecond || demand > 90*time.Millisecond {
		t.Errorf("demanded 256 KiB took %v, want 25 ms (not queued behind speculation)", demand)
	}
	// 4 MiB + 256 KiB at 10 MiB/s: the last speculative chunk ends no
	// earlier than 425 ms.
	if end := time.Duration(specEnd.Load()); end < 425*time.Millisecond {
		t.Errorf("speculative reads ended at %v: the demand took bandwidth the device does not have", end)
	}
}
