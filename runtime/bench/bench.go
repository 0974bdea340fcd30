// Package bench measures the LES runtime: prefill and decode throughput of
// a model with all weights resident, over repetitions after warm-up, with
// the effective weight bandwidth and arithmetic rate, and writes
// llama-bench-style reports (Markdown, CSV, JSON, JSON lines).
package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// Config configures Run. Zero fields get the defaults noted.
type Config struct {
	Model        string // GGUF path (required)
	Threads      []int  // thread counts to measure (default: NumCPU)
	Repetitions  int    // measured runs per test (default 5)
	Warmup       int    // unmeasured runs before them (default 1)
	PromptTokens int    // prefill test length, 0 = skip (default 64 via CLI)
	GenTokens    int    // decode test length, 0 = skip (default 32 via CLI)
	// CopyBytes is the buffer size of the memory copy benchmark that the
	// weight bandwidth is compared with; 0 skips it.
	CopyBytes int64
	// Progress, if set, receives one line per finished measurement.
	Progress func(line string)
}

func (c *Config) defaults() error {
	if c.Model == "" {
		return fmt.Errorf("bench: no model given")
	}
	if len(c.Threads) == 0 {
		c.Threads = []int{runtime.NumCPU()}
	}
	for _, t := range c.Threads {
		if t < 1 {
			return fmt.Errorf("bench: thread count %d must be at least 1", t)
		}
	}
	if c.Repetitions == 0 {
		c.Repetitions = 5
	}
	if c.Repetitions < 1 || c.Warmup < 0 || c.PromptTokens < 0 || c.GenTokens < 0 {
		return fmt.Errorf("bench: repetitions must be >= 1 and warm-up, prompt and gen tokens >= 0")
	}
	if c.PromptTokens == 0 && c.GenTokens == 0 {
		return fmt.Errorf("bench: nothing to measure: prompt and gen tokens are both 0")
	}
	return nil
}

// Row is one measurement, like a line of llama-bench.
type Row struct {
	Model      string    `json:"model"`       // general.name or file name
	Arch       string    `json:"arch"`        // architecture
	Type       string    `json:"type"`        // dominant expert/matrix type
	SizeBytes  int64     `json:"size_bytes"`  // model file size
	Params     int64     `json:"params"`      // parameter count
	Backend    string    `json:"backend"`     // "go", "go+simd" (GOEXPERIMENT=simd) or "go+neon"
	Threads    int       `json:"threads"`     // threads for matrix products
	Test       string    `json:"test"`        // "pp64", "tg32"
	Tokens     int       `json:"n_tokens"`    // tokens per run
	Reps       int       `json:"repetitions"` // measured runs
	TPS        float64   `json:"tokens_per_second"`
	TPSStddev  float64   `json:"stddev"`
	Samples    []float64 `json:"samples"`                      // tok/s of each run
	WeightGB   float64   `json:"weight_gb_per_token"`          // weight bytes read per token (GB), decode rows
	GBps       float64   `json:"gb_per_second"`                // effective weight bandwidth
	GFLOPs     float64   `json:"gflop_per_second"`             // matrix-product arithmetic rate
	BWFraction float64   `json:"bandwidth_fraction,omitempty"` // GBps / memory copy read bandwidth
	// CPUTPS is tokens per CPU-second of the whole process (all threads).
	// On a shared, oversubscribed machine wall-clock t/s understates what
	// the code does; with 1 thread this is the uncontended estimate.
	CPUTPS float64 `json:"tokens_per_cpu_second,omitempty"`
	// GBpsCPU is the weight bandwidth per CPU-second (CPUTPS × bytes per
	// token); BWFractionCPU divides it by the copy's bytes per CPU-second.
	GBpsCPU       float64 `json:"gb_per_cpu_second,omitempty"`
	BWFractionCPU float64 `json:"bandwidth_fraction_cpu,omitempty"`
	// StateBytes is the sequence state the run allocated (model.State
	// StateBytes: KV cache of the attention layers plus, for recurrent
	// layers, conv and DeltaNet state with their rollback history);
	// RecurrentStateBytes the conv and DeltaNet states alone.
	StateBytes          int64 `json:"state_bytes,omitempty"`
	RecurrentStateBytes int64 `json:"recurrent_state_bytes,omitempty"`
}

// Report is the result of Run.
type Report struct {
	Model       string  `json:"model"`
	CopyGBps    float64 `json:"memory_copy_gb_per_second,omitempty"`     // bytes read per second by a large copy
	CopyGBpsCPU float64 `json:"memory_copy_gb_per_cpu_second,omitempty"` // the same per CPU-second
	GoVersion   string  `json:"go_version"`
	CPUs        int     `json:"cpus"`
	Rows        []Row   `json:"rows"`
}

// Run loads the model once per thread count and measures prefill (one
// batched forward pass of PromptTokens) and decode (GenTokens single-token
// steps from an empty cache), Warmup+Repetitions times each.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &Report{Model: cfg.Model, GoVersion: runtime.Version(), CPUs: runtime.NumCPU()}
	fi, err := os.Stat(cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for i, th := range cfg.Threads {
		m, err := model.Load(cfg.Model, model.Options{Threads: th})
		if err != nil {
			return nil, err
		}
		// The copy benchmark's two buffers (CopyBytes each, 1 GiB at
		// bench's default) are allocated only once the model has loaded:
		// a bad model file fails at once, without them.
		if i == 0 && cfg.CopyBytes > 0 {
			rep.CopyGBps, rep.CopyGBpsCPU = copyBandwidth(cfg.CopyBytes, 5)
			if cfg.Progress != nil {
				cfg.Progress(fmt.Sprintf("memory copy: %.2f GB/s read (%.2f GB per CPU-s)", rep.CopyGBps, rep.CopyGBpsCPU))
			}
		}
		base := Row{
			Model: modelName(m, cfg.Model), Arch: m.Arch, Type: modelType(m), SizeBytes: fi.Size(),
			Params: paramCount(m), Backend: backend, Threads: th, Reps: cfg.Repetitions,
		}
		rows, err := measure(ctx, m, cfg, base)
		m.Close()
		if err != nil {
			return nil, err
		}
		for i := range rows {
			if rep.CopyGBps > 0 {
				rows[i].BWFraction = rows[i].GBps / rep.CopyGBps
			}
			if rep.CopyGBpsCPU > 0 {
				rows[i].BWFractionCPU = rows[i].GBpsCPU / rep.CopyGBpsCPU
			}
			if cfg.Progress != nil {
				r := rows[i]
				cfg.Progress(fmt.Sprintf("%s threads=%d: %.2f ± %.2f tok/s (%.2f tok per CPU-s), %.2f GB/s, %.2f GFLOP/s", r.Test, r.Threads, r.TPS, r.TPSStddev, r.CPUTPS, r.GBps, r.GFLOPs))
			}
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	return rep, nil
}

// bytesSink counts the expert layers' selected experts per run so the
// weight bytes read are exact, not estimated.
type bytesSink struct {
	m       *model.Model
	experts int64 // sum over (step, layer) of selected experts × expert bytes
}

func (s *bytesSink) Token(*trace.TokenEvent) {}
func (s *bytesSink) Read(*trace.ReadEvent)   {}
func (s *bytesSink) Layer(ev *trace.LayerEvent) {
	s.experts += int64(len(ev.Selected)) * s.m.Layers[ev.Layer].Shape.Bytes()
}

// residentMatrixBytes is the bytes of non-expert matrices read per forward
// pass (every matrix except the embedding table, of which rows are read).
func residentMatrixBytes(m *model.Model, tokens int) int64 {
	n := int64(len(m.Output.Data))
	row, _ := m.Embed.Type.RowSize(m.Embed.Cols)
	n += int64(row * tokens)
	for _, l := range m.Layers {
		n += int64(len(l.Q.Data) + len(l.K.Data) + len(l.V.Data) + len(l.O.Data))
		if l.Router != nil {
			n += int64(len(l.Router.Data))
		}
		if l.Gate != nil {
			n += int64(len(l.Gate.Data) + len(l.Up.Data) + len(l.Down.Data))
		}
	}
	return n + m.HybridMatrixBytes()
}

func measure(ctx context.Context, m *model.Model, cfg Config, base Row) ([]Row, error) {
	need := max(cfg.PromptTokens, cfg.GenTokens)
	if need > m.Context {
		return nil, fmt.Errorf("bench: %d tokens exceed the context length %d of the model; lower --prompt-tokens/--gen-tokens", need, m.Context)
	}
	st, err := m.NewState(need)
	if err != nil {
		return nil, err
	}
	base.StateBytes, base.RecurrentStateBytes = st.StateBytes(), st.RecurrentStateBytes()
	sink := &bytesSink{m: m}
	st.Sink = sink
	// Deterministic pseudo-random prompt over the vocabulary.
	toks := make([]int, need)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range toks {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		toks[i] = int(x % uint64(m.Vocab))
	}
	var rows []Row
	if n := cfg.PromptTokens; n > 0 {
		r := base
		r.Test, r.Tokens = fmt.Sprintf("pp%d", n), n
		var secs []float64
		var bytes int64
		var cpu time.Duration
		for i := range cfg.Warmup + cfg.Repetitions {
			st.Reset()
			sink.experts = 0
			c0 := processCPU()
			t0 := time.Now()
			for pos := 0; pos < n; pos += 512 {
				if _, err := st.Forward(ctx, toks[pos:min(pos+512, n)], false); err != nil {
					return nil, err
				}
			}
			d := time.Since(t0).Seconds()
			if i >= cfg.Warmup {
				secs = append(secs, d)
				cpu += processCPU() - c0
				bytes = sink.experts + residentMatrixBytes(m, n)*int64((n+511)/512)
			}
		}
		fill(&r, secs, float64(bytes)/float64(n), flopsPrefill(m, n))
		if cpu > 0 {
			r.CPUTPS = float64(n*cfg.Repetitions) / cpu.Seconds()
			r.GBpsCPU = r.WeightGB * r.CPUTPS
		}
		rows = append(rows, r)
	}
	if n := cfg.GenTokens; n > 0 {
		r := base
		r.Test, r.Tokens = fmt.Sprintf("tg%d", n), n
		var secs []float64
		var bytes int64
		one := make([]int, 1)
		var cpu time.Duration
		for i := range cfg.Warmup + cfg.Repetitions {
			st.Reset()
			sink.experts = 0
			c0 := processCPU()
			t0 := time.Now()
			for j := range n {
				one[0] = toks[j]
				if _, err := st.Forward(ctx, one, false); err != nil {
					return nil, err
				}
			}
			d := time.Since(t0).Seconds()
			if i >= cfg.Warmup {
				secs = append(secs, d)
				cpu += processCPU() - c0
				bytes = sink.experts + residentMatrixBytes(m, 1)*int64(n)
			}
		}
		if cpu > 0 {
			r.CPUTPS = float64(n*cfg.Repetitions) / cpu.Seconds()
			r.GBpsCPU = r.WeightGB * r.CPUTPS
		}
		var fl float64
		for j := range n {
			fl += m.FLOPsPerToken(j + 1)
		}
		fill(&r, secs, float64(bytes)/float64(n), fl/float64(n))
		r.GBpsCPU = r.WeightGB * r.CPUTPS
		rows = append(rows, r)
	}
	return rows, nil
}

// fill sets the throughput statistics of r from per-run seconds, with
// bytesPerToken weight bytes and flopsPerToken FLOPs per token.
func fill(r *Row, secs []float64, bytesPerToken, flopsPerToken float64) {
	r.Samples = make([]float64, len(secs))
	for i, s := range secs {
		r.Samples[i] = float64(r.Tokens) / s
	}
	r.TPS, r.TPSStddev = meanStd(r.Samples)
	r.WeightGB = bytesPerToken / 1e9
	r.GBps = bytesPerToken * r.TPS / 1e9
	r.GFLOPs = flopsPerToken * r.TPS / 1e9
}

func flopsPrefill(m *model.Model, n int) float64 {
	var f float64
	for j := range n {
		f += m.FLOPsPerToken(j + 1)
	}
	return f / float64(n)
}

func meanStd(xs []float64) (mean, std float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)-1))
}

func modelName(m *model.Model, path string) string {
	if m.Name != "" {
		return m.Name
	}
	return strings.TrimSuffix(filepath.Base(path), ".gguf")
}

// modelType names the type of the model's expert (or FFN) matrices.
func modelType(m *model.Model) string {
	l := m.Layers[len(m.Layers)-1]
	if l.Router != nil {
		return l.Shape.GateType.String()
	}
	if l.Gate != nil {
		return l.Gate.Type.String()
	}
	return m.Output.Type.String()
}

func paramCount(m *model.Model) int64 {
	var n int64
	for _, t := range m.File.Tensors() {
		n += t.Elements()
	}
	return n
}

// CopyBandwidth copies a size-byte buffer reps times and returns the best
// read bandwidth in GB/s (bytes copied per second; the copy also writes as
// many). Decode reads weights once per token, so this is the ceiling the
// effective weight bandwidth is compared with.
func CopyBandwidth(size int64, reps int) float64 {
	g, _ := copyBandwidth(size, reps)
	return g
}

// copyBandwidth is CopyBandwidth that also returns the best bytes per
// CPU-second of the process (the uncontended estimate on a shared machine).
func copyBandwidth(size int64, reps int) (wall, cpu float64) {
	src := make([]byte, size)
	dst := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault in
	for range reps {
		c0 := processCPU()
		t0 := time.Now()
		copy(dst, src)
		wall = max(wall, float64(size)/time.Since(t0).Seconds()/1e9)
		if c := (processCPU() - c0).Seconds(); c > 0 {
			cpu = max(cpu, float64(size)/c/1e9)
		}
	}
	return wall, cpu
}
