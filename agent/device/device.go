// Package device reads the fingerprint of the machine an agent runs on:
// platform, OS, device model, SoC/CPU, cores, RAM, free storage and build,
// plus thermal and battery state where the platform lets an unprivileged
// process read them.
//
// Linux and Android are read from /proc and /sys (and Android's build
// properties); darwin and iOS from sysctl. A field that cannot be read is
// absent (nil or empty, omitted from JSON), never a made-up zero, so the
// coordinator can tell "0 %" from "unknown". The fingerprint is the wire
// type protocol.Fingerprint: there is no second device-side copy.
package device

import (
	"runtime"
	"runtime/debug"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
)

// Options tune Read. The zero value reads the real system.
type Options struct {
	// Root prefixes every /proc, /sys and /system path; tests point it at a
	// fake tree. Empty means "/".
	Root string
	// StoragePath is the directory whose filesystem's free space is
	// reported; empty means the current directory.
	StoragePath string
	// Profile, when set, marks the fingerprint as an emulated device with
	// this storage profile name.
	Profile string
	// RAMBytes, when > 0, overrides the RAM reported (an emulated device's
	// memory budget).
	RAMBytes int64
	// Goos overrides runtime.GOOS (tests of another platform's reader).
	Goos string
}

// Read returns the fingerprint of this device, in the wire type the
// coordinator receives. It never fails: what cannot
// be read is left absent.
func Read(opt Options) *protocol.Fingerprint {
	goos := opt.Goos
	if goos == "" {
		goos = runtime.GOOS
	}
	fp := &protocol.Fingerprint{
		Platform:  goos,
		Arch:      runtime.GOARCH,
		Cores:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
	}
	fp.AgentBuild = Build()
	fp.RuntimeBuild = fp.AgentBuild
	switch goos {
	case "linux", "android":
		readLinux(fp, opt)
	case "darwin", "ios":
		readDarwin(fp, opt)
	}
	if v, ok := freeStorage(opt.StoragePath); ok {
		fp.FreeStorageBytes = &v
	}
	st := ReadState(opt)
	fp.State = &st
	if opt.RAMBytes > 0 {
		v := opt.RAMBytes
		fp.RAMBytes = &v
		if fp.RAMAvailableBytes != nil && *fp.RAMAvailableBytes > v {
			fp.RAMAvailableBytes = &v
		}
	}
	if opt.Profile != "" {
		fp.Emulated = true
		fp.Profile = opt.Profile
		fp.HostModel = fp.DeviceModel
		if fp.HostModel == "" {
			fp.HostModel = fp.CPUModel
		}
		fp.DeviceModel = "emulated:" + opt.Profile
	}
	return fp
}

// ReadState returns the current thermal and battery state.
func ReadState(opt Options) protocol.DeviceState {
	goos := opt.Goos
	if goos == "" {
		goos = runtime.GOOS
	}
	st := protocol.DeviceState{ReadAt: time.Now().UTC()}
	switch goos {
	case "linux", "android":
		readLinuxState(&st, opt.Root)
	}
	return st
}

// Build returns the module version and VCS revision of this binary, e.g.
// "v0.0.0 rev 1a2b3c4d5e6f+dirty". It returns "devel" when the toolchain
// recorded nothing.
func Build() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			rev := s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
			v += " rev " + rev
		}
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+dirty"
		}
	}
	return v
}

func ptr[T any](v T) *T { return &v }
