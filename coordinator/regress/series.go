package regress

import (
	"fmt"
	"strings"
)

// SeriesKey identifies one series of results: the same benchmark
// configuration, measured the same way, on the same kind of device, with
// the same runtime build lineage. Points of different keys are never
// compared directly; cross-device analysis compares keys that differ only
// in device model, OS or emulation.
type SeriesKey struct {
	Suite       string `json:"suite"`
	Config      string `json:"config"`
	Metric      string `json:"metric"`
	DeviceModel string `json:"device_model"`
	OSMajor     string `json:"os_major"` // e.g. "android 14", "ios 18"
	Lineage     string `json:"lineage"`  // runtime build lineage, e.g. "main"
	Emulated    bool   `json:"emulated"`
}

// String formats the key as "suite/config/metric/device/os/lineage[/emulated]",
// the form used in CSV files and logs.
func (k SeriesKey) String() string {
	s := strings.Join([]string{k.Suite, k.Config, k.Metric, k.DeviceModel, k.OSMajor, k.Lineage}, "/")
	if k.Emulated {
		s += "/emulated"
	}
	return s
}

// Platform returns the platform part of the OS, "android" for
// "android 14", lower-cased; emulated devices are their own platform
// prefix so a regression only in emulation is not called global.
func (k SeriesKey) Platform() string {
	p := strings.ToLower(strings.TrimSpace(k.OSMajor))
	if i := strings.IndexAny(p, " /-_0123456789"); i > 0 {
		p = p[:i]
	}
	if p == "" {
		p = "unknown"
	}
	if k.Emulated {
		p = "emulated-" + p
	}
	return p
}

// ParseSeriesKey parses the String form back. It returns an error naming
// the problem for anything that is not 6 or 7 slash-separated fields.
func ParseSeriesKey(s string) (SeriesKey, error) {
	parts := strings.Split(s, "/")
	var k SeriesKey
	switch {
	case len(parts) == 7 && parts[6] == "emulated":
		k.Emulated = true
	case len(parts) == 6:
	default:
		return k, fmt.Errorf("series key %q: want suite/config/metric/device/os/lineage[/emulated]", s)
	}
	k.Suite, k.Config, k.Metric, k.DeviceModel, k.OSMajor, k.Lineage = parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]
	return k, nil
}
