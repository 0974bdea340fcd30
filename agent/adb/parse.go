package adb

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/protocol"
)

// ParseDevices parses `adb devices` output: a "List of devices attached"
// header, then "SERIAL<tab>STATE" lines (the state may hold spaces: "no
// permissions (...)"). Daemon chatter ("* daemon started successfully")
// is skipped; output without the header is an error.
func ParseDevices(s string) ([]Device, error) {
	var out []Device
	header := false
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, "\r ")
		switch {
		case line == "" || strings.HasPrefix(line, "*"):
			continue
		case strings.HasPrefix(line, "List of devices"):
			header = true
			continue
		case !header:
			continue
		}
		serial, state, ok := strings.Cut(line, "\t")
		if !ok {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			serial, state = f[0], strings.Join(f[1:], " ")
		}
		serial, state = strings.TrimSpace(serial), strings.TrimSpace(state)
		if serial == "" || len(serial) > 128 || strings.ContainsAny(serial, " '\"\\") {
			continue
		}
		out = append(out, Device{Serial: serial, State: state})
	}
	if !header {
		return nil, fmt.Errorf("adb devices: unexpected output %q", clip(s, 120))
	}
	return out, nil
}

// ParseProps parses getprop output ("[key]: [value]" lines). Output from
// which no property parses is an error naming its start, so that garbage
// never becomes an empty fingerprint.
func ParseProps(s string) (map[string]string, error) {
	props := device.ParseGetprop(s)
	if len(props) == 0 {
		return nil, fmt.Errorf("getprop printed no [key]: [value] line (output starts %q)", clip(strings.TrimSpace(s), 80))
	}
	return props, nil
}

// sections splits a script's output at "@@name" lines.
func sections(s string) map[string]string {
	out := map[string]string{}
	name := ""
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "@@") {
			out[name] += b.String()
			b.Reset()
			name = t[2:]
			continue
		}
		b.WriteString(line)
	}
	out[name] += b.String()
	return out
}

// ParseDFAvailable parses `df -k PATH` output and returns the available
// bytes of its filesystem (the "Available" column of the last row; a row
// wrapped after a long filesystem name is joined).
func ParseDFAvailable(s string) (int64, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "Avail") {
		return 0, fmt.Errorf("df: unexpected output %q", clip(s, 120))
	}
	hdr := strings.Fields(lines[0])
	col := -1
	for i, h := range hdr {
		if strings.HasPrefix(h, "Avail") {
			col = i
		}
	}
	f := strings.Fields(strings.Join(lines[1:], " "))
	if col < 0 || len(f) <= col {
		return 0, fmt.Errorf("df: no Available column in %q", clip(s, 120))
	}
	kb, err := strconv.ParseInt(f[col], 10, 64)
	if err != nil || kb < 0 || kb > math.MaxInt64/1024 {
		return 0, fmt.Errorf("df: available %q is not a size", clip(f[col], 32))
	}
	return kb * 1024, nil
}

var cpuDir = regexp.MustCompile(`cpu(\d+)/cpufreq`)

// ParseCoreMax parses "PATH KHZ" lines of cpuinfo_max_freq files into
// each core's max kHz, in core order; unreadable lines are skipped.
func ParseCoreMax(s string) []int64 {
	m := map[int]int64{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		sub := cpuDir.FindStringSubmatch(f[0])
		khz, err := strconv.ParseInt(f[1], 10, 64)
		if sub == nil || err != nil || khz <= 0 {
			continue
		}
		n, err := strconv.Atoi(sub[1])
		if err != nil || n >= protocol.MaxPhoneCPUs*64 {
			continue
		}
		m[n] = khz
	}
	cores := make([]int, 0, len(m))
	for n := range m {
		cores = append(cores, n)
	}
	sort.Ints(cores)
	out := make([]int64, len(cores))
	for i, n := range cores {
		out[i] = m[n]
	}
	return out
}

// Battery is what ParseBattery reads from `dumpsys battery`.
type Battery struct {
	Percent  *float64
	TempC    *float64
	Charging *bool
}

// ParseBattery parses `dumpsys battery`: level and scale, temperature (in
// tenths of °C), status (2 charging, 5 full) and the powered lines.
// Missing or garbled values stay nil; output with none of them is an error.
func ParseBattery(s string) (Battery, error) {
	var b Battery
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			kv[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	num := func(k string) (float64, bool) {
		v, err := strconv.ParseFloat(kv[k], 64)
		return v, err == nil && !math.IsNaN(v) && !math.IsInf(v, 0)
	}
	if lvl, ok := num("level"); ok {
		scale, ok := num("scale")
		if !ok || scale <= 0 {
			scale = 100
		}
		if p := 100 * lvl / scale; p >= 0 && p <= 100 {
			b.Percent = &p
		}
	}
	if t, ok := num("temperature"); ok {
		if c := t / 10; c > -50 && c < 150 {
			b.TempC = &c
		}
	}
	charging, known := false, false
	if st, ok := num("status"); ok {
		charging, known = st == 2 || st == 5, true
	}
	for _, k := range []string{"ac powered", "usb powered", "wireless powered", "dock powered"} {
		if v, ok := kv[k]; ok {
			known = true
			if v == "true" {
				charging = true
			}
		}
	}
	if known {
		b.Charging = &charging
	}
	if b.Percent == nil && b.TempC == nil && b.Charging == nil {
		return b, fmt.Errorf("dumpsys battery: no level, temperature or status in %q", clip(strings.TrimSpace(s), 80))
	}
	return b, nil
}

// Thermal is what ParseThermal reads from `dumpsys thermalservice`.
type Thermal struct {
	// Status is the "Thermal Status" line (0-6), nil when absent.
	Status *int
	// Headroom is a "headroom" value where the service prints one.
	Headroom *float64
	// MaxTempC is the hottest Temperature{mValue=...} the HAL reports.
	MaxTempC *float64
}

var (
	thermalStatus = regexp.MustCompile(`(?i)thermal status:\s*(-?\d+)`)
	headroom      = regexp.MustCompile(`(?i)headroom[^0-9\-]{0,40}?(-?\d+(?:\.\d+)?)`)
	tempValue     = regexp.MustCompile(`mValue=(-?\d+(?:\.\d+)?)`)
)

// ParseThermal parses `dumpsys thermalservice`. Output with no status is
// an error (the service is missing before Android 10).
func ParseThermal(s string) (Thermal, error) {
	var t Thermal
	if m := thermalStatus.FindStringSubmatch(s); m != nil {
		if v, err := strconv.Atoi(m[1]); err == nil && v >= 0 && v <= 6 {
			t.Status = &v
		}
	}
	if m := headroom.FindStringSubmatch(s); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil && v > -100 && v < 100 {
			t.Headroom = &v
		}
	}
	for _, m := range tempValue.FindAllStringSubmatch(s, 256) {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil && v > -40 && v < 200 && (t.MaxTempC == nil || v > *t.MaxTempC) {
			t.MaxTempC = &v
		}
	}
	if t.Status == nil {
		return t, errors.New("dumpsys thermalservice: no Thermal Status line")
	}
	return t, nil
}

// ParseClusters parses the cpufreq part of the state script: per policy a
// "policy DIR" line, then "cpus", "gov", "cur", "max" and "tis KHZ TICKS"
// lines. Garbled values are left out.
func ParseClusters(s string) []protocol.CPUCluster {
	var out []protocol.CPUCluster
	var c *protocol.CPUCluster
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "policy" {
			if len(out) >= protocol.MaxPhoneClusters {
				break
			}
			out = append(out, protocol.CPUCluster{CPUs: []int{}})
			c = &out[len(out)-1]
			continue
		}
		if c == nil || len(f) < 2 {
			continue
		}
		switch f[0] {
		case "cpus":
			for _, x := range f[1:] {
				if n, err := strconv.Atoi(x); err == nil && n >= 0 && n < 4096 && len(c.CPUs) < protocol.MaxPhoneCPUs {
					c.CPUs = append(c.CPUs, n)
				}
			}
		case "gov":
			if len(f[1]) <= 64 {
				c.Governor = f[1]
			}
		case "cur", "max":
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || n < 0 {
				continue
			}
			if f[0] == "cur" {
				c.CurKHz = n
			} else {
				c.MaxKHz = n
			}
		case "tis":
			if len(f) != 3 || len(c.TimeInState) >= protocol.MaxTimeInStateFreqs {
				continue
			}
			k, err1 := strconv.ParseInt(f[1], 10, 64)
			t, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 == nil && err2 == nil && k >= 0 && t >= 0 {
				c.TimeInState = append(c.TimeInState, protocol.FreqTicks{KHz: k, Ticks: t})
			}
		}
	}
	return out
}

// ParseZones parses "zone TYPE MILLIDEGREES" lines and returns the hottest
// plausible zone in °C (nil when none).
func ParseZones(s string) *float64 {
	var hot *float64
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "zone" {
			continue
		}
		if v, ok := device.ParseTemp(f[2]); ok && (hot == nil || v > *hot) {
			hot = &v
		}
	}
	return hot
}
