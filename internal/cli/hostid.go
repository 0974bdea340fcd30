package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// machineHostID names this machine for the shared-host scheduling policy
// (store.HostLabel): a digest of /etc/machine-id when readable (stable,
// and not the id itself, which systemd asks not to expose), else the host
// name.
func machineHostID() string {
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				sum := sha256.Sum256([]byte("lesfarm-host:" + id))
				return "m-" + hex.EncodeToString(sum[:8])
			}
		}
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}

// withHostLabel returns labels with store.HostLabel set to host for an
// emulated agent (profile set), unless the labels name a host already or
// host is "none" (or empty). labels is not modified.
func withHostLabel(labels map[string]string, profile, host string) map[string]string {
	if profile == "" || host == "" || host == "none" {
		return labels
	}
	if _, ok := labels[store.HostLabel]; ok {
		return labels
	}
	out := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		out[k] = v
	}
	out[store.HostLabel] = host
	return out
}
