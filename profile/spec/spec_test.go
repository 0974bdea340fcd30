package spec

import (
	"strings"
	"testing"
)

// TestBuiltins: every embedded profile parses, and a bad upload is a
// one-line error naming the field (the coordinator's 422 detail).
func TestBuiltins(t *testing.T) {
	t.Parallel()
	for _, n := range Builtin() {
		p, err := Load(n)
		if err != nil || p.Name != n {
			t.Fatalf("%s: %+v, %v", n, p, err)
		}
	}
	_, err := Parse([]byte("name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\nservice_times:\n  queue_depths: [1]\n  reads:\n    - {size: 4KiB, times: [0s]}\n"))
	if err == nil || !strings.Contains(err.Error(), "service_times") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v", err)
	}
}
