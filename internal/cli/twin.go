package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
)

// twinPrefix marks an agent --profile that names a fleet device: its
// measured profile is fetched from the coordinator.
const twinPrefix = "twin:"

func newProfileUploadCmd(env *Env) *cobra.Command {
	var (
		sf     serverFlags
		device string
	)
	cmd := &cobra.Command{
		Use:   "upload FILE --device ID",
		Short: "Store a measured profile on the coordinator as a device's profile",
		Long: `upload sends a profile YAML (written by 'lesfarm profile measure') to the
coordinator as the measured profile of device ID, replacing any earlier one.
The coordinator validates it with the same parser as --profile FILE. An
emulated twin of the device is then one flag:

  lesfarm agent --profile twin:ID ...`,
		Example: `  lesfarm profile upload pixel-8.yaml --device pixel-8-a --server http://farm:8080 --token lft_...`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return uploadProfile(env, &sf, device, args[0])
		},
	}
	addServerFlags(cmd, &sf)
	cmd.Flags().StringVar(&device, "device", "", "device id the profile was measured on (required)")
	return cmd
}

// uploadProfile validates the profile at path locally (so a bad file fails
// before the network) and PUTs it as device's measured profile.
func uploadProfile(env *Env, sf *serverFlags, device, path string) error {
	if !protocol.ValidDeviceID(device) {
		return usagef("--device %q invalid: give the device id (1-64 letters, digits, '_' or '-')", device)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return usagef("profile upload: %v", err)
	}
	if _, err := profile.Parse(data); err != nil {
		return fmt.Errorf("profile upload: %s: %w", path, err)
	}
	c, err := sf.client()
	if err != nil {
		return err
	}
	p, err := c.PutDeviceProfile(env.Ctx, device, string(data))
	if err != nil {
		return fmt.Errorf("profile upload: %w", err)
	}
	fmt.Fprintf(env.Stdout, "stored profile %s as device %s's measured profile; emulate it with: lesfarm agent --profile twin:%s\n", p.Name, p.DeviceID, p.DeviceID)
	return nil
}

// resolveTwin fetches deviceID's measured profile from the coordinator,
// validates it with the runtime's parser and writes it to dir, returning
// the file's path for --profile. Errors are one line: an unknown device
// says how to measure it, a stored profile the parser refuses says so.
func resolveTwin(ctx context.Context, c *client.Client, server, deviceID, dir string) (string, error) {
	if !protocol.ValidDeviceID(deviceID) {
		return "", usagef("--profile twin:%s: %q is not a device id (1-64 letters, digits, '_' or '-')", deviceID, deviceID)
	}
	p, err := c.GetDeviceProfile(ctx, deviceID)
	if err != nil {
		var pr *client.Problem
		if errors.As(err, &pr) && pr.Status == http.StatusNotFound {
			return "", fmt.Errorf("agent: %s", pr.Detail)
		}
		return "", fmt.Errorf("agent: --profile twin:%s: cannot fetch the profile from the coordinator at %s (set --server): %w", deviceID, server, err)
	}
	if _, err := profile.Parse([]byte(p.YAML)); err != nil {
		return "", fmt.Errorf("agent: the measured profile stored for device %s is malformed (%v); measure it again with lesfarm profile measure --upload", deviceID, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("agent: twin profile: %w", err)
	}
	path := filepath.Join(dir, "twin-"+deviceID+".yaml")
	hdr := fmt.Sprintf("# twin of device %s: measured profile fetched from %s (uploaded %s)\n", deviceID, server, p.UpdatedAt.UTC().Format("2006-01-02T15:04:05Z"))
	if err := calibrate.WriteFile(path, []byte(hdr+p.YAML)); err != nil {
		return "", fmt.Errorf("agent: twin profile: %w", err)
	}
	return path, nil
}

// twinDevice returns the device id of a "twin:ID" profile and whether it
// is one.
func twinDevice(profile string) (string, bool) {
	return strings.CutPrefix(profile, twinPrefix)
}
