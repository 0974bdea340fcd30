package calibrate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/profile"
)

func quick(dir string) Config {
	return Config{Name: "this-host", Dir: dir, FileBytes: 16 << 20, BlockSizes: []int64{4 << 10, 256 << 10}, QueueDepths: []int{1, 4}, CellTime: 20 * time.Millisecond, CopyBytes: 8 << 20}
}

// TestMeasureRoundTrip measures this machine on a small grid and checks
// that the profile written parses back to the same values through the
// --profile FILE path.
func TestMeasureRoundTrip(t *testing.T) {
	dir := t.TempDir()
	res, err := Measure(context.Background(), quick(dir))
	if err != nil {
		t.Fatal(err)
	}
	p := res.Profile
	if len(res.Cells) != 4 || p.Bandwidth <= 0 || p.MaxInFlight < 1 || p.Compute == nil || p.Compute.WeightBandwidth <= 0 || p.Compute.Throughput <= 0 || res.CopyGBps <= 0 {
		t.Fatalf("implausible result %+v, profile %+v", res, p)
	}
	out := filepath.Join(dir, "this-host.yaml")
	if err := WriteFile(out, res.YAML()); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Load(out)
	if err != nil {
		t.Fatalf("the written profile does not load: %v\n%s", err, res.YAML())
	}
	pc, qc := *p.Compute, *q.Compute
	if p.Service == nil || len(p.Service.Sizes) != 2 || len(p.Service.QueueDepths) != 2 || !p.Service.Equal(q.Service) {
		t.Fatalf("service-time table: measured %+v, read back %+v", p.Service, q.Service)
	}
	a, b := *p, *q
	a.Compute, b.Compute, a.Service, b.Service = nil, nil, nil, nil
	if a != b || pc != qc {
		t.Fatalf("round trip:\n%+v %+v\n%+v %+v", a, pc, b, qc)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

// TestMeasureInterrupted: a measurement cancelled half way returns the
// context's error and leaves no file behind.
func TestMeasureInterrupted(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := quick(dir)
	cfg.Progress = func(line string) {
		if strings.HasPrefix(line, "flash: ") && strings.Contains(line, "QD") {
			cancel() // after the first cell
		}
	}
	res, err := Measure(ctx, cfg)
	if !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("Measure = %v, %v; want context.Canceled and no result", res, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("an interrupted measurement left %v", ents)
	}
}

func TestMeasureBadConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Name: "x", BlockSizes: []int64{1000}},
		{Name: "x", QueueDepths: []int{0}},
		{Name: "x", FileBytes: 1 << 20, BlockSizes: []int64{4 << 20}},
	} {
		if _, err := Measure(context.Background(), c); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: err = %v, want a one-line error", c, err)
		}
	}
}
