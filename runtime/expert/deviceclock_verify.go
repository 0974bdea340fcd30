package expert

import "time"

// VerifyNext marks the next forward pass, of several positions, as a
// decode-phase pass: a speculative verify. Device time then counts it as
// decode, priced as the clock prices any batched pass (each segment's
// weights once with its FLOPs for every position, each expert of the
// pass's union once, and the output head for every position's logits), and
// its stalls count as decode stall. Without the mark a pass of several
// positions is prefill, which the decode totals leave out. Without device
// time it does nothing.
func (s *Store) VerifyNext() {
	if s.clock == nil {
		return
	}
	s.mu.Lock()
	s.clock.verifyNext = true
	s.mu.Unlock()
}

// DeviceTotals returns the device clock's decode compute and stall so far
// (Stats' DeviceCompute and DeviceStall, without the rest of Stats), and
// false without device time. A speculative decoder weighs its passes by
// their difference before and after, the clock its decode is reported in.
func (s *Store) DeviceTotals() (compute, stall time.Duration, ok bool) {
	if s.clock == nil {
		return 0, 0, false
	}
	_, dev, st := s.clock.totals()
	return dev, st, true
}
