package spec

import (
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// deviceClock is an emulated device's clock (expert.DeviceClock) that a
// target's experts run on: decode is reported in that clock, so the
// controller weighs passes by it too.
type deviceClock interface {
	// VerifyNext marks the next pass of several positions as decode.
	VerifyNext()
	// Totals is the clock's decode compute and stall so far.
	Totals() (compute, stall time.Duration, ok bool)
}

// meter measures the cost of a round's passes in the clock the
// controller weighs: the device clock where the target's experts run on
// one (device time: its compute per the profile and its emulated flash
// stalls, the figures the decode is reported in), otherwise the process
// CPU time plus the store's read stall (host CPU, not wall time: on a
// shared machine wall time also counts other processes' turns).
//
// Reading the process CPU clock is a system call (about 2.5 µs on the
// development VM, against a 600 µs decode step), so a pass is only metered
// when the controller wants its sample (controller.wants): a plain round
// of a settled controller, or of a fixed k whose drafter had nothing to
// propose, costs what a plain decode step costs.
type meter struct {
	dev    deviceClock
	c0, s0 time.Duration
	t0     time.Time
	on     bool
}

// newMeter returns the meter of a target whose experts come from src:
// on the device clock of an expert store with device time, or of a source
// that keeps a device clock itself; else on the host.
func newMeter(src any) meter {
	switch c := src.(type) {
	case interface{ Clock() *expert.DeviceClock }:
		if d := c.Clock(); d != nil {
			return meter{dev: d}
		}
	case deviceClock:
		if _, _, ok := c.Totals(); ok {
			return meter{dev: c}
		}
	}
	return meter{}
}

// begin starts metering a pass of positions when want (a device clock
// always meters: reading it costs no system call); it marks a verify pass
// as decode on a device clock.
func (m *meter) begin(positions int, want bool) {
	m.t0 = time.Now()
	if m.dev != nil {
		if positions > 1 {
			m.dev.VerifyNext()
		}
		m.c0, m.s0, _ = m.dev.Totals()
		m.on = true
		return
	}
	m.on = want
	if want {
		m.c0 = cputime.Process()
	}
}

// end ends the pass and returns its wall time.
func (m *meter) end() time.Duration {
	wall := time.Since(m.t0)
	if m.on {
		if m.dev != nil {
			c, s, _ := m.dev.Totals()
			m.c0, m.s0 = c-m.c0, s-m.s0
		} else {
			m.c0 = cpuSince(m.c0, m.t0)
		}
	}
	return wall
}

// cost returns the ended pass's cost in the controller's clock and its
// stall there (hostStall is the store's wait for reads during the pass,
// added to CPU time on the host); cost is -1 when the pass was not
// metered.
func (m *meter) cost(hostStall time.Duration) (cost, stall time.Duration) {
	switch {
	case !m.on:
		return -1, hostStall
	case m.dev != nil:
		return m.c0 + m.s0, m.s0
	}
	return m.c0 + hostStall, hostStall
}
