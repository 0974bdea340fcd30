package jobs

import (
	"embed"
	"fmt"
	"path"
	"sort"
	"strings"
)

//go:embed suites/*.yaml
var suiteFS embed.FS

// SuiteCalibrate is the suite whose runs measure the device instead of
// benchmarking a mode (lesfarm profile measure on the device, its model as
// the compute reference); the agent uploads the measured profile to the
// coordinator, from which `lesfarm agent --profile twin:ID` emulates it.
const SuiteCalibrate = "calibrate"

// Builtin returns a fresh copy of a built-in suite's spec ("smoke",
// "les-ladder"), parsed and validated.
func Builtin(name string) (*Spec, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("jobs: no built-in suite %q (have %s)", clip(name), strings.Join(BuiltinNames(), ", "))
	}
	data, err := suiteFS.ReadFile("suites/" + name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("jobs: no built-in suite %q (have %s)", clip(name), strings.Join(BuiltinNames(), ", "))
	}
	s, err := Parse(data, FormatYAML)
	if err != nil {
		return nil, fmt.Errorf("jobs: built-in suite %s: %w", name, err)
	}
	return s, nil
}

// BuiltinNames lists the built-in suites, sorted.
func BuiltinNames() []string {
	ents, _ := suiteFS.ReadDir("suites")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(path.Base(e.Name()), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// BuiltinSource returns the YAML text of a built-in suite.
func BuiltinSource(name string) ([]byte, bool) {
	if !nameRE.MatchString(name) {
		return nil, false
	}
	data, err := suiteFS.ReadFile("suites/" + name + ".yaml")
	return data, err == nil
}
