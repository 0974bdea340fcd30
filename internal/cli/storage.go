package cli

import (
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// resolveStorage turns --profile and --storage into where experts are read
// from: direct (the real disk with O_DIRECT), an emulated device profile, or
// neither (both flags empty). Errors are usage errors.
func resolveStorage(prof, storage string) (direct bool, p *expert.Profile, err error) {
	switch {
	case storage != "" && storage != "direct":
		return false, nil, usagef("--storage %q is not supported: use --storage direct, or --profile NAME|FILE to emulate a device", storage)
	case storage == "direct" && prof != "" && prof != "direct":
		return false, nil, usagef("--storage direct and --profile %s conflict: choose real storage or an emulated device", prof)
	case storage == "direct" || prof == "direct":
		return true, nil, nil
	case prof == "":
		return false, nil, nil
	}
	p, err = profile.Load(prof)
	if err != nil {
		return false, nil, usagef("--profile: %v", err)
	}
	return false, p, nil
}
