package fit

import (
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
)

func ptr[T any](v T) *T { return &v }

func TestMatch(t *testing.T) {
	pixel := &Device{ID: "p", Platform: "android", DeviceModel: "Pixel 8", RAMBytes: 8 << 30, Labels: map[string]string{"pool": "ci", "rack": "1"}}
	emu := &Device{ID: "e", Platform: "linux", DeviceModel: "host", RAMBytes: 4 << 30, Emulated: true}
	tests := []struct {
		name   string
		sel    jobs.Selector
		dev    *Device
		want   bool
		reason string
	}{
		{"empty selector", jobs.Selector{}, pixel, true, ""},
		{"platform", jobs.Selector{Platform: "android"}, pixel, true, ""},
		{"wrong platform", jobs.Selector{Platform: "ios"}, pixel, false, "platform android is not ios"},
		{"model case-insensitive", jobs.Selector{DeviceModel: "pixel 8"}, pixel, true, ""},
		{"wrong model", jobs.Selector{DeviceModel: "iPhone 15"}, pixel, false, "device model Pixel 8 is not iPhone 15"},
		{"enough RAM", jobs.Selector{MinRAM: 8 << 30}, pixel, true, ""},
		{"too little RAM", jobs.Selector{MinRAM: 12 << 30}, pixel, false, "RAM 8GiB is below 12GiB"},
		{"labels subset", jobs.Selector{Labels: map[string]string{"pool": "ci"}}, pixel, true, ""},
		{"label value differs", jobs.Selector{Labels: map[string]string{"pool": "lab"}}, pixel, false, "label pool=lab missing"},
		{"label absent", jobs.Selector{Labels: map[string]string{"gpu": "yes"}}, emu, false, "label gpu=yes missing"},
		{"real only", jobs.Selector{Emulated: ptr(false)}, emu, false, "device is emulated"},
		{"emulated only", jobs.Selector{Emulated: ptr(true)}, pixel, false, "device is not emulated"},
		{"emulated ok", jobs.Selector{Emulated: ptr(true)}, emu, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Match(&tt.sel, tt.dev)
			if got != tt.want || reason != tt.reason {
				t.Fatalf("Match = %v %q, want %v %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}
