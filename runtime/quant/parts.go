package quant

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// PlannerArchs are the architectures the planner measures and plans.
var PlannerArchs = []string{"qwen3", "qwen3moe", "qwen35moe"}

// ErrUnknownArch is wrapped when the planner does not know a model's
// architecture.
var ErrUnknownArch = errors.New("architecture not supported by the planner")

// checkArch returns an error wrapping ErrUnknownArch, naming arch and the
// supported ones, when the planner cannot measure arch.
func checkArch(arch string) error {
	if slices.Contains(PlannerArchs, arch) {
		return nil
	}
	if arch == "" {
		arch = "(none: general.architecture is missing)"
	}
	return fmt.Errorf("quant: %w: the model is %s; the planner knows %s", ErrUnknownArch, arch, strings.Join(PlannerArchs, ", "))
}

// NoteNextN is the note of a NextN (MTP) block's parts. The main forward
// pass never runs them, so their effect on the output cannot be measured;
// Measure gives each candidate a proxy sensitivity instead: the largest KL
// measured for the same part and requested type in a decoder layer (the
// draft head is as sensitive as the most sensitive layer it resembles).
const NoteNextN = "proxy: NextN block"

// nextNFrom returns the first block index of the NextN (MTP) blocks of f,
// or -1 when it has none (block_count - nextn_predict_layers).
func nextNFrom(f *gguf.File) int {
	arch := f.Architecture()
	n, err := f.Uint(arch + ".nextn_predict_layers")
	if err != nil || n == 0 {
		return -1
	}
	b, err := f.Uint(arch + ".block_count")
	if err != nil || n >= b || b > 1<<20 {
		return -1
	}
	return int(b - n)
}

// groupParts groups the quantizable tensors of f into (layer, part)s with
// their candidate types, and sums the bytes of everything else. A part's
// tensors may take different types at one requested type (a row that does
// not fit the type's block falls back, tensor by tensor, as Quantize does):
// a candidate is the requested type, its bytes are the sum after the
// fallbacks, and requested types that store every tensor alike are one
// candidate (the one asked first). The parts of NextN blocks carry
// NoteNextN.
func groupParts(f *gguf.File, types []tensor.Type, requant bool) ([]PartSensitivity, int64, error) {
	if err := checkArch(f.Architecture()); err != nil {
		return nil, 0, err
	}
	nextN := nextNFrom(f)
	byKey := map[string]*PartSensitivity{}
	var order []string
	// The input's header, room for the plan's metadata (about 100 bytes
	// per part), and worst-case alignment padding per tensor.
	fixed := f.DataOffset + 2048
	for _, t := range f.Tensors() {
		fixed += f.Alignment - 1
		if !Quantizable(t.Name, len(t.Dims)) {
			fixed += t.Size
			continue
		}
		l, part := PartOf(t.Name)
		k := Key(l, part)
		p := byKey[k]
		if p == nil {
			p = &PartSensitivity{Layer: l, Part: part}
			if nextN >= 0 && l >= nextN {
				p.Note = NoteNextN
			}
			byKey[k] = p
			order = append(order, k)
		}
		p.Tensors = append(p.Tensors, t.Name)
	}
	out := make([]PartSensitivity, 0, len(order))
	for _, k := range order {
		p := byKey[k]
		if err := candidates(f, p, types, requant); err != nil {
			return nil, 0, err
		}
		out = append(out, *p)
	}
	return out, fixed, nil
}

// candidates fills p.Candidates: the input's own type first, then each
// requested type that stores the part differently from those before it.
// With requant a quantized part is a candidate too (its values dequantized
// and quantized again), but only at types that make it smaller: a
// requantization that does not shrink the part only adds error.
func candidates(f *gguf.File, p *PartSensitivity, types []tensor.Type, requant bool) error {
	k := Key(p.Layer, p.Part)
	var src tensor.Type
	var srcBytes int64
	for i, name := range p.Tensors {
		t, _ := f.Tensor(name)
		if i == 0 {
			src = t.Type
		} else if t.Type != src {
			return fmt.Errorf("quant: part %s mixes %s (%s) and %s (%s) tensors; the planner needs one input type per part: convert the model to F16 or F32 first", k, src, p.Tensors[0], t.Type, name)
		}
		srcBytes += t.Size
	}
	if !requant && !floatType(src) {
		return fmt.Errorf("quant: tensor %s is already %s: %w; plan from the F32, F16 or BF16 model (or requantize: --allow-requantize)", p.Tensors[0], src, ErrQuantizedInput)
	}
	p.Candidates = append(p.Candidates[:0], Candidate{Type: src, Bytes: srcBytes})
	seen := map[string]bool{src.String(): true}
	for _, want := range types {
		stored := make([]tensor.Type, len(p.Tensors))
		var bytes int64
		for i, name := range p.Tensors {
			t, _ := f.Tensor(name)
			to, _, err := target(name, t.Dims, t.Type, want, requant)
			if err != nil {
				return err
			}
			sz, err := gguf.TensorSize(to, t.Dims)
			if err != nil {
				return fmt.Errorf("quant: tensor %s: %w", name, err)
			}
			stored[i], bytes = to, bytes+sz
		}
		sig := signature(stored)
		if seen[sig] {
			continue // fallbacks store it like an earlier candidate
		}
		seen[sig] = true
		if !floatType(src) && bytes >= srcBytes {
			continue // requantizing to no fewer bytes
		}
		p.Candidates = append(p.Candidates, Candidate{Type: want, Bytes: bytes, Stored: storedNote(p.Tensors, stored, want)})
	}
	sort.SliceStable(p.Candidates, func(i, j int) bool { return p.Candidates[i].Bytes > p.Candidates[j].Bytes })
	if p.Candidates[0].Type != src {
		return fmt.Errorf("quant: part %s: a candidate is larger than the input's %s", k, src)
	}
	return nil
}

// signature identifies how a candidate stores a part's tensors.
func signature(stored []tensor.Type) string {
	var b strings.Builder
	for _, t := range stored {
		b.WriteString(t.String())
		b.WriteByte(',')
	}
	return b.String()
}

// storedNote describes the tensors of a part that a candidate stores in
// another type than the requested want ("" when none), grouped by type:
// "Q8_0: ffn_down_shexp; Q5_0: ssm_out".
func storedNote(names []string, stored []tensor.Type, want tensor.Type) string {
	by := map[tensor.Type][]string{}
	var order []tensor.Type
	for i, t := range stored {
		if t == want {
			continue
		}
		if by[t] == nil {
			order = append(order, t)
		}
		short := names[i]
		if l := layerOf(short); l >= 0 {
			short = strings.TrimPrefix(short, Key(l, ""))
		}
		by[t] = append(by[t], strings.TrimSuffix(short, ".weight"))
	}
	parts := make([]string, len(order))
	for i, t := range order {
		parts[i] = t.String() + ": " + strings.Join(by[t], ", ")
	}
	return strings.Join(parts, "; ")
}

// proxyNextN sets the KL of each candidate of the NextN parts of s to the
// largest KL measured for the same part and requested type in a decoder
// layer (NoteNextN), or the part kind's largest KL when no decoder layer
// has that candidate.
func proxyNextN(s *Sensitivity) {
	byType := map[string]float64{} // part + type -> largest KL
	byPart := map[string]float64{}
	for _, p := range s.Parts {
		if p.Note != "" || p.Layer < 0 {
			continue
		}
		for _, c := range p.Candidates[1:] {
			k := p.Part + "/" + c.Type.String()
			byType[k] = max(byType[k], c.KL)
			byPart[p.Part] = max(byPart[p.Part], c.KL)
		}
	}
	for i := range s.Parts {
		p := &s.Parts[i]
		if p.Note == "" {
			continue
		}
		for j := 1; j < len(p.Candidates); j++ {
			c := &p.Candidates[j]
			kl, ok := byType[p.Part+"/"+c.Type.String()]
			if !ok {
				kl = byPart[p.Part]
			}
			c.KL = kl
		}
	}
}
