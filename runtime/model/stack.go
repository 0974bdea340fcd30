package model

import (
	"context"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// plainStack is the shared part of the plain transformer architectures
// (qwen3, qwen3moe): attention blocks (attention.go) followed by a dense
// SwiGLU FFN or a routed MoE block (forward.go's layer, dense and moe),
// with the lookahead predictor on the previous layer's residual. Its
// sequences hold only a KV cache, and it reads no matrix that Layer does
// not hold. An architecture embeds it and adds what differs.
type plainStack struct{}

func (plainStack) kvLayer(int) bool                        { return true }
func (plainStack) newSeq(*State)                           {}
func (plainStack) reset(*State)                            {}
func (plainStack) truncate(*State, int)                    {}
func (plainStack) seqBytes(*State) (all, recurrent int64)  { return 0, 0 }
func (plainStack) extraBytes() int64                       { return 0 }
func (plainStack) extraWeights() float64                   { return 0 }
func (plainStack) weightMatrix(int, string) *tensor.Matrix { return nil }

// buildStack binds a plain transformer stack of architecture a (qwen3's
// GGUF tensor names): attention blocks with a dense SwiGLU FFN, or with a
// routed MoE block when isMoE. All its GGUF tensor names appear here and
// nowhere else, except the per-expert names of a packed file
// (runtime/pack), bound by load_packed.go.
func buildStack(f *gguf.File, opts Options, arch string, isMoE bool, a architecture) (*Model, error) {
	cfg, err := readConfig(f, arch, isMoE)
	if err != nil {
		return nil, err
	}
	b := &binder{f: f, swizzle: !opts.GGUFLayout}
	m := &Model{Config: cfg, arch: a}
	m.Embed = b.matrix("token_embd.weight", cfg.Hidden, cfg.Vocab)
	m.OutNorm = b.vector("output_norm.weight", cfg.Hidden)
	if _, ok := f.Tensor("output.weight"); ok {
		m.Output = b.matrix("output.weight", cfg.Hidden, cfg.Vocab)
	} else {
		m.Output = m.Embed // tied embeddings
	}
	qDim, kvDim, vDim := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim, cfg.KVHeads*cfg.ValueDim
	shapes := make([]moe.LayerShape, cfg.Layers)
	var blobs []*pack.Blob // per layer, for a packed file (lesfarm pack)
	if isMoE {
		blobs = b.packedBlobs(cfg)
	}
	m.Layers = make([]Layer, cfg.Layers)
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		l.AttnNorm = b.vector(p+"attn_norm.weight", cfg.Hidden)
		l.Q = b.matrix(p+"attn_q.weight", cfg.Hidden, qDim)
		l.K = b.matrix(p+"attn_k.weight", cfg.Hidden, kvDim)
		l.V = b.matrix(p+"attn_v.weight", cfg.Hidden, vDim)
		l.O = b.matrix(p+"attn_output.weight", cfg.Heads*cfg.ValueDim, cfg.Hidden)
		l.QNorm = b.vector(p+"attn_q_norm.weight", cfg.HeadDim)
		l.KNorm = b.vector(p+"attn_k_norm.weight", cfg.HeadDim)
		l.FFNNorm = b.vector(p+"ffn_norm.weight", cfg.Hidden)
		if isMoE {
			r := b.matrix(p+"ffn_gate_inp.weight", cfg.Hidden, cfg.ExpertCount)
			l.Router = &r
			var gt, ut, dt tensor.Type
			if blobs != nil {
				types := b.packedExpertTypes(blobs, i, cfg)
				gt, ut, dt = types[0], types[1], types[2]
			} else {
				types := b.stackedExpertTypes(i, cfg.Hidden, cfg.ExpertFFN, cfg.ExpertCount)
				gt, ut, dt = types[0], types[1], types[2]
			}
			shapes[i] = moe.LayerShape{Experts: cfg.ExpertCount, Hidden: cfg.Hidden, FFN: cfg.ExpertFFN, GateType: gt, UpType: ut, DownType: dt}
			l.Shape = shapes[i]
			m.ExpertBytes += int64(cfg.ExpertCount) * shapes[i].Bytes()
		} else {
			g := b.matrix(p+"ffn_gate.weight", cfg.Hidden, cfg.FFN)
			u := b.matrix(p+"ffn_up.weight", cfg.Hidden, cfg.FFN)
			d := b.matrix(p+"ffn_down.weight", cfg.FFN, cfg.Hidden)
			l.Gate, l.Up, l.Down = &g, &u, &d
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	m.ResidentBytes = b.bytes
	if isMoE {
		if opts.Experts != nil {
			src, err := opts.Experts(f, shapes)
			if err != nil {
				return nil, fmt.Errorf("expert source: %w", err)
			}
			m.Experts = src
		} else {
			res := &moe.Resident{Data: make([][]moe.Weights, cfg.Layers)}
			for i := range res.Data {
				if blobs != nil {
					res.Data[i], err = b.packedResident(i, shapes[i])
				} else {
					res.Data[i], err = b.stackedResident(i, cfg.ExpertCount)
				}
				if err == nil {
					err = b.swizzleExperts(res.Data[i], shapes[i])
				}
				if err != nil {
					return nil, err
				}
			}
			m.Experts = res
		}
	}
	m.init(opts)
	return m, nil
}

// forward runs the stack on validated tokens (State.Forward).
func (plainStack) forward(ctx context.Context, s *State, tokens []int, all bool) ([]float32, error) {
	m := s.m
	n := len(tokens)
	s.ensure(n)
	sc := &s.sc
	H := m.Hidden
	x := sc.x[:n*H]
	for i, t := range tokens {
		if err := m.Embed.Row(t, x[i*H:(i+1)*H]); err != nil {
			return nil, fmt.Errorf("model: embedding row %d: %w", t, err)
		}
	}
	half := m.RopeDim / 2
	for i := range n {
		m.rope.fill(s.pos+i, sc.cos[i*half:(i+1)*half], sc.sin[i*half:(i+1)*half])
	}
	// Lookahead for layer 0: route the token embedding through layer 0's
	// router (the prev_layer_output predictor, entry 0).
	if m.Experts != nil {
		if k := m.Experts.PredictK(); k > 0 && m.Layers[0].Router != nil {
			if err := s.predict(0, x, n, k); err != nil {
				return nil, err
			}
		}
	}
	s.keep = n
	for li := range m.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := s.layer(ctx, li, n); err != nil {
			return nil, err
		}
		if s.Sink != nil {
			s.emitLayer(li, time.Since(start))
		}
		n = s.keep // CutVerify may have dropped later positions
	}
	// Output head on the requested positions.
	first := n - 1
	if all {
		first = 0
	}
	cnt := n - first
	sc.logitsIn = grow(sc.logitsIn, cnt*H)
	for i := range cnt {
		rmsNorm(sc.logitsIn[i*H:(i+1)*H], x[(first+i)*H:(first+i+1)*H], m.OutNorm, m.Eps)
	}
	sc.logits = grow(sc.logits, cnt*m.Vocab)
	if err := m.matmul(sc.logits, &m.Output, sc.logitsIn, cnt); err != nil {
		return nil, fmt.Errorf("model: output: %w", err)
	}
	s.pos += n
	return sc.logits, nil
}

// readConfig reads the hyper-parameters of a qwen3-family file.
func readConfig(f *gguf.File, arch string, isMoE bool) (Config, error) {
	r := metaReader{f: f, prefix: arch + "."}
	c := Config{Arch: arch}
	c.Name, _ = metaString(f, "general.name")
	c.Layers = r.int("block_count", 0)
	c.Hidden = r.int("embedding_length", 0)
	c.Heads = r.int("attention.head_count", 0)
	c.KVHeads = r.int("attention.head_count_kv", c.Heads)
	if c.Heads > 0 {
		c.HeadDim = r.int("attention.key_length", c.Hidden/c.Heads)
		c.ValueDim = r.int("attention.value_length", c.HeadDim)
	}
	c.Context = r.int("context_length", 0)
	c.FFN = r.int("feed_forward_length", -1)
	if isMoE {
		c.ExpertCount = r.int("expert_count", 0)
		c.ExpertsUsed = r.int("expert_used_count", 0)
		c.ExpertFFN = r.int("expert_feed_forward_length", 0)
	}
	c.RopeBase = r.float("rope.freq_base", 10000)
	c.RopeDim = r.int("rope.dimension_count", c.HeadDim)
	c.Eps = r.float("attention.layer_norm_rms_epsilon", 1e-6)
	if r.err != nil {
		return c, r.err
	}
	if t, ok := f.Tensor("token_embd.weight"); ok && len(t.Dims) == 2 {
		c.Vocab = int(t.Dims[1])
	}
	switch {
	case c.Layers <= 0 || c.Layers > 1024:
		return c, fmt.Errorf("%sblock_count %d out of range", r.prefix, c.Layers)
	case c.Hidden <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return c, fmt.Errorf("bad attention geometry: embedding_length %d, head_count %d, head_count_kv %d", c.Hidden, c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0 || c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0:
		return c, fmt.Errorf("bad head geometry: key_length %d, rope.dimension_count %d", c.HeadDim, c.RopeDim)
	case c.ValueDim <= 0:
		return c, fmt.Errorf("bad value_length %d", c.ValueDim)
	case c.Vocab <= 0:
		return c, fmt.Errorf("token_embd.weight missing or not 2-D")
	case !isMoE && c.FFN <= 0:
		return c, fmt.Errorf("%sfeed_forward_length missing", r.prefix)
	case isMoE && (c.ExpertCount <= 0 || c.ExpertsUsed <= 0 || c.ExpertsUsed > c.ExpertCount || c.ExpertFFN <= 0):
		return c, fmt.Errorf("bad expert geometry: expert_count %d, expert_used_count %d, expert_feed_forward_length %d", c.ExpertCount, c.ExpertsUsed, c.ExpertFFN)
	case c.Context <= 0:
		c.Context = 4096
	}
	return c, nil
}
