package profile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/profile/spec"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// TestSpecMirrorsRuntime: the constants spec mirrors (it may not import
// the runtime) are the runtime's.
func TestSpecMirrorsRuntime(t *testing.T) {
	t.Parallel()
	if spec.DefaultPageSize != expert.DefaultPageSize || spec.MaxReadAhead != expert.MaxReadAhead ||
		spec.PatternRandom != expert.PatternRandom || spec.PatternLayer != expert.PatternLayer || spec.PatternPages != expert.PatternPages {
		t.Fatal("profile/spec's mirrored constants differ from runtime/expert's")
	}
	for _, r := range []string{"3.5GB/s", "800MiB/s", "1MiB/s", "10KB/s", "fast", "1GB"} {
		a, aerr := spec.ParseRate(r)
		b, berr := expert.ParseRate(r)
		if a != b || (aerr == nil) != (berr == nil) {
			t.Fatalf("ParseRate(%q): spec %v %v, expert %v %v", r, a, aerr, b, berr)
		}
	}
}

func TestBuiltinProfiles(t *testing.T) {
	t.Parallel()
	names := Builtin()
	for _, want := range []string{"laptop-nvme", "phone-flagship", "phone-mid"} {
		p, err := Load(want)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		if p.Name != want || p.Bandwidth < 1e9 || p.Latency <= 0 || p.MaxInFlight < 1 || p.RAMBudget <= 0 {
			t.Fatalf("%s: implausible %+v", want, p)
		}
		if !strings.Contains(strings.Join(names, ","), want) {
			t.Fatalf("Builtin() = %v lacks %s", names, want)
		}
	}
	p, _ := Load("phone-flagship")
	if p.Bandwidth != 3.5e9 || p.Latency != 100*time.Microsecond || p.MaxInFlight != 32 {
		t.Fatalf("phone-flagship = %+v", p)
	}
}

func TestProfileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"not yaml", "{[", "invalid YAML"},
		{"unknown key", "name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\nbandwith: 2GB/s\n", "bandwith"}, //nolint:misspell // the typo is the test
		{"no name", "bandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\n", "missing name"},
		{"bad rate", "name: x\nbandwidth: fast\nlatency: 1us\nmax_in_flight: 4\n", "bandwidth"},
		{"rate without /s", "name: x\nbandwidth: 1GB\nlatency: 1us\nmax_in_flight: 4\n", "/s"},
		{"tiny rate", "name: x\nbandwidth: 10KB/s\nlatency: 1us\nmax_in_flight: 4\n", "below"},
		{"bad latency", "name: x\nbandwidth: 1GB/s\nlatency: soon\nmax_in_flight: 4\n", "latency"},
		{"negative latency", "name: x\nbandwidth: 1GB/s\nlatency: -1us\nmax_in_flight: 4\n", "latency"},
		{"no latency", "name: x\nbandwidth: 1GB/s\nmax_in_flight: 4\n", "missing latency"},
		{"zero in flight", "name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 0\n", "max_in_flight"},
		{"bad ram", "name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\nram_budget: lots\n", "ram_budget"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestLoadProfileFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "dev.yaml")
	os.WriteFile(good, []byte("name: dev\nbandwidth: 800MiB/s\nlatency: 150us\nmax_in_flight: 8\nram_budget: 4GiB\n"), 0o644)
	p, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.Bandwidth != 800<<20 || p.RAMBudget != 4<<30 {
		t.Fatalf("got %+v", p)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: dev\n"), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("bad file: err = %v, want the file named", err)
	}
	if _, err := Load(filepath.Join(dir, "none.yaml")); err == nil || !strings.Contains(err.Error(), "built-in") {
		t.Fatalf("missing file: err = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, n := range Builtin() {
		data, _ := spec.BuiltinYAML(n)
		f.Add(data)
	}
	f.Add([]byte("name: x\nbandwidth: 1e400GB/s\nlatency: 1us\nmax_in_flight: 4\n"))
	f.Add([]byte("name: x\nbandwidth: NaNGB/s\n"))
	f.Add([]byte("name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\npage_size: 16KiB\nread_ahead: 100KiB\ncompute:\n  weight_bandwidth: NaNGB/s\n  throughput: -1TFLOP/s\n"))
	f.Add([]byte("name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\nservice_times:\n  queue_depths: [1, 4]\n  reads:\n    - {size: 4KiB, times: [90us, 120us]}\n    - {size: 1MiB, times: [1.2ms, 3ms]}\n"))
	f.Add([]byte("name: x\nbandwidth: 1GB/s\nlatency: 1us\nmax_in_flight: 4\nservice_times:\n  queue_depths: [1]\n  reads:\n    - {size: 1e9, times: [-1us]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The coordinator validates uploads with spec alone: what spec
		// accepts the runtime must accept too.
		sp, serr := spec.Parse(data)
		p, err := Parse(data)
		if (serr == nil) != (err == nil) {
			t.Fatalf("spec.Parse err = %v, Parse err = %v", serr, err)
		}
		if err != nil {
			return
		}
		if sp.Name != p.Name || sp.Bandwidth != p.Bandwidth || sp.PageSize != p.PageSize {
			t.Fatalf("spec %+v converted to %+v", sp, p)
		}
		if p.Bandwidth <= 0 || p.MaxInFlight < 1 || p.Latency < 0 {
			t.Fatalf("accepted invalid profile %+v", p)
		}
		if p.PageSize < 4096 || p.PageSize&(p.PageSize-1) != 0 || p.ReadAhead < 0 || p.ReadAhead%p.PageSize != 0 {
			t.Fatalf("accepted invalid page size / read-ahead %+v", p)
		}
		if c := p.Compute; c != nil && (!(c.WeightBandwidth >= 100e6 && c.WeightBandwidth <= 100e12) || !(c.Throughput >= 100e6 && c.Throughput <= 1e18)) {
			t.Fatalf("accepted invalid compute %+v", c)
		}
		if st := p.Service; st != nil {
			for _, n := range []int64{0, 1, 4096, 1 << 20, 1 << 30} {
				if l, x := st.ReadCost(n); l < 0 || x < 0 || l+x <= 0 {
					t.Fatalf("table prices %d bytes at %v + %v", n, l, x)
				}
			}
		}
		// What parses marshals back to the same profile.
		q, err := Parse(expert.MarshalProfile(p, "fuzz"))
		if err != nil {
			t.Fatalf("marshalled profile does not parse: %v", err)
		}
		if q.Name != p.Name || q.Bandwidth != p.Bandwidth || q.Latency != p.Latency || q.PageSize != p.PageSize || q.ReadAhead != p.ReadAhead || (p.Compute == nil) != (q.Compute == nil) || (p.Compute != nil && *p.Compute != *q.Compute) || !p.Service.Equal(q.Service) {
			t.Fatalf("round trip %+v -> %+v", p, q)
		}
	})
}
