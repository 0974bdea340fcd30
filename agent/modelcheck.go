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
// expert cache budget (at most all the experts). ModelRAMOverhead comes on
// top. The second result explains the sum.
func RequiredModelRAM(f *protocol.ModelFacts, c jobs.Config) (int64, string) {
	if c.Mode == jobs.ModeResident || f.ExpertBytes == 0 {
		return f.TotalBytes + ModelRAMOverhead, fmt.Sprintf("weights %s + overhead %s", fmtBytes(f.TotalBytes), fmtBytes(ModelRAMOverhead))
	}
	budget := min(max(c.Budget.Resolve(f.ExpertBytes), 0), f.ExpertBytes)
	return f.ResidentBytes + budget + ModelRAMOverhead, fmt.Sprintf("resident weights %s + expert budget %s + overhead %s",
		fmtBytes(f.ResidentBytes), fmtBytes(budget), fmtBytes(ModelRAMOverhead))
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
