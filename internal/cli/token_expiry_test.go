package cli_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestTokenCreateExpires: --expires sets the expiry of an API token and of
// a device credential, says it on create and shows it in list; a too short
// or negative one is a usage error.
func TestTokenCreateExpires(t *testing.T) {
	dbURL := testenv.MigratedPostgresURL(t)
	for _, bad := range []string{"10s", "-1h"} {
		if code, _, errOut := run(t, "token", "create", "--name", "ci", "--expires", bad, "--database-url", dbURL); code != 2 || !strings.Contains(errOut, "--expires") {
			t.Errorf("--expires %s: %d %q; want exit 2 naming --expires", bad, code, errOut)
		}
	}
	day := time.Now().UTC().Add(720 * time.Hour).Format("2006-01-02")
	if code, out, errOut := run(t, "token", "create", "--name", "ci", "--expires", "720h", "--database-url", dbURL); code != 0 || !strings.HasPrefix(out, "lft_") || !strings.Contains(errOut, "expires "+day) {
		t.Fatalf("create --expires: %d %q %q; want an expiry on %s", code, out, errOut, day)
	}
	if code, out, errOut := run(t, "token", "create", "--device", "dev-a", "--expires", "24h", "--database-url", dbURL); code != 0 || !strings.HasPrefix(out, "lfd_") || !strings.Contains(errOut, ", expires ") {
		t.Fatalf("create --device --expires: %d %q %q", code, out, errOut)
	}
	if code, out, _ := run(t, "token", "list", "--database-url", dbURL); code != 0 || !regexp.MustCompile(`EXPIRES`).MatchString(out) || !strings.Contains(out, day+"T") {
		t.Fatalf("list does not show the expiry: %q", out)
	}
	if code, out, _ := run(t, "token", "list", "--devices", "--database-url", dbURL); code != 0 || !regexp.MustCompile(`(?m)^1\s+dev-a\s+lfd_\S+\s+\S+\s+-\s+\d{4}-\d\d-\d\dT\S+Z\s+-\s*$`).MatchString(out) {
		t.Fatalf("list --devices does not show the expiry: %q", out)
	}
}
