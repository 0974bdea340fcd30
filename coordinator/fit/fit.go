// Package fit decides whether a device can run a run: its job's selector
// (platform, model, RAM, emulation, labels) and what its build asks of a
// device (an executable for the device's platform, or the very agent that
// embeds it). It is pure, with no I/O, and shared by the scheduler's
// placement (coordinator/scheduler) and the store's waiting reasons, so
// that both judge a device by one definition. The store's SQL prefilters
// mirror Match and BuildMatch; these are the final word.
package fit

import (
	"slices"
	"strings"

	"github.com/lesfarm/lesfarm/jobs"
)

// Device is what placement knows about an idle device.
type Device struct {
	ID          string
	Platform    string
	DeviceModel string
	RAMBytes    int64
	Emulated    bool
	// Labels are the effective labels (agent labels overlaid with operator
	// labels).
	Labels map[string]string
	// ExecPlatform is GOOS/GOARCH of the build executables the device's
	// agent runs ("" when it runs its embedded build only), and
	// EmbeddedBuild the id of its embedded build.
	ExecPlatform, EmbeddedBuild string
}

// Match reports whether d satisfies sel, and when it does not, a short
// reason naming the first failed condition.
func Match(sel *jobs.Selector, d *Device) (bool, string) {
	if sel.Platform != "" && sel.Platform != d.Platform {
		return false, "platform " + d.Platform + " is not " + sel.Platform
	}
	if sel.DeviceModel != "" && !strings.EqualFold(sel.DeviceModel, d.DeviceModel) {
		return false, "device model " + d.DeviceModel + " is not " + sel.DeviceModel
	}
	if sel.MinRAM > 0 && d.RAMBytes < int64(sel.MinRAM) {
		return false, "RAM " + jobs.ByteSize(d.RAMBytes).String() + " is below " + sel.MinRAM.String()
	}
	if sel.Emulated != nil && *sel.Emulated != d.Emulated {
		if d.Emulated {
			return false, "device is emulated"
		}
		return false, "device is not emulated"
	}
	for k, v := range sel.Labels {
		if got, ok := d.Labels[k]; !ok || got != v {
			return false, "label " + k + "=" + v + " missing"
		}
	}
	return true, ""
}

// BuildNeeds is what a registered build asks of a device: an agent that
// executes one of its executables' platforms, or, for an embedded build
// (an agent's own runtime), the very agent that embeds it.
type BuildNeeds struct {
	Embedded  bool
	Platforms []string
}

// BuildMatch reports whether d can run a run of build with needs, and when
// it cannot, a short reason. An agent never runs a build it was not asked
// for, so this is a hard constraint like the selector.
func BuildMatch(build string, needs *BuildNeeds, d *Device) (bool, string) {
	switch {
	case needs == nil:
		return true, ""
	case needs.Embedded:
		if d.EmbeddedBuild == build {
			return true, ""
		}
		return false, "build " + build + " is another agent's embedded runtime"
	case d.ExecPlatform == "":
		return false, "the device runs its embedded build only, build " + build + " is an executable"
	case !slices.Contains(needs.Platforms, d.ExecPlatform):
		return false, "build " + build + " has no executable for " + d.ExecPlatform + " (has " + strings.Join(needs.Platforms, ", ") + ")"
	}
	return true, ""
}
