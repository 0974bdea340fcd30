//go:build linux

package les

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Pin locks the calling goroutine to its OS thread and restricts that
// thread to cpu (sched_setaffinity), so the token loop neither migrates
// between CPUs nor shares its thread. The returned function restores the
// thread's previous CPU set and unlocks it. Threads the Go runtime starts
// while the goroutine is locked do not inherit the mask (it creates them
// from its template thread).
func Pin(cpu int) (unpin func(), err error) {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("les: pin: reading the CPU set: %w", err)
	}
	if cpu < 0 || !old.IsSet(cpu) {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("les: pin: CPU %d is not one this process may run on (%s)", cpu, cpuList(old))
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("les: pin to CPU %d: %w", cpu, err)
	}
	return func() {
		_ = unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}, nil
}

// PinnedCPU returns the CPU the calling thread is restricted to, or -1
// when it may run on more than one.
func PinnedCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() != 1 {
		return -1
	}
	for i := range 1024 {
		if set.IsSet(i) {
			return i
		}
	}
	return -1
}

// DefaultPinCPU is the CPU --pin uses: the highest-numbered CPU the process
// may run on (CPU 0 tends to take the interrupts), or -1 if unknown.
func DefaultPinCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return -1
	}
	for i := 1023; i >= 0; i-- {
		if set.IsSet(i) {
			return i
		}
	}
	return -1
}

func cpuList(s unix.CPUSet) string {
	out := ""
	for i := range 1024 {
		if s.IsSet(i) {
			if out != "" {
				out += ","
			}
			out += fmt.Sprint(i)
		}
	}
	return "CPUs " + out
}
