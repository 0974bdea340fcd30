package bench

import (
	"context"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/spec"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// repeatDrafter proposes the sequence's last token k times: every round
// verifies k+1 positions (the target rejects most of them; the output is
// still exact).
type repeatDrafter struct{ out []int }

func (d *repeatDrafter) Name() string        { return "repeat" }
func (d *repeatDrafter) Start(int) error     { return nil }
func (d *repeatDrafter) Rewind(int)          {}
func (d *repeatDrafter) Deterministic() bool { return true }
func (d *repeatDrafter) Propose(_ context.Context, seq []int, k int, _ *sample.Sampler, _ [][]float64) ([]int, error) {
	d.out = d.out[:0]
	for range k {
		d.out = append(d.out, seq[len(seq)-1])
	}
	return d.out, nil
}

// TestVerifyPassesInDeviceTime: in device time a speculative verify pass is
// decode and costs device time (the weights it reads, its experts' union,
// its stalls). Before, the device clock counted only one-position passes,
// so a verify was free and the +speculative row's device tok/s counted
// tokens without the passes that produced them. Each verify pass reads at
// least a plain pass's weights, so its device compute per round is at
// least the plain decode's per pass (the clock is the profile's, not the
// host's: no slack for noise is needed).
func TestVerifyPassesInDeviceTime(t *testing.T) {
	p := writeSynth(t, model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 64, Type: tensor.F32, Seed: 5})
	prof, err := profile.Parse([]byte(hostIndependenceProfile))
	if err != nil {
		t.Fatal(err)
	}
	ses, err := les.Open(les.Config{Model: p, Mode: expert.Scheduled, Budget: units.Budget{Fraction: 0.5}, Profile: prof, DeviceTime: true, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ses.Close()
	one := les.RepParams{Prompts: [][]int{{3, 1, 4, 1, 5}}, MaxTokens: 24}
	plain, err := ses.Repetition(context.Background(), one)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := spec.NewWithDrafter(ses.Model, &repeatDrafter{})
	if err != nil {
		t.Fatal(err)
	}
	sp := &les.Speculative{Dec: dec, K: 4}
	ses.SetDecoder(sp)
	got, err := ses.Repetition(context.Background(), one)
	if err != nil {
		t.Fatal(err)
	}
	if !got.DeviceTime || plain.Decode <= 0 || sp.Last.Rounds == 0 || sp.Last.VerifyPositions <= sp.Last.Rounds {
		t.Fatalf("plain %+v, speculative %+v, stats %+v", plain, got, sp.Last)
	}
	perToken := plain.Expert.DeviceCompute / plainDecodePasses(plain)
	perRound := got.Expert.DeviceCompute / timeCount(sp.Last.Rounds)
	t.Logf("device time: plain %v per pass, verify %v per round (%d rounds, %d positions)", perToken, perRound, sp.Last.Rounds, sp.Last.VerifyPositions)
	if perRound < perToken || got.Decode < got.Expert.DeviceCompute {
		t.Fatalf("a verify round costs %v of device compute, less than a plain pass's %v: verify passes are not counted", perRound, perToken)
	}
}

func plainDecodePasses(r les.Rep) time.Duration { return timeCount(r.DecodeTokens) }

func timeCount(n int) time.Duration { return time.Duration(max(n, 1)) }
