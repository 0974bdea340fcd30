package agent

import (
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// ModelRAMOverhead is the memory a run needs beyond the model's weights
// when the assignment carries model facts: KV cache, activations, the
// tokenizer and the runtime itself for the phone-sized models we run. It is
// added to RequiredModelRAM.
const ModelRAMOverhead = 64 << 20

// CheckModelSupport checks model facts against what this agent binary can
// run: the architecture must be registered in runtime/model and every
// tensor type must have a kernel in runtime/tensor. It returns a refusal
// code and reason, or "" when the model is supported.
func CheckModelSupport(f *protocol.ModelFacts) (code, reason string) {
	if archs := model.Architectures(); !contains(archs, f.Architecture) {
		return protocol.RefuseUnsupported, fmt.Sprintf("architecture %s (this agent runs %s)", f.Architecture, strings.Join(archs, ", "))
	}
	var bad []string
	for _, name := range f.TensorTypes {
		t, err := tensor.ParseType(name)
		if err != nil || !tensor.Supported(t) {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		var have []string
		for _, t := range tensor.SupportedTypes() {
			have = append(have, t.String())
		}
		return protocol.RefuseUnsupported, fmt.Sprintf("tensor type %s (this agent computes %s)", strings.Join(bad, ", "), strings.Join(have, ", "))
	}
	return "", ""
}

// RequiredModelRAM is the memory config c needs for a model with facts f:
// all the weights for the resident mode (and for a model without routed
// experts); otherwise the resident (non-expert) weights plus the config's
// expert cache budget (at most all the experts). A hybrid model's
// recurrent state for one sequence (RecurrentStateBytes) and
// ModelRAMOverhead come on top. The second result explains the sum.
func RequiredModelRAM(f *protocol.ModelFacts, c jobs.Config) (int64, string) {
	state := RecurrentStateBytes(f)
	var n int64
	var why string
	// The mixed-precision planner holds every weight while it measures.
	if c.Mode == jobs.ModeResident || c.Mode == jobs.ModeMixedPrecision || f.ExpertBytes == 0 {
		n, why = f.TotalBytes, "weights "+fmtBytes(f.TotalBytes)
	} else {
		budget := min(max(c.Budget.Resolve(f.ExpertBytes), 0), f.ExpertBytes)
		n, why = f.ResidentBytes+budget, fmt.Sprintf("resident weights %s + expert budget %s", fmtBytes(f.ResidentBytes), fmtBytes(budget))
	}
	if state > 0 {
		n += state
		why += " + recurrent state " + fmtBytes(state)
	}
	return n + ModelRAMOverhead, why + " + overhead " + fmtBytes(ModelRAMOverhead)
}

// RecurrentStateBytes is the per-sequence recurrent state of a hybrid
// model (qwen35moe's Gated DeltaNet conv windows and state matrices, with
// their rollback checkpoints and history) as the runtime allocates it
// (model.RecurrentGeometry.SequenceStateBytes), or 0 for an attention-only
// model.
func RecurrentStateBytes(f *protocol.ModelFacts) int64 {
	r := f.Recurrent
	if r == nil {
		return 0
	}
	return model.RecurrentGeometry{Layers: r.Layers, ConvKernel: r.ConvKernel, ConvChannels: r.ConvChannels, Heads: r.Heads, StateSize: r.StateSize}.SequenceStateBytes()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fmtBytes prints n in binary units with one decimal (e.g. 1.5 GiB).
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
