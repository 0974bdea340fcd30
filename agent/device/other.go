//go:build !(darwin || ios)

package device

func readDarwin(*Fingerprint, Options) {}
