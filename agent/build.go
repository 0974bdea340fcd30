package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/lesfarm/lesfarm/protocol"
)

// Identity is the code an agent process embeds: its executable's sha256,
// the VCS revision the toolchain stamped (empty when built without VCS
// stamping, e.g. GOFLAGS=-buildvcs=false), and the build id the agent
// registers it under (protocol.EmbeddedBuildID). Two different binaries
// may both report no revision; the sha256 tells them apart.
type Identity struct {
	BuildID   string
	SHA256    string
	Revision  string
	GoVersion string
	Platform  string // GOOS/GOARCH
}

var (
	selfOnce sync.Once
	self     Identity
	selfErr  error
)

// SelfIdentity hashes this process's executable once and returns its
// Identity. The error says why the executable could not be read (the
// agent then cannot prove which code its embedded runs are).
func SelfIdentity() (Identity, error) {
	selfOnce.Do(func() {
		self = Identity{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, s := range info.Settings {
				if s.Key == "vcs.revision" {
					self.Revision = s.Value
				}
			}
		}
		exe, err := os.Executable()
		if err != nil {
			selfErr = fmt.Errorf("agent: own executable: %w", err)
			return
		}
		self.SHA256, selfErr = fileSHA256(exe)
		self.BuildID = protocol.EmbeddedBuildID(self.Revision, self.SHA256)
	})
	return self, selfErr
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
