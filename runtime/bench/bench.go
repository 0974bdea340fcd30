// Package bench measures the LES runtime: prefill and decode throughput of
// a model with all weights resident, over repetitions after warm-up, with
// the effective weight bandwidth and arithmetic rate, and writes
// llama-bench-style reports (Markdown, CSV, JSON, JSON lines).
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/stat"
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
	// Pin pins the measuring thread to one CPU (les.Pin); DiscardOutliers
	// drops outlier repetitions (les.MeasureOptions) before each row's
	// statistics are taken.
	Pin, DiscardOutliers bool
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
	Model     string  `json:"model"`       // general.name or file name
	Arch      string  `json:"arch"`        // architecture
	Type      string  `json:"type"`        // dominant expert/matrix type
	SizeBytes int64   `json:"size_bytes"`  // model file size
	Params    int64   `json:"params"`      // parameter count
	Backend   string  `json:"backend"`     // "go", "go+simd" (GOEXPERIMENT=simd) or "go+neon"
	Threads   int     `json:"threads"`     // threads for matrix products
	Test      string  `json:"test"`        // "pp64", "tg32"
	Tokens    int     `json:"n_tokens"`    // tokens per run
	Reps      int     `json:"repetitions"` // measured runs
	TPS       float64 `json:"tokens_per_second"`
	TPSStddev float64 `json:"stddev"`
	TPSCV     float64 `json:"cv"` // TPSStddev / TPS
	// Discarded is how many measured repetitions the outlier rule dropped
	// (Config.DiscardOutliers); Samples still lists every repetition.
	Discarded  int       `json:"discarded_repetitions,omitempty"`
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
		ses, err := measure.OpenSession(measure.Config{Model: cfg.Model, Resident: true, Threads: th})
		if err != nil {
			return nil, err
		}
		m := ses.Model
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
		rows, err := measureRows(ctx, ses, cfg, base)
		ses.Close()
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
	phase   int   // 0 before the first sampled token, 1 after
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

// measure runs the prefill and decode tests on the resident session s
// through the one measurement path (les.Session.Run): ppN is a repetition
// whose prompt is N tokens and which samples one token (prefill only); tgN
// one whose 1-token prompt is continued by N decoded tokens. Their tok/s
// are les.PrefillTPS and les.DecodeTPS of each repetition.
func measureRows(ctx context.Context, s *les.Session, cfg Config, base Row) ([]Row, error) {
	m := s.Model
	need := max(cfg.PromptTokens, cfg.GenTokens+1)
	if need > m.Context {
		return nil, fmt.Errorf("bench: %d tokens exceed the context length %d of the model; lower --prompt-tokens/--gen-tokens", need, m.Context)
	}
	// The state a run of max(prompt, gen) tokens holds (the session's own
	// decoder state is sized for each test).
	st, err := m.NewState(max(cfg.PromptTokens, cfg.GenTokens))
	if err != nil {
		return nil, err
	}
	base.StateBytes, base.RecurrentStateBytes = st.StateBytes(), st.RecurrentStateBytes()
	// Deterministic pseudo-random prompt over the vocabulary.
	toks := make([]int, need)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range toks {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		toks[i] = int(x % uint64(m.Vocab))
	}
	// test runs one llama-bench test: its repetitions, their tok/s (rate),
	// the experts the router selected in the measured phase and the CPU
	// time of the process.
	test := func(prompt []int, maxTokens int, decode bool, rate func(les.Rep) float64) (*les.Result, []float64, int64, time.Duration, error) {
		sink := &bytesSink{m: m}
		var c0, cpu time.Duration
		var experts int64
		p := les.Plan{Warmup: cfg.Warmup, Repetitions: cfg.Repetitions, Pin: cfg.Pin, DiscardOutliers: cfg.DiscardOutliers,
			RepParams: les.RepParams{Prompts: [][]int{prompt}, MaxTokens: maxTokens}}
		p.Sink = sink
		if decode { // count the decode phase's experts only
			p.OnToken = func(int) error {
				if sink.phase == 0 {
					sink.phase, sink.experts = 1, 0
				}
				return nil
			}
		}
		p.Before = func(context.Context, int) error {
			sink.experts, sink.phase = 0, 0
			c0 = processCPU()
			return nil
		}
		p.After = func(i int, _ *les.Rep) {
			if i >= 0 {
				cpu += processCPU() - c0
				experts = sink.experts
			}
		}
		res, reps, err := s.Run(ctx, p)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		samples := make([]float64, len(reps))
		for i, rp := range reps {
			samples[i] = rate(rp)
		}
		return res, samples, experts, cpu, nil
	}
	var rows []Row
	if n := cfg.PromptTokens; n > 0 {
		r := base
		r.Test, r.Tokens = fmt.Sprintf("pp%d", n), n
		res, samples, experts, cpu, err := test(toks[:n], 1, false, les.PrefillTPS)
		if err != nil {
			return nil, err
		}
		bytes := experts + residentMatrixBytes(m, n)*int64((n+511)/512)
		r.Discarded = res.Discarded
		fill(&r, res.PrefillTPS, samples, float64(bytes)/float64(n), flopsPrefill(m, n))
		if cpu > 0 {
			r.CPUTPS = float64(n*cfg.Repetitions) / cpu.Seconds()
			r.GBpsCPU = r.WeightGB * r.CPUTPS
		}
		rows = append(rows, r)
	}
	if n := cfg.GenTokens; n > 0 {
		r := base
		r.Test, r.Tokens = fmt.Sprintf("tg%d", n), n
		res, samples, experts, cpu, err := test(toks[:1], n+1, true, les.DecodeTPS)
		if err != nil {
			return nil, err
		}
		bytes := experts + residentMatrixBytes(m, 1)*int64(n)
		var fl float64
		for j := range n {
			fl += m.FLOPsPerToken(j + 2)
		}
		r.Discarded = res.Discarded
		fill(&r, res.DecodeTPS, samples, float64(bytes)/float64(n), fl/float64(n))
		if cpu > 0 {
			r.CPUTPS = float64(n*cfg.Repetitions) / cpu.Seconds()
		}
		r.GBpsCPU = r.WeightGB * r.CPUTPS
		rows = append(rows, r)
	}
	return rows, nil
}

// fill sets the throughput statistics of r from the summary of its
// per-repetition tok/s (samples), with bytesPerToken weight bytes and
// flopsPerToken FLOPs per token.
func fill(r *Row, sum stat.Summary, samples []float64, bytesPerToken, flopsPerToken float64) {
	r.Samples = samples
	r.TPS, r.TPSStddev, r.TPSCV = sum.Mean, sum.Stddev, sum.CV
	r.Reps = sum.N
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
