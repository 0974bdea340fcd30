package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveSecret: a device secret comes from --device-token, --device-token-file or
// the environment, so it need not show in ps.
func TestResolveSecret(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("lfd_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	t.Setenv("LESFARM_TEST_SECRET", "lfd_from_env")
	tests := []struct {
		value, file, env, want, err string
	}{
		{"", file, "LESFARM_TEST_SECRET", "lfd_from_file", ""},
		{"lfd_flag", "", "LESFARM_TEST_SECRET", "lfd_flag", ""},
		{"", "", "LESFARM_TEST_SECRET", "lfd_from_env", ""},
		{"", "", "LESFARM_TEST_UNSET", "", ""},
		{"lfd_flag", file, "LESFARM_TEST_SECRET", "", "not both"},
		{"", filepath.Join(dir, "missing"), "", "", "--device-token-file"},
		{"", empty, "", "", "is empty"},
	}
	for _, tc := range tests {
		got, err := resolveSecret(tc.value, tc.file, tc.env, "device-token")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc, got, err, tc.want)
		}
	}
}
