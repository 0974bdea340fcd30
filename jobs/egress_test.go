package jobs

import (
	"errors"
	"testing"
)

func TestNormalizeEgressHost(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"Models.Lab", "models.lab"},
		{" mirror.lab:8080 ", "mirror.lab:8080"},
		{"[::1]:9000", "[::1]:9000"},
		{"::1", "[::1]"},
		{"10.0.0.7", "10.0.0.7"},
		{"http://x", ""},
		{"x/y", ""},
		{"u@x", ""},
		{"x:0", ""},
		{"x:65536", ""},
		{"x:", ""},
		{"", ""},
	}
	for _, tc := range tests {
		got, err := NormalizeEgressHost(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("NormalizeEgressHost(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizeEgressHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCheckEgress(t *testing.T) {
	t.Parallel()
	allowed := []string{"farm.lab:8080", "models.lab", "[::1]:9000"}
	tests := []struct {
		url string
		ok  bool
	}{
		{"http://farm.lab:8080/v1/artifacts/x", true},
		{"http://FARM.lab:8080/x", true},
		{"http://farm.lab/x", false}, // port 80
		{"https://farm.lab:8081/x", false},
		{"https://models.lab/x", true},
		{"http://models.lab:22/x", true}, // a host entry allows any port
		{"http://[::1]:9000/x", true},
		{"http://[::1]:9001/x", false},
		{"http://10.0.0.7:9200/", false},
		{"http://user:pw@farm.lab:8080/x", false},
		{"ftp://models.lab/x", false},
		{"models.lab/x", false},
		{"http:///x", false},
	}
	for _, tc := range tests {
		err := CheckEgress(tc.url, allowed)
		if (err == nil) != tc.ok {
			t.Errorf("CheckEgress(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrEgressDenied) {
			t.Errorf("CheckEgress(%q) = %v, not ErrEgressDenied", tc.url, err)
		}
	}
	if o := EgressOrigin("https://Farm.lab"); o != "farm.lab:443" {
		t.Errorf("EgressOrigin = %q", o)
	}
}
