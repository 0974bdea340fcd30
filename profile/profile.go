// Package profile hands the runtime the device profiles that package spec
// parses: Load and Parse read a built-in or a YAML file with spec and
// convert it into an expert.Profile. It is the edge between profiles as
// data (spec, which the coordinator uses without the runtime) and the
// runtime (std and x/sys only, so no YAML parser): the command line and
// the agent call it.
package profile

import (
	"fmt"

	"github.com/lesfarm/lesfarm/profile/spec"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// Builtin returns the names of the embedded profiles, sorted.
func Builtin() []string { return spec.Builtin() }

// Load returns the built-in profile called name, or else parses the
// YAML file at that path.
func Load(name string) (*expert.Profile, error) {
	p, err := spec.Load(name)
	if err != nil {
		return nil, err
	}
	return Expert(p)
}

// Parse parses and validates a profile in YAML. Unknown keys are
// errors so a typo cannot silently fall back to a default.
func Parse(data []byte) (*expert.Profile, error) {
	p, err := spec.Parse(data)
	if err != nil {
		return nil, err
	}
	return Expert(p)
}

// Expert converts a validated profile into the runtime's form. It fails
// only where spec's validation and the runtime's disagree, which the
// tests rule out for every profile spec accepts.
func Expert(p *spec.Profile) (*expert.Profile, error) {
	q := &expert.Profile{Name: p.Name, Description: p.Description, Bandwidth: p.Bandwidth, Latency: p.Latency,
		MaxInFlight: p.MaxInFlight, RAMBudget: p.RAMBudget, PageSize: p.PageSize, ReadAhead: p.ReadAhead}
	if c := p.Compute; c != nil {
		q.Compute = &expert.Compute{WeightBandwidth: c.WeightBandwidth, Throughput: c.Throughput, PageCost: c.PageCost}
	}
	if s := p.Service; s != nil {
		st, err := expert.NewServiceTimes(s.Sizes, s.QueueDepths, s.Times)
		if err == nil && s.Patterns != nil {
			st, err = st.WithPatterns(s.Patterns)
		}
		if err != nil {
			return nil, fmt.Errorf("profile %s: service_times: %w", p.Name, err)
		}
		q.Service = st
	}
	return q, nil
}
