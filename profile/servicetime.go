package profile

import (
	"fmt"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// serviceYAML is the file form of a measured service-time table
// (expert.ServiceTimes), as lesfarm profile measure writes it:
//
//	service_times:
//	  queue_depths: [1, 2, 4]
//	  reads:
//	    - {size: 4KiB, times: [80us, 85us, 110us]}
//	    - {size: 864KiB, pattern: layer, times: [1ms, 1.9ms, 3.5ms]}
//
// Each row is one read size; its times are the mean time per read at each
// queue depth, and its pattern how the reads were issued
// (expert.PatternRandom, the default, PatternLayer or PatternPages).
type serviceYAML struct {
	QueueDepths []int            `yaml:"queue_depths,flow"`
	Reads       []serviceRowYAML `yaml:"reads"`
}

type serviceRowYAML struct {
	Size string `yaml:"size"`
	// Pattern is how profile measure read the row (random, layer or
	// pages); absent: random.
	Pattern string   `yaml:"pattern,omitempty"`
	Times   []string `yaml:"times,flow"`
}

// maxServiceRows bounds the rows and columns parsed (expert.NewServiceTimes
// enforces its own limit too).
const maxServiceRows = 64

// parseServiceTimes parses a profile's service_times section.
func parseServiceTimes(y *serviceYAML) (*expert.ServiceTimes, error) {
	if len(y.Reads) > maxServiceRows {
		return nil, fmt.Errorf("has %d read sizes; at most %d", len(y.Reads), maxServiceRows)
	}
	sizes := make([]int64, len(y.Reads))
	times := make([][]time.Duration, len(y.Reads))
	patterns := make([]string, len(y.Reads))
	anyPattern := false
	for i, r := range y.Reads {
		patterns[i] = expert.PatternRandom
		if r.Pattern != "" {
			if !expert.ValidPattern(r.Pattern) {
				return nil, fmt.Errorf("reads[%d] (size %s): pattern %q is not %s, %s or %s", i, r.Size, r.Pattern, expert.PatternRandom, expert.PatternLayer, expert.PatternPages)
			}
			patterns[i], anyPattern = r.Pattern, true
		}
		n, err := units.ParseSize(r.Size)
		if err != nil {
			return nil, fmt.Errorf("reads[%d]: size: %w", i, err)
		}
		sizes[i] = n
		if len(r.Times) > maxServiceRows {
			return nil, fmt.Errorf("reads[%d]: %d times; at most %d", i, len(r.Times), maxServiceRows)
		}
		for _, t := range r.Times {
			d, err := time.ParseDuration(strings.TrimSpace(t))
			if err != nil {
				return nil, fmt.Errorf("reads[%d] (size %s): time %q is not a duration (e.g. 120us)", i, r.Size, t)
			}
			times[i] = append(times[i], d)
		}
	}
	st, err := expert.NewServiceTimes(sizes, y.QueueDepths, times)
	if err != nil || !anyPattern {
		return st, err
	}
	return st.WithPatterns(patterns)
}
