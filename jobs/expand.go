package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
)

// Config is one point of a job's matrix: what one benchmark execution runs.
type Config struct {
	// Index is the position of the config in the expansion, from 0.
	Index int `json:"index"`
	// Key identifies the config within its job, stable across runs and
	// builds, e.g. "lookahead/budget=25%/profile=phone-flagship". Regression
	// series are keyed by it.
	Key     string `json:"key"`
	Mode    Mode   `json:"mode"`
	Budget  Budget `json:"budget,omitzero"`
	Profile string `json:"profile,omitempty"`
}

// configKey builds Config.Key.
func configKey(m Mode, b Budget, profile string) string {
	var sb strings.Builder
	sb.WriteString(string(m))
	if !b.IsZero() {
		sb.WriteString("/budget=")
		sb.WriteString(b.String())
	}
	if profile != "" {
		sb.WriteString("/profile=")
		sb.WriteString(profile)
	}
	return sb.String()
}

// Expand returns the configs of the matrix in a deterministic order: modes
// outermost, then budgets, then profiles, each in the order written. The
// resident mode takes no budget and expands once per profile. The spec
// should be valid; Expand does not validate it.
func (s *Spec) Expand() []Config {
	m := &s.Matrix
	profiles := m.Profiles
	if len(profiles) == 0 {
		profiles = []string{""}
	}
	budgets := m.Budgets
	if len(budgets) == 0 {
		budgets = []Budget{{}}
	}
	out := make([]Config, 0, m.count())
	for _, md := range m.Modes {
		bs := budgets
		if !md.NeedsBudget() {
			bs = []Budget{{}}
		}
		for _, b := range bs {
			for _, p := range profiles {
				out = append(out, Config{Index: len(out), Key: configKey(md, b, p), Mode: md, Budget: b, Profile: p})
			}
		}
	}
	return out
}

// Fingerprint returns a hex sha256 of the spec's canonical JSON form: two
// specs with the same fingerprint run the same benchmark. The coordinator
// stores it to deduplicate specs.
func (s *Spec) Fingerprint() string {
	b, err := s.MarshalCanonical()
	if err != nil {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
