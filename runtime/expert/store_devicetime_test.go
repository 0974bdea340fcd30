package expert

import (
	"fmt"
	"testing"
	"time"
)

// TestStoreModesUnderDeviceTime is TestStoreModesServeCorrectBytesWithinBudget
// on a device clock whose flash is slow next to the host's disk, so reads
// done on the host are still landing on the device when the next Use
// needs their room: every mode, policy and budget serves every expert's
// bytes, within the budget, without giving up.
func TestStoreModesUnderDeviceTime(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 4, 16, 16, 16, true)
	tr := randomTrace(1, 30, 4, 16, 4)
	prof := &Profile{Name: "slow-flash", Bandwidth: 20e6, Latency: 100 * time.Microsecond, MaxInFlight: 4,
		Compute: &Compute{WeightBandwidth: 10e9, Throughput: 1e12}}
	for _, mode := range []Mode{OnDemand, OnDemandParallel, Lookahead, Scheduled, OracleMode} {
		for _, policy := range PolicyNames() {
			for _, budgetExperts := range []int64{1, 3, 12} {
				t.Run(fmt.Sprintf("%s/%s/budget=%d", mode, policy, budgetExperts), func(t *testing.T) {
					// A profile's reads land in page-aligned buffers.
					one := (planRead(m.layout.Experts[0][0], 1).size + directAlign - 1) / directAlign * directAlign
					budget := budgetExperts * one
					s, err := New(m.path, m.layout, m.shapes, Options{Mode: mode, Budget: budget, Policy: policy, Trace: tr, Workers: 4, PredictK: 4,
						Profile: prof, DeviceTime: true})
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
					if st.DeviceTime() <= 0 {
						t.Fatalf("no device time: %+v", st)
					}
				})
			}
		}
	}
}
