package expert

import "time"

// VerifyNext marks the next forward pass, of several positions, as a
// decode-phase pass: a speculative verify. Device time then counts it as
// decode, priced as the clock prices any batched pass (each segment's
// weights once with its FLOPs for every position, each expert of the
// pass's union once, and the output head for every position's logits), and
// its stalls count as decode stall. Without the mark a pass of several
// positions is prefill, which the decode totals leave out. On nil (no
// device time) it does nothing.
func (d *DeviceClock) VerifyNext() {
	if d == nil {
		return
	}
	d.store.Lock()
	d.verifyNext = true
	d.store.Unlock()
}

// Totals returns the clock's decode compute and stall so far (Stats'
// DeviceCompute and DeviceStall, without the rest of Stats), and false on
// nil (no device time). A speculative decoder weighs its passes by their
// difference before and after, the clock its decode is reported in.
func (d *DeviceClock) Totals() (compute, stall time.Duration, ok bool) {
	if d == nil {
		return 0, 0, false
	}
	_, dev, st := d.totals()
	return dev, st, true
}

// PrefillTotals returns the clock's prefill time so far (Stats'
// DevicePrefill) and the stall within it, and false on nil (no device
// time).
func (d *DeviceClock) PrefillTotals() (total, stall time.Duration, ok bool) {
	if d == nil {
		return 0, 0, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prefill, d.prefillStall, true
}

// SetServiceTimes replaces the measured table the clock's flash prices
// reads by (the twin check re-measures the disk before each repetition,
// so a twin is priced by the disk of that minute). Reads in flight keep
// their progress and are priced by st from now on. It returns false,
// changing nothing, on nil, when the profile has no measured table, or
// when st is nil.
func (d *DeviceClock) SetServiceTimes(st *ServiceTimes) bool {
	if d == nil || d.ps == nil || st == nil {
		return false
	}
	d.store.Lock()
	defer d.store.Unlock()
	d.ps.advance(d.now)
	d.ps.st = st
	d.ps.plan()
	return true
}
