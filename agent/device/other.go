//go:build !(darwin || ios)

package device

import "github.com/lesfarm/lesfarm/protocol"

func readDarwin(*protocol.Fingerprint, Options) {}
