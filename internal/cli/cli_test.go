package cli_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/internal/cli"
)

// run executes the CLI in-process and returns its exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitCodesAndHelp(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"version", []string{"version"}, 0, "lesfarm ", ""},
		{"root help", []string{"--help"}, 0, "Run 'lesfarm COMMAND --help'", ""},
		{"migrate help", []string{"migrate", "--help"}, 0, "session lock", ""},
		{"unknown flag", []string{"--bogus"}, 2, "", "unknown flag: --bogus"},
		{"unknown command", []string{"frobnicate"}, 2, "", "unknown command"},
		{"migrate bad action", []string{"migrate", "sideways"}, 2, "", `unknown action "sideways"`},
		{"migrate missing action", []string{"migrate"}, 2, "", "accepts 1 arg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if !strings.Contains(out, tt.stdout) {
				t.Errorf("stdout %q lacks %q", out, tt.stdout)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Errorf("stderr %q lacks %q", errOut, tt.stderr)
			}
			if strings.Contains(errOut, "goroutine ") {
				t.Errorf("stack trace on stderr: %s", errOut)
			}
		})
	}
}

// TestNATSAuthDefaultAgrees: 'token --help' names the same default NATS
// auth mode as 'serve --help' has for --nats-auth.
func TestNATSAuthDefaultAgrees(t *testing.T) {
	_, serve, _ := run(t, "serve", "--help")
	m := regexp.MustCompile(`--nats-auth string +.*\(default "(\w+)"\)`).FindStringSubmatch(serve)
	if m == nil {
		t.Fatalf("serve --help has no --nats-auth default:\n%s", serve)
	}
	_, token, _ := run(t, "token", "--help")
	if want := "--nats-auth " + m[1] + ", the default"; !strings.Contains(token, want) {
		t.Fatalf("token --help lacks %q (serve's default is %s):\n%s", want, m[1], token)
	}
}

// TestVersionFlag: --version prints what `lesfarm version` prints and exits 0.
func TestVersionFlag(t *testing.T) {
	code, out, errOut := run(t, "--version")
	if code != 0 || strings.TrimSpace(out) != "lesfarm "+cli.BuildVersion() {
		t.Errorf("--version: exit %d, stdout %q, stderr %q; want lesfarm %s", code, out, errOut, cli.BuildVersion())
	}
}
