package expert

import (
	"testing"
	"time"
)

// TestDeviceClockChargesEachPread: on the device clock an expert read in
// two preads (the compat layout: gate+up, then down) or three (an unpacked
// file) completes one profile latency later per extra pread than a packed
// blob's single read of the same bytes, since a worker issues them one
// after the other.
func TestDeviceClockChargesEachPread(t *testing.T) {
	const lat = 100 * time.Microsecond
	done := func(runs int, demand bool) time.Duration {
		d := &DeviceClock{prof: &Profile{Latency: lat, Bandwidth: 1e9}, batchN: 1}
		e := &entry{}
		e.spec.Store(!demand)
		d.issue(e, 1<<20, runs, demand)
		return e.devDone
	}
	for _, demand := range []bool{true, false} {
		one := done(1, demand)
		if want := lat + secs(float64(1<<20)/1e9); one != want {
			t.Fatalf("demand %v: one pread done at %v, want %v", demand, one, want)
		}
		for runs := 2; runs <= 3; runs++ {
			if got := done(runs, demand) - one; got != time.Duration(runs-1)*lat {
				t.Errorf("demand %v: %d preads finish %v after one, want %v", demand, runs, got, time.Duration(runs-1)*lat)
			}
		}
	}
	// The extra latency does not hold the flash: a second demanded read
	// issued at once transfers right after the first's bytes.
	d := &DeviceClock{prof: &Profile{Latency: lat, Bandwidth: 1e9}, batchN: 1}
	a, b := &entry{}, &entry{}
	d.issue(a, 1<<20, 2, true)
	d.issue(b, 1<<20, 1, true)
	xfer := secs(float64(1<<20) / 1e9)
	if want := lat + 2*xfer; b.devDone != want {
		t.Fatalf("second read done at %v, want %v (the first's extra latency must not occupy the flash)", b.devDone, want)
	}
}
