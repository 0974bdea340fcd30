package expert_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestMeasuredTableChargesReads: a profile's measured service-time table
// sets what the store charges each read on the device clock. The naive
// mode's faults (one 4 KiB page each, no read-ahead) and the on-demand
// mode's expert reads (three preads of a 34 KiB part padded to 4 KiB
// blocks, unpacked file) are
// synchronous, so the decode's device stall is their count times the
// table's QD-1 time for their size: doubling the table doubles the stall,
// and against the simple form (20 µs + bytes at 2 GB/s) it grows by the
// ratio of the two prices. Routing and bytes read do not change.
func TestMeasuredTableChargesReads(t *testing.T) {
	path := synthModel(t, tensor.Q8_0)
	want := greedyWith(t, path, nil)
	const part = 128 * 256 * 34 / 32 // one Q8_0 gate/up/down of the synth model
	table := func(scale int) string {
		return "service_times:\n  queue_depths: [1, 4]\n  reads:\n" +
			"    - {size: 4KiB, times: [" + ms(scale, 1) + ", " + ms(scale, 1.2) + "]}\n" +
			"    - {size: 64KiB, times: [" + ms(scale, 1.5) + ", " + ms(scale, 2) + "]}\n"
	}
	// Emulated reads are padded to whole 4 KiB blocks as direct ones are,
	// so a part's pread is a little over 34 KiB; both prices are affine in
	// the size between 4 and 64 KiB, so three preads cost three of their
	// mean size (n, from the bytes read). QD-1 price of an n-byte pread in
	// table(1): 1 ms + 0.5 ms × (n-4096)/61440.
	qd1Part := func(n float64) float64 { return 1e-3 + 0.5e-3*(n-4096)/61440 }
	for _, tc := range []struct {
		mode   expert.Mode
		simple func(n float64) float64 // seconds per synchronous read of preads of mean size n, simple form
		table  func(n float64) float64 // ... with table(1)
	}{
		{expert.Naive, func(float64) float64 { return 20e-6 + 4096/2e9 }, func(float64) float64 { return 1e-3 }},
		{expert.OnDemand, func(n float64) float64 { return 3 * (20e-6 + n/2e9) }, func(n float64) float64 { return 3 * qd1Part(n) }},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			var stall [3]float64
			var bytes [3]int64
			var reads int64
			for i, extra := range []string{"", table(1), table(2)} {
				var s *expert.Store
				prof := testProfile(t, extra+testCompute)
				got := greedyWith(t, path, storeSource(t, path, "", expert.Options{Mode: tc.mode, Profile: prof, DeviceTime: true}, 0.3, &s))
				if !slices.Equal(got, want) {
					t.Fatalf("tokens %v, want %v", got, want)
				}
				st := s.Meter().Stats()
				stall[i], bytes[i], reads = st.DeviceStall.Seconds(), st.BytesRead, st.Reads
			}
			if bytes[0] != bytes[1] || bytes[1] != bytes[2] || stall[0] <= 0 {
				t.Fatalf("bytes read %v, stall %v: the price of a read changed what was read", bytes, stall)
			}
			if r := stall[2] / stall[1]; math.Abs(r-2) > 1e-4 {
				t.Errorf("doubling the table's times made the stall %.6f× (%v), want 2×", r, stall)
			}
			n := float64(bytes[0]) / float64(reads)
			if tc.mode == expert.OnDemand {
				n /= 3
				if n < part || n > part+2*4096 {
					t.Fatalf("mean pread %.0f bytes, want the %d-byte part padded to 4 KiB blocks", n, part)
				}
			}
			// The clock prices an expert read at its layer's largest
			// padded size, a block or so over this mean: 2%.
			if r, w := stall[1]/stall[0], tc.table(n)/tc.simple(n); math.Abs(r/w-1) > 0.02 {
				t.Errorf("table over simple form: stall %.3f×, want %.3f× (%v)", r, w, stall)
			}
		})
	}
}

// ms formats scale × x milliseconds as a duration.
func ms(scale int, x float64) string {
	return time.Duration(float64(scale) * x * float64(time.Millisecond)).String()
}

// TestNaivePageCost: a profile's compute.page_cost is charged as device
// compute for every page naive reads, and changes nothing else.
func TestNaivePageCost(t *testing.T) {
	path := synthModel(t, tensor.Q8_0)
	want := greedyWith(t, path, nil)
	var st [2]expert.Stats
	for i, extra := range []string{"", "  page_cost: 2us\n"} {
		var s *expert.Store
		prof := testProfile(t, "read_ahead: 16KiB\n"+testCompute+extra)
		got := greedyWith(t, path, storeSource(t, path, "", expert.Options{Mode: expert.Naive, Profile: prof, DeviceTime: true}, 0.3, &s))
		if !slices.Equal(got, want) {
			t.Fatalf("tokens %v, want %v", got, want)
		}
		st[i] = s.Meter().Stats()
	}
	if st[0].BytesRead != st[1].BytesRead || st[0].DeviceStall != st[1].DeviceStall || st[0].BytesRead == 0 {
		t.Fatalf("the page cost changed what was read or the stall: %+v / %+v", st[0], st[1])
	}
	// Device compute counts decode only, the bytes prefill's too: the
	// charge is a whole number of pages, most of those read.
	pages := float64(st[1].BytesRead) / 4096
	got := (st[1].DeviceCompute - st[0].DeviceCompute).Seconds() / 2e-6
	if math.Abs(got-math.Round(got)) > 0.01 || got < 0.5*pages || got > pages+1 {
		t.Errorf("page cost charged for %.2f pages, naive read %.1f", got, pages)
	}
}
