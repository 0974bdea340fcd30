package model

import (
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestSequenceStateBytesMatchesState checks the header-only state size
// (what the agent's RAM check uses) against what a State really allocates,
// for two geometries.
func TestSequenceStateBytesMatchesState(t *testing.T) {
	for _, edit := range []func(*SynthConfig){
		func(c *SynthConfig) {},
		func(c *SynthConfig) { c.Layers, c.SSMGroups, c.SSMHeads, c.SSMState, c.ConvKernel = 5, 1, 3, 32, 3 },
	} {
		c := fixtureQwen35(tensor.F32)
		c.Layers = 4
		edit(&c)
		m, err := Load(writeSynth(t, c), Options{})
		if err != nil {
			t.Fatal(err)
		}
		g := m.Recurrent()
		wantLayers := 0
		for l := range c.Layers {
			if !IsFullAttention(l, 4) {
				wantLayers++
			}
		}
		if g.Layers != wantLayers || g.ConvChannels != (2*c.SSMGroups+c.SSMHeads)*c.SSMState {
			t.Fatalf("geometry %+v for %d recurrent layers", g, wantLayers)
		}
		st, err := m.NewState(32)
		if err != nil {
			t.Fatal(err)
		}
		var kv int64
		for i := range st.k {
			kv += 4 * int64(len(st.k[i])+len(st.v[i]))
		}
		if got, want := g.SequenceStateBytes(), st.StateBytes()-kv; got != want {
			t.Fatalf("SequenceStateBytes %d, the State holds %d recurrent bytes", got, want)
		}
		m.Close()
	}
	if n := (RecurrentGeometry{}).SequenceStateBytes(); n != 0 {
		t.Fatalf("no recurrent layers: %d bytes", n)
	}
}
