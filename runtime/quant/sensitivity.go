package quant

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Candidate is one type a part can take, its size and measured error.
type Candidate struct {
	// Type is the requested type; Quantize stores each tensor of the part
	// at Type or at its fallback (Target) when Type's block does not fit
	// the tensor's rows.
	Type tensor.Type
	// Bytes is the part's size at Type, after the fallbacks.
	Bytes int64
	// Stored names the tensors stored in another type than Type, by type
	// ("Q8_0: ffn_down_shexp"); empty when every tensor takes Type.
	Stored string
	// KL is the mean KL divergence (nats per token) of the model's next
	// token distribution on the calibration text, reference (the input
	// model) against the model with only this part at Type.
	KL float64
}

// PartSensitivity is the measured sensitivity of one (layer, part).
type PartSensitivity struct {
	Layer      int
	Part       string
	Tensors    []string
	Candidates []Candidate // most bytes first; the input's own type has KL 0
	// Note, when set, says that the part's KLs are not measured but a
	// proxy (NoteNextN).
	Note string
}

// Sensitivity is the result of Measure.
type Sensitivity struct {
	Parts []PartSensitivity
	// Fixed is the bytes no plan changes: unquantizable tensors (norms,
	// router) and the header, plus worst-case alignment padding.
	Fixed int64
	// Tokens is the calibration tokens scored.
	Tokens int
}

// MeasureConfig configures Measure.
type MeasureConfig struct {
	// Tokens is the tokenized calibration text.
	Tokens []int
	// Context is the window length (default min(model context, 256,
	// MaxTokens)).
	Context int
	// MaxTokens caps the calibration tokens used (default 1024).
	MaxTokens int
	// Types are the candidate types (default Types); each part also keeps
	// its input type as a candidate.
	Types   []tensor.Type
	Threads int
	// Requantize plans an already quantized model (Options.Requantize):
	// a part's candidates are the types that make it smaller.
	Requantize bool
	// Progress, if set, is called after each measured (part, type).
	Progress func(done, total int)
}

// ErrNoCalibration is wrapped when the calibration text is too short.
var ErrNoCalibration = fmt.Errorf("calibration text too short")

// Measure loads the model at path with every weight in RAM and measures,
// for each (layer, part) and each candidate type, the KL divergence of the
// output distribution when only that part is quantized to that type (the
// rest stays as in the input). The quantized weights run through the same
// kernels the quantized file will use. Architectures: PlannerArchs (an
// unknown one is an error wrapping ErrUnknownArch that names it).
func Measure(ctx context.Context, path string, cfg MeasureConfig) (*Sensitivity, error) {
	if len(cfg.Types) == 0 {
		cfg.Types = Types
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 1024
	}
	gf, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	err = checkArch(gf.Architecture())
	gf.Close()
	if err != nil {
		return nil, err
	}
	m, err := model.Load(path, model.Options{Threads: max(cfg.Threads, 1), GGUFLayout: true})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if err := checkArch(m.Arch); err != nil {
		return nil, err
	}
	f := m.File
	if cfg.Context <= 0 {
		cfg.Context = min(m.Context, 256, cfg.MaxTokens)
	}
	if cfg.Context > m.Context {
		return nil, fmt.Errorf("quant: calibration window %d exceeds the model's context %d", cfg.Context, m.Context)
	}
	c := cfg.Context
	toks := cfg.Tokens[:min(len(cfg.Tokens), cfg.MaxTokens+1)]
	windows := (len(toks) - 1) / c
	if windows < 1 {
		return nil, fmt.Errorf("quant: %w: %d tokens, the planner needs at least %d (one %d-token window and its next token); give a longer --calib file", ErrNoCalibration, len(toks), c+1, c)
	}
	for _, t := range toks {
		if t < 0 || t >= m.Vocab {
			return nil, fmt.Errorf("quant: calibration token %d outside the vocabulary of %d", t, m.Vocab)
		}
	}

	parts, fixed, err := groupParts(f, cfg.Types, cfg.Requantize)
	if err != nil {
		return nil, err
	}
	sens := &Sensitivity{Parts: parts, Fixed: fixed, Tokens: windows * c}

	st, err := m.NewState(c)
	if err != nil {
		return nil, err
	}
	V := m.Vocab
	// Reference log-probabilities of every scored position.
	ref := make([]float32, windows*c*V)
	if err := logProbs(ctx, st, toks, windows, c, V, func(w, i int, lp []float64) {
		dst := ref[(w*c+i)*V : (w*c+i+1)*V]
		for j, v := range lp {
			dst[j] = float32(v)
		}
	}); err != nil {
		return nil, err
	}
	klOf := func() (float64, error) {
		var sum float64
		err := logProbs(ctx, st, toks, windows, c, V, func(w, i int, lq []float64) {
			lp := ref[(w*c+i)*V : (w*c+i+1)*V]
			var kl float64
			for j, p := range lp {
				if p > -80 {
					kl += float64(math.Exp(float64(p)) * (float64(p) - lq[j]))
				}
			}
			sum += kl
		})
		return sum / float64(windows*c), err
	}

	total := 0
	for _, p := range parts {
		if p.Note == "" {
			total += len(p.Candidates) - 1
		}
	}
	done := 0
	pool := tensor.NewPool(max(cfg.Threads, 1))
	defer pool.Close()
	for pi := range parts {
		p := &sens.Parts[pi]
		if p.Note != "" {
			continue // a NextN block: proxyNextN
		}
		for ci := range p.Candidates {
			cand := &p.Candidates[ci]
			if ci == 0 {
				continue // the input's own type
			}
			restore, err := swapPart(m, f, p, cand.Type, pool, cfg.Requantize)
			if err != nil {
				return nil, err
			}
			kl, err := klOf()
			restore()
			if err != nil {
				return nil, err
			}
			cand.KL = max(kl, 0)
			done++
			if cfg.Progress != nil {
				cfg.Progress(done, total)
			}
		}
	}
	proxyNextN(sens)
	return sens, nil
}

// logProbs evaluates each window of c tokens from an empty cache and calls
// fn with the log-softmax (float64) at every position.
func logProbs(ctx context.Context, st *model.State, toks []int, windows, c, V int, fn func(w, i int, lp []float64)) error {
	lp := make([]float64, V)
	for w := range windows {
		st.Reset()
		logits, err := st.Forward(ctx, toks[w*c:(w+1)*c], true)
		if err != nil {
			return err
		}
		for i := range c {
			row := logits[i*V : (i+1)*V]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = max(mx, float64(v))
			}
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v) - mx)
			}
			ls := math.Log(s) + mx
			for j, v := range row {
				lp[j] = float64(v) - ls
			}
			fn(w, i, lp)
		}
	}
	return nil
}

// swapPart replaces the weights of part p in the loaded model m by the
// input's values quantized to want (each tensor at want or its fallback, as
// Quantize stores it) and returns a function that restores the input
// weights.
func swapPart(m *model.Model, f *gguf.File, p *PartSensitivity, want tensor.Type, pool *tensor.Pool, requant bool) (func(), error) {
	var undo []func()
	restore := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	for _, name := range p.Tensors {
		t, _ := f.Tensor(name)
		typ, _, err := target(name, t.Dims, t.Type, want, requant)
		if err != nil {
			restore()
			return nil, err
		}
		data, err := requantize(f, t, typ, pool)
		if err != nil {
			restore()
			return nil, err
		}
		switch p.Part {
		case PartExperts:
			res, ok := m.Experts.(*moe.Resident)
			if !ok {
				restore()
				return nil, fmt.Errorf("quant: experts are not resident")
			}
			l := p.Layer
			sh := &m.Layers[l].Shape
			E := sh.Experts
			per := len(data) / E
			old := slices.Clone(res.Data[l])
			oldShape := *sh
			for e := range E {
				w := &res.Data[l][e]
				slab := data[e*per : (e+1)*per]
				switch {
				case containsPart(name, "ffn_gate_exps"):
					w.Gate, sh.GateType = slab, typ
				case containsPart(name, "ffn_up_exps"):
					w.Up, sh.UpType = slab, typ
				case containsPart(name, "ffn_down_exps"):
					w.Down, sh.DownType = slab, typ
				default:
					restore()
					return nil, fmt.Errorf("quant: cannot measure expert tensor %s", name)
				}
			}
			undo = append(undo, func() { copy(res.Data[l], old); *sh = oldShape })
		default:
			mat := m.WeightMatrix(name)
			if mat == nil {
				restore()
				return nil, fmt.Errorf("quant: the planner cannot measure tensor %s of %s", name, m.Arch)
			}
			old := *mat
			*mat = tensor.Matrix{Type: typ, Rows: old.Rows, Cols: old.Cols, Data: data}
			undo = append(undo, func() { *mat = old })
			if name == "token_embd.weight" {
				if _, ok := f.Tensor("output.weight"); !ok { // tied
					oldOut := m.Output
					m.Output = *mat
					undo = append(undo, func() { m.Output = oldOut })
				}
			}
		}
	}
	return restore, nil
}

func containsPart(name, s string) bool { return strings.Contains(name, s) }

// requantize reads tensor t of f and returns its data converted to typ.
func requantize(f *gguf.File, t *gguf.TensorInfo, typ tensor.Type, pool *tensor.Pool) ([]byte, error) {
	raw, err := f.ReadTensor(t.Name)
	if err != nil {
		return nil, err
	}
	size, err := gguf.TensorSize(typ, t.Dims)
	if err != nil {
		return nil, fmt.Errorf("quant: %s: %w", t.Name, err)
	}
	out := make([]byte, size)
	// A group of rows at a time: an expert tensor of a large model is
	// gigabytes as float32.
	cols := int(t.Dims[0])
	inRow, err := t.Type.RowSize(cols)
	if err != nil {
		return nil, fmt.Errorf("quant: %s: %w", t.Name, err)
	}
	outRow, err := typ.RowSize(cols)
	if err != nil {
		return nil, fmt.Errorf("quant: %s: %w", t.Name, err)
	}
	rows := len(raw) / inRow
	group := max(1, (4<<20)/cols)
	x := make([]float32, min(rows, group)*cols)
	for r := 0; r < rows; r += group {
		n := min(group, rows-r)
		if err := tensor.Dequantize(t.Type, raw[r*inRow:(r+n)*inRow], x[:n*cols]); err != nil {
			return nil, fmt.Errorf("quant: %s: %w", t.Name, err)
		}
		if err := tensor.QuantizeParallel(pool, typ, x[:n*cols], out[r*outRow:(r+n)*outRow]); err != nil {
			return nil, fmt.Errorf("quant: %s: %w", t.Name, err)
		}
	}
	return out, nil
}
