package agent

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/lesfarm/lesfarm/jobs"
)

// artifactHosts returns the hosts the artifact cache may fetch from:
// ArtifactHosts, or by default the hosts of NATSURL's servers and of
// ServerURL (any port), the coordinator's own.
func (c *Config) artifactHosts() ([]string, error) {
	var out []string
	add := func(entry string) error {
		h, err := jobs.NormalizeEgressHost(entry)
		if err != nil {
			return fmt.Errorf("artifact hosts: %w", err)
		}
		out = append(out, h)
		return nil
	}
	if len(c.ArtifactHosts) > 0 {
		for _, e := range c.ArtifactHosts {
			if err := add(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for _, raw := range append(strings.Split(c.NATSURL, ","), c.ServerURL) {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		if err := add(u.Hostname()); err != nil {
			return nil, err
		}
	}
	return out, nil
}
