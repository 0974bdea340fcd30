package model

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// Speed of the hybrid architecture against qwen3moe at similar active
// weights. Both models have the phone-shaped qwen3moe's per-layer expert
// geometry (hidden 1024, top-8 of experts of width 512, Q4_K, vocabulary
// 32000), with 32 experts per layer instead of 128 to keep the files small
// (decode touches 8 per layer either way). qwen35moe's own layers are the
// 35B-A3B proportions at half width (DeltaNet 8 k-heads / 16 v-heads of
// 128, 8 query / 2 KV heads of 256, a 512-wide shared expert), which are
// heavier per layer, so it gets 8 layers (6 DeltaNet + 2 attention) to
// qwen3moe's 12 to bring the active weights per token within ~10%.
var (
	benchQwen3 = SynthConfig{Arch: "qwen3moe", Layers: 12, Experts: 32, ExpertsUsed: 8, Hidden: 1024, ExpertFFN: 512,
		Heads: 16, KVHeads: 4, Vocab: 32000, Context: 4096, Type: tensor.Q4_K, Seed: 1}
	benchQwen35 = SynthConfig{Arch: "qwen35moe", Layers: 8, Experts: 32, ExpertsUsed: 8, Hidden: 1024, ExpertFFN: 512,
		Heads: 8, KVHeads: 2, HeadDim: 256, Vocab: 32000, Context: 4096, Type: tensor.Q4_K, Seed: 1,
		Qwen35: Qwen35{SharedFFN: 512, FullAttnInterval: 4, NoMTP: true, SSMGroups: 8, SSMHeads: 16, SSMState: 128, ConvKernel: 4, RopeDim: 64}}
)

// benchModel writes c once into the user cache dir (reused across runs:
// the bytes depend only on c) and loads it.
func benchModel(b *testing.B, c SynthConfig) *Model {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "lesfarm-bench-models")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(dir, fmt.Sprintf("%s-%dL-%dE-h%d-%s-s%d.gguf", c.Arch, c.Layers, c.Experts, c.Hidden, c.Type, c.Seed))
	if _, err := os.Stat(p); err != nil {
		tmp := p + ".tmp"
		f, err := os.Create(tmp)
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteSynthetic(f, c); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			b.Fatal(err)
		}
	}
	m, err := Load(p, Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// layerTimer sums LayerEvent compute times per layer.
type layerTimer struct{ d []time.Duration }

func (l *layerTimer) Token(*trace.TokenEvent) {}
func (l *layerTimer) Read(*trace.ReadEvent)   {}
func (l *layerTimer) Layer(ev *trace.LayerEvent) {
	l.d[ev.Layer] += ev.Compute
}

// BenchmarkQwen35VsQwen3Decode decodes one token on each model per
// iteration, interleaved, one thread, at positions 16–144 (short context),
// and reports each model's time per token, their ratio, and the mean time
// of a qwen35moe DeltaNet block, a qwen35moe attention block and a
// qwen3moe block (each including its MoE FFN).
func BenchmarkQwen35VsQwen3Decode(b *testing.B) {
	m3, m35 := benchModel(b, benchQwen3), benchModel(b, benchQwen35)
	defer m3.Close()
	defer m35.Close()
	ctx := context.Background()
	type run struct {
		m   *Model
		st  *State
		lt  *layerTimer
		dur time.Duration
	}
	runs := []*run{{m: m3}, {m: m35}}
	prompt := make([]int, 16)
	for i := range prompt {
		prompt[i] = (i*131 + 7) % 32000
	}
	for _, r := range runs {
		st, err := r.m.NewState(256)
		if err != nil {
			b.Fatal(err)
		}
		r.st, r.lt = st, &layerTimer{d: make([]time.Duration, len(r.m.Layers))}
		st.Sink = r.lt
	}
	tok := []int{42}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for _, r := range runs {
			if r.st.Pos() == 0 || r.st.Pos() >= 144 {
				r.st.Reset()
				if _, err := r.st.Forward(ctx, prompt, false); err != nil {
					b.Fatal(err)
				}
				clear(r.lt.d) // layer times cover decode steps only
			}
			start := time.Now()
			if _, err := r.st.Forward(ctx, tok, false); err != nil {
				b.Fatal(err)
			}
			r.dur += time.Since(start)
		}
		n++
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e6 }
	t3, t35 := ms(runs[0].dur), ms(runs[1].dur)
	b.ReportMetric(t3, "qwen3moe-ms/tok")
	b.ReportMetric(t35, "qwen35moe-ms/tok")
	b.ReportMetric(t35/t3, "time-ratio")
	a3, a35 := float64(m3.ActiveBytesPerToken()), float64(m35.ActiveBytesPerToken())
	b.ReportMetric(a35/a3, "active-bytes-ratio")
	var dn, at, q3 time.Duration
	var ndn, nat int
	for l, d := range runs[1].lt.d {
		if m35.q35().layers[l].recurrent {
			dn += d
			ndn++
		} else {
			at += d
			nat++
		}
	}
	for _, d := range runs[0].lt.d {
		q3 += d
	}
	// Layer times cover the decode steps since the last reset; scale to
	// per-step means by their share of the step count.
	steps := float64(runs[1].st.Pos() - len(prompt))
	if steps > 0 {
		b.ReportMetric(float64(dn)/float64(ndn)/steps/1e6, "deltanet-block-ms")
		b.ReportMetric(float64(at)/float64(nat)/steps/1e6, "attn-block-ms")
		b.ReportMetric(float64(q3)/float64(len(m3.Layers))/float64(runs[0].st.Pos()-len(prompt))/1e6, "qwen3moe-block-ms")
	}
}
