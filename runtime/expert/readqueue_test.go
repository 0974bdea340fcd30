package expert

import (
	"sync"
	"testing"
)

// queueReader records the order in which the queue's workers serve reads.
type queueReader struct {
	mu    sync.Mutex
	order []Key
	done  chan Key
}

func (r *queueReader) fetch(e *entry, buf []byte) readResult { return readResult{n: int64(len(buf))} }

func (r *queueReader) finishLocked(e *entry, res readResult) {
	e.state = stReady
	r.mu.Lock()
	r.order = append(r.order, e.key)
	r.mu.Unlock()
}

func (r *queueReader) reported(e *entry, _ readResult) { r.done <- e.key }

// TestReadQueueServesDemandFirst: with one worker, queued demanded reads
// are served before speculative ones queued earlier, in FIFO order within
// each class, and a promoted speculative read moves to the demand class.
func TestReadQueueServesDemandFirst(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	q := newReadQueue(&mu, 1, false, false)
	r := &queueReader{done: make(chan Key, 8)}
	ent := func(e int32) *entry { return &entry{key: Key{0, e}, buf: make([]byte, 1)} }
	s1, s2, s3, d1, d2 := ent(1), ent(2), ent(3), ent(4), ent(5)
	mu.Lock()
	q.pushSpecLocked(s1)
	q.pushSpecLocked(s2)
	q.pushSpecLocked(s3)
	q.pushDemandLocked(d1)
	q.pushDemandLocked(d2)
	q.promoteLocked(s3)
	q.dropSpecLocked(s2)
	if s2.inSpecQ || s3.inSpecQ || !s1.inSpecQ {
		t.Fatalf("inSpecQ: s1 %v s2 %v s3 %v", s1.inSpecQ, s2.inSpecQ, s3.inSpecQ)
	}
	mu.Unlock()
	q.start(1, r, false)
	mu.Lock()
	q.wakeLocked(4)
	mu.Unlock()
	for range 4 {
		<-r.done
	}
	mu.Lock()
	q.closeLocked()
	mu.Unlock()
	q.wait()
	want := []Key{d1.key, d2.key, s3.key, s1.key}
	if len(r.order) != len(want) {
		t.Fatalf("served %v, want %v", r.order, want)
	}
	for i := range want {
		if r.order[i] != want[i] {
			t.Fatalf("served %v, want %v", r.order, want)
		}
	}
	if q.demFlight != 0 || q.specFlight != 0 || !q.specIdleLocked() || q.demandQueuedLocked() {
		t.Fatalf("queue not idle after serving: demand in flight %d, speculative %d", q.demFlight, q.specFlight)
	}
}

// TestReadQueueDrain: draining the speculative class hands back every
// queued read and leaves demand alone.
func TestReadQueueDrain(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	q := newReadQueue(&mu, 2, false, false)
	if q.drainSpecLocked(func(*entry) { t.Fatal("drained an empty queue") }) {
		t.Fatal("an empty speculative class reported drained")
	}
	a, b, d := &entry{key: Key{0, 1}}, &entry{key: Key{0, 2}}, &entry{key: Key{0, 3}}
	q.pushSpecLocked(a)
	q.pushSpecLocked(b)
	q.pushDemandLocked(d)
	var got []*entry
	if !q.drainSpecLocked(func(e *entry) { got = append(got, e) }) {
		t.Fatal("drain reported nothing")
	}
	if len(got) != 2 || got[0] != a || got[1] != b || a.inSpecQ || b.inSpecQ {
		t.Fatalf("drained %v", got)
	}
	if !q.specIdleLocked() || !q.demandQueuedLocked() {
		t.Fatal("drain touched the demand class or left speculative reads")
	}
}

// TestSpeculationWaitsForDemandOnRealStorage: on real storage a queued
// speculative read does not start beside a demanded one; under a profile
// (which serves demand first itself) and for the oracle (whose reads are
// all needed) it does.
func TestSpeculationWaitsForDemandOnRealStorage(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 2, 8, 16, 16, true)
	prof := &Profile{Name: "p", Bandwidth: 1 << 30, MaxInFlight: 4}
	tr := randomTrace(1, 4, 2, 8, 2)
	for _, tc := range []struct {
		name string
		opts Options
		want bool
	}{
		{"real storage", Options{Mode: Scheduled}, false},
		{"profile", Options{Mode: Scheduled, Profile: prof}, true},
		{"oracle", Options{Mode: OracleMode, Trace: tr}, true},
	} {
		tc.opts.Budget = 1 << 20
		s, err := New(m.path, m.layout, m.shapes, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.q.spec = append(s.q.spec, &entry{})
		if !s.q.specMayStartLocked() {
			t.Errorf("%s: a queued speculative read may not start on an idle device", tc.name)
		}
		s.q.demFlight = 1
		if got := s.q.specMayStartLocked(); got != tc.want {
			t.Errorf("%s: speculative read may start beside a demanded one = %v, want %v", tc.name, got, tc.want)
		}
		s.q.demFlight = 0
		s.q.specFlight = s.q.specMax
		if s.q.specMayStartLocked() {
			t.Errorf("%s: more than %d speculative reads in flight", tc.name, s.q.specMax)
		}
		s.q.spec, s.q.specFlight = nil, 0
		s.mu.Unlock()
		s.Close()
	}
}
