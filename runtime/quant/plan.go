package quant

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Parts a plan assigns types to. Every quantizable tensor belongs to one
// (layer, part): blk.L.*_exps.* (the routed experts) to (L, PartExperts),
// blk.L.*_shexp.* (a shared expert) to (L, PartShared), every other
// quantizable blk.L.* matrix (attention, recurrent-layer projections such
// as Gated DeltaNet's, a NextN block's eh_proj) to (L, PartAttention),
// token_embd.weight to (-1, PartEmbedding), output.weight to (-1,
// PartOutput) and anything else to (-1, PartOther). A part's tensors may be
// stored in different types when rows do not fit a type's block (Target).
const (
	PartAttention = "attention"
	PartExperts   = "experts"
	PartShared    = "shared_expert"
	PartEmbedding = "token_embd"
	PartOutput    = "output"
	PartOther     = "other"
)

// PartOf returns the (layer, part) of a tensor name.
func PartOf(name string) (layer int, part string) {
	if l := layerOf(name); l >= 0 {
		if strings.Contains(name, "_exps.") {
			return l, PartExperts
		}
		if strings.Contains(name, "_shexp.") {
			return l, PartShared
		}
		return l, PartAttention
	}
	switch name {
	case "token_embd.weight":
		return -1, PartEmbedding
	case "output.weight":
		return -1, PartOutput
	}
	return -1, PartOther
}

// Key names a (layer, part) as stored in metadata: "blk.L.part" or part.
func Key(layer int, part string) string {
	if layer < 0 {
		return part
	}
	return "blk." + strconv.Itoa(layer) + "." + part
}

// ParseKey is the inverse of Key.
func ParseKey(s string) (layer int, part string, err error) {
	if rest, ok := strings.CutPrefix(s, "blk."); ok {
		num, p, ok := strings.Cut(rest, ".")
		l, err := strconv.Atoi(num)
		if !ok || err != nil || l < 0 || l > 1<<20 || (p != PartAttention && p != PartExperts && p != PartShared) {
			return 0, "", fmt.Errorf("quant: bad plan part %q", s)
		}
		return l, p, nil
	}
	switch s {
	case PartEmbedding, PartOutput, PartOther:
		return -1, s, nil
	}
	return 0, "", fmt.Errorf("quant: bad plan part %q", s)
}

// Choice is the chosen type of one (layer, part).
type Choice struct {
	Layer int    `json:"layer"` // -1 for model-wide parts
	Part  string `json:"part"`
	// Type is the requested type of the part's tensors; a tensor whose
	// rows do not fit its block is stored at the fallback (Target).
	Type tensor.Type `json:"-"`
	// TypeName is Type's name (JSON).
	TypeName string `json:"type"`
	// Stored names the tensors that fall back, by type ("Q8_0:
	// ffn_down_shexp"); empty when all take Type. Not stored in the file.
	Stored string `json:"stored,omitempty"`
	// Bytes is the part's size at Type (after fallbacks).
	Bytes int64 `json:"bytes"`
	// Sensitivity is the measured KL divergence (nats per token) of the
	// model's output when only this part is stored at Type.
	Sensitivity float64 `json:"sensitivity"`
	// Note says that Sensitivity is a proxy, not measured (NoteNextN).
	// Not stored in the file.
	Note string `json:"note,omitempty"`
}

// Plan is a per-(layer, part) type assignment under a byte budget.
type Plan struct {
	Budget int64    `json:"budget_bytes"`
	Size   int64    `json:"planned_bytes"` // tensor data + header estimate
	Method string   `json:"method"`
	Error  float64  `json:"total_sensitivity"` // sum of the chosen sensitivities
	Items  []Choice `json:"parts"`
}

// Metadata keys of a plan (arrays are parallel, one entry per part).
const (
	PlanPrefix     = "les.quant.plan."
	KeyPlanVersion = PlanPrefix + "version" // uint32: 1
	KeyPlanBudget  = PlanPrefix + "budget"  // uint64: the byte budget
	KeyPlanMethod  = PlanPrefix + "method"  // string: the optimisation
	KeyPlanParts   = PlanPrefix + "parts"   // []string: Key(layer, part)
	KeyPlanTypes   = PlanPrefix + "types"   // []string: type names
	KeyPlanBytes   = PlanPrefix + "bytes"   // []int64: bytes per part
	KeyPlanKL      = PlanPrefix + "kl"      // []float32: sensitivity per part
)

// MaxPlanParts bounds the parts a stored plan may list.
const MaxPlanParts = 1 << 16

// Meta returns the metadata pairs that store p.
func (p *Plan) Meta() []KV {
	parts := make([]string, len(p.Items))
	types := make([]string, len(p.Items))
	bytes := make([]int64, len(p.Items))
	kl := make([]float32, len(p.Items))
	for i, c := range p.Items {
		parts[i] = Key(c.Layer, c.Part)
		types[i] = c.Type.String()
		bytes[i] = c.Bytes
		kl[i] = float32(c.Sensitivity)
	}
	return []KV{
		{KeyPlanVersion, uint32(1)}, {KeyPlanBudget, uint64(max(p.Budget, 0))}, {KeyPlanMethod, p.Method},
		{KeyPlanParts, parts}, {KeyPlanTypes, types}, {KeyPlanBytes, bytes}, {KeyPlanKL, kl},
	}
}

// HasPlan reports whether f stores a plan.
func HasPlan(f *gguf.File) bool { return f.Has(KeyPlanVersion) }

// ReadPlan reads the plan stored in f's metadata. It returns an error for
// a missing or malformed plan (never panics on hostile metadata).
func ReadPlan(f *gguf.File) (*Plan, error) {
	v, err := f.Uint(KeyPlanVersion)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if v != 1 {
		return nil, fmt.Errorf("quant: plan version %d, this runtime reads 1", v)
	}
	p := &Plan{}
	b, err := f.Uint(KeyPlanBudget)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	if b > 1<<62 {
		return nil, fmt.Errorf("quant: plan budget %d out of range", b)
	}
	p.Budget = int64(b)
	if p.Method, err = f.String(KeyPlanMethod); err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	parts, err := f.Strings(KeyPlanParts)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	types, err := f.Strings(KeyPlanTypes)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	bytes, err := f.Int64s(KeyPlanBytes)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	kl, err := f.Float32s(KeyPlanKL)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	n := len(parts)
	if n > MaxPlanParts || len(types) != n || len(bytes) != n || len(kl) != n {
		return nil, fmt.Errorf("quant: plan arrays have %d parts, %d types, %d sizes, %d sensitivities; want equal lengths up to %d", n, len(types), len(bytes), len(kl), MaxPlanParts)
	}
	seen := map[string]bool{}
	for i := range n {
		l, part, err := ParseKey(parts[i])
		if err != nil {
			return nil, err
		}
		if seen[parts[i]] {
			return nil, fmt.Errorf("quant: plan lists %s twice", parts[i])
		}
		seen[parts[i]] = true
		t, err := tensor.ParseType(types[i])
		if err != nil {
			return nil, fmt.Errorf("quant: plan part %s: %w", parts[i], err)
		}
		if bytes[i] < 0 {
			return nil, fmt.Errorf("quant: plan part %s has %d bytes", parts[i], bytes[i])
		}
		p.Items = append(p.Items, Choice{Layer: l, Part: part, Type: t, TypeName: t.String(), Bytes: bytes[i], Sensitivity: float64(kl[i])})
		p.Size += bytes[i]
	}
	return p, nil
}

// TypeFor returns an Options.TypeFor that applies p.
func (p *Plan) TypeFor() func(name string) (tensor.Type, bool) {
	m := map[string]tensor.Type{}
	for _, c := range p.Items {
		m[Key(c.Layer, c.Part)] = c.Type
	}
	return func(name string) (tensor.Type, bool) {
		l, part := PartOf(name)
		t, ok := m[Key(l, part)]
		return t, ok
	}
}

// WriteTable prints p as a Markdown table: layer, part, type, bytes,
// sensitivity.
func (p *Plan) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "plan: %s, budget %d bytes, planned %d bytes, total sensitivity %.5f nats/token\n\n", p.Method, p.Budget, p.Size, p.Error)
	b.WriteString("| layer | part | type | bytes | sensitivity (KL, nats/token) |\n| ---: | --- | --- | ---: | ---: |\n")
	for _, c := range p.Items {
		layer := "–"
		if c.Layer >= 0 {
			layer = strconv.Itoa(c.Layer)
		}
		typ := c.Type.String()
		if c.Stored != "" {
			typ += " (" + c.Stored + ")"
		}
		sens := fmt.Sprintf("%.5f", c.Sensitivity)
		if c.Note != "" {
			sens += " (" + c.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s |\n", layer, c.Part, typ, c.Bytes, sens)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
