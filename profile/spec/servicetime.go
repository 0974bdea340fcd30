package spec

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/units"
)

// serviceYAML is the file form of a measured service-time table
// (ServiceTable), as lesfarm profile measure writes it:
//
//	service_times:
//	  queue_depths: [1, 2, 4]
//	  reads:
//	    - {size: 4KiB, times: [80us, 85us, 110us]}
//	    - {size: 864KiB, pattern: layer, times: [1ms, 1.9ms, 3.5ms]}
//
// Each row is one read size; its times are the mean time per read at each
// queue depth, and its pattern how the reads were issued
// (PatternRandom, the default, PatternLayer or PatternPages).
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

// Limits of a service-time table (expert.NewServiceTimes checks the same).
const (
	maxServiceRows = 64
	maxServiceTime = 10 * time.Second
	maxServiceSize = 1 << 30
)

// parseServiceTimes parses a profile's service_times section.
func parseServiceTimes(y *serviceYAML) (*ServiceTable, error) {
	if len(y.Reads) > maxServiceRows {
		return nil, fmt.Errorf("has %d read sizes; at most %d", len(y.Reads), maxServiceRows)
	}
	sizes := make([]int64, len(y.Reads))
	times := make([][]time.Duration, len(y.Reads))
	patterns := make([]string, len(y.Reads))
	anyPattern := false
	for i, r := range y.Reads {
		patterns[i] = PatternRandom
		if r.Pattern != "" {
			if !validPattern(r.Pattern) {
				return nil, fmt.Errorf("reads[%d] (size %s): pattern %q is not %s, %s or %s", i, r.Size, r.Pattern, PatternRandom, PatternLayer, PatternPages)
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
	st := &ServiceTable{Sizes: sizes, QueueDepths: y.QueueDepths, Times: times}
	if err := st.validate(); err != nil {
		return nil, err
	}
	if anyPattern {
		st.Patterns = patterns
	}
	return st, nil
}

func validPattern(p string) bool {
	return p == PatternRandom || p == PatternLayer || p == PatternPages
}

// validate checks the table as expert.NewServiceTimes does (sizes and
// queue depths increasing and in range, one positive time per cell), so
// a table this package accepts the runtime accepts too, with the same
// messages.
func (s *ServiceTable) validate() error {
	sizes, depths, times := s.Sizes, s.QueueDepths, s.Times
	if len(sizes) == 0 || len(depths) == 0 {
		return errors.New("needs at least one read size and one queue depth")
	}
	if len(sizes) > maxServiceRows || len(depths) > maxServiceRows {
		return fmt.Errorf("has %d sizes and %d queue depths; at most %d of each", len(sizes), len(depths), maxServiceRows)
	}
	for j, q := range depths {
		if q < 1 || q > 1024 {
			return fmt.Errorf("queue depth %d must be between 1 and 1024", q)
		}
		if j > 0 && q <= depths[j-1] {
			return fmt.Errorf("queue depths must increase (%d after %d)", q, depths[j-1])
		}
	}
	for i, n := range sizes {
		if n < 512 || n > maxServiceSize {
			return fmt.Errorf("read size %d must be between 512 bytes and 1GiB", n)
		}
		if i > 0 && n <= sizes[i-1] {
			return fmt.Errorf("read sizes must increase (%d after %d)", n, sizes[i-1])
		}
		if len(times[i]) != len(depths) {
			return fmt.Errorf("size %d has %d times for %d queue depths", n, len(times[i]), len(depths))
		}
		for j, d := range times[i] {
			if d <= 0 || d > maxServiceTime {
				return fmt.Errorf("size %d at queue depth %d: time %v must be between 0 and 10s", n, depths[j], d)
			}
		}
	}
	return nil
}
