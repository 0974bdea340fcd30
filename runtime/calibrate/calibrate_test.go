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
	"github.com/lesfarm/lesfarm/runtime/expert"
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
	// The compute rates are the streamed path's: never above the resident
	// decode's, by the measured ratio of CPU per token.
	if res.StreamedCPUTPS <= 0 || streamedSlowdown(res) < 1 || !strings.Contains(string(res.YAML()), "served by the store") {
		t.Fatalf("streamed compute not measured: %+v", res)
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
// place), with the extra read sizes as rows of the table read as the
// store reads them (layer), naive's page runs read as pages from the page
// file, and each row's pattern in the profile, read back the same.
func TestMeasureReadFile(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "model.bin")
	if err := writeTestFile(context.Background(), existing, 16<<20); err != nil {
		t.Fatal(err)
	}
	cfg := quick(dir)
	pages := filepath.Join(dir, "unpacked.bin")
	if err := writeTestFile(context.Background(), pages, 8<<20); err != nil {
		t.Fatal(err)
	}
	cfg.ReadFile, cfg.ExpertSizes, cfg.PageRuns, cfg.PageFile = existing, []int64{884736}, []int64{128 << 10, 256 << 10}, pages
	res, err := Measure(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := res.Profile.Service
	if res.ReadFile != existing || res.PageFile != pages || len(res.Cells) != 8 || st == nil || !slices.Equal(st.Sizes, []int64{4 << 10, 128 << 10, 256 << 10, 884736}) {
		t.Fatalf("cells %+v, table %+v", res.Cells, st)
	}
	want := []string{expert.PatternRandom, expert.PatternPages, expert.PatternPages, expert.PatternLayer}
	for i := range st.Sizes {
		if st.Pattern(i) != want[i] {
			t.Errorf("row %d (%d B): pattern %q, want %q", i, st.Sizes[i], st.Pattern(i), want[i])
		}
	}
	for _, c := range res.Cells {
		if c.Pattern != cfg.pattern(c.Block) || c.Reads < 8*int64(c.QD) {
			t.Errorf("cell %+v: want pattern %q and at least 8 reads per reader", c, cfg.pattern(c.Block))
		}
	}
	q, err := profile.Parse(res.YAML())
	if err != nil || !q.Service.Equal(st) || q.Service.Pattern(3) != expert.PatternLayer {
		t.Fatalf("read back %+v, %v\n%s", q, err, res.YAML())
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

// TestModelGeometry: a model's expert read is its gate, up and down
// bytes in whole 4 KiB blocks, stacked or packed, beside its experts per
// layer and per token (the layer pattern's geometry).
func TestModelGeometry(t *testing.T) {
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
		if got, err := modelGeometry(p); err != nil || got != (expertGeometry{read: want, experts: 16, used: 4}) {
			t.Errorf("%s: modelGeometry = %+v, %v; want %d bytes, 16 experts, 4 used", filepath.Base(p), got, err, want)
		}
	}
	if _, err := modelGeometry(filepath.Join(dir, "none.gguf")); err == nil {
		t.Error("a missing model gave no error")
	}
}

// TestLayerOffsets: the layer pattern hands the readers one layer's
// routed set at a time (distinct adjacent expert blocks of one layer
// region), then the next layer's, at block-aligned offsets in the file.
func TestLayerOffsets(t *testing.T) {
	const block = 64 << 10
	g := &gridFile{size: 10 * 16 * block, geom: expertGeometry{experts: 16, used: 4}, page: 4096}
	o := newOffsets(g, expert.PatternLayer, block)
	var prev int64 = -1
	for set := range 25 {
		seen := map[int64]bool{}
		var layer int64 = -1
		for range 4 {
			off := o.next(nil)
			if off%block != 0 || off < 0 || off+block > g.size {
				t.Fatalf("offset %d is not a whole block in the file", off)
			}
			l := off / (16 * block)
			if layer >= 0 && l != layer {
				t.Fatalf("set %d mixes layers %d and %d", set, layer, l)
			}
			layer = l
			if seen[off] {
				t.Fatalf("set %d reads block %d twice", set, off)
			}
			seen[off] = true
		}
		if prev >= 0 && layer != (prev+1)%10 {
			t.Fatalf("set %d is layer %d after layer %d, want the next", set, layer, prev)
		}
		prev = layer
	}
}

// TestCells: the twin check's calibration measures the cells asked for,
// each by its pattern, and refuses a bad one in one line.
func TestCells(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f.bin")
	if err := writeTestFile(context.Background(), f, 8<<20); err != nil {
		t.Fatal(err)
	}
	specs := []CellSpec{{Block: 256 << 10, QD: 2, Pattern: expert.PatternLayer}, {Block: 512 << 10, QD: 1, Pattern: expert.PatternPages}, {Block: 4096, QD: 1, Pattern: expert.PatternRandom}}
	cells, err := Cells(context.Background(), f, f, "", 5*time.Millisecond, specs)
	if err != nil || len(cells) != len(specs) {
		t.Fatalf("cells %+v, %v", cells, err)
	}
	for i, c := range cells {
		if c.Block != specs[i].Block || c.QD != specs[i].QD || c.Pattern != specs[i].Pattern || c.MeanLatency <= 0 || c.Reads < 8*int64(c.QD) {
			t.Errorf("cell %+v for %+v", c, specs[i])
		}
	}
	if _, err := Cells(context.Background(), f, f, "", time.Millisecond, []CellSpec{{Block: 4096, QD: 1, Pattern: "zigzag"}}); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("bad pattern: err = %v, want one line", err)
	}
}

// TestDefaultPageRuns: naive's page runs are whole pages, increasing, up
// to the read-ahead window of the directory's device.
func TestDefaultPageRuns(t *testing.T) {
	dir := t.TempDir()
	runs := defaultPageRuns(dir)
	page := int64(os.Getpagesize())
	ra := int64(expert.DirectReadAhead)
	if n, ok := expert.DeviceReadAhead(dir); ok && n > 0 {
		ra = n
	}
	ra = max(ra/page*page, 2*page)
	if len(runs) == 0 || runs[len(runs)-1] != ra {
		t.Fatalf("runs %v, want up to the window %d", runs, ra)
	}
	for i, r := range runs {
		if r%page != 0 || r < 2*page || i > 0 && r <= runs[i-1] {
			t.Fatalf("runs %v: want increasing whole pages of at least two", runs)
		}
	}
}
