package calibrate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/pack"
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

// TestMeasureReadFile: the grid reads an existing file as it is (left in
// place), with the extra read sizes as rows of the table.
func TestMeasureReadFile(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "model.bin")
	if err := writeTestFile(context.Background(), existing, 16<<20); err != nil {
		t.Fatal(err)
	}
	cfg := quick(dir)
	cfg.ReadFile, cfg.ExpertSizes = existing, []int64{884736}
	res, err := Measure(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.ReadFile != existing || len(res.Cells) != 6 || res.Profile.Service == nil || !slices.Contains(res.Profile.Service.Sizes, 884736) {
		t.Fatalf("cells %+v, table %+v", res.Cells, res.Profile.Service)
	}
	if _, err := os.Stat(existing); err != nil {
		t.Fatalf("the file read was removed: %v", err)
	}
	if !strings.Contains(string(res.YAML()), "model.bin (read as it is)") {
		t.Errorf("the profile does not say which file was read:\n%s", res.YAML())
	}
	cfg.ReadFile = filepath.Join(dir, "missing")
	if _, err := Measure(context.Background(), cfg); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("missing file: err = %v, want a one-line error", err)
	}
}

// TestExpertReadSize: a model's expert read is its gate, up and down
// bytes in whole 4 KiB blocks, stacked or packed.
func TestExpertReadSize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	if err := writeReference(path); err != nil {
		t.Fatal(err)
	}
	packed := filepath.Join(dir, "m.packed.gguf")
	if err := pack.Pack(context.Background(), path, packed, pack.Options{}); err != nil {
		t.Fatal(err)
	}
	// Q4_K: 144 bytes per 256 weights; three 1024×512 matrices.
	want := int64(3 * 1024 * 512 / 256 * 144)
	want = (want + 4095) / 4096 * 4096
	for _, p := range []string{path, packed} {
		if got, err := expertReadSize(p); err != nil || got != want {
			t.Errorf("%s: expertReadSize = %d, %v; want %d", filepath.Base(p), got, err, want)
		}
	}
	if _, err := expertReadSize(filepath.Join(dir, "none.gguf")); err == nil {
		t.Error("a missing model gave no error")
	}
}
