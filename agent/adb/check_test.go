package adb

import "github.com/lesfarm/lesfarm/protocol"

type phoneStateCheck struct{ s *protocol.PhoneSnapshot }

func (c *phoneStateCheck) validate() error {
	p := protocol.PhoneState{Clocks: protocol.ClocksFree, Start: c.s}
	return p.Validate()
}
