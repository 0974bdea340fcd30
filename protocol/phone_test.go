package protocol

import (
	"strings"
	"testing"
)

// TestPhoneStateValidate: a phone state with a known clock state and
// eviction passes; an unknown clock state or eviction, or a battery
// outside [0, 100], is refused with a line naming the field.
func TestPhoneStateValidate(t *testing.T) {
	pct := func(v float64) *float64 { return &v }
	tests := []struct {
		name    string
		ps      PhoneState
		wantErr string
	}{
		{"fadvise", PhoneState{Clocks: ClocksFixedPerformance, Eviction: EvictionFadvise}, ""},
		{"drop caches", PhoneState{Clocks: ClocksLocked, Eviction: EvictionDropCaches}, ""},
		{"none", PhoneState{Clocks: ClocksFree, Eviction: EvictionNone}, ""},
		{"older agent: no eviction", PhoneState{Clocks: ClocksFree}, ""},
		{"unknown eviction", PhoneState{Clocks: ClocksFree, Eviction: "purge"}, `eviction "purge" unknown`},
		{"unknown clocks", PhoneState{Clocks: "turbo"}, `clocks "turbo" unknown`},
		{"battery over 100", PhoneState{Clocks: ClocksFree, Start: &PhoneSnapshot{BatteryPercent: pct(101)}}, "phone_state.start: battery_percent 101"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ps.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
