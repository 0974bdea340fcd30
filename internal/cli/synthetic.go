package cli

import (
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
)

// synthDescription starts the general.description lesfarm synth writes
// into every model it makes (runtime/model.WriteSynthetic); pack and
// quantize keep it.
const synthDescription = "random weights written by lesfarm synth"

// syntheticModel reports whether the GGUF file at path was written by
// lesfarm synth: its weights are random, so its text is gibberish and no
// drafter can predict it. A file that cannot be read is not synthetic.
func syntheticModel(path string) bool {
	f, err := gguf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	d, err := f.String("general.description")
	return err == nil && strings.HasPrefix(d, synthDescription)
}

// synthRouting returns the routing preset of a model lesfarm synth wrote
// (model.SynthRoutingKey, uniform when absent), or "" for any other model.
func synthRouting(path string) string {
	if !syntheticModel(path) {
		return ""
	}
	f, err := gguf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if r, err := f.String(model.SynthRoutingKey); err == nil {
		return r
	}
	return model.RoutingUniform
}
