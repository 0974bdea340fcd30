package profile

import (
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

const us = time.Microsecond

func table(t *testing.T) *expert.ServiceTimes {
	t.Helper()
	st, err := expert.NewServiceTimes([]int64{4 << 10, 64 << 10, 1 << 20}, []int{1, 4, 16}, [][]time.Duration{
		{100 * us, 110 * us, 200 * us},
		{200 * us, 300 * us, 1000 * us},
		{1000 * us, 2500 * us, 9000 * us},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestServiceTimesErrors: a bad table in a profile is a one-line error
// naming service_times.
func TestServiceTimesErrors(t *testing.T) {
	head := "name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\nservice_times:\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"empty", "  queue_depths: []\n  reads: []\n", "at least one"},
		{"depths decrease", "  queue_depths: [4, 2]\n  reads:\n    - {size: 4KiB, times: [1us, 2us]}\n", "increase"},
		{"zero depth", "  queue_depths: [0]\n  reads:\n    - {size: 4KiB, times: [1us]}\n", "queue depth 0"},
		{"sizes decrease", "  queue_depths: [1]\n  reads:\n    - {size: 64KiB, times: [1us]}\n    - {size: 4KiB, times: [1us]}\n", "increase"},
		{"bad size", "  queue_depths: [1]\n  reads:\n    - {size: big, times: [1us]}\n", "size"},
		{"tiny size", "  queue_depths: [1]\n  reads:\n    - {size: 100, times: [1us]}\n", "512"},
		{"short row", "  queue_depths: [1, 2]\n  reads:\n    - {size: 4KiB, times: [1us]}\n", "1 times for 2"},
		{"bad time", "  queue_depths: [1]\n  reads:\n    - {size: 4KiB, times: [soon]}\n", "not a duration"},
		{"zero time", "  queue_depths: [1]\n  reads:\n    - {size: 4KiB, times: [0s]}\n", "between 0 and 10s"},
		{"huge time", "  queue_depths: [1]\n  reads:\n    - {size: 4KiB, times: [1h]}\n", "between 0 and 10s"},
		{"unknown key", "  queue_depth: [1]\n  reads:\n    - {size: 4KiB, times: [1us]}\n", "queue_depth"},
		{"bad pattern", "  queue_depths: [1]\n  reads:\n    - {size: 4KiB, pattern: zigzag, times: [1us]}\n", "pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(head + tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line mentioning %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "service_times") && tc.name != "unknown key" {
				t.Fatalf("err = %v, want it to name service_times", err)
			}
		})
	}
}

// TestServiceTimesRoundTrip: a profile with a table marshals and parses
// back to the same table.
func TestServiceTimesRoundTrip(t *testing.T) {
	p := &expert.Profile{Name: "dev", Bandwidth: 1e9, Latency: 50 * us, MaxInFlight: 4, PageSize: 4096, Service: table(t)}
	p.Service.Times[2][1] = 2500*us + 7 // odd nanoseconds survive
	q, err := Parse(expert.MarshalProfile(p, "a table"))
	if err != nil {
		t.Fatalf("%v\n%s", err, expert.MarshalProfile(p, "a table"))
	}
	if !p.Service.Equal(q.Service) {
		t.Fatalf("table %+v read back as %+v", p.Service, q.Service)
	}
	// The rows' patterns (how profile measure read them) survive too, and
	// a table that differs only in one is not equal.
	withPat, err := p.Service.WithPatterns([]string{expert.PatternRandom, expert.PatternPages, expert.PatternLayer})
	if err != nil {
		t.Fatal(err)
	}
	p.Service = withPat
	out := expert.MarshalProfile(p, "patterns")
	if q, err = Parse(out); err != nil || !q.Service.Equal(withPat) || q.Service.Pattern(2) != expert.PatternLayer || !strings.Contains(string(out), "pattern: pages") {
		t.Fatalf("patterns read back as %+v, %v\n%s", q.Service, err, out)
	}
	if other, _ := withPat.WithPatterns([]string{expert.PatternRandom, expert.PatternLayer, expert.PatternLayer}); other.Equal(withPat) {
		t.Fatal("tables that differ in a row's pattern compare equal")
	}
	if _, err := withPat.WithPatterns([]string{"x", "y", "z"}); err == nil {
		t.Fatal("a bad pattern was accepted")
	}
}
