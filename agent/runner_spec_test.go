package agent

import (
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
)

// TestRunnerSpeculativeMode: the les-ladder suite's speculative mode runs
// speculative decoding on the scheduled store and reports like every mode
// (decode and prefill rates, streamed expert bytes).
func TestRunnerSpeculativeMode(t *testing.T) {
	path := trainedModel(t)
	spec := smokeSpec(t)
	spec.Repetitions, spec.Warmup = 1, 0
	configs := spec.Expand()
	c := configs[len(configs)-1]
	c.Mode = jobs.ModeSpeculative
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}}
	res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: []jobs.Config{c}, ModelPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Error != "" || !res[0].Valid || res[0].DecodeTPS.Mean <= 0 || (!raceEnabled && res[0].BytesPerToken <= 0) {
		t.Fatalf("speculative config: %+v", res)
	}
}
