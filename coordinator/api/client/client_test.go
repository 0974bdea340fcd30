package client

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseSelector(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"", "<nil>", ""},
		{"all", "<nil>", ""},
		{"platform=Android,model=Pixel 8", "android|Pixel 8|0|map[]", ""},
		{"min_ram=8GiB,pool=ci,emulated=false", "||8589934592|map[pool:ci]", ""},
		{"platform", "", "not key=value"},
		{"emulated=maybe", "", "true or false"},
		{"min_ram=lots", "", "min_ram"},
		{"pool=a,pool=b", "", "twice"},
	}
	for _, tc := range tests {
		sel, err := ParseSelector(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		got := "<nil>"
		if sel != nil {
			got = sel.Platform + "|" + sel.DeviceModel + "|" + fmt.Sprint(int64(sel.MinRAM)) + "|" + fmtMap(sel.Labels)
		}
		if got != tc.want {
			t.Errorf("%q: %s, want %s", tc.in, got, tc.want)
		}
	}
}

func fmtMap(m map[string]string) string {
	if len(m) == 0 {
		return "map[]"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, k+":"+v)
	}
	return "map[" + strings.Join(parts, " ") + "]"
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"platform=android,model=Pixel 8", "min_ram=8GiB,pool=ci", "emulated=true", "=,=", ",,,", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil && sel != nil {
			t.Fatal("selector and error both returned")
		}
	})
}
