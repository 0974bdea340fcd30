package expert

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// TestReaders: every storage strategy reads the same bytes for every
// expert (buffered and direct files, the emulated flash, the naive mode's
// page faults over each), in packed and unpacked layouts; the flash takes
// at least its latency per pread, and the page faults are faults only the
// first time an expert's pages are touched.
func TestReaders(t *testing.T) {
	t.Parallel()
	const latency = 2 * time.Millisecond
	for _, packed := range []bool{true, false} {
		m := newTestModel(t, 2, 4, 32, 32, packed)
		st, err := os.Stat(m.path)
		if err != nil {
			t.Fatal(err)
		}
		open := func(t *testing.T, direct bool, align int64) *fileReader {
			f, d, err := openModel(m.path, direct)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if d {
				align = directAlign
			}
			return &fileReader{f: f, path: m.path, direct: d, align: align, layout: m.layout, io: &ioMeter{}}
		}
		flash := func(t *testing.T) reader {
			return &flashReader{fileReader: open(t, false, directAlign), throttle: NewThrottle(&Profile{Bandwidth: 1 << 40, Latency: latency, MaxInFlight: 1})}
		}
		faults := func(src func(*testing.T) pager) func(*testing.T) reader {
			return func(t *testing.T) reader {
				r, err := newFaultReader(&Profile{PageSize: DefaultPageSize}, m.path, 1<<20, m.expertBytes(), st.Size(), src(t))
				if err != nil {
					t.Fatal(err)
				}
				r.mu, r.layout, r.onRun = &sync.Mutex{}, m.layout, func(int, int, int64, time.Duration) {}
				return r
			}
		}
		for _, tc := range []struct {
			name  string
			new   func(*testing.T) reader
			flash bool
			fault bool
		}{
			{name: "file", new: func(t *testing.T) reader { return open(t, false, 1) }},
			{name: "direct", new: func(t *testing.T) reader { return open(t, true, 1) }},
			{name: "flash", new: flash, flash: true},
			{name: "faults-file", new: faults(func(t *testing.T) pager { return open(t, false, 1) }), fault: true},
			{name: "faults-direct", new: faults(func(t *testing.T) pager { return open(t, true, 1) }), fault: true},
			{name: "faults-flash", new: faults(func(t *testing.T) pager { return flash(t).(pager) }), fault: true},
		} {
			name := tc.name + "-unpacked"
			if packed {
				name = tc.name + "-packed"
			}
			t.Run(name, func(t *testing.T) {
				r := tc.new(t)
				ctx := context.Background()
				for pass := range 2 {
					for l := range m.shapes {
						for e := range m.shapes[l].Experts {
							k := Key{int32(l), int32(e)}
							buf := alignedBuf(planRead(m.layout.Experts[l][e], directAlign).size)
							t0 := time.Now()
							f, err := r.expert(ctx, k, buf, nil)
							d := time.Since(t0)
							if err != nil {
								t.Fatal(err)
							}
							if err := m.check(l, e, f.w); err != nil {
								t.Fatalf("pass %d: %v", pass, err)
							}
							if tc.flash && d < time.Duration(f.runs)*latency {
								t.Fatalf("%v: %d preads in %v, want at least %v each", k, f.runs, d, latency)
							}
							if tc.fault && pass == 1 && f.faults != 0 {
								t.Fatalf("%v: %d faults on the second touch of cached pages", k, f.faults)
							}
							if tc.fault && pass == 0 && l == 0 && e == 0 && f.faults == 0 {
								t.Fatalf("%v: no fault on a cold cache", k)
							}
						}
					}
				}
			})
		}
	}
}
