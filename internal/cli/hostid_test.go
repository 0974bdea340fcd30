package cli

import (
	"maps"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

func TestWithHostLabel(t *testing.T) {
	for _, tc := range []struct {
		name          string
		labels        map[string]string
		profile, host string
		want          map[string]string
	}{
		{"emulated gets the host", map[string]string{"pool": "ci"}, "phone-mid", "h1", map[string]string{"pool": "ci", store.HostLabel: "h1"}},
		{"real device keeps its labels", map[string]string{"pool": "ci"}, "", "h1", map[string]string{"pool": "ci"}},
		{"operator's host label wins", map[string]string{store.HostLabel: "rack-2"}, "phone-mid", "h1", map[string]string{store.HostLabel: "rack-2"}},
		{"opted out", nil, "phone-mid", "none", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := maps.Clone(tc.labels)
			got := withHostLabel(tc.labels, tc.profile, tc.host)
			if !maps.Equal(got, tc.want) {
				t.Errorf("withHostLabel = %v, want %v", got, tc.want)
			}
			if !maps.Equal(in, tc.labels) {
				t.Errorf("input labels modified: %v", tc.labels)
			}
		})
	}
	if id := machineHostID(); id == "" {
		t.Error("machineHostID is empty")
	}
}
